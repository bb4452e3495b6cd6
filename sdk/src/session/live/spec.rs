//! What a session's container is made with, and what a backend that lacks
//! some of it refuses: shared by its start on any backend and by its pod's
//! manifests.

use super::*;

/// Bad settings, found before anything is resolved or created.
pub(super) fn validate(c: &SessionConfig) -> Result<crate::sandbox::Resources> {
    let resources = c.checked_resources()?;
    for m in &c.mounts {
        if !m.container_path.starts_with('/') || !m.host_path.starts_with('/') {
            return Err(Error::spec(
                "session",
                format!(
                    "mount {} -> {}: both paths must be absolute",
                    m.host_path, m.container_path
                ),
            ));
        }
        for path in [&m.host_path, &m.container_path] {
            check_mount_path(path).map_err(|why| {
                Error::spec(
                    "session",
                    format!("mount {} -> {}: {why}", m.host_path, m.container_path),
                )
            })?;
        }
    }
    for v in &c.volumes {
        check_mount_path(&v.path).map_err(|why| {
            Error::spec("session", format!("volume {} at {}: {why}", v.name, v.path))
        })?;
    }
    if !c.workspace.starts_with('/') || c.workspace == "/" {
        return Err(Error::spec(
            "session",
            format!(
                "workspace `{}` must be an absolute directory other than /",
                c.workspace
            ),
        ));
    }
    Ok(resources)
}

/// Why `path` cannot be where something is mounted: it must be absolute,
/// not `/`, without `..`, and without the characters Docker's mount
/// syntax reads as separators (`:` and `,`) or a NUL.
fn check_mount_path(path: &str) -> std::result::Result<(), String> {
    if !path.starts_with('/') || path.trim_end_matches('/').is_empty() {
        return Err("the path must be absolute and not `/`".into());
    }
    if path.split('/').any(|part| part == "..") {
        return Err("the path must not hold `..`".into());
    }
    if let Some(c) = path.chars().find(|c| matches!(c, ':' | ',' | '\0')) {
        return Err(format!(
            "the path must not hold {c:?} (Docker's mount syntax reads it as a separator)"
        ));
    }
    Ok(())
}

/// The container every session of `c` is made with, secrets aside (their
/// values are added at start; a Kubernetes rendering refers to them instead).
pub(crate) fn container_spec(c: &SessionConfig, image: &str) -> Result<ContainerSpec> {
    let resources = validate(c)?;
    let mut env = vec![
        "HOME=/tmp".to_string(),
        "PYTHONUNBUFFERED=1".to_string(),
        format!("DOCKHAND_WORKSPACE={}", c.workspace),
        format!("DOCKHAND_ROOTS={}", c.roots().join(":")),
        // The agent ends a command that is about to use them all up.
        format!("DOCKHAND_PIDS_LIMIT={}", resources.pids),
    ];
    // Lazy values are resolved now, when the session is created.
    for (name, value) in &c.env {
        let value = match value {
            EnvValue::Plain(v) => v.clone(),
            EnvValue::Lazy(f) => f(),
        };
        env.push(format!("{name}={value}"));
    }
    let mut labels = HashMap::new();
    if let Some(name) = &c.name {
        labels.insert("dev.dockhand.session-name".to_string(), name.clone());
    }
    let mut spec = ContainerSpec {
        image: image.to_string(),
        // Where Docker's containers have it; a cluster's pod renders its own.
        cmd: vec![super::agent::static_path()],
        entrypoint: Some(Vec::new()),
        env,
        working_dir: Some(c.workspace.clone()),
        kind: "session",
        extra_labels: labels,
        scratch_volumes: vec![AGENT_DIR.into()],
        mounts: c.mounts.clone(),
        open_stdin: true,
        no_log: true,
        // The agent exits when its stdin closes, as it does when the owner
        // dies; the daemon then removes the container, unless it is to be
        // paused (a pause stops it) or kept.
        auto_remove: !c.pausable,
        kept: c.keep,
        volumes: c
            .volumes
            .iter()
            .map(|v| {
                (
                    crate::volume::docker_name(&v.name),
                    v.path.clone(),
                    v.read_only,
                )
            })
            .collect(),
        ..Default::default()
    };
    confine(&mut spec, &resources, &c.hardening, &c.network);
    spec.runtime = c.isolation.runtime_name().map(String::from);
    Ok(spec)
}

/// What a session on a backend that `offers` this cannot have, refused
/// before anything is made.
pub(super) fn refuse_on(offers: crate::backend::Offers, c: &SessionConfig) -> Result<()> {
    let on_docker = "run them on a Docker client (`Client::connect()`)";
    if !offers.checkpoints && c.pausable {
        return Err(offers.unsupported("pausable and kept sessions", on_docker));
    }
    if !offers.volumes && !c.volumes.is_empty() {
        return Err(offers.unsupported("volume-mounting sessions", on_docker));
    }
    if !offers.host_paths && !c.mounts.is_empty() {
        return Err(offers.unsupported(
            "host directories mounted into a session",
            "a node has no path of this machine's: copy files in with write_file",
        ));
    }
    if !offers.image_commit && c.persist {
        return Err(offers.unsupported(
            "persisting a session as a snapshot image",
            "a cluster has no image commit: keep what matters by reading it out (read_file) before close",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod path_tests {
    use super::check_mount_path;

    #[test]
    fn mount_paths_are_plain_absolute_paths() {
        for ok in ["/data", "/home/user/shared", "/a b/c"] {
            assert!(check_mount_path(ok).is_ok(), "{ok}");
        }
        for bad in [
            "data",
            "/",
            "//",
            "/data:/etc",
            "/a,b",
            "/a/../etc",
            "/a\0b",
        ] {
            assert!(check_mount_path(bad).is_err(), "{bad:?}");
        }
    }
}
