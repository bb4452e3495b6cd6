//! Runs after the other test files (cargo runs test binaries in name order):
//! nothing they created may be left behind.

mod common;

#[test]
fn no_container_with_dockhand_labels_remains() {
    let left = common::containers_with_label("dev.dockhand.managed");
    assert_eq!(
        left, 0,
        "containers left behind: see `docker ps -a --filter label=dev.dockhand.managed`"
    );
}
