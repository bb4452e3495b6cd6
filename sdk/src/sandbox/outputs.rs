//! Outputs: parsing `/var/outputs` (downloaded as a tar) by declared type, and
//! extracting File and Dir outputs safely into a directory the result owns.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use serde::de::DeserializeOwned;
use tempfile::TempDir;

use super::preamble::{CONTROL_DIR, STATUS_FILE};
use super::spec::Param;
use super::value::{json_as, FromValue, Type, Value};
use crate::error::{Error, Result};

/// The typed outputs of a run, in declared order.
///
/// File and Dir outputs live in a host directory owned by this value: it is
/// removed when the value is dropped, unless [`Outputs::keep`] is called.
#[derive(Debug, Default)]
pub struct Outputs {
    values: Vec<(String, Value)>,
    dir: Option<TempDir>,
}

impl Outputs {
    pub(crate) fn new(values: Vec<(String, Value)>, dir: Option<TempDir>) -> Self {
        Outputs { values, dir }
    }

    /// The output `name` as a Rust type (`i64`, `f64`, `String`, `bool`,
    /// `NaiveDateTime`, `DateTime<Utc>`, `Duration`, `PathBuf`, `serde_json::Value`, `Value`).
    pub fn get<T: FromValue>(&self, name: &str) -> Result<T> {
        let value = self
            .value(name)
            .ok_or_else(|| Error::MissingOutput { name: name.into() })?;
        T::from_value(value).map_err(|expected| Error::BadOutput {
            name: name.into(),
            expected: expected.into(),
            got: format!("a {} value", value.type_of()),
        })
    }

    /// A JSON output deserialised into any type.
    pub fn json<T: DeserializeOwned>(&self, name: &str) -> Result<T> {
        let value = self
            .value(name)
            .ok_or_else(|| Error::MissingOutput { name: name.into() })?;
        json_as(value).map_err(|got| Error::BadOutput {
            name: name.into(),
            expected: std::any::type_name::<T>().into(),
            got,
        })
    }

    /// The outputs as a tuple, in declared order: `let (a, b): (i64, String) = out.tuple()?;`
    pub fn tuple<T: FromOutputs>(&self) -> Result<T> {
        T::from_outputs(self)
    }

    /// The raw value of an output.
    pub fn value(&self, name: &str) -> Option<&Value> {
        self.values.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// `(name, value)` pairs in declared order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.values.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// Number of outputs.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are no outputs.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The host directory holding File and Dir outputs, if any.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(|d| d.path())
    }

    /// Keeps the File/Dir outputs on disk after this value is dropped and
    /// returns their directory (the caller removes it).
    pub fn keep(&mut self) -> Option<PathBuf> {
        self.dir.take().map(|d| d.keep())
    }
}

/// Tuples that [`Outputs::tuple`] can produce.
pub trait FromOutputs: Sized {
    /// Reads the outputs in declared order.
    fn from_outputs(outputs: &Outputs) -> Result<Self>;
}

macro_rules! tuple_outputs {
    ($n:literal; $($t:ident $i:tt),+) => {
        impl<$($t: FromValue),+> FromOutputs for ($($t,)+) {
            fn from_outputs(outputs: &Outputs) -> Result<Self> {
                if outputs.values.len() != $n {
                    return Err(Error::spec("outputs", format!(
                        "a tuple of {} was asked for, but there are {} outputs", $n, outputs.values.len())));
                }
                Ok(($(outputs.get::<$t>(&outputs.values[$i].0)?,)+))
            }
        }
    };
}
tuple_outputs!(1; A 0);
tuple_outputs!(2; A 0, B 1);
tuple_outputs!(3; A 0, B 1, C 2);
tuple_outputs!(4; A 0, B 1, C 2, D 3);
tuple_outputs!(5; A 0, B 1, C 2, D 3, E 4);
tuple_outputs!(6; A 0, B 1, C 2, D 3, E 4, F 5);
tuple_outputs!(7; A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_outputs!(8; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// What the auto-IO runner reported in its status file.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct RunnerStatus {
    /// The exception that ended the code.
    pub error: Option<RunnerError>,
    /// Outputs the code never assigned.
    pub unassigned: Option<Vec<String>>,
    /// An output that could not be written as its type.
    pub bad_output: Option<RunnerBadOutput>,
}

/// An exception reported by the runner.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct RunnerError {
    /// Exception class.
    #[serde(rename = "type")]
    pub kind: String,
    /// Message.
    pub message: String,
    /// Formatted traceback.
    pub traceback: String,
}

/// An output of the wrong type, reported by the runner.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct RunnerBadOutput {
    /// Output name.
    pub name: String,
    /// Declared type.
    pub expected: String,
    /// What the variable held.
    pub got: String,
}

/// The largest value output (int, str, json, ...) read into memory.
const VALUE_LIMIT: u64 = 64 << 20;
/// The largest status file the runner could have written.
const STATUS_LIMIT: u64 = 1 << 20;

/// What was found in `/var/outputs`.
#[derive(Debug, Default)]
pub struct Collected {
    /// Text of scalar/JSON outputs, by name.
    pub texts: Vec<(String, Vec<u8>)>,
    /// Names of File/Dir outputs that were extracted.
    pub extracted: HashSet<String>,
    /// The runner's status report, if any.
    pub status: Option<RunnerStatus>,
    /// Where File/Dir outputs were extracted.
    pub dir: Option<TempDir>,
}

/// Reads the tar of `/var/outputs` (entries start with `outputs/`), keeping only
/// declared outputs and the runner's status. File and Dir outputs are extracted
/// into a fresh temp dir, refusing anything that could land outside it.
///
/// The archive is read as a stream (File and Dir outputs go straight to
/// disk); everything in it, declared or not, counts toward `limit` bytes.
pub fn collect(tar: impl std::io::Read, declared: &[Param], limit: u64) -> Result<Collected> {
    let wrap = |e: std::io::Error| Error::io("reading the outputs archive", e);
    let mut collected = Collected::default();
    let mut symlinks: HashSet<PathBuf> = HashSet::new();
    let mut archive = tar::Archive::new(tar);
    let mut total: u64 = 0;
    for entry in archive.entries().map_err(wrap)? {
        let mut entry = entry.map_err(wrap)?;
        let full = entry.path().map_err(wrap)?.into_owned();
        total = total.saturating_add(entry.header().size().unwrap_or(0));
        if total > limit {
            let name: PathBuf = full.components().skip(1).take(1).collect();
            return Err(Error::OutputTooLarge {
                name: name.display().to_string(),
                limit_bytes: limit,
            });
        }
        let shown = full.display().to_string();
        let unsafe_path = |reason| Error::UnsafeArchivePath {
            path: shown.clone(),
            reason,
        };
        if full
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(unsafe_path("absolute or `..` path"));
        }
        // Strip the archive's top directory (`outputs`).
        let rel: PathBuf = full.components().skip(1).collect();
        let Some(first) = rel.components().next() else {
            continue;
        };
        let name = first.as_os_str().to_string_lossy().into_owned();

        let size = entry.header().size().unwrap_or(0);
        if name == CONTROL_DIR {
            // The code can write here too: a status file larger than any the
            // runner writes is not read.
            if rel == Path::new(CONTROL_DIR).join(STATUS_FILE) && size <= STATUS_LIMIT {
                let mut text = Vec::new();
                entry.read_to_end(&mut text).map_err(wrap)?;
                collected.status = serde_json::from_slice(&text).ok();
            }
            continue;
        }
        let Some(param) = declared.iter().find(|p| p.name == name) else {
            continue;
        };
        let kind = entry.header().entry_type();

        if !param.ty.is_path() {
            if size > VALUE_LIMIT {
                return Err(Error::BadOutput {
                    name,
                    expected: param.ty.to_string(),
                    got: format!("{size} bytes; values are read into memory up to {VALUE_LIMIT} bytes, so declare a File output for more"),
                });
            }
            if !kind.is_file() {
                return Err(Error::BadOutput {
                    name,
                    expected: param.ty.to_string(),
                    got: "not a regular file".into(),
                });
            }
            let mut text = Vec::new();
            entry.read_to_end(&mut text).map_err(wrap)?;
            collected.texts.push((name, text));
            continue;
        }

        // A File output is one regular file; a Dir output is a tree.
        let is_top = rel.components().count() == 1;
        match (param.ty, is_top) {
            (Type::File, true) if !kind.is_file() => {
                return Err(if kind.is_symlink() {
                    unsafe_path("a File output may not be a link")
                } else {
                    Error::BadOutput {
                        name,
                        expected: "File".into(),
                        got: "a directory or special file".into(),
                    }
                })
            }
            (Type::File, false) => continue,
            (Type::Dir, true) if !kind.is_dir() => {
                return Err(Error::BadOutput {
                    name,
                    expected: "Dir".into(),
                    got: "not a directory".into(),
                })
            }
            _ => {}
        }
        // Writing through a link we created could land anywhere it points.
        if rel.ancestors().skip(1).any(|a| symlinks.contains(a)) {
            return Err(unsafe_path("path goes through a symbolic link"));
        }
        // A hard link names its target from the archive's root.
        let mut hard_link_target = None;
        if kind.is_symlink() {
            let target = entry
                .link_name()
                .map_err(wrap)?
                .ok_or_else(|| unsafe_path("link without target"))?
                .into_owned();
            // Links may only point down: relative, no `..`. Then no chain of
            // them can climb out of the directory.
            let downward = target
                .components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
            if !downward {
                return Err(unsafe_path("link points outside the output"));
            }
            symlinks.insert(rel.clone());
        } else if kind.is_hard_link() {
            let target = entry
                .link_name()
                .map_err(wrap)?
                .ok_or_else(|| unsafe_path("link without target"))?
                .into_owned();
            let target_rel: PathBuf = target.components().skip(1).collect();
            let inside = target
                .components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
                && target_rel.components().next() == rel.components().next()
                && !target_rel.ancestors().any(|a| symlinks.contains(a));
            if !inside {
                return Err(unsafe_path("hard link to a file outside the output"));
            }
            hard_link_target = Some(target_rel);
        } else if !(kind.is_file() || kind.is_dir()) {
            return Err(unsafe_path("device, fifo or other special file"));
        }
        if collected.dir.is_none() {
            let dir = tempfile::Builder::new()
                .prefix("dockhand-outputs-")
                .tempdir()
                .map_err(|e| Error::io("creating the outputs directory", e))?;
            collected.dir = Some(dir);
        }
        let root = collected
            .dir
            .as_ref()
            .map(|d| d.path().to_path_buf())
            .unwrap_or_default();
        let dest = root.join(&rel);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::io(format!("creating {}", parent.display()), e))?;
        }
        if let Some(target) = hard_link_target {
            std::fs::hard_link(root.join(target), &dest)
                .map_err(|e| Error::io(format!("linking {}", dest.display()), e))?;
        } else {
            entry.set_preserve_permissions(false);
            entry
                .unpack(&dest)
                .map_err(|e| Error::io(format!("extracting {}", dest.display()), e))?;
        }
        collected.extracted.insert(name);
    }
    Ok(collected)
}

/// Turns what was collected into typed values, failing on the first missing
/// or unparsable output.
pub fn parse(collected: Collected, declared: &[Param]) -> Result<Outputs> {
    let mut values = Vec::with_capacity(declared.len());
    for p in declared {
        let value = if p.ty.is_path() {
            if !collected.extracted.contains(&p.name) {
                return Err(Error::MissingOutput {
                    name: p.name.clone(),
                });
            }
            let path = collected
                .dir
                .as_ref()
                .map(|d| d.path().join(&p.name))
                .unwrap_or_default();
            if p.ty == Type::File {
                Value::File(path)
            } else {
                Value::Dir(path)
            }
        } else {
            let text = collected
                .texts
                .iter()
                .find(|(n, _)| *n == p.name)
                .map(|(_, t)| t)
                .ok_or_else(|| Error::MissingOutput {
                    name: p.name.clone(),
                })?;
            let got = || String::from_utf8_lossy(&text[..text.len().min(200)]).into_owned();
            let text = std::str::from_utf8(text).map_err(|_| Error::BadOutput {
                name: p.name.clone(),
                expected: p.ty.to_string(),
                got: got(),
            })?;
            Value::parse(p.ty, text).map_err(|_| Error::BadOutput {
                name: p.name.clone(),
                expected: p.ty.to_string(),
                got: got(),
            })?
        };
        values.push((p.name.clone(), value));
    }
    Ok(Outputs::new(values, collected.dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &str, ty: Type) -> Param {
        Param {
            name: name.into(),
            ty,
        }
    }

    /// A tar like the daemon sends for `/var/outputs`.
    fn archive(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let mut dir = tar::Header::new_gnu();
        dir.set_entry_type(tar::EntryType::Directory);
        dir.set_mode(0o755);
        dir.set_size(0);
        b.append_data(&mut dir, "outputs/", std::io::empty())
            .unwrap();
        build(&mut b);
        b.into_inner().unwrap()
    }

    fn file(b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, path, data).unwrap();
    }

    fn link(b: &mut tar::Builder<Vec<u8>>, path: &str, target: &str) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, path, target).unwrap();
    }

    fn hard_link(b: &mut tar::Builder<Vec<u8>>, path: &str, target: &str) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Link);
        h.set_size(0);
        b.append_link(&mut h, path, target).unwrap();
    }

    #[test]
    fn hard_links_stay_within_their_output() {
        let tar = archive(|b| {
            dir(b, "outputs/tree/");
            file(b, "outputs/tree/a", b"same");
            hard_link(b, "outputs/tree/b", "outputs/tree/a");
        });
        let got = collect(&tar[..], &[p("tree", Type::Dir)], 1 << 20).unwrap();
        let root = got.dir.as_ref().unwrap().path().join("tree");
        assert_eq!(std::fs::read(root.join("b")).unwrap(), b"same");
        for target in ["outputs/other/a", "outputs/../etc/passwd", "/etc/passwd"] {
            let tar = archive(|b| {
                file(b, "outputs/other/a", b"secret");
                dir(b, "outputs/tree/");
                hard_link(b, "outputs/tree/b", target);
            });
            let declared = [p("tree", Type::Dir), p("other", Type::Dir)];
            assert!(
                matches!(
                    collect(&tar[..], &declared, 1 << 20),
                    Err(Error::UnsafeArchivePath { .. })
                ),
                "{target}"
            );
        }
    }

    fn dir(b: &mut tar::Builder<Vec<u8>>, path: &str) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        b.append_data(&mut h, path, std::io::empty()).unwrap();
    }

    #[test]
    fn the_outputs_limit_names_what_crossed_it() {
        let tar = archive(|b| {
            file(b, "outputs/small", b"1234");
            file(b, "outputs/undeclared", b"12345678");
        });
        let declared = [p("small", Type::File)];
        assert!(collect(&tar[..], &declared, 12).is_ok());
        match collect(&tar[..], &declared, 11) {
            Err(Error::OutputTooLarge { name, limit_bytes }) => {
                assert_eq!((name.as_str(), limit_bytes), ("undeclared", 11))
            }
            other => panic!("expected OutputTooLarge, got {other:?}"),
        }
    }

    #[test]
    fn scalars_files_and_dirs_are_collected() {
        let tar = archive(|b| {
            file(b, "outputs/n", b"42");
            file(b, "outputs/report.txt", b"ignored: undeclared");
            file(b, "outputs/rep", b"<xml/>");
            dir(b, "outputs/tree/");
            file(b, "outputs/tree/a/b.txt", b"deep");
            link(b, "outputs/tree/link", "a/b.txt");
            file(
                b,
                "outputs/.dockhand/status.json",
                b"{\"unassigned\": [\"x\"]}",
            );
        });
        let declared = [
            p("n", Type::Int),
            p("rep", Type::File),
            p("tree", Type::Dir),
        ];
        let collected = collect(&tar[..], &declared, u64::MAX).unwrap();
        assert_eq!(
            collected.status.as_ref().unwrap().unassigned,
            Some(vec!["x".to_string()])
        );
        let mut out = parse(collected, &declared).unwrap();
        assert_eq!(out.get::<i64>("n").unwrap(), 42);
        let rep: PathBuf = out.get("rep").unwrap();
        assert_eq!(std::fs::read(&rep).unwrap(), b"<xml/>");
        let tree: PathBuf = out.get("tree").unwrap();
        assert_eq!(
            std::fs::read_to_string(tree.join("a/b.txt")).unwrap(),
            "deep"
        );
        assert_eq!(std::fs::read_to_string(tree.join("link")).unwrap(), "deep");
        let kept = out.keep().unwrap();
        drop(out);
        assert!(kept.join("rep").exists());
        std::fs::remove_dir_all(kept).unwrap();
    }

    #[test]
    fn outputs_dir_is_removed_on_drop() {
        let tar = archive(|b| file(b, "outputs/rep", b"x"));
        let declared = [p("rep", Type::File)];
        let out = parse(collect(&tar[..], &declared, u64::MAX).unwrap(), &declared).unwrap();
        let dir = out.dir().unwrap().to_path_buf();
        assert!(dir.exists());
        drop(out);
        assert!(!dir.exists());
    }

    #[test]
    fn escaping_paths_are_refused() {
        let declared = [p("tree", Type::Dir), p("rep", Type::File)];
        let cases: Vec<Vec<u8>> = vec![
            archive(|b| {
                dir(b, "outputs/tree/");
                link(b, "outputs/tree/up", "../../etc");
            }),
            archive(|b| {
                dir(b, "outputs/tree/");
                link(b, "outputs/tree/abs", "/etc/passwd");
            }),
            archive(|b| link(b, "outputs/rep", "/etc/passwd")),
            archive(|b| {
                dir(b, "outputs/tree/");
                link(b, "outputs/tree/l", "sub");
                file(b, "outputs/tree/l/f", b"through the link");
            }),
        ];
        for tar in cases {
            let err = collect(&tar[..], &declared, u64::MAX).unwrap_err();
            assert!(matches!(err, Error::UnsafeArchivePath { .. }), "{err}");
        }
        // `..` in entry names: the tar crate refuses to write such names, so
        // patch the bytes of a header after the fact.
        let mut tar = archive(|b| file(b, "outputs/XX/XX/escape", b"x"));
        let pos = tar.windows(12).position(|w| w == b"outputs/XX/X").unwrap();
        tar[pos + 8..pos + 13].copy_from_slice(b"../..");
        let header_start = pos - pos % 512;
        let mut header = tar::Header::new_old();
        header
            .as_mut_bytes()
            .copy_from_slice(&tar[header_start..header_start + 512]);
        header.set_cksum();
        tar[header_start..header_start + 512].copy_from_slice(header.as_bytes());
        let err = collect(&tar[..], &[p("escape", Type::File)], u64::MAX).unwrap_err();
        assert!(matches!(err, Error::UnsafeArchivePath { .. }), "{err}");
    }

    #[test]
    fn missing_and_bad_outputs_are_named() {
        let declared = [p("n", Type::Int)];
        let err = parse(
            collect(&archive(|_| {})[..], &declared, u64::MAX).unwrap(),
            &declared,
        )
        .unwrap_err();
        assert!(matches!(err, Error::MissingOutput { ref name } if name == "n"));
        let tar = archive(|b| file(b, "outputs/n", b"forty-two"));
        let err = parse(collect(&tar[..], &declared, u64::MAX).unwrap(), &declared).unwrap_err();
        assert!(
            matches!(err, Error::BadOutput { ref name, ref got, .. } if name == "n" && got == "forty-two"),
            "{err}"
        );
    }

    #[test]
    fn tuples_in_declared_order() {
        let out = Outputs::new(
            vec![
                ("a".into(), Value::Int(1)),
                ("b".into(), Value::Str("x".into())),
            ],
            None,
        );
        let (a, b): (i64, String) = out.tuple().unwrap();
        assert_eq!((a, b.as_str()), (1, "x"));
        assert!(out.tuple::<(i64,)>().is_err());
        assert!(out.get::<String>("a").is_err());
    }
}
