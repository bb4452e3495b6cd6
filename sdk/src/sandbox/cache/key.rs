//! The cache key: a hash of everything that decides a run's result.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::sandbox::spec::{Param, Sandbox};
use crate::sandbox::value::Value;

/// Bumped when the entry format or key recipe changes.
pub(super) const FORMAT: u32 = 2;

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
    if let crate::sandbox::spec::Program::Code { auto_io: true, .. } = &sandbox.program {
        let runner = crate::sandbox::preamble::render(&sandbox.inputs, &sandbox.outputs, "", "");
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
    // Only a non-default isolation enters the key, so existing entries stay valid.
    if let Some(runtime) = sandbox.runtime.isolation.runtime_name() {
        field("isolation", runtime.as_bytes());
    }
    let secret_names: Vec<(&str, crate::sandbox::SecretMount)> = sandbox
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
        let gvisor = Sandbox::code("c", "y = x")
            .input("x", Type::Int)
            .output("y", Type::Int)
            .isolation(crate::Isolation::Gvisor)
            .build()
            .unwrap();
        assert_ne!(base, key(&gvisor, "sha256:a", &inp(1)).unwrap());
    }

    #[test]
    fn secret_values_never_enter_the_key() {
        use crate::sandbox::Secret;
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
}
