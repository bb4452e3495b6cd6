//! The agent's state for unit tests: one workspace for the whole run.

use std::sync::OnceLock;

/// The tests' workspace, made once; the agent's state is set to it.
pub fn workspace() -> String {
    static DIR: OnceLock<String> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("dockhand-agent-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let dir = dir.to_string_lossy().into_owned();
        std::env::set_var("DOCKHAND_WORKSPACE", &dir);
        std::env::set_var("DOCKHAND_ROOTS", &dir);
        assert_eq!(crate::agent().workspace, dir, "set before first use");
        dir
    })
    .clone()
}
