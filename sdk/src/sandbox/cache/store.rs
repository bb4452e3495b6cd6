//! The entries on disk: one directory per key holding `manifest.json` and the
//! File/Dir outputs under `files/`, written into a staging directory and
//! renamed into place, and evicted least recently used first.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::CacheStats;
use crate::error::{Error, Result};
use crate::sandbox::capture::CapturedText;
use crate::sandbox::outputs::Outputs;
use crate::sandbox::value::Value;

const MANIFEST: &str = "manifest.json";

/// What an entry stores besides File/Dir contents.
#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    format: u32,
    values: Vec<(String, Value)>,
    stdout: CapturedText,
    stderr: CapturedText,
    image: String,
    exit_code: i64,
    /// Bytes the entry takes on disk.
    size: u64,
}

/// A hit: what the original run returned.
pub struct Hit {
    pub exit_code: i64,
    pub outputs: Outputs,
    pub stdout: CapturedText,
    pub stderr: CapturedText,
    pub image: String,
}

impl Hit {
    /// The run's result as a hit returns it: no container, no attempts.
    pub fn into_output(self, duration: std::time::Duration) -> crate::sandbox::RunOutput {
        crate::sandbox::RunOutput {
            outputs: self.outputs,
            exit_code: self.exit_code,
            stdout: self.stdout,
            stderr: self.stderr,
            duration,
            image: self.image,
            cached: true,
            attempts: Vec::new(),
        }
    }
}

/// The store under `<cache dir>/outputs`, holding at most `limit` bytes.
pub struct Store {
    root: PathBuf,
    limit: u64,
}

impl Store {
    pub fn new(cache_dir: &Path, limit: u64) -> Self {
        Store {
            root: cache_dir.join("outputs"),
            limit,
        }
    }

    /// Looks an entry up; File/Dir outputs are copied out so the caller may
    /// change or delete them without touching the cache. A hit counts as a use
    /// for eviction.
    pub fn get(&self, key: &str) -> Result<Option<Hit>> {
        let entry = self.root.join(key);
        let manifest = match std::fs::read(entry.join(MANIFEST)) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("reading the output cache", e)),
        };
        // An unreadable or older entry is a miss, not an error: it is
        // rewritten after the run.
        let Ok(manifest) = serde_json::from_slice::<Manifest>(&manifest) else {
            return Ok(None);
        };
        if manifest.format != super::key::FORMAT {
            return Ok(None);
        }
        touch(&entry.join(MANIFEST));
        let needs_files = manifest
            .values
            .iter()
            .any(|(_, v)| matches!(v, Value::File(_) | Value::Dir(_)));
        let dir = if needs_files {
            let dir = tempfile::Builder::new()
                .prefix("dockhand-outputs-")
                .tempdir()
                .map_err(|e| Error::io("creating the outputs directory", e))?;
            crate::util::copy_tree(&entry.join("files"), dir.path())?;
            Some(dir)
        } else {
            None
        };
        let values = manifest
            .values
            .into_iter()
            .map(|(name, v)| {
                let v = match (v, &dir) {
                    (Value::File(_), Some(d)) => Value::File(d.path().join(&name)),
                    (Value::Dir(_), Some(d)) => Value::Dir(d.path().join(&name)),
                    (other, _) => other,
                };
                (name, v)
            })
            .collect();
        Ok(Some(Hit {
            exit_code: manifest.exit_code,
            outputs: Outputs::new(values, dir),
            stdout: manifest.stdout,
            stderr: manifest.stderr,
            image: manifest.image,
        }))
    }

    /// Stores a successful run (replacing an older entry for the same key),
    /// then evicts the least recently used entries past the limit. A run
    /// larger than the whole limit is not stored.
    pub fn put(&self, key: &str, run: &crate::sandbox::RunOutput) -> Result<()> {
        let (outputs, stdout, stderr, image) = (&run.outputs, &run.stdout, &run.stderr, &run.image);
        let wrap = |e| Error::io("writing the output cache", e);
        let files = match outputs.dir() {
            Some(dir) => tree_size(dir),
            None => 0,
        };
        let mut manifest = Manifest {
            format: super::key::FORMAT,
            values: outputs
                .iter()
                .map(|(n, v)| (n.to_string(), v.clone()))
                .collect(),
            stdout: stdout.clone(),
            stderr: stderr.clone(),
            image: image.to_string(),
            exit_code: run.exit_code,
            size: 0,
        };
        let encode = |m: &Manifest| {
            serde_json::to_vec(m).map_err(|e| Error::io("encoding cache entry", e.into()))
        };
        manifest.size = files + encode(&manifest)?.len() as u64;
        if manifest.size > self.limit {
            tracing::debug!(
                size = manifest.size,
                limit = self.limit,
                "run outputs exceed the whole cache limit; not stored"
            );
            return Ok(());
        }
        std::fs::create_dir_all(&self.root).map_err(wrap)?;
        let staging = tempfile::Builder::new()
            .prefix(".tmp-")
            .tempdir_in(&self.root)
            .map_err(wrap)?;
        if let Some(dir) = outputs.dir() {
            crate::util::copy_tree(dir, &staging.path().join("files"))?;
        }
        std::fs::write(staging.path().join(MANIFEST), encode(&manifest)?).map_err(wrap)?;
        let staged = staging.keep();
        let target = self.root.join(key);
        if std::fs::rename(&staged, &target).is_err() {
            // An entry exists (a concurrent run, or override mode): move it
            // aside, then put ours in its place.
            let trash = self
                .root
                .join(format!(".trash-{}", uuid::Uuid::new_v4().simple()));
            let _ = std::fs::rename(&target, &trash);
            let placed = std::fs::rename(&staged, &target);
            let _ = std::fs::remove_dir_all(&trash);
            if placed.is_err() {
                let _ = std::fs::remove_dir_all(&staged);
            }
        }
        self.evict(self.limit)?;
        Ok(())
    }

    /// Entries with their size and last use, oldest first.
    fn entries(&self) -> Result<Vec<(PathBuf, u64, SystemTime)>> {
        let listing = match std::fs::read_dir(&self.root) {
            Ok(listing) => listing,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("listing the output cache", e)),
        };
        let mut entries = Vec::new();
        for entry in listing.flatten() {
            // Staging and trash directories belong to runs in progress.
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let path = entry.path();
            let manifest = path.join(MANIFEST);
            let used = std::fs::metadata(&manifest)
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            let size = std::fs::read(&manifest)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<Manifest>(&bytes).ok())
                .map(|m| m.size)
                .unwrap_or_else(|| tree_size(&path));
            entries.push((path, size, used));
        }
        entries.sort_by_key(|(_, _, used)| *used);
        Ok(entries)
    }

    /// What the store holds.
    pub fn stats(&self) -> Result<CacheStats> {
        let entries = self.entries()?;
        Ok(CacheStats {
            entries: entries.len(),
            bytes: entries.iter().map(|(_, size, _)| size).sum(),
            limit_bytes: self.limit,
        })
    }

    /// Removes least recently used entries until at most `keep` bytes remain;
    /// returns what was removed.
    pub fn evict(&self, keep: u64) -> Result<CacheStats> {
        let entries = self.entries()?;
        let mut total: u64 = entries.iter().map(|(_, size, _)| size).sum();
        let mut removed = CacheStats {
            entries: 0,
            bytes: 0,
            limit_bytes: self.limit,
        };
        for (path, size, _) in entries {
            if total <= keep {
                break;
            }
            match std::fs::remove_dir_all(&path) {
                Ok(()) => {}
                // A concurrent eviction got there first.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("evicting from the output cache", e)),
            }
            total = total.saturating_sub(size);
            removed.entries += 1;
            removed.bytes += size;
        }
        Ok(removed)
    }
}

/// Marks an entry as just used. Failing only costs eviction order.
fn touch(path: &Path) {
    if let Ok(file) = std::fs::File::options().write(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// Bytes of the regular files under `root`.
fn tree_size(root: &Path) -> u64 {
    let Ok(listing) = std::fs::read_dir(root) else {
        return 0;
    };
    listing
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(m) if m.is_dir() => tree_size(&entry.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::RunOutput;

    fn text(t: &str, truncated: bool, total_bytes: usize) -> CapturedText {
        CapturedText {
            text: t.into(),
            truncated,
            total_bytes,
        }
    }

    fn run(outputs: Outputs, stdout: CapturedText, stderr: CapturedText) -> RunOutput {
        RunOutput {
            outputs,
            exit_code: 0,
            stdout,
            stderr,
            duration: std::time::Duration::ZERO,
            image: "img".into(),
            cached: false,
            attempts: Vec::new(),
        }
    }

    fn values(pairs: Vec<(&str, Value)>) -> Outputs {
        Outputs::new(
            pairs.into_iter().map(|(n, v)| (n.to_string(), v)).collect(),
            None,
        )
    }

    #[test]
    fn store_round_trips_values_files_and_captured_text() {
        let cache = tempfile::tempdir().unwrap();
        let store = Store::new(cache.path(), 1 << 30);
        assert!(store.get("k").unwrap().is_none());
        let files = tempfile::tempdir().unwrap();
        std::fs::write(files.path().join("rep"), "report").unwrap();
        let outputs = Outputs::new(
            vec![
                ("n".into(), Value::Int(3)),
                ("f".into(), Value::Float(0.18627786622414266)),
                ("rep".into(), Value::File(files.path().join("rep"))),
            ],
            Some(files),
        );
        let mut original = run(outputs, text("out", true, 5_000_000), text("", false, 0));
        store.put("k", &original).unwrap();
        let out2 = text("out2", true, 6_000_000);
        original.stdout = out2.clone();
        original.exit_code = 3;
        store.put("k", &original).unwrap();
        let hit = store.get("k").unwrap().unwrap();
        assert_eq!(hit.exit_code, 3, "an accepted exit code comes back too");
        assert_eq!(
            hit.stdout, out2,
            "truncation and byte counts as the run had them"
        );
        assert_eq!(hit.outputs.get::<i64>("n").unwrap(), 3);
        assert_eq!(hit.outputs.get::<f64>("f").unwrap(), 0.18627786622414266);
        let rep: PathBuf = hit.outputs.get("rep").unwrap();
        assert_eq!(std::fs::read_to_string(&rep).unwrap(), "report");
        assert!(!rep.starts_with(cache.path()), "hits hand out copies");
        let leftovers: Vec<_> = std::fs::read_dir(cache.path().join("outputs"))
            .unwrap()
            .collect();
        assert_eq!(leftovers.len(), 1, "no staging or trash left");
    }

    #[test]
    fn least_recently_used_entries_go_first() {
        let cache = tempfile::tempdir().unwrap();
        let blob = |n: usize| values(vec![("s", Value::Str("x".repeat(n)))]);
        let none = || text("", false, 0);
        // Room for three of these entries, not four.
        let probe = tempfile::tempdir().unwrap();
        let one = Store::new(probe.path(), 1 << 30);
        one.put("x", &run(blob(1000), none(), none())).unwrap();
        let entry = one.stats().unwrap().bytes;
        let store = Store::new(cache.path(), 3 * entry + entry / 2);
        for key in ["a", "b", "c"] {
            store.put(key, &run(blob(1000), none(), none())).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(store.stats().unwrap().entries, 3);
        // Using `a` makes `b` the oldest.
        assert!(store.get("a").unwrap().is_some());
        std::thread::sleep(std::time::Duration::from_millis(20));
        store.put("d", &run(blob(1000), none(), none())).unwrap();
        assert!(store.get("b").unwrap().is_none(), "b was evicted");
        for key in ["a", "c", "d"] {
            assert!(store.get(key).unwrap().is_some(), "{key} kept");
        }
        let stats = store.stats().unwrap();
        assert!(stats.bytes <= stats.limit_bytes, "{stats:?}");
        // A run bigger than the whole cache is not stored.
        store
            .put("huge", &run(blob(10_000), none(), none()))
            .unwrap();
        assert!(store.get("huge").unwrap().is_none());
        let removed = store.evict(0).unwrap();
        assert_eq!(removed.entries, 3);
        assert_eq!(store.stats().unwrap().entries, 0);
    }
}
