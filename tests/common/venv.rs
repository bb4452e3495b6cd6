//! Python venvs of the clients users use, made once per target directory.
//! Shared by the SDK's and the command's tests.

/// A Python venv with `packages` from PyPI (the clients users use, such as
/// `nbformat`), made once per target directory; returns its `python`.
pub fn venv_python(packages: &[&str]) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("venv-{}", packages.join("-")));
    let python = dir.join("bin/python");
    let ready = dir.join(".ready");
    // One maker at a time: two tests of a binary making the same venv at
    // once break each other's pip (seen: a missing .pyc assertion).
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = MAKING.lock().unwrap_or_else(|p| p.into_inner());
    if !ready.exists() {
        let run = |cmd: &mut std::process::Command| {
            let status = cmd.status().expect("python3 runs");
            assert!(status.success(), "{cmd:?} failed");
        };
        run(std::process::Command::new("python3")
            .args(["-m", "venv"])
            .arg(&dir));
        run(std::process::Command::new(&python)
            .args(["-m", "pip", "install", "-q"])
            .args(packages));
        std::fs::write(&ready, b"").unwrap();
    }
    python
}
