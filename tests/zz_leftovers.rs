//! Runs after the other test files (cargo runs test binaries in name order):
//! nothing they created may be left behind.

mod common;

fn count(args: &[&str]) -> usize {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[test]
fn no_container_volume_network_or_snapshot_with_dockhand_labels_remains() {
    // The watchdogs of the test binaries that ran before this one sweep for a
    // few seconds after their process exits, then go.
    let since = std::time::Instant::now();
    while common::containers_with_label("dev.dockhand.managed") > 0
        && since.elapsed() < std::time::Duration::from_secs(15)
    {
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let containers = common::containers_with_label("dev.dockhand.managed");
    assert_eq!(
        containers, 0,
        "containers left behind: see `docker ps -a --filter label=dev.dockhand.managed`"
    );
    let volumes = count(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        "label=dev.dockhand.managed",
    ]);
    assert_eq!(
        volumes, 0,
        "volumes left behind: see `docker volume ls --filter label=dev.dockhand.managed`"
    );
    let networks = count(&[
        "network",
        "ls",
        "-q",
        "--filter",
        "label=dev.dockhand.managed",
    ]);
    assert_eq!(
        networks, 0,
        "egress networks left behind: see `docker network ls --filter label=dev.dockhand.managed`"
    );
}
