//! Tar layout: build contexts, input uploads and safe extraction of outputs.
//! Pure functions over bytes, plus one streaming context for large files.

use std::io;
use std::path::Path;

use bytes::Bytes;
use futures::{Stream, StreamExt};

use crate::error::{Error, Result};

/// One file to put in an in-memory archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TarFile {
    /// Path inside the archive (relative, `/`-separated).
    pub path: String,
    /// File contents.
    pub data: Vec<u8>,
    /// Unix permission bits.
    pub mode: u32,
    /// Owner uid and gid (root by default).
    pub owner: (u64, u64),
}

impl TarFile {
    /// A regular file readable by everyone.
    pub fn new(path: impl Into<String>, data: impl Into<Vec<u8>>) -> Self {
        TarFile {
            path: path.into(),
            data: data.into(),
            mode: 0o644,
            owner: (0, 0),
        }
    }

    /// The same file, private to `uid:gid` (mode 0400).
    pub fn private_to(mut self, uid: u64, gid: u64) -> Self {
        self.mode = 0o400;
        self.owner = (uid, gid);
        self
    }
}

fn header(path: &str, size: u64, mode: u32, kind: tar::EntryType) -> io::Result<tar::Header> {
    owned_header(path, size, mode, kind, ROOT)
}

/// The root user and group: who owns what the SDK uploads unless told.
pub const ROOT: (u64, u64) = (0, 0);

fn owned_header(
    path: &str,
    size: u64,
    mode: u32,
    kind: tar::EntryType,
    (uid, gid): (u64, u64),
) -> io::Result<tar::Header> {
    let mut h = tar::Header::new_gnu();
    h.set_path(path)?;
    h.set_size(size);
    h.set_mode(mode);
    h.set_entry_type(kind);
    // Fixed metadata keeps archives byte-for-byte reproducible.
    h.set_mtime(0);
    h.set_uid(uid);
    h.set_gid(gid);
    h.set_cksum();
    Ok(h)
}

/// An uncompressed tar of the given directories `(path, mode)` (created first)
/// and files.
pub fn build_tar(dirs: &[(&str, u32)], files: &[TarFile]) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    append_files(&mut builder, dirs, files)?;
    builder
        .into_inner()
        .map_err(|e| Error::io("building tar archive", e))
}

/// Adds the given directories `(path, mode)` (first) and files to a tar
/// being built.
pub fn append_files<W: io::Write>(
    builder: &mut tar::Builder<W>,
    dirs: &[(&str, u32)],
    files: &[TarFile],
) -> Result<()> {
    let wrap = |e: io::Error| Error::io("building tar archive", e);
    for (dir, mode) in dirs {
        let h = header(
            &format!("{}/", dir.trim_end_matches('/')),
            0,
            *mode,
            tar::EntryType::Directory,
        )
        .map_err(wrap)?;
        builder.append(&h, io::empty()).map_err(wrap)?;
    }
    for file in files {
        let mut h = header(
            &file.path,
            file.data.len() as u64,
            file.mode,
            tar::EntryType::Regular,
        )
        .map_err(wrap)?;
        h.set_uid(file.owner.0);
        h.set_gid(file.owner.1);
        h.set_cksum();
        builder.append(&h, file.data.as_slice()).map_err(wrap)?;
    }
    Ok(())
}

/// Adds a host directory tree under `prefix` to a tar builder. Ownership and
/// modes are normalised (root-owned, 0755 for dirs and executables, 0644 for
/// other files) so an unprivileged process in the container can read it
/// whatever the host's modes were. Symbolic links are kept as links; other
/// special files are skipped.
pub fn append_tree<W: io::Write>(
    builder: &mut tar::Builder<W>,
    prefix: &str,
    dir: &Path,
) -> io::Result<()> {
    append_tree_owned(builder, prefix, dir, ROOT)
}

/// [`append_tree`], every entry owned by `owner` (uid, gid): the daemon
/// applies the archive's owners when it unpacks, so a tree the container's
/// unprivileged user must write is uploaded as its own.
pub fn append_tree_owned<W: io::Write>(
    builder: &mut tar::Builder<W>,
    prefix: &str,
    dir: &Path,
    owner: (u64, u64),
) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    append_dir(builder, prefix, owner)?;
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<io::Result<_>>()?;
    // Sorted: the same tree always makes the same archive.
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let name = format!("{prefix}/{}", entry.file_name().to_string_lossy());
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.is_dir() {
            append_tree_owned(builder, &name, &path, owner)?;
        } else if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path)?;
            let mut h = owned_header(&name, 0, 0o777, tar::EntryType::Symlink, owner)?;
            builder.append_link(&mut h, &name, &target)?;
        } else if meta.is_file() {
            let mode = if meta.permissions().mode() & 0o111 != 0 {
                0o755
            } else {
                0o644
            };
            append_file_owned(builder, &name, &path, mode, owner)?;
        }
    }
    Ok(())
}

/// Adds an empty directory `path` (0755) owned by `owner` (uid, gid).
pub fn append_dir<W: io::Write>(
    builder: &mut tar::Builder<W>,
    path: &str,
    owner: (u64, u64),
) -> io::Result<()> {
    let h = owned_header(
        &format!("{path}/"),
        0,
        0o755,
        tar::EntryType::Directory,
        owner,
    )?;
    builder.append(&h, io::empty())
}

/// Adds one host file as `name` (root-owned, 0644), read from disk as it is
/// written: the file is never held in memory whole. The size is the one read
/// when the header is written; a file that changes meanwhile is an error,
/// not a corrupt archive.
pub fn append_file<W: io::Write>(
    builder: &mut tar::Builder<W>,
    name: &str,
    path: &Path,
) -> io::Result<()> {
    append_file_owned(builder, name, path, 0o644, ROOT)
}

fn append_file_owned<W: io::Write>(
    builder: &mut tar::Builder<W>,
    name: &str,
    path: &Path,
    mode: u32,
    owner: (u64, u64),
) -> io::Result<()> {
    use std::io::Read as _;
    let file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    let h = owned_header(name, size, mode, tar::EntryType::Regular, owner)?;
    let mut counted = CountingReader {
        inner: file.take(size),
        read: 0,
    };
    builder.append(&h, &mut counted)?;
    if counted.read != size {
        return Err(io::Error::other(format!(
            "{} changed size while it was read",
            path.display()
        )));
    }
    Ok(())
}

struct CountingReader<R> {
    inner: R,
    read: u64,
}

impl<R: io::Read> io::Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// A build context streamed from disk: a Dockerfile plus one large file (a root
/// filesystem tar), without copying the large file into memory or a second file.
pub async fn context_with_file(
    dockerfile: &str,
    name: &str,
    path: &Path,
) -> Result<impl Stream<Item = io::Result<Bytes>> + Send + 'static> {
    context_with_files(
        &[TarFile::new("Dockerfile", dockerfile)],
        &[(name.to_string(), path.to_path_buf())],
    )
    .await
}

/// A build context streamed from disk: small files held in memory, then
/// each host file (`(name, path)`) read as the archive is sent, never
/// held whole. A host file that changes size meanwhile ends the stream
/// with an error rather than a corrupt archive.
pub async fn context_with_files(
    small: &[TarFile],
    large: &[(String, std::path::PathBuf)],
) -> Result<impl Stream<Item = io::Result<Bytes>> + Send + 'static> {
    let mut head = build_tar(&[], small)?;
    // `build_tar` ends the archive; the large files follow its entries.
    head.truncate(head.len() - 1024);
    let mut parts: Vec<futures::stream::BoxStream<'static, io::Result<Bytes>>> =
        vec![futures::stream::iter([Ok(Bytes::from(head))]).boxed()];
    for (name, path) in large {
        let wrap = |e: io::Error| Error::io(format!("reading {}", path.display()), e);
        let file = tokio::fs::File::open(path).await.map_err(wrap)?;
        let size = file.metadata().await.map_err(wrap)?.len();
        let entry = header(name, size, 0o644, tar::EntryType::Regular).map_err(wrap)?;
        let sized = tokio::io::AsyncReadExt::take(file, size);
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = sent.clone();
        let body = futures::TryStreamExt::inspect_ok(
            tokio_util::io::ReaderStream::with_capacity(sized, 1 << 20),
            move |chunk| {
                counter.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
            },
        );
        let path = path.clone();
        // Polled once the body is done: a file that shrank meanwhile.
        let check = futures::stream::once(async move {
            (sent.load(std::sync::atomic::Ordering::Relaxed) != size).then(|| {
                Err(io::Error::other(format!(
                    "{} changed size while it was sent",
                    path.display()
                )))
            })
        })
        .filter_map(futures::future::ready);
        parts.push(futures::stream::iter([Ok(Bytes::copy_from_slice(entry.as_bytes()))]).boxed());
        parts.push(body.boxed());
        parts.push(check.boxed());
        parts.push(futures::stream::iter([Ok(Bytes::from(vec![0u8; padding(size)]))]).boxed());
    }
    // The archive ends with two zero blocks.
    parts.push(futures::stream::iter([Ok(Bytes::from(vec![0u8; 1024]))]).boxed());
    Ok(futures::stream::iter(parts).flatten())
}

fn padding(len: u64) -> usize {
    ((512 - (len % 512)) % 512) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn entries(tar_bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
        let mut archive = tar::Archive::new(tar_bytes);
        archive
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let path = e.path().unwrap().to_string_lossy().into_owned();
                let mut data = Vec::new();
                e.read_to_end(&mut data).unwrap();
                (path, data)
            })
            .collect()
    }

    #[test]
    fn build_tar_holds_dirs_then_files_and_is_reproducible() {
        let files = [
            TarFile::new("inputs/x", "21"),
            TarFile::new("Dockerfile", "FROM a\n"),
        ];
        let a = build_tar(&[("inputs", 0o755)], &files).unwrap();
        let b = build_tar(&[("inputs", 0o755)], &files).unwrap();
        assert_eq!(a, b);
        let got = entries(&a);
        assert_eq!(got[0].0, "inputs/");
        assert_eq!(got[1], ("inputs/x".to_string(), b"21".to_vec()));
        assert_eq!(got[2], ("Dockerfile".to_string(), b"FROM a\n".to_vec()));
    }

    #[tokio::test]
    async fn streamed_context_is_a_valid_tar() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("rootfs.tar");
        std::fs::write(&big, vec![7u8; 1000]).unwrap();
        let stream = context_with_file("FROM scratch\n", "rootfs.tar", &big)
            .await
            .unwrap();
        let chunks: Vec<Bytes> = stream.map(|c| c.unwrap()).collect().await;
        let all: Vec<u8> = chunks.concat();
        assert_eq!(all.len() % 512, 0);
        let got = entries(&all);
        assert_eq!(
            got[0],
            ("Dockerfile".to_string(), b"FROM scratch\n".to_vec())
        );
        assert_eq!(got[1], ("rootfs.tar".to_string(), vec![7u8; 1000]));
    }
}
