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

/// Removes containerd's copies of the checkpoint at `dir`; how many.
///
/// For each restore, containerd unpacks the checkpoint into a directory
/// of its own under its temporary directory (`ctrd-checkpoint*`) and never
/// removes it (containerd/containerd#10166): a host that resumes often
/// fills its disk. A copy is known by the markers `mark_unique` put in
/// the checkpoint: the same set, which no other checkpoint has. Called
/// once the restored container runs (its runtime has read the copy).
pub(crate) fn remove_runtime_copies(dir: &Path) -> usize {
    let markers = |dir: &Path| -> std::collections::BTreeSet<std::ffi::OsString> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| n.to_string_lossy().starts_with("dockhand-"))
            .collect()
    };
    let ours = markers(dir);
    if ours.is_empty() {
        return 0;
    }
    let mut places = vec![std::env::temp_dir()];
    if !places.iter().any(|p| p == Path::new("/tmp")) {
        places.push("/tmp".into());
    }
    let mut removed = 0;
    for place in places {
        for entry in std::fs::read_dir(&place).into_iter().flatten().flatten() {
            let copy = entry.path();
            let is_copy = entry
                .file_name()
                .to_string_lossy()
                .starts_with("ctrd-checkpoint")
                && entry.file_type().is_ok_and(|t| t.is_dir())
                && markers(&copy) == ours;
            if is_copy && std::fs::remove_dir_all(&copy).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

/// Ends the runtime shim of container `id`, which is gone: a container
/// checkpointed or restored under gVisor leaves its shim
/// (`containerd-shim-runc-v2 ... -id <id>`, about 13 MB) running after
/// Docker removed it, one more per memory resume. Only a shim naming that
/// exact container is signalled; on a daemon of another machine, or
/// without the right to signal it, nothing happens. How many were ended.
pub(crate) fn end_orphaned_shims(id: &str) -> usize {
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return 0;
    }
    let mut ended = 0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_shim = args
            .first()
            .is_some_and(|a| a.ends_with(b"containerd-shim-runc-v2"));
        let names_it = args
            .windows(2)
            .any(|w| w[0] == b"-id" && w[1] == id.as_bytes());
        // SAFETY: kill(2) with a pid read from /proc and a plain signal
        // number touches no memory of this process.
        if is_shim && names_it && unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
            ended += 1;
        }
    }
    ended
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

impl Seal {
    /// The seal as bytes that name every file's path, size, inode and
    /// change time.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (path, size, inode, secs, nanos) in &self.0 {
            out.extend_from_slice(&(path.len() as u64).to_le_bytes());
            out.extend_from_slice(path.as_bytes());
            for n in [*size, *inode, *secs as u64, *nanos as u64] {
                out.extend_from_slice(&n.to_le_bytes());
            }
        }
        out
    }
}

/// Seals kept for a later process: what a kept session's memory pause
/// wrote, so that any process that resumes it (not only the one that
/// paused it) refuses a checkpoint changed or swapped since. Each is a
/// MAC over the container, the checkpoint's name and its seal, keyed by a
/// secret of this machine's cache directory (mode 0600), stored there:
/// nothing in the daemon's directories, which whoever swaps checkpoints
/// can write, vouches for a checkpoint.
pub(crate) struct KeptSeals {
    dir: std::path::PathBuf,
}

type Mac = hmac::Hmac<sha2::Sha256>;

impl KeptSeals {
    /// The seals under `cache_dir`.
    pub(crate) fn new(cache_dir: &Path) -> Self {
        KeptSeals {
            dir: cache_dir.join("checkpoint-seals"),
        }
    }

    fn key(&self) -> std::io::Result<Vec<u8>> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.dir.join("key");
        if let Ok(key) = std::fs::read(&path) {
            if key.len() == 32 {
                return Ok(key);
            }
        }
        std::fs::create_dir_all(&self.dir)?;
        let mut key = vec![0u8; 32];
        getrandom::fill(&mut key).map_err(|e| std::io::Error::other(e.to_string()))?;
        let temporary = self
            .dir
            .join(format!("key.{}", uuid::Uuid::new_v4().simple()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)?;
        file.write_all(&key)?;
        file.sync_all()?;
        // Two processes making the key at once: the first one kept wins.
        match std::fs::hard_link(&temporary, &path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                key = std::fs::read(&path)?;
            }
            Err(e) => {
                let _ = std::fs::remove_file(&temporary);
                return Err(e);
            }
        }
        let _ = std::fs::remove_file(&temporary);
        Ok(key)
    }

    fn file(&self, container: &str, checkpoint: &str) -> std::path::PathBuf {
        let plain = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        let name = if plain(container) && plain(checkpoint) {
            format!("{container}.{checkpoint}")
        } else {
            format!(
                "{:x}",
                sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(format!(
                    "{container}\0{checkpoint}"
                )))
            )
        };
        self.dir.join(name)
    }

    fn mac(&self, container: &str, checkpoint: &str, seal: &Seal) -> std::io::Result<Mac> {
        use hmac::Mac as _;
        let mut mac =
            Mac::new_from_slice(&self.key()?).map_err(|e| std::io::Error::other(e.to_string()))?;
        for part in [container.as_bytes(), checkpoint.as_bytes()] {
            mac.update(&(part.len() as u64).to_le_bytes());
            mac.update(part);
        }
        mac.update(&seal.encode());
        Ok(mac)
    }

    /// Keeps `seal` of `container`'s checkpoint `checkpoint`.
    pub(crate) fn keep(
        &self,
        container: &str,
        checkpoint: &str,
        seal: &Seal,
    ) -> std::io::Result<()> {
        use hmac::Mac as _;
        let tag = self
            .mac(container, checkpoint, seal)?
            .finalize()
            .into_bytes();
        std::fs::create_dir_all(&self.dir)?;
        let path = self.file(container, checkpoint);
        let temporary = path.with_extension(format!("{}", uuid::Uuid::new_v4().simple()));
        std::fs::write(&temporary, tag)?;
        std::fs::rename(&temporary, &path)
    }

    /// Whether the checkpoint is as it was sealed: `None` when no seal of
    /// it was kept here.
    pub(crate) fn check(&self, container: &str, checkpoint: &str, now: &Seal) -> Option<bool> {
        use hmac::Mac as _;
        let tag = std::fs::read(self.file(container, checkpoint)).ok()?;
        let mac = self.mac(container, checkpoint, now).ok()?;
        Some(mac.verify_slice(&tag).is_ok())
    }

    /// Forgets the seals of a container that is gone.
    pub(crate) fn forget(&self, container: &str) {
        let prefix = format!("{container}.");
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
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

#[cfg(test)]
mod tests {
    #[test]
    fn a_kept_seal_refuses_a_swapped_checkpoint_in_any_process() {
        let base = std::env::temp_dir().join(format!("dh-test-seals-{}", std::process::id()));
        let (one, two) = (base.join("one"), base.join("two"));
        for dir in [&one, &two] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("checkpoint.img"), dir.to_string_lossy().as_bytes()).unwrap();
        }
        let seals = super::KeptSeals::new(&base.join("cache"));
        let (seal_one, seal_two) = (super::seal(&one).unwrap(), super::seal(&two).unwrap());
        seals.keep("c1", "dockhand-a", &seal_one).unwrap();
        seals.keep("c2", "dockhand-b", &seal_two).unwrap();
        // Another process: a new reader of the same cache directory.
        let later = super::KeptSeals::new(&base.join("cache"));
        assert_eq!(later.check("c1", "dockhand-a", &seal_one), Some(true));
        // Each other's checkpoint, or the files changed: refused.
        assert_eq!(later.check("c1", "dockhand-a", &seal_two), Some(false));
        assert_eq!(later.check("c2", "dockhand-b", &seal_one), Some(false));
        std::fs::write(one.join("checkpoint.img"), b"changed").unwrap();
        assert_eq!(
            later.check("c1", "dockhand-a", &super::seal(&one).unwrap()),
            Some(false)
        );
        // A seal file forged without the key: refused.
        std::fs::write(base.join("cache/checkpoint-seals/c2.dockhand-b"), [0u8; 32]).unwrap();
        assert_eq!(later.check("c2", "dockhand-b", &seal_two), Some(false));
        assert_eq!(later.check("c3", "dockhand-c", &seal_two), None);
        later.forget("c1");
        assert_eq!(later.check("c1", "dockhand-a", &seal_one), None);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn only_containerds_copies_of_this_checkpoint_go() {
        let base = std::env::temp_dir();
        let pid = std::process::id();
        let ours = base.join(format!("dh-test-checkpoint-{pid}"));
        std::fs::create_dir_all(&ours).unwrap();
        super::mark_unique(&ours).unwrap();
        super::mark_unique(&ours).unwrap();
        std::fs::write(ours.join("checkpoint.img"), b"state").unwrap();
        let copy = base.join(format!("ctrd-checkpoint-dh-test-{pid}-a"));
        super::copy_dir(&ours, &copy).unwrap();
        // Another checkpoint's copy (one marker more) and an unmarked one stay.
        let other = base.join(format!("ctrd-checkpoint-dh-test-{pid}-b"));
        super::copy_dir(&ours, &other).unwrap();
        super::mark_unique(&other).unwrap();
        let plain = base.join(format!("ctrd-checkpoint-dh-test-{pid}-c"));
        std::fs::create_dir_all(&plain).unwrap();
        assert_eq!(super::remove_runtime_copies(&ours), 1);
        assert!(!copy.exists());
        assert!(other.exists() && plain.exists() && ours.exists());
        for dir in [ours, other, plain] {
            std::fs::remove_dir_all(dir).unwrap();
        }
    }
}
