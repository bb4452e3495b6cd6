//! File and Dir results that leave code mode: a handle the code returns
//! (`{"$handle": "h1", ...}`, from a sandbox tool) is kept for the
//! application after its execution ends, until the application releases it,
//! its time passes, or newer ones push it out of the host's count and byte
//! budget.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::error::{Error, Result};
use crate::sandbox::{Outputs, Value as SbValue};
use crate::util::{blocking, lock};

/// A File or Dir result the code returned, kept on the host for the
/// application: download it with
/// [`CodeHost::download`](super::CodeHost::download), let it go with
/// [`CodeHost::release`](super::CodeHost::release).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResultFile {
    /// The handle the value names (`{"$handle": "h1", ...}`).
    pub handle: String,
    /// The output's name in the tool's sandbox.
    pub name: String,
    /// Whether it is a directory.
    pub is_dir: bool,
    /// Its size on disk (a directory: its files together).
    pub bytes: u64,
}

/// How long, and how many and how much, kept results may be held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeepLimits {
    pub ttl: Duration,
    pub max_files: usize,
    pub max_bytes: u64,
}

impl Default for KeepLimits {
    fn default() -> Self {
        KeepLimits {
            ttl: Duration::from_secs(15 * 60),
            max_files: 100,
            max_bytes: 1 << 30,
        }
    }
}

/// One kept result: its value, the sandbox outputs its file lives in, and
/// when it goes.
struct Kept {
    value: SbValue,
    file: ResultFile,
    _outputs: Arc<Outputs>,
    expires: Instant,
    order: u64,
}

/// The results kept for the application.
#[derive(Default)]
pub(crate) struct KeptResults {
    entries: std::sync::Mutex<(HashMap<String, Kept>, u64)>,
}

impl KeptResults {
    /// Keeps `candidates` (handle, output name, value, the outputs holding
    /// it), dropping the oldest kept results while over the limits. A result
    /// larger than the whole budget is not kept.
    pub(crate) async fn keep(
        &self,
        candidates: Vec<(String, String, SbValue, Arc<Outputs>)>,
        limits: KeepLimits,
    ) -> Vec<ResultFile> {
        let mut kept = Vec::new();
        for (handle, name, value, outputs) in candidates {
            let path = value_path(&value).to_path_buf();
            let bytes = blocking("measuring a result file", move || Ok(size_of(&path)))
                .await
                .unwrap_or(u64::MAX);
            if bytes > limits.max_bytes {
                tracing::warn!(%handle, bytes, "a result file is over the kept-results budget; not kept");
                continue;
            }
            let file = ResultFile {
                handle: handle.clone(),
                name,
                is_dir: matches!(value, SbValue::Dir(_)),
                bytes,
            };
            let mut guard = lock(&self.entries);
            let (entries, next) = &mut *guard;
            *next += 1;
            entries.insert(
                handle,
                Kept {
                    value,
                    file: file.clone(),
                    _outputs: outputs,
                    expires: Instant::now() + limits.ttl,
                    order: *next,
                },
            );
            evict(entries, limits);
            kept.push(file);
        }
        kept
    }

    /// The value behind a kept handle, if it is still kept.
    pub(crate) fn value(&self, handle: &str) -> Option<SbValue> {
        let mut guard = lock(&self.entries);
        let entries = &mut guard.0;
        sweep(entries);
        entries.get(handle).map(|k| k.value.clone())
    }

    /// What is kept now.
    pub(crate) fn list(&self) -> Vec<ResultFile> {
        let mut guard = lock(&self.entries);
        let entries = &mut guard.0;
        sweep(entries);
        let mut files: Vec<(u64, ResultFile)> = entries
            .values()
            .map(|k| (k.order, k.file.clone()))
            .collect();
        files.sort_by_key(|(order, _)| *order);
        files.into_iter().map(|(_, f)| f).collect()
    }

    /// Lets a kept result go; whether it was kept.
    pub(crate) fn release(&self, handle: &str) -> bool {
        lock(&self.entries).0.remove(handle).is_some()
    }

    pub(crate) fn clear(&self) {
        lock(&self.entries).0.clear();
    }

    /// Copies a kept result to `to` (a file, or a directory it creates).
    pub(crate) async fn download(&self, handle: &str, to: &Path) -> Result<()> {
        let Some(value) = self.value(handle) else {
            return Err(Error::UnknownHandle {
                handle: handle.to_string(),
            });
        };
        let from = value_path(&value).to_path_buf();
        let to = to.to_path_buf();
        blocking("downloading a result file", move || {
            copy_tree(&from, &to).map_err(|e| {
                Error::io(format!("copying {} to {}", from.display(), to.display()), e)
            })
        })
        .await
    }
}

impl super::CodeHost {
    /// Copies a File or Dir result the code returned (see
    /// [`Execution::files`](super::Execution::files)) to `to`: a file, or a
    /// directory it creates. [`Error::UnknownHandle`] when it is no longer
    /// kept.
    ///
    /// ```no_run
    /// # async fn demo(host: dockhand::codemode::CodeHost, tools: dockhand::codemode::Toolset) -> dockhand::Result<()> {
    /// let run = host.execute("chart = plot(rows=[1, 2, 3])\nchart", serde_json::json!({}), &tools).await?;
    /// for file in &run.files {
    ///     host.download(&file.handle, format!("/tmp/{}", file.name)).await?;
    ///     host.release(&file.handle);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn download(&self, handle: &str, to: impl AsRef<Path>) -> Result<()> {
        self.handles().kept.download(handle, to.as_ref()).await
    }

    /// Lets a kept result go (its files are removed); whether it was kept.
    pub fn release(&self, handle: &str) -> bool {
        self.handles().kept.release(handle)
    }

    /// The results kept now, oldest first.
    pub fn result_files(&self) -> Vec<ResultFile> {
        self.handles().kept.list()
    }
}

fn value_path(value: &SbValue) -> &Path {
    match value {
        SbValue::File(p) | SbValue::Dir(p) => p,
        _ => Path::new(""),
    }
}

fn sweep(entries: &mut HashMap<String, Kept>) {
    let now = Instant::now();
    entries.retain(|_, k| k.expires > now);
}

/// Drops the oldest entries while over the count or byte budget.
fn evict(entries: &mut HashMap<String, Kept>, limits: KeepLimits) {
    sweep(entries);
    loop {
        let total: u64 = entries.values().map(|k| k.file.bytes).sum();
        if entries.len() <= limits.max_files && total <= limits.max_bytes {
            return;
        }
        let Some(oldest) = entries
            .iter()
            .min_by_key(|(_, k)| k.order)
            .map(|(h, _)| h.clone())
        else {
            return;
        };
        entries.remove(&oldest);
    }
}

/// Bytes under `path` (links not followed).
fn size_of(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| size_of(&e.path()))
                .sum()
        })
        .unwrap_or(0)
}

/// Copies a file, or a directory's regular files and directories (links are
/// skipped: a sandbox's output may point anywhere).
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(from)?;
    if meta.is_file() {
        std::fs::copy(from, to)?;
        return Ok(());
    }
    if !meta.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        copy_tree(&entry.path(), &to.join(entry.file_name()))?;
    }
    Ok(())
}

/// The handles a value names (`{"$handle": id, ...}` anywhere in it).
pub(crate) fn handles_in(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(id) = map.get("$handle").and_then(Value::as_str) {
                found.push(id.to_string());
            }
            map.values().for_each(|v| handles_in(v, found));
        }
        Value::Array(items) => items.iter().for_each(|v| handles_in(v, found)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn file_in(dir: &tempfile::TempDir, name: &str, bytes: usize) -> (SbValue, Arc<Outputs>) {
        let path = dir.path().join(name);
        std::fs::write(&path, vec![b'x'; bytes]).unwrap();
        (
            SbValue::File(path),
            Arc::new(Outputs::new(Vec::new(), None)),
        )
    }

    #[test]
    fn handles_are_found_anywhere_in_a_value() {
        let mut found = Vec::new();
        handles_in(
            &json!({"a": [{"$handle": "h1", "kind": "File"}], "b": {"c": {"$handle": "h2"}}}),
            &mut found,
        );
        found.sort();
        assert_eq!(found, vec!["h1", "h2"]);
    }

    #[tokio::test]
    async fn the_oldest_go_first_and_the_budget_holds() {
        let dir = tempfile::tempdir().unwrap();
        let kept = KeptResults::default();
        let limits = KeepLimits {
            ttl: Duration::from_secs(60),
            max_files: 2,
            max_bytes: 100,
        };
        for (i, size) in [10, 10, 10].into_iter().enumerate() {
            let (value, outputs) = file_in(&dir, &format!("f{i}"), size);
            kept.keep(
                vec![(format!("h{i}"), "out".into(), value, outputs)],
                limits,
            )
            .await;
        }
        let held: Vec<String> = kept.list().into_iter().map(|f| f.handle).collect();
        assert_eq!(held, vec!["h1", "h2"]);
        // One over the whole budget is not kept; one that fits pushes out others.
        let (value, outputs) = file_in(&dir, "big", 101);
        assert!(kept
            .keep(vec![("h9".into(), "out".into(), value, outputs)], limits)
            .await
            .is_empty());
        let (value, outputs) = file_in(&dir, "most", 95);
        kept.keep(vec![("h8".into(), "out".into(), value, outputs)], limits)
            .await;
        let held: Vec<String> = kept.list().into_iter().map(|f| f.handle).collect();
        assert_eq!(held, vec!["h8"]);
        assert!(kept.release("h8"));
        assert!(!kept.release("h8"));
        assert!(kept.list().is_empty());
    }

    #[tokio::test]
    async fn kept_results_expire() {
        let dir = tempfile::tempdir().unwrap();
        let kept = KeptResults::default();
        let limits = KeepLimits {
            ttl: Duration::from_millis(50),
            ..KeepLimits::default()
        };
        let (value, outputs) = file_in(&dir, "f", 3);
        kept.keep(vec![("h1".into(), "out".into(), value, outputs)], limits)
            .await;
        assert!(kept.value("h1").is_some());
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert!(kept.value("h1").is_none());
        let err = kept
            .download("h1", &dir.path().join("copy"))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::UnknownHandle { .. }), "{err:?}");
    }
}
