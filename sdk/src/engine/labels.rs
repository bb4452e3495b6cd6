//! Labels put on every object the SDK creates, so it can be found and reaped.

use std::collections::HashMap;
use std::sync::OnceLock;

/// Present on every object dockhand creates; its value is always `true`.
pub const MANAGED: &str = "dev.dockhand.managed";
/// SDK version that created the object.
pub const VERSION: &str = "dev.dockhand.version";
/// Per-process session id (a random UUID chosen when the process first connects).
pub const SESSION: &str = "dev.dockhand.session";
/// Host name and process id of the creator, used to tell whether it is still alive.
pub const OWNER_HOST: &str = "dev.dockhand.owner-host";
/// Process id of the creator.
pub const OWNER_PID: &str = "dev.dockhand.owner-pid";
/// What the object is for: `sandbox`, `base-image`, `image`, `session`,
/// `code-host`, `snapshot`, `watchdog`.
pub const KIND: &str = "dev.dockhand.kind";
/// `kind` of the per-process watchdog container.
pub const WATCHDOG: &str = "watchdog";
/// On a container and its scratch volumes: the token that ties them together,
/// so volumes are found when their container was removed without them.
pub const SCRATCH: &str = "dev.dockhand.scratch";
/// On a container meant to outlive its owner (a kept session): `true`.
/// No watchdog or `reap` removes it; `Client::kept_sessions` lists it.
pub const KEPT: &str = "dev.dockhand.kept";
/// On a named volume: the name it was created under (without the prefix).
pub const VOLUME: &str = "dev.dockhand.volume";
/// For images: the content hash of the spec they were built from.
pub const SPEC_HASH: &str = "dev.dockhand.spec-hash";

/// The id of this process's session: one per process, shared by every `Client`.
pub fn session_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| uuid::Uuid::new_v4().simple().to_string())
}

/// This machine's host name, as far as it can be told without extra crates.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| std::env::var("HOSTNAME").unwrap_or_default())
}

/// Labels for a short-lived object (container) owned by this process.
pub fn owned(kind: &str) -> HashMap<String, String> {
    let mut labels = durable(kind);
    labels.extend(owner());
    labels
}

/// The labels that name this process as an object's owner: its watchdog
/// removes what carries them when the process goes, and so does a later
/// process's `reap`.
pub fn owner() -> HashMap<String, String> {
    HashMap::from([
        (SESSION.to_string(), session_id().to_string()),
        (OWNER_HOST.to_string(), host_name()),
        (OWNER_PID.to_string(), std::process::id().to_string()),
    ])
}

/// Labels for an object meant to outlive the process (images, snapshots).
pub fn durable(kind: &str) -> HashMap<String, String> {
    HashMap::from([
        (MANAGED.to_string(), "true".to_string()),
        (VERSION.to_string(), env!("CARGO_PKG_VERSION").to_string()),
        (KIND.to_string(), kind.to_string()),
    ])
}

/// Whether an object with these labels was left behind by a process that is gone:
/// created on this host by a pid that no longer runs, and not by this process.
pub fn owner_is_gone(labels: &HashMap<String, String>) -> bool {
    if labels.get(SESSION).map(String::as_str) == Some(session_id()) {
        return false;
    }
    let same_host = labels.get(OWNER_HOST).is_some_and(|h| *h == host_name());
    match labels.get(OWNER_PID).and_then(|p| p.parse::<u32>().ok()) {
        // On another host we cannot tell; leave it to that host.
        Some(pid) if same_host => !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_labels_name_this_process() {
        let labels = owned("sandbox");
        assert_eq!(labels[MANAGED], "true");
        assert_eq!(labels[KIND], "sandbox");
        assert_eq!(labels[SESSION], session_id());
        assert_eq!(labels[OWNER_PID], std::process::id().to_string());
        assert!(!owner_is_gone(&labels));
    }

    #[test]
    fn dead_owner_on_this_host_is_gone() {
        let mut labels = owned("sandbox");
        labels.insert(SESSION.into(), "someone-else".into());
        // pid_max is at most 2^22 on Linux, so this pid cannot exist.
        labels.insert(OWNER_PID.into(), "99999999".into());
        assert!(owner_is_gone(&labels));
        labels.insert(OWNER_HOST.into(), "another-host".into());
        assert!(!owner_is_gone(&labels));
    }
}
