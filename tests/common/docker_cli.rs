//! The docker CLI as the tests use it (shared with the CLI's tests).
#![allow(dead_code)]

/// How many containers (running or not) carry `label` (`key=value`).
pub fn containers_with_label(label: &str) -> usize {
    let out = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label={label}")])
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// Runs the docker CLI with `args`, asserts it succeeded (pause, rm -f,
/// inspect, ...) and returns its stdout.
pub fn docker(args: &[&str]) -> String {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
