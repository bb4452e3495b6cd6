//! Host directories the code's file calls reach (`open`, `pathlib.Path`,
//! `os.listdir`): copied into the code host's container when it starts, and
//! mounted by the bridge through monty-fs, which resolves every path inside
//! the directory by the OS (cap-std), so `..` and links cannot leave it.

use std::path::PathBuf;

use super::protocol::BridgeMount;
use crate::archive;
use crate::error::{Error, Result};

/// Where the container holds the copies (a scratch volume).
pub(crate) const MOUNTS_DIR: &str = "/var/dockhand/mounts";

/// How the code may use a mounted directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MountMode {
    /// Reads only; a write raises `PermissionError`.
    ReadOnly,
    /// Reads, and writes kept in memory for the one execution (a scratch
    /// space over the files): nothing written reaches the host.
    Overlay,
}

impl MountMode {
    fn wire_name(self) -> &'static str {
        match self {
            MountMode::ReadOnly => "read-only",
            MountMode::Overlay => "overlay",
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

/// What the bridge is told: mount `i` is at `MOUNTS_DIR/i`.
pub(crate) fn for_bridge(mounts: &[Mount]) -> Vec<BridgeMount> {
    mounts
        .iter()
        .enumerate()
        .map(|(i, m)| BridgeMount {
            virtual_path: m.virtual_path.clone(),
            path: format!("{MOUNTS_DIR}/{i}"),
            mode: m.mode.wire_name().to_string(),
        })
        .collect()
}

/// The mounted directories as one tar (`0/...`, `1/...`), spooled to a
/// temporary file: a directory may be large.
pub(crate) fn archive(mounts: &[Mount]) -> Result<tempfile::TempPath> {
    let spool = tempfile::NamedTempFile::new()
        .map_err(|e| Error::io("making a temporary file for mounts", e))?;
    let (file, path) = spool.into_parts();
    let mut builder = tar::Builder::new(std::io::BufWriter::new(file));
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
        archive::append_tree(&mut builder, &i.to_string(), &m.host_dir)
            .map_err(|e| Error::io(format!("reading {}", m.host_dir.display()), e))?;
    }
    builder
        .into_inner()
        .and_then(|mut w| std::io::Write::flush(&mut w))
        .map_err(|e| Error::io("writing the mounts' archive", e))?;
    Ok(path)
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
        assert_eq!(told[0].path, format!("{MOUNTS_DIR}/0"));
        assert_eq!(told[0].mode, "read-only");
    }

    #[test]
    fn a_missing_directory_is_a_clear_error() {
        let mut m = mount("/data");
        m.host_dir = PathBuf::from("/no/such/dir");
        let e = archive(&[m]).unwrap_err();
        assert!(e.to_string().contains("/no/such/dir"), "{e}");
    }
}
