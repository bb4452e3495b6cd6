//! Paths as the session may use them: resolved against the workspace, with
//! every symbolic link followed, and under one of the allowed roots.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::agent;
use crate::reply::Refused;

/// How many links one resolution may follow (as the kernel allows).
const MAX_LINKS: usize = 40;

/// `path` made absolute and free of symbolic links, as Python's
/// `os.path.realpath` does: what does not exist is kept as written.
pub fn realpath(path: &Path) -> PathBuf {
    let mut resolved = PathBuf::from("/");
    let mut pending: Vec<PathBuf> = path
        .components()
        .rev()
        .map(|c| PathBuf::from(c.as_os_str()))
        .collect();
    let mut links = 0;
    while let Some(part) = pending.pop() {
        match part.components().next() {
            Some(Component::RootDir) => resolved = PathBuf::from("/"),
            Some(Component::ParentDir) => {
                resolved.pop();
            }
            Some(Component::CurDir) | None => {}
            Some(Component::Normal(name)) => {
                let candidate = resolved.join(name);
                match std::fs::symlink_metadata(&candidate) {
                    Ok(meta) if meta.file_type().is_symlink() && links < MAX_LINKS => {
                        links += 1;
                        match std::fs::read_link(&candidate) {
                            Ok(target) => {
                                // The target's parts come next, in order.
                                for c in target.components().rev() {
                                    pending.push(PathBuf::from(c.as_os_str()));
                                }
                            }
                            Err(_) => resolved = candidate,
                        }
                    }
                    _ => resolved = candidate,
                }
            }
            Some(Component::Prefix(_)) => {}
        }
    }
    resolved
}

/// `path` (absolute, or relative to the workspace), symlink-free and under
/// an allowed root; or refused.
pub fn resolve(path: &str) -> Result<PathBuf, Refused> {
    let a = agent();
    let full = if path.starts_with('/') {
        PathBuf::from(path)
    } else {
        Path::new(&a.workspace).join(path)
    };
    let real = realpath(&full);
    for root in &a.roots {
        let root_real = realpath(Path::new(root));
        if real.starts_with(&root_real) {
            return Ok(real);
        }
    }
    Err(Refused::new(
        "outside",
        format!(
            "{path} is outside the session's allowed paths ({})",
            a.roots.join(", ")
        ),
    ))
}

/// Whether `path` is one of the roots itself.
pub fn is_root(path: &Path) -> bool {
    agent().roots.iter().any(|r| realpath(Path::new(r)) == path)
}

/// The last component, or "/" for the root.
pub fn base_name(path: &Path) -> String {
    path.file_name()
        .map(|n| String::from_utf8_lossy(n.as_bytes()).into_owned())
        .unwrap_or_else(|| "/".into())
}

/// Text of a path, for replies.
pub fn text(path: &Path) -> String {
    String::from_utf8_lossy(path.as_os_str().as_bytes()).into_owned()
}

/// A file name, for replies.
pub fn name_text(name: &OsStr) -> String {
    String::from_utf8_lossy(name.as_bytes()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_followed_and_what_is_missing_is_kept() {
        let dir = crate::testing::workspace();
        let real = realpath(Path::new(&dir));
        std::fs::create_dir_all(real.join("a/b")).unwrap();
        let link = real.join("up");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("a/b/../..", &link).unwrap();
        assert_eq!(realpath(&link.join("a")), real.join("a"));
        assert_eq!(
            realpath(&real.join("a/./b/missing/x")),
            real.join("a/b/missing/x")
        );
        assert_eq!(realpath(&real.join("a/b/../../..")), real.parent().unwrap());
        let escape = real.join("escape");
        let _ = std::fs::remove_file(&escape);
        std::os::unix::fs::symlink("/etc", &escape).unwrap();
        assert_eq!(realpath(&escape.join("passwd")), Path::new("/etc/passwd"));
    }

    #[test]
    fn paths_outside_every_root_are_refused() {
        let dir = crate::testing::workspace();
        let escape = Path::new(&dir).join("out");
        let _ = std::fs::remove_file(&escape);
        std::os::unix::fs::symlink("/", &escape).unwrap();
        assert_eq!(resolve("out/etc").unwrap_err().kind, "outside");
        assert_eq!(resolve("/etc/passwd").unwrap_err().kind, "outside");
        assert_eq!(resolve("../x").unwrap_err().kind, "outside");
        let inside = resolve("sub/file").unwrap();
        assert!(inside.starts_with(realpath(Path::new(&dir))));
        assert!(is_root(&realpath(Path::new(&dir))));
    }
}
