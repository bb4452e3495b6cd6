//! Stopping and starting a container with or without its memory: a
//! checkpoint (`docker checkpoint create`) saves its processes and memory
//! and stops it; a start from the checkpoint restores them.
//!
//! Checkpoints need the daemon's `experimental` flag and a runtime that can
//! save a container (gVisor's `runsc` here; CRIU under runc fails on many
//! kernels). Docker 20.10 keeps a checkpoint under the container's own
//! directory in its data root and refuses another directory, so copying one
//! into a new container (a fork) needs that directory on this machine.

use std::path::{Path, PathBuf};

use bollard::container::CreateCheckpointOptions;
use bollard::query_parameters::StopContainerOptionsBuilder;

use super::Engine;
use crate::error::Result;

/// The runtime memory checkpoints are made with.
const CHECKPOINT_RUNTIME: &str = "runsc";

impl Engine {
    /// Saves the container's processes and memory as checkpoint `name`
    /// and stops it.
    pub async fn checkpoint(&self, id: &str, name: &str) -> Result<()> {
        let options = CreateCheckpointOptions {
            checkpoint_id: name.to_string(),
            checkpoint_dir: None,
            exit: true,
        };
        self.docker
            .create_checkpoint(id, options)
            .await
            .map_err(|e| self.docker_err("checkpoint container", e))
    }

    /// Starts a stopped container from its checkpoint `name`.
    pub async fn start_from_checkpoint(&self, id: &str, name: &str) -> Result<()> {
        // bollard's start options carry no `checkpoint`; the query rides on
        // the path instead (`/containers/{id}/start` is joined as a URL, so
        // the trailing `&_=` swallows the `/start` bollard appends).
        let path = format!("{id}/start?checkpoint={}&_=", urlencode(name));
        self.docker
            .start_container(&path, None)
            .await
            .map_err(|e| self.docker_err("start container from checkpoint", e))
    }

    /// Removes checkpoint `name` of a container; a missing one is fine.
    pub async fn delete_checkpoint(&self, id: &str, name: &str) -> Result<()> {
        match self
            .docker
            .delete_checkpoint(
                id,
                name,
                None::<bollard::container::DeleteCheckpointOptions>,
            )
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if super::is_not_found(&e) => Ok(()),
            Err(e) => Err(self.docker_err("delete checkpoint", e)),
        }
    }

    /// Stops a container at once (SIGKILL): its files stay, its processes end.
    pub async fn stop_container(&self, id: &str) -> Result<()> {
        let options = StopContainerOptionsBuilder::default().t(0).build();
        match self.docker.stop_container(id, Some(options)).await {
            Ok(()) => Ok(()),
            // 304: already stopped.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 304, ..
            }) => Ok(()),
            Err(e) => Err(self.docker_err("stop container", e)),
        }
    }

    /// The daemon's settings and data root, read once per engine (each
    /// pause and resume would otherwise ask again).
    async fn checkpoint_facts(&self) -> Result<&super::DaemonInfo> {
        self.checkpoint_facts
            .get_or_try_init(|| self.daemon_info())
            .await
    }

    /// Why this daemon cannot save a container's memory under `runtime`,
    /// or `None` when it can.
    pub(crate) async fn memory_checkpoints_refused(
        &self,
        runtime: Option<&str>,
    ) -> Result<Option<String>> {
        let info = self.checkpoint_facts().await?;
        let mut missing = Vec::new();
        if !info.experimental {
            missing.push("the daemon's `experimental` flag is off (set \"experimental\": true in its daemon.json and restart it)".to_string());
        }
        if !info.runtimes.iter().any(|r| r == CHECKPOINT_RUNTIME) {
            missing.push(format!(
                "the daemon has no `{CHECKPOINT_RUNTIME}` runtime (gVisor: register it under \"runtimes\" in its daemon.json)"
            ));
        } else if runtime != Some(CHECKPOINT_RUNTIME) {
            missing.push(
                "the sandbox does not run under gVisor (`.isolation(Isolation::Gvisor)`); \
                 runc's checkpoints (CRIU) are not used"
                    .to_string(),
            );
        }
        Ok((!missing.is_empty()).then(|| missing.join("; ")))
    }

    /// Where the daemon keeps a container's checkpoint `name`, when that
    /// is on this machine.
    pub(crate) async fn checkpoint_path(&self, id: &str, name: &str) -> Result<PathBuf> {
        self.require_shared_filesystem(
            "copying a memory checkpoint into a new container (a fork)".into(),
            "fork on the daemon's own machine, or fork in filesystem mode",
        )?;
        let root = &self.checkpoint_facts().await?.root_dir;
        let path = Path::new(root)
            .join("containers")
            .join(id)
            .join("checkpoints")
            .join(name);
        Ok(path)
    }
}

/// Puts a checkpoint directory (plain files, as runsc writes them) at
/// `to`, marked as a copy of its own: hard links where both are on one
/// filesystem (as two containers' directories of one daemon are: no bytes
/// move, whatever the size), copies elsewhere. Neither runsc nor Docker
/// writes a checkpoint's files after making them.
pub(crate) fn copy_checkpoint(from: &Path, to: &Path) -> std::io::Result<u64> {
    let bytes = copy_dir(from, to)?;
    mark_unique(to)?;
    Ok(bytes)
}

/// Makes a checkpoint's contents unlike any other's. Docker uploads a
/// checkpoint into containerd's content store by its digest before a
/// restore, and refuses a second upload of equal contents while the first
/// is there ("content ... already exists"): two forks' copies made in the
/// same second are equal, file times and all.
pub(crate) fn mark_unique(dir: &Path) -> std::io::Result<()> {
    let name = format!("dockhand-{}", uuid::Uuid::new_v4().simple());
    std::fs::write(dir.join(name), b"")
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<u64> {
    std::fs::create_dir_all(to)?;
    let mut bytes = 0;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            bytes += copy_dir(&entry.path(), &target)?;
        } else if kind.is_file() {
            bytes += match std::fs::hard_link(entry.path(), &target) {
                Ok(()) => entry.metadata()?.len(),
                Err(_) => std::fs::copy(entry.path(), &target)?,
            };
        }
    }
    Ok(bytes)
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A checkpoint name of dockhand's: only characters Docker accepts.
pub(crate) fn checkpoint_name() -> String {
    format!("dockhand-{}", uuid::Uuid::new_v4().simple())
}

/// What resuming a stopped container by id needs to know of it.
#[derive(Debug, Clone)]
pub(crate) struct StoppedContainer {
    /// Its labels.
    pub labels: std::collections::HashMap<String, String>,
    /// Whether it runs now.
    pub running: bool,
    /// When it was last stopped (RFC 3339), as the daemon says.
    pub finished_at: Option<String>,
}

impl Engine {
    /// The container `id`, if it exists.
    pub(crate) async fn inspect_stopped(&self, id: &str) -> Result<Option<StoppedContainer>> {
        match self.docker.inspect_container(id, None).await {
            Ok(c) => {
                let state = c.state.unwrap_or_default();
                Ok(Some(StoppedContainer {
                    labels: c.config.and_then(|c| c.labels).unwrap_or_default(),
                    running: state.running.unwrap_or(false),
                    finished_at: state.finished_at,
                }))
            }
            Err(e) if super::is_not_found(&e) => Ok(None),
            Err(e) => Err(self.docker_err("inspect container", e)),
        }
    }

    /// The names of a container's checkpoints.
    pub(crate) async fn checkpoints(&self, id: &str) -> Result<Vec<String>> {
        match self
            .docker
            .list_checkpoints(id, None::<bollard::container::ListCheckpointsOptions>)
            .await
        {
            Ok(listed) => Ok(listed.into_iter().map(|c| c.name).collect()),
            // Without `experimental` no container has checkpoints.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 501, ..
            }) => Ok(Vec::new()),
            Err(e) => Err(self.docker_err("list checkpoints", e)),
        }
    }
}

/// What each file of a checkpoint was when it was written: its path,
/// size, inode and change time. Any change or swap afterwards (even one
/// that restores the modification time) changes the change time or the
/// inode, which no one can set back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seal(Vec<(String, u64, u64, i64, i64)>);

impl Seal {
    /// The checkpoint's size in bytes.
    pub(crate) fn bytes(&self) -> u64 {
        self.0.iter().map(|(_, size, ..)| size).sum()
    }
}

/// The seal of the checkpoint directory `dir`.
pub(crate) fn seal(dir: &Path) -> std::io::Result<Seal> {
    use std::os::unix::fs::MetadataExt;
    fn walk(
        dir: &Path,
        prefix: &str,
        out: &mut Vec<(String, u64, u64, i64, i64)>,
    ) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            let meta = entry.metadata()?;
            if meta.is_dir() {
                walk(&entry.path(), &format!("{name}/"), out)?;
            }
            out.push((
                name,
                meta.size(),
                meta.ino(),
                meta.ctime(),
                meta.ctime_nsec(),
            ));
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(dir, "", &mut files)?;
    files.sort();
    Ok(Seal(files))
}
