//! Host directories the code's file calls reach (`open`, `pathlib.Path`,
//! `os.listdir`): copied into the code host's container when it starts, and
//! mounted by the bridge through monty-fs, which resolves every path inside
//! the directory by the OS (cap-std), so `..` and links cannot leave it.
//! A read-write mount's copy can be downloaded again
//! ([`CodeHost::download_mount`]).

use std::path::{Path, PathBuf};

use futures::StreamExt;

use super::protocol::BridgeMount;
use super::CodeHost;
use crate::archive;
use crate::error::{Error, Result};
use crate::sandbox::{Param, Type};

/// Where the container holds the copies (a scratch volume): mount `i` is
/// `MOUNTS_DIR/i/data`, so that its download names one directory, `data`.
pub(crate) const MOUNTS_DIR: &str = "/var/dockhand/mounts";
const COPY_NAME: &str = "data";

/// The bridge's user, who owns a read-write mount's copy.
const BRIDGE_USER: (u64, u64) = (65534, 65534);

/// The default of [`CodeHostConfig::mounts_size`](super::CodeHostConfig::mounts_size).
pub const DEFAULT_MOUNTS_SIZE: u64 = 256 << 20;

/// How the code may use a mounted directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MountMode {
    /// Reads only; a write raises `PermissionError`.
    ReadOnly,
    /// Reads, and writes kept in memory for the one execution (a scratch
    /// space over the files): nothing written reaches the host.
    Overlay,
    /// Reads and writes on the container's copy of the directory: changes
    /// last from one execution to the next, for the host's life, and
    /// [`CodeHost::download_mount`] brings them back. The host's directory
    /// itself is never written.
    ReadWrite,
}

impl MountMode {
    fn wire_name(self) -> &'static str {
        match self {
            MountMode::ReadOnly => "read-only",
            MountMode::Overlay => "overlay",
            MountMode::ReadWrite => "read-write",
        }
    }
}

/// One mount of a code host's configuration.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mount {
    pub virtual_path: String,
    pub host_dir: PathBuf,
    pub mode: MountMode,
}

/// Checks the mounts' paths: absolute, not `/`, each once.
pub(crate) fn check(mounts: &[Mount]) -> std::result::Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for m in mounts {
        let p = m.virtual_path.trim_end_matches('/');
        if !m.virtual_path.starts_with('/') || p.is_empty() || p.contains("/../") {
            return Err(format!(
                "mount path `{}` must be absolute and not `/`",
                m.virtual_path
            ));
        }
        if !seen.insert(p.to_string()) {
            return Err(format!("mount path `{p}` is given twice"));
        }
    }
    Ok(())
}

/// Where mount `i`'s copy is in the container.
fn copy_path(i: usize) -> String {
    format!("{MOUNTS_DIR}/{i}/{COPY_NAME}")
}

/// What the bridge is told: mount `i` is at `MOUNTS_DIR/i/data`.
pub(crate) fn for_bridge(mounts: &[Mount]) -> Vec<BridgeMount> {
    mounts
        .iter()
        .enumerate()
        .map(|(i, m)| BridgeMount {
            virtual_path: m.virtual_path.clone(),
            path: copy_path(i),
            mode: m.mode.wire_name().to_string(),
        })
        .collect()
}

/// The mounted directories as one tar (`0/data/...`, `1/data/...`), spooled
/// to a temporary file: a directory may be large. A read-write mount's copy
/// belongs to the bridge's user; the others stay root's, so the OS refuses
/// writes even if monty-fs did not.
pub(crate) fn archive(mounts: &[Mount]) -> Result<Packed> {
    let spool = tempfile::NamedTempFile::new()
        .map_err(|e| Error::io("making a temporary file for mounts", e))?;
    let (file, path) = spool.into_parts();
    let mut builder = tar::Builder::new(std::io::BufWriter::new(file));
    let mut files = 0;
    for (i, m) in mounts.iter().enumerate() {
        if !m.host_dir.is_dir() {
            return Err(Error::spec(
                "code host",
                format!(
                    "the directory mounted at {} ({}) is not a directory",
                    m.virtual_path,
                    m.host_dir.display()
                ),
            ));
        }
        let owner = match m.mode {
            MountMode::ReadWrite => BRIDGE_USER,
            MountMode::ReadOnly | MountMode::Overlay => archive::ROOT,
        };
        let wrap = |e| Error::io(format!("reading {}", m.host_dir.display()), e);
        files += 2 + count_entries(&m.host_dir).map_err(wrap)?;
        archive::append_dir(&mut builder, &i.to_string(), archive::ROOT).map_err(wrap)?;
        archive::append_tree_owned(
            &mut builder,
            &format!("{i}/{COPY_NAME}"),
            &m.host_dir,
            owner,
        )
        .map_err(wrap)?;
    }
    builder
        .into_inner()
        .and_then(|mut w| std::io::Write::flush(&mut w))
        .map_err(|e| Error::io("writing the mounts' archive", e))?;
    Ok(Packed { path, files })
}

/// The mounts' archive, and how many files and directories it holds.
#[derive(Debug)]
pub(crate) struct Packed {
    pub path: tempfile::TempPath,
    pub files: u64,
}

/// Files, links and directories under `dir` (links not followed).
fn count_entries(dir: &Path) -> std::io::Result<u64> {
    let mut n = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        n += 1;
        if entry.file_type()?.is_dir() {
            n += count_entries(&entry.path())?;
        }
    }
    Ok(n)
}

impl CodeHost {
    /// Copies the directory mounted at `virtual_path` (see
    /// [`CodeHostConfig::mount`](super::CodeHostConfig::mount)), as the
    /// code has left it, to `to` (a directory it creates; it must not
    /// exist). Waits for a running execution to end, so the copy is whole.
    /// It is bounded by the mounts' volume
    /// ([`CodeHostConfig::mounts_size`](super::CodeHostConfig::mounts_size));
    /// links that lead out of the directory are refused
    /// ([`Error::UnsafeArchivePath`]).
    ///
    /// Only a [`MountMode::ReadWrite`] mount changes; the others come back
    /// as they were uploaded. The copy lives as long as the host's
    /// container: after `stop` or `close` it is gone
    /// ([`Error::CodeHostUnavailable`]).
    ///
    /// ```no_run
    /// # async fn demo(client: dockhand::Client) -> dockhand::Result<()> {
    /// use dockhand::codemode::{CodeHostConfig, MountMode, Toolset};
    /// let host = client.code_host(
    ///     CodeHostConfig::default().mount("/work", "./work", MountMode::ReadWrite),
    /// );
    /// host.execute("open('/work/report.txt', 'w').write('done')", serde_json::json!({}), &Toolset::new())
    ///     .await?;
    /// host.download_mount("/work", "./work-after").await?;
    /// # Ok(()) }
    /// ```
    pub async fn download_mount(&self, virtual_path: &str, to: impl AsRef<Path>) -> Result<()> {
        let to = to.as_ref().to_path_buf();
        let wanted = virtual_path.trim_end_matches('/');
        let index = self
            .config()
            .mounts
            .iter()
            .position(|m| m.virtual_path.trim_end_matches('/') == wanted)
            .ok_or_else(|| {
                Error::spec(
                    "code host",
                    format!("nothing is mounted at `{virtual_path}` (see CodeHostConfig::mount)"),
                )
            })?;
        if to.exists() {
            return Err(Error::io(
                format!("downloading the mount {virtual_path}"),
                std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!("{} already exists", to.display()),
                ),
            ));
        }
        let limit = self.config().mounts_size;
        let collected = self
            .with_idle_container(|client, id| {
                let client = client.clone();
                let id = id.to_string();
                async move {
                    let engine = client.engine()?;
                    let path = format!("{MOUNTS_DIR}/{index}");
                    let Some(stream) = engine.download_stream(&id, &path).await? else {
                        return Err(Error::CodeHostUnavailable {
                            reason: format!("its copy of {path} is gone"),
                        });
                    };
                    let reader = tokio_util::io::StreamReader::new(
                        stream.map(|chunk| chunk.map_err(std::io::Error::other)),
                    );
                    let reader = tokio_util::io::SyncIoBridge::new(reader);
                    let declared = [Param {
                        name: COPY_NAME.into(),
                        ty: Type::Dir,
                    }];
                    crate::util::blocking("unpacking a mount's copy", move || {
                        crate::sandbox::collect_outputs(reader, &declared, limit)
                    })
                    .await
                }
            })
            .await?;
        let Some(dir) = collected.dir else {
            return Err(Error::CodeHostUnavailable {
                reason: format!("its copy of {virtual_path} came back empty"),
            });
        };
        crate::util::blocking("placing a mount's copy", move || {
            let from = dir.path().join(COPY_NAME);
            // The temporary directory goes when `dir` drops, renamed or not.
            match std::fs::rename(&from, &to) {
                Ok(()) => Ok(()),
                Err(_) => crate::util::copy_tree(&from, &to),
            }
        })
        .await
    }
}

/// Refuses mounted directories whose copies would not fit their volume, in
/// bytes or in files.
pub(crate) fn check_size(packed: &Packed, volume_size: u64) -> Result<()> {
    let size = std::fs::metadata(&packed.path)
        .map_err(|e| Error::io("reading the mounts' archive", e))?
        .len();
    let room = volume_size / crate::engine::BYTES_PER_FILE;
    let problem = if size > volume_size {
        format!("hold about {size} bytes")
    } else if packed.files > room {
        format!(
            "hold {} files and directories, and the volume has room for one per {} bytes ({room})",
            packed.files,
            crate::engine::BYTES_PER_FILE
        )
    } else {
        return Ok(());
    };
    Err(Error::spec(
        "code host",
        format!(
            "the mounted directories {problem}: more than mounts_size ({volume_size} bytes) allows; raise CodeHostConfig::mounts_size"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(path: &str) -> Mount {
        Mount {
            virtual_path: path.into(),
            host_dir: std::env::temp_dir(),
            mode: MountMode::ReadOnly,
        }
    }

    #[test]
    fn mount_paths_are_absolute_and_distinct() {
        assert!(check(&[mount("/data"), mount("/scratch/")]).is_ok());
        assert!(check(&[mount("data")]).unwrap_err().contains("absolute"));
        assert!(check(&[mount("/")]).is_err());
        assert!(check(&[mount("/a/../etc")]).is_err());
        assert!(check(&[mount("/data"), mount("/data/")])
            .unwrap_err()
            .contains("twice"));
        let told = for_bridge(&[mount("/data")]);
        assert_eq!(told[0].path, format!("{MOUNTS_DIR}/0/data"));
        assert_eq!(told[0].mode, "read-only");
    }

    #[test]
    fn copies_must_fit_the_volume_in_bytes_and_in_files() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..40 {
            std::fs::write(dir.path().join(format!("f{i}")), "x").unwrap();
        }
        let mut m = mount("/data");
        m.host_dir = dir.path().to_path_buf();
        let packed = archive(&[m]).unwrap();
        // 40 files, the mount's two directories.
        assert_eq!(packed.files, 42);
        assert!(check_size(&packed, 1 << 20).is_ok());
        // 42 files need 42 * 4 KiB; 64 KiB has room for 16.
        let e = check_size(&packed, 64 << 10).unwrap_err().to_string();
        assert!(e.contains("42 files") && e.contains("mounts_size"), "{e}");
        let e = check_size(&packed, 1024).unwrap_err().to_string();
        assert!(e.contains("bytes") && e.contains("mounts_size"), "{e}");
    }

    #[test]
    fn a_missing_directory_is_a_clear_error() {
        let mut m = mount("/data");
        m.host_dir = PathBuf::from("/no/such/dir");
        let e = archive(&[m]).unwrap_err();
        assert!(e.to_string().contains("/no/such/dir"), "{e}");
    }
}
