//! Paths inside a session: relative ones are under the workspace, and every
//! path must stay under a root the session allows. Lexical and pure; the
//! agent repeats the check with symbolic links resolved.

use std::path::{Component, Path, PathBuf};

/// Resolves `path` against `workspace` and normalises `.` and `..`; returns
/// the absolute path if it lies under one of `roots`, or `None`.
pub fn resolve(path: &str, workspace: &str, roots: &[String]) -> Option<String> {
    let joined = if path.starts_with('/') {
        PathBuf::from(path)
    } else {
        Path::new(workspace).join(path)
    };
    let mut parts: Vec<String> = Vec::new();
    for c in joined.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    let normal = format!("/{}", parts.join("/"));
    let inside = roots.iter().any(|root| {
        let root = root.trim_end_matches('/');
        root.is_empty() || normal == root || normal.starts_with(&format!("{root}/"))
    });
    inside.then_some(normal)
}

#[cfg(test)]
mod tests {
    use super::resolve;

    fn roots() -> Vec<String> {
        vec!["/workspace".into(), "/data".into()]
    }

    #[test]
    fn relative_paths_live_in_the_workspace() {
        assert_eq!(
            resolve("a/b.txt", "/workspace", &roots()).as_deref(),
            Some("/workspace/a/b.txt")
        );
        assert_eq!(
            resolve("./a/../b", "/workspace", &roots()).as_deref(),
            Some("/workspace/b")
        );
        assert_eq!(
            resolve(".", "/workspace", &roots()).as_deref(),
            Some("/workspace")
        );
        assert_eq!(
            resolve("/data/x", "/workspace", &roots()).as_deref(),
            Some("/data/x")
        );
    }

    #[test]
    fn escapes_are_refused() {
        assert_eq!(resolve("../etc/passwd", "/workspace", &roots()), None);
        assert_eq!(resolve("/etc/passwd", "/workspace", &roots()), None);
        assert_eq!(resolve("/workspacex/a", "/workspace", &roots()), None);
        assert_eq!(resolve("../../../..", "/workspace", &roots()), None);
    }
}
