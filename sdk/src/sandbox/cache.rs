//! The output cache: a local content-addressed store of successful runs.
//!
//! The key hashes everything that decides a run's result: the image's id,
//! the program and mode, every input value (and the content of File and Dir
//! inputs), the declared outputs, env vars, the network and the *names* of
//! secrets. Secret values never enter the key. An entry is written into a
//! temporary directory and renamed into place, so concurrent runs never see a
//! half-written entry.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::capture::CapturedText;
use super::outputs::Outputs;
use super::spec::{Param, Sandbox};
use super::value::Value;
use crate::error::{Error, Result};

/// Bumped when the entry format or key recipe changes.
const FORMAT: u32 = 1;

/// The cache key of one run.
pub fn key(sandbox: &Sandbox, image_id: &str, inputs: &[(Param, Value)]) -> Result<String> {
    let mut h = Sha256::new();
    let mut field = |label: &str, bytes: &[u8]| {
        // Length-prefixed, so no two different runs can hash alike by shifting bytes.
        h.update(label.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field("format", &FORMAT.to_le_bytes());
    field("image", image_id.as_bytes());
    // The generated runner decides how values are written back: a new SDK
    // version with a different runner must not reuse old entries.
    field("sdk", env!("CARGO_PKG_VERSION").as_bytes());
    if let super::spec::Program::Code { auto_io: true, .. } = &sandbox.program {
        let runner = super::preamble::render(&sandbox.inputs, &sandbox.outputs, "", "");
        field("runner", runner.as_bytes());
    }
    field(
        "program",
        serde_json::to_string(&sandbox.program)
            .unwrap_or_default()
            .as_bytes(),
    );
    field(
        "outputs",
        serde_json::to_string(&sandbox.outputs)
            .unwrap_or_default()
            .as_bytes(),
    );
    field(
        "env",
        serde_json::to_string(&sandbox.runtime.env)
            .unwrap_or_default()
            .as_bytes(),
    );
    field(
        "network",
        serde_json::to_string(&sandbox.runtime.network)
            .unwrap_or_default()
            .as_bytes(),
    );
    let secret_names: Vec<(&str, super::runtime::SecretMount)> = sandbox
        .runtime
        .secrets
        .iter()
        .map(|s| (s.name.as_str(), s.mount))
        .collect();
    field(
        "secrets",
        serde_json::to_string(&secret_names)
            .unwrap_or_default()
            .as_bytes(),
    );
    for (p, value) in inputs {
        field("input", p.name.as_bytes());
        field("type", p.ty.name().as_bytes());
        match value {
            Value::File(path) => field("file", &hash_file(path)?),
            Value::Dir(path) => field("dir", &hash_tree(path)?),
            other => field("value", other.to_text().unwrap_or_default().as_bytes()),
        }
    }
    Ok(hex::encode(h.finalize()))
}

fn hash_file(path: &Path) -> Result<Vec<u8>> {
    let mut file = std::fs::File::open(path)
        .map_err(|e| Error::io(format!("hashing {}", path.display()), e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| Error::io(format!("hashing {}", path.display()), e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().to_vec())
}

/// Hash of a tree: sorted relative paths, kinds, link targets and contents.
fn hash_tree(root: &Path) -> Result<Vec<u8>> {
    fn walk(h: &mut Sha256, root: &Path, dir: &Path) -> Result<()> {
        let wrap = |e| Error::io(format!("hashing {}", dir.display()), e);
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .map_err(wrap)?
            .collect::<std::io::Result<_>>()
            .map_err(wrap)?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            let meta = std::fs::symlink_metadata(&path).map_err(wrap)?;
            h.update((rel.len() as u64).to_le_bytes());
            h.update(rel.as_bytes());
            if meta.is_dir() {
                h.update(b"d");
                walk(h, root, &path)?;
            } else if meta.file_type().is_symlink() {
                h.update(b"l");
                h.update(
                    std::fs::read_link(&path)
                        .map_err(wrap)?
                        .to_string_lossy()
                        .as_bytes(),
                );
            } else {
                h.update(b"f");
                h.update(hash_file(&path)?);
            }
        }
        Ok(())
    }
    let mut h = Sha256::new();
    walk(&mut h, root, root)?;
    Ok(h.finalize().to_vec())
}

/// What an entry stores besides File/Dir contents.
#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    values: Vec<(String, Value)>,
    stdout: String,
    stderr: String,
    image: String,
}

/// A hit: what the original run returned.
pub struct Hit {
    pub outputs: Outputs,
    pub stdout: CapturedText,
    pub stderr: CapturedText,
    pub image: String,
}

/// The store under `<cache dir>/outputs`.
pub struct Store {
    root: PathBuf,
}

impl Store {
    pub fn new(cache_dir: &Path) -> Self {
        Store {
            root: cache_dir.join("outputs"),
        }
    }

    /// Looks an entry up; File/Dir outputs are copied out so the caller may
    /// change or delete them without touching the cache.
    pub fn get(&self, key: &str) -> Result<Option<Hit>> {
        let entry = self.root.join(key);
        let manifest = match std::fs::read(entry.join("manifest.json")) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("reading the output cache", e)),
        };
        // An unreadable entry is a miss, not an error: it is rewritten after the run.
        let Ok(manifest) = serde_json::from_slice::<Manifest>(&manifest) else {
            return Ok(None);
        };
        let needs_files = manifest
            .values
            .iter()
            .any(|(_, v)| matches!(v, Value::File(_) | Value::Dir(_)));
        let dir = if needs_files {
            let dir = tempfile::Builder::new()
                .prefix("dockhand-outputs-")
                .tempdir()
                .map_err(|e| Error::io("creating the outputs directory", e))?;
            copy_tree(&entry.join("files"), dir.path())?;
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
        let text = |t: String| CapturedText {
            total_bytes: t.len(),
            text: t,
            truncated: false,
        };
        Ok(Some(Hit {
            outputs: Outputs::new(values, dir),
            stdout: text(manifest.stdout),
            stderr: text(manifest.stderr),
            image: manifest.image,
        }))
    }

    /// Stores a successful run (replacing an older entry for the same key).
    pub fn put(
        &self,
        key: &str,
        outputs: &Outputs,
        stdout: &str,
        stderr: &str,
        image: &str,
    ) -> Result<()> {
        let wrap = |e| Error::io("writing the output cache", e);
        std::fs::create_dir_all(&self.root).map_err(wrap)?;
        let staging = tempfile::Builder::new()
            .prefix(".tmp-")
            .tempdir_in(&self.root)
            .map_err(wrap)?;
        if let Some(dir) = outputs.dir() {
            copy_tree(dir, &staging.path().join("files"))?;
        }
        let manifest = Manifest {
            values: outputs
                .iter()
                .map(|(n, v)| (n.to_string(), v.clone()))
                .collect(),
            stdout: stdout.to_string(),
            stderr: stderr.to_string(),
            image: image.to_string(),
        };
        let json = serde_json::to_vec(&manifest)
            .map_err(|e| Error::io("encoding cache entry", e.into()))?;
        std::fs::write(staging.path().join("manifest.json"), json).map_err(wrap)?;
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
        Ok(())
    }
}

/// Copies a tree, keeping symbolic links as links.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let wrap = |e| Error::io(format!("copying {}", from.display()), e);
    std::fs::create_dir_all(to).map_err(wrap)?;
    for entry in std::fs::read_dir(from).map_err(wrap)? {
        let entry = entry.map_err(wrap)?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let meta = std::fs::symlink_metadata(&src).map_err(wrap)?;
        if meta.is_dir() {
            copy_tree(&src, &dst)?;
        } else if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).map_err(wrap)?, &dst)
                .map_err(wrap)?;
        } else {
            std::fs::copy(&src, &dst).map_err(wrap)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::value::Type;

    fn sb(code: &str) -> Sandbox {
        Sandbox::code("c", code)
            .input("x", Type::Int)
            .output("y", Type::Int)
            .build()
            .unwrap()
    }

    fn inp(x: i64) -> Vec<(Param, Value)> {
        vec![(
            Param {
                name: "x".into(),
                ty: Type::Int,
            },
            Value::Int(x),
        )]
    }

    #[test]
    fn key_changes_with_everything_that_matters() {
        let base = key(&sb("y = x"), "sha256:a", &inp(1)).unwrap();
        assert_eq!(base, key(&sb("y = x"), "sha256:a", &inp(1)).unwrap());
        assert_ne!(base, key(&sb("y = x + 1"), "sha256:a", &inp(1)).unwrap());
        assert_ne!(base, key(&sb("y = x"), "sha256:b", &inp(1)).unwrap());
        assert_ne!(base, key(&sb("y = x"), "sha256:a", &inp(2)).unwrap());
    }

    #[test]
    fn secret_values_never_enter_the_key() {
        use crate::sandbox::runtime::Secret;
        let with = |v: &str| {
            Sandbox::code("c", "y = x")
                .input("x", Type::Int)
                .secret(Secret::value("TOKEN", v))
                .build()
                .unwrap()
        };
        assert_eq!(
            key(&with("one"), "i", &inp(1)).unwrap(),
            key(&with("two"), "i", &inp(1)).unwrap()
        );
    }

    #[test]
    fn file_content_is_in_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        let s = Sandbox::code("c", "1")
            .input("f", Type::File)
            .build()
            .unwrap();
        let inputs = |p: &Path| {
            vec![(
                Param {
                    name: "f".into(),
                    ty: Type::File,
                },
                Value::file(p),
            )]
        };
        std::fs::write(&f, "a").unwrap();
        let k1 = key(&s, "i", &inputs(&f)).unwrap();
        std::fs::write(&f, "b").unwrap();
        assert_ne!(k1, key(&s, "i", &inputs(&f)).unwrap());
    }

    #[test]
    fn store_round_trips_values_and_files() {
        let cache = tempfile::tempdir().unwrap();
        let store = Store::new(cache.path());
        assert!(store.get("k").unwrap().is_none());
        let files = tempfile::tempdir().unwrap();
        std::fs::write(files.path().join("rep"), "report").unwrap();
        let outputs = Outputs::new(
            vec![
                ("n".into(), Value::Int(3)),
                ("rep".into(), Value::File(files.path().join("rep"))),
            ],
            Some(files),
        );
        store.put("k", &outputs, "out", "err", "img").unwrap();
        store.put("k", &outputs, "out2", "err", "img").unwrap();
        let hit = store.get("k").unwrap().unwrap();
        assert_eq!(hit.stdout.text, "out2");
        assert_eq!(hit.outputs.get::<i64>("n").unwrap(), 3);
        let rep: PathBuf = hit.outputs.get("rep").unwrap();
        assert_eq!(std::fs::read_to_string(&rep).unwrap(), "report");
        assert!(!rep.starts_with(cache.path()), "hits hand out copies");
        let leftovers: Vec<_> = std::fs::read_dir(cache.path().join("outputs"))
            .unwrap()
            .collect();
        assert_eq!(leftovers.len(), 1, "no staging or trash left");
    }
}
