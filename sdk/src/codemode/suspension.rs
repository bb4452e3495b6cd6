//! Suspended executions: an execution stopped at a tool call that needs
//! approval, sealed so that it can be kept anywhere (a database, a queue, a
//! file) and resumed later, by another code host in another process.
//!
//! The sealed form is `DHSUSP\0` and a format version, a JSON body (the
//! code, the call, the output so far, and Monty's own dump of the paused
//! interpreter), and an HMAC-SHA256 of all of it under this installation's
//! key. Opening checks the size, the format, the tag (in constant time) and
//! the expiry before any of it is read further; Monty never sees a blob
//! that fails one of them. Each suspension resumes once: its id is claimed
//! in the store's record of resumed suspensions first, so a replayed blob is
//! refused and its tool never runs twice.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::Sha256;

use crate::error::{Error, Result};

/// Environment variable naming the directory of the default
/// [`SuspensionStore`].
pub const SUSPENSION_DIR_ENV: &str = "DOCKHAND_SUSPENSION_DIR";

/// The sealed form's magic and format version.
const MAGIC: &[u8; 8] = b"DHSUSP\x00\x01";
const TAG_LEN: usize = 32;
const KEY_LEN: usize = 32;

/// Where suspended executions are sealed and their resumptions recorded:
/// a directory holding the sealing key (`key`, 32 random bytes, mode 0600,
/// made on first use) and a file per resumed suspension (`resumed/<id>`).
///
/// Processes that share the directory can resume each other's suspensions;
/// a blob sealed under another directory's key is refused.
///
/// ```
/// use std::time::Duration;
/// use dockhand::codemode::SuspensionStore;
/// let dir = tempfile::tempdir().unwrap();
/// let store = SuspensionStore::at(dir.path())
///     .ttl(Duration::from_secs(3600))
///     .max_state_bytes(4 << 20);
/// assert_eq!(store.dir(), dir.path());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuspensionStore {
    dir: PathBuf,
    ttl: Duration,
    max_state_bytes: usize,
}

impl Default for SuspensionStore {
    /// `$DOCKHAND_SUSPENSION_DIR`, else `dockhand/suspensions` in the
    /// user's local data directory (`~/.local/share` on Linux).
    fn default() -> Self {
        let dir = std::env::var_os(SUSPENSION_DIR_ENV)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                dirs::data_local_dir()
                    .unwrap_or_else(std::env::temp_dir)
                    .join("dockhand")
                    .join("suspensions")
            });
        SuspensionStore::at(dir)
    }
}

impl SuspensionStore {
    /// A store in `dir` (made on first use).
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        SuspensionStore {
            dir: dir.into(),
            ttl: Duration::from_secs(7 * 24 * 3600),
            max_state_bytes: 16 << 20,
        }
    }

    /// How long a suspension may wait to be resumed (default 7 days).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Bytes the paused interpreter's state may take (default 16 MiB); an
    /// execution holding more fails with `CodeError::SuspendLimit` rather
    /// than suspending.
    pub fn max_state_bytes(mut self, bytes: usize) -> Self {
        self.max_state_bytes = bytes;
        self
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn state_limit(&self) -> usize {
        self.max_state_bytes
    }

    /// The largest sealed form opened: the state in base64 and room for
    /// the code (1 MiB at most), the output and the call.
    fn sealed_limit(&self) -> usize {
        self.max_state_bytes / 3 * 4 + (4 << 20)
    }

    /// Seals `body` into the form [`Suspended::to_bytes`] gives.
    pub(crate) async fn seal(&self, mut body: Body) -> Result<Suspended> {
        let now = unix_now();
        body.created = now;
        body.expires = now.saturating_add(self.ttl.as_secs());
        let json = serde_json::to_vec(&body).map_err(|e| Error::SuspensionRefused {
            reason: format!("its state could not be written: {e}"),
        })?;
        let key = self.key().await?;
        let mut sealed = Vec::with_capacity(MAGIC.len() + json.len() + TAG_LEN);
        sealed.extend_from_slice(MAGIC);
        sealed.extend_from_slice(&json);
        let tag = tag_of(&key, &sealed);
        sealed.extend_from_slice(&tag);
        Ok(Suspended::new(body, sealed))
    }

    /// Checks and reads a sealed suspension (from [`Suspended::to_bytes`]).
    /// Nothing of a blob that fails a check is read past the check.
    ///
    /// # Errors
    ///
    /// [`Error::SuspensionRefused`] for a blob over the size limit, of
    /// another format or version, altered, sealed under another key, or
    /// expired.
    pub async fn open(&self, sealed: &[u8]) -> Result<Suspended> {
        let refuse = |reason: &str| Error::SuspensionRefused {
            reason: reason.to_string(),
        };
        if sealed.len() > self.sealed_limit() {
            return Err(refuse("it is larger than a suspension may be"));
        }
        if sealed.len() < MAGIC.len() + TAG_LEN || sealed[..6] != MAGIC[..6] {
            return Err(refuse("it is not a suspended dockhand execution"));
        }
        if sealed[..MAGIC.len()] != MAGIC[..] {
            return Err(refuse(
                "it was made by a version of dockhand with another format",
            ));
        }
        let (signed, tag) = sealed.split_at(sealed.len() - TAG_LEN);
        let key = self.key().await?;
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&key).map_err(|_| refuse("bad key"))?;
        mac.update(signed);
        if mac.verify_slice(tag).is_err() {
            return Err(refuse(
                "its seal does not match: it was altered, or sealed under another store's key",
            ));
        }
        let body: Body = serde_json::from_slice(&signed[MAGIC.len()..])
            .map_err(|e| refuse(&format!("its body could not be read: {e}")))?;
        if body.monty != crate::image::bridge::MONTY_PACKAGE {
            return Err(refuse(&format!(
                "it was suspended by {}, and this code host runs {}",
                body.monty,
                crate::image::bridge::MONTY_PACKAGE
            )));
        }
        if unix_now() > body.expires {
            return Err(refuse("it has expired (see SuspensionStore::ttl)"));
        }
        Ok(Suspended::new(body, sealed.to_vec()))
    }

    /// Keeps a suspension in the store under its id (`pending/<id>`), for
    /// tools that hand out ids rather than blobs (the CLI, the MCP server).
    pub async fn keep(&self, suspended: &Suspended) -> Result<()> {
        let path = self.pending_path(suspended.id())?;
        let sealed = suspended.sealed.clone();
        tokio::task::spawn_blocking(move || {
            if let Some(dir) = path.parent() {
                make_private_dir(dir)?;
            }
            std::fs::write(&path, sealed.as_slice())
        })
        .await
        .map_err(|e| Error::io("keeping a suspension", std::io::Error::other(e)))?
        .map_err(|e| Error::io("keeping a suspension", e))
    }

    /// A suspension kept with [`SuspensionStore::keep`], opened and checked
    /// as [`SuspensionStore::open`] does.
    pub async fn kept(&self, id: &str) -> Result<Suspended> {
        let path = self.pending_path(id)?;
        let sealed = tokio::fs::read(&path).await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::SuspensionRefused {
                    reason: format!(
                        "no suspension `{id}` is kept (it was resumed, or never made here)"
                    ),
                }
            } else {
                Error::io("reading a kept suspension", e)
            }
        })?;
        self.open(&sealed).await
    }

    /// Removes a kept suspension (after it was resumed).
    pub async fn forget(&self, id: &str) -> Result<()> {
        match tokio::fs::remove_file(self.pending_path(id)?).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("removing a kept suspension", e)),
        }
    }

    /// Where a kept suspension lives; ids are ours (`susp-` and hex), so
    /// anything else is refused rather than joined to a path.
    fn pending_path(&self, id: &str) -> Result<PathBuf> {
        let ours = id.strip_prefix("susp-").is_some_and(|hex| {
            !hex.is_empty() && hex.len() <= 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())
        });
        if !ours {
            return Err(Error::SuspensionRefused {
                reason: format!("`{id}` is not a suspension id"),
            });
        }
        Ok(self.dir.join("pending").join(id))
    }

    /// Records that `suspended` is being resumed; refuses one resumed before.
    pub(crate) async fn claim(&self, suspended: &Suspended) -> Result<()> {
        if unix_now() > suspended.body.expires {
            return Err(Error::SuspensionRefused {
                reason: "it has expired (see SuspensionStore::ttl)".into(),
            });
        }
        let dir = self.dir.join("resumed");
        let id = suspended.body.id.clone();
        let expires = suspended.body.expires;
        let claimed = tokio::task::spawn_blocking(move || {
            make_private_dir(&dir)?;
            forget_expired(&dir);
            let mut record = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(dir.join(&id))?;
            // The record guards the blob until the blob's own expiry, not
            // this store's ttl: a store with a shorter ttl over the same
            // directory must not forget it early. A record left empty (a
            // crash here) is never forgotten, which only refuses more.
            use std::io::Write;
            record.write_all(expires.to_string().as_bytes())
        })
        .await
        .map_err(|e| Error::io("recording a resumed suspension", std::io::Error::other(e)))?;
        match claimed {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(Error::SuspensionRefused {
                    reason: format!(
                        "suspension {} was resumed already; each resumes once",
                        suspended.body.id
                    ),
                })
            }
            Err(e) => Err(Error::io("recording a resumed suspension", e)),
        }
    }

    /// The sealing key, made on first use.
    async fn key(&self) -> Result<[u8; KEY_LEN]> {
        let path = self.dir.join("key");
        tokio::task::spawn_blocking(move || read_or_make_key(&path))
            .await
            .map_err(|e| Error::io("reading the suspension key", std::io::Error::other(e)))?
    }
}

fn read_or_make_key(path: &Path) -> Result<[u8; KEY_LEN]> {
    let read = |path: &Path| -> Result<[u8; KEY_LEN]> {
        let bytes = std::fs::read(path).map_err(|e| Error::io("reading the suspension key", e))?;
        bytes.try_into().map_err(|_| Error::SuspensionRefused {
            reason: format!("the key at {} is not {KEY_LEN} bytes", path.display()),
        })
    };
    if path.exists() {
        return read(path);
    }
    if let Some(dir) = path.parent() {
        make_private_dir(dir).map_err(|e| Error::io("making the suspension store", e))?;
    }
    let mut key = [0u8; KEY_LEN];
    getrandom::fill(&mut key).map_err(|e| {
        Error::io(
            "making the suspension key",
            std::io::Error::other(e.to_string()),
        )
    })?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(mut file) => {
            std::io::Write::write_all(&mut file, &key)
                .and_then(|()| file.sync_all())
                .map_err(|e| Error::io("writing the suspension key", e))?;
            Ok(key)
        }
        // Another process made it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read(path),
        Err(e) => Err(Error::io("writing the suspension key", e)),
    }
}

/// Makes `dir` (and its parents) if missing; the store and its parts are
/// the user's alone (0700): kept suspensions hold code, arguments and output.
fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Removes records of resumptions older than any suspension may live: their
/// blobs are refused as expired anyway.
/// Removes the records of suspensions whose blobs have expired (with an
/// hour's grace for clocks that disagree): such a blob is refused anyway.
fn forget_expired(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = unix_now();
    for entry in entries.flatten() {
        let expires = std::fs::read_to_string(entry.path())
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok());
        if expires.is_some_and(|at| now > at.saturating_add(EXPIRY_GRACE.as_secs())) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn tag_of(key: &[u8], bytes: &[u8]) -> [u8; TAG_LEN] {
    // HMAC takes keys of any length; ours is always 32 bytes.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(bytes);
    mac.finalize().into_bytes().into()
}

/// How long past its blob's expiry a resumed record is kept.
const EXPIRY_GRACE: Duration = Duration::from_secs(3600);

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What a sealed suspension holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Body {
    pub id: String,
    pub created: u64,
    pub expires: u64,
    /// The Monty build whose dump `saved` holds.
    pub monty: String,
    pub code: String,
    pub tools: Vec<String>,
    pub approval: Vec<String>,
    pub tool: String,
    pub args: Vec<Value>,
    pub kwargs: Map<String, Value>,
    /// The arguments by name, as the application sees them.
    pub named: Value,
    pub stdout: String,
    pub stdout_truncated: bool,
    /// The bridge's saved execution, Monty's dump among it.
    pub saved: Value,
}

/// An execution stopped at a call of a tool that needs approval (see
/// [`Tool::requires_approval`](super::Tool::requires_approval)). The code
/// host keeps nothing of it: resume it with
/// [`CodeHost::resume`](super::CodeHost::resume), now or later, here or
/// elsewhere, after [`Suspended::to_bytes`] and
/// [`SuspensionStore::open`].
#[derive(Clone)]
pub struct Suspended {
    body: Arc<Body>,
    sealed: Arc<Vec<u8>>,
}

impl Suspended {
    fn new(body: Body, sealed: Vec<u8>) -> Self {
        Suspended {
            body: Arc::new(body),
            sealed: Arc::new(sealed),
        }
    }

    pub(crate) fn body(&self) -> &Body {
        &self.body
    }

    /// Its id: unique, and what the record of resumed suspensions is kept by.
    pub fn id(&self) -> &str {
        &self.body.id
    }

    /// The tool the code called.
    pub fn tool(&self) -> &str {
        &self.body.tool
    }

    /// The call's arguments, by name where the tool's parameters name them.
    pub fn args(&self) -> &Value {
        &self.body.named
    }

    /// What the code printed before it stopped.
    pub fn stdout(&self) -> &str {
        &self.body.stdout
    }

    /// When it can no longer be resumed.
    pub fn expires_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.body.expires)
    }

    /// The sealed form, to keep anywhere; [`SuspensionStore::open`] reads it.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.sealed.as_ref().clone()
    }
}

impl PartialEq for Suspended {
    fn eq(&self, other: &Self) -> bool {
        self.sealed == other.sealed
    }
}

impl std::fmt::Debug for Suspended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Suspended")
            .field("id", &self.body.id)
            .field("tool", &self.body.tool)
            .field("args", &self.body.named)
            .field("sealed_bytes", &self.sealed.len())
            .finish_non_exhaustive()
    }
}

/// What the application decides about a suspended call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Decision {
    /// Run the tool with the code's arguments; the code goes on with its result.
    Approve,
    /// Do not run it: the call raises `ToolError` in the code (which may
    /// catch it), with this reason.
    Reject(String),
    /// Do not run it: the call returns this value, as if the tool had.
    Return(Value),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body() -> Body {
        Body {
            id: "x1".into(),
            created: 0,
            expires: 0,
            monty: crate::image::bridge::MONTY_PACKAGE.into(),
            code: "await delete(1)".into(),
            tools: vec!["delete".into()],
            approval: vec!["delete".into()],
            tool: "delete".into(),
            args: vec![Value::from(1)],
            kwargs: Map::new(),
            named: serde_json::json!({"n": 1}),
            stdout: "before\n".into(),
            stdout_truncated: false,
            saved: serde_json::json!({"state": "AAAA"}),
        }
    }

    #[tokio::test]
    async fn sealed_suspensions_open_and_altered_ones_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let store = SuspensionStore::at(dir.path());
        let sealed = store.seal(body()).await.unwrap();
        let bytes = sealed.to_bytes();
        let opened = store.open(&bytes).await.unwrap();
        assert_eq!(opened, sealed);
        assert_eq!(opened.args(), &serde_json::json!({"n": 1}));
        // Every single flipped byte is caught, wherever it is.
        for at in [0, 7, 9, bytes.len() / 2, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x20;
            let err = store.open(&bad).await.unwrap_err();
            assert!(
                matches!(err, Error::SuspensionRefused { .. }),
                "{at}: {err}"
            );
        }
        // Another store's key: a foreign blob.
        let other = tempfile::tempdir().unwrap();
        let err = SuspensionStore::at(other.path())
            .open(&bytes)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("another store's key"), "{err}");
        let err = store.open(b"{\"not\": \"sealed\"}").await.unwrap_err();
        assert!(err.to_string().contains("not a suspended"), "{err}");
    }

    #[tokio::test]
    async fn limits_versions_and_expiry_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let store = SuspensionStore::at(dir.path()).max_state_bytes(1024);
        let huge = vec![b'x'; store.sealed_limit() + 1];
        let err = store.open(&huge).await.unwrap_err();
        assert!(err.to_string().contains("larger"), "{err}");
        let mut newer = store.seal(body()).await.unwrap().to_bytes();
        newer[7] = 9;
        let err = store.open(&newer).await.unwrap_err();
        assert!(err.to_string().contains("another format"), "{err}");
        let expired = SuspensionStore::at(dir.path()).ttl(Duration::ZERO);
        let sealed = expired.seal(body()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let err = expired.open(&sealed.to_bytes()).await.unwrap_err();
        assert!(err.to_string().contains("expired"), "{err}");
        let mut foreign_build = body();
        foreign_build.monty = "pydantic-monty-runtime==0.0.1".into();
        let sealed = store.seal(foreign_build).await.unwrap();
        let err = store.open(&sealed.to_bytes()).await.unwrap_err();
        assert!(err.to_string().contains("0.0.1"), "{err}");
    }

    #[tokio::test]
    async fn each_suspension_resumes_once_and_the_key_persists() {
        let dir = tempfile::tempdir().unwrap();
        let store = SuspensionStore::at(dir.path());
        let sealed = store.seal(body()).await.unwrap();
        store.claim(&sealed).await.unwrap();
        let err = store.claim(&sealed).await.unwrap_err();
        assert!(err.to_string().contains("resumed already"), "{err}");
        // A second store over the same directory (another process) uses the
        // same key, so it opens the blob, and sees the same record.
        let again = SuspensionStore::at(dir.path());
        let opened = again.open(&sealed.to_bytes()).await.unwrap();
        assert!(again.claim(&opened).await.is_err());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
            let mode = std::fs::metadata(dir.path().join("resumed"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700);
        }
        assert!(!format!("{sealed:?}").contains("AAAA"));
    }

    #[tokio::test]
    async fn a_store_with_a_short_ttl_does_not_forget_a_resumed_record() {
        let dir = tempfile::tempdir().unwrap();
        let long = SuspensionStore::at(dir.path()).ttl(Duration::from_secs(7 * 86_400));
        let sealed = long.seal(body()).await.unwrap();
        long.claim(&sealed).await.unwrap();
        // Its record looks old, as after a day of waiting for approval.
        let record = dir.path().join("resumed").join("x1");
        let day_ago = SystemTime::now() - Duration::from_secs(86_400);
        std::fs::File::options()
            .write(true)
            .open(&record)
            .unwrap()
            .set_modified(day_ago)
            .unwrap();
        // A store over the same directory with a short ttl prunes as it
        // claims something else, then is handed the same blob again.
        let short = SuspensionStore::at(dir.path()).ttl(Duration::from_secs(1));
        let mut other = body();
        other.id = "x2".into();
        let other = short.seal(other).await.unwrap();
        short.claim(&other).await.unwrap();
        let replayed = short.open(&sealed.to_bytes()).await.unwrap();
        let err = short.claim(&replayed).await.unwrap_err();
        assert!(err.to_string().contains("resumed already"), "{err}");
        // Past the blob's own expiry and the grace, the record goes.
        std::fs::write(&record, "1").unwrap();
        let mut third = body();
        third.id = "x3".into();
        short
            .claim(&short.seal(third).await.unwrap())
            .await
            .unwrap();
        assert!(!record.exists(), "an expired blob's record is pruned");
    }

    #[tokio::test]
    async fn suspensions_are_kept_by_id_and_ids_are_not_paths() {
        let dir = tempfile::tempdir().unwrap();
        let store = SuspensionStore::at(dir.path());
        let mut b = body();
        b.id = "susp-0a1b".into();
        let sealed = store.seal(b).await.unwrap();
        store.keep(&sealed).await.unwrap();
        assert_eq!(store.kept("susp-0a1b").await.unwrap(), sealed);
        store.forget("susp-0a1b").await.unwrap();
        let err = store.kept("susp-0a1b").await.unwrap_err();
        assert!(err.to_string().contains("no suspension"), "{err}");
        for bad in ["../key", "susp-../../x", "susp-", "key"] {
            let err = store.kept(bad).await.unwrap_err();
            assert!(
                err.to_string().contains("not a suspension id"),
                "{bad}: {err}"
            );
        }
    }
}
