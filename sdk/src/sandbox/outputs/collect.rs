//! Reading `/var/outputs`: the archive streamed from the container, kept to
//! declared outputs and the runner's status, extracted without letting
//! anything land outside its directory.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use tempfile::TempDir;

use super::RunnerStatus;
use crate::error::{Error, Result};
use crate::sandbox::preamble::{CONTROL_DIR, STATUS_FILE};
use crate::sandbox::spec::Param;
use crate::sandbox::value::Type;

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

/// The outputs from the runner's frame (see `preamble::with_frame`), when it
/// is whole and can stand for the download: every declared output a value
/// that is present, nothing else claimed, and `/var/outputs` within `limit`
/// (past it, the download refuses the run as it always did).
pub fn from_frame(frame: &[u8], declared: &[Param], limit: u64) -> Option<Collected> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Frame {
        outputs: std::collections::HashMap<String, String>,
        bytes: u64,
    }
    let mut frame: Frame = serde_json::from_slice(frame).ok()?;
    if frame.bytes > limit
        || frame.outputs.len() != declared.len()
        || declared.iter().any(|p| p.ty.is_path())
    {
        return None;
    }
    let mut texts = Vec::with_capacity(declared.len());
    for p in declared {
        let text = frame.outputs.remove(&p.name)?;
        texts.push((p.name.clone(), text.into_bytes()));
    }
    // `bytes` is the code's own word; the texts themselves are counted too.
    let carried: u64 = texts.iter().map(|(_, t)| t.len() as u64).sum();
    if carried > limit {
        return None;
    }
    Some(Collected {
        texts,
        ..Default::default()
    })
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
