//! Testing utilities for apps built on dockhand: an in-memory session that
//! implements [`SessionApi`] without Docker, whose commands are scripted.
//!
//! ```
//! use dockhand::session::{SessionApi, SessionTools};
//! use dockhand::testing::FakeSession;
//! # tokio_test_block(async {
//! let fake = FakeSession::new()
//!     .with_file("main.py", "print('hi')\n")
//!     .respond("python3 main.py", 0, "hi\n", "");
//! let tools = SessionTools::new(fake.clone());
//! let out = tools.call("shell", serde_json::json!({"command": "python3 main.py"})).await.unwrap();
//! assert_eq!(out["stdout"], "hi\n");
//! assert_eq!(fake.commands(), ["python3 main.py"]);
//! # });
//! # fn tokio_test_block(f: impl std::future::Future<Output = ()>) {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::error::{Error, FileErrorKind, Result};
use crate::session::{paths, DirEntry, ExecOptions, ExecResult, SessionApi};

type Responder = Arc<dyn Fn(&str, &ExecOptions) -> ExecResult + Send + Sync>;
type Matcher = Arc<dyn Fn(&str) -> bool + Send + Sync>;

#[derive(Default)]
struct State {
    files: BTreeMap<String, Vec<u8>>,
    responders: Vec<(Matcher, Responder)>,
    commands: Vec<String>,
}

/// An in-memory session: files live in a map, commands answer from a script.
/// Clones share state, so a test can keep one and hand another to the code
/// under test.
#[derive(Clone, Default)]
pub struct FakeSession {
    state: Arc<Mutex<State>>,
    workspace: String,
}

impl std::fmt::Debug for FakeSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("FakeSession")
            .field("files", &s.files.keys().collect::<Vec<_>>())
            .field("commands", &s.commands)
            .finish()
    }
}

impl FakeSession {
    /// An empty session with workspace `/workspace`; unscripted commands exit 127.
    pub fn new() -> Self {
        FakeSession {
            state: Arc::default(),
            workspace: "/workspace".into(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::util::lock(&self.state)
    }

    fn resolve(&self, path: &str) -> Result<String> {
        paths::resolve(
            path,
            &self.workspace,
            &[self.workspace.clone(), "/tmp".into()],
        )
        .ok_or_else(|| Error::SessionFile {
            path: path.into(),
            kind: FileErrorKind::OutsideSession,
            message: "outside the session's allowed paths".into(),
        })
    }

    /// Adds a file.
    pub fn with_file(self, path: &str, content: impl Into<Vec<u8>>) -> Self {
        if let Ok(p) = self.resolve(path) {
            self.lock().files.insert(p, content.into());
        }
        self
    }

    /// Answers the exact command `command` with this exit code and output.
    pub fn respond(self, command: &str, exit_code: i64, stdout: &str, stderr: &str) -> Self {
        let (command, stdout, stderr) =
            (command.to_string(), stdout.to_string(), stderr.to_string());
        self.respond_with(
            move |c| c == command,
            move |_, _| ExecResult {
                exit_code,
                stdout: stdout.clone(),
                stderr: stderr.clone(),
                ..Default::default()
            },
        )
    }

    /// Answers commands matching `when` with whatever `then` computes (it sees
    /// the command and its options). Earlier rules win.
    pub fn respond_with(
        self,
        when: impl Fn(&str) -> bool + Send + Sync + 'static,
        then: impl Fn(&str, &ExecOptions) -> ExecResult + Send + Sync + 'static,
    ) -> Self {
        self.lock()
            .responders
            .push((Arc::new(when), Arc::new(then)));
        self
    }

    /// Every command run so far, in order.
    pub fn commands(&self) -> Vec<String> {
        self.lock().commands.clone()
    }

    /// A file's current content.
    pub fn file(&self, path: &str) -> Option<Vec<u8>> {
        let p = self.resolve(path).ok()?;
        self.lock().files.get(&p).cloned()
    }
}

impl SessionApi for FakeSession {
    async fn exec_with(&self, command: &str, options: ExecOptions) -> Result<ExecResult> {
        let responder = {
            let mut s = self.lock();
            s.commands.push(command.to_string());
            s.responders
                .iter()
                .find(|(when, _)| when(command))
                .map(|(_, then)| then.clone())
        };
        Ok(match responder {
            Some(then) => then(command, &options),
            None => ExecResult {
                exit_code: 127,
                stderr: format!("fake session: no response scripted for `{command}`\n"),
                ..Default::default()
            },
        })
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let p = self.resolve(path)?;
        let s = self.lock();
        if let Some(data) = s.files.get(&p) {
            return Ok(data.clone());
        }
        let is_dir = s.files.keys().any(|k| k.starts_with(&format!("{p}/")));
        Err(Error::SessionFile {
            path: path.into(),
            kind: if is_dir {
                FileErrorKind::IsADirectory
            } else {
                FileErrorKind::NotFound
            },
            message: if is_dir {
                "is a directory".into()
            } else {
                "no such file".into()
            },
        })
    }

    async fn write_file(&self, path: &str, data: &[u8]) -> Result<()> {
        let p = self.resolve(path)?;
        self.lock().files.insert(p, data.to_vec());
        Ok(())
    }

    async fn list_dir(&self, path: &str) -> Result<Vec<DirEntry>> {
        let p = self.resolve(path)?;
        let prefix = format!("{}/", p.trim_end_matches('/'));
        let s = self.lock();
        let mut entries: BTreeMap<String, DirEntry> = BTreeMap::new();
        for (key, data) in &s.files {
            let Some(rest) = key.strip_prefix(&prefix) else {
                continue;
            };
            let (name, kind, size) = match rest.split_once('/') {
                Some((dir, _)) => (dir.to_string(), "dir", 0),
                None => (rest.to_string(), "file", data.len() as u64),
            };
            entries.entry(name.clone()).or_insert(DirEntry {
                name,
                kind: kind.into(),
                size,
                mtime_ns: 0,
            });
        }
        if entries.is_empty() && p != self.workspace {
            return Err(Error::SessionFile {
                path: path.into(),
                kind: FileErrorKind::NotFound,
                message: "no such directory".into(),
            });
        }
        Ok(entries.into_values().collect())
    }

    async fn remove(&self, path: &str) -> Result<()> {
        let p = self.resolve(path)?;
        let prefix = format!("{p}/");
        let mut s = self.lock();
        let before = s.files.len();
        s.files.retain(|k, _| *k != p && !k.starts_with(&prefix));
        if s.files.len() == before {
            return Err(Error::SessionFile {
                path: path.into(),
                kind: FileErrorKind::NotFound,
                message: "no such file".into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::edits::Edit;
    use crate::session::SessionTools;
    use serde_json::json;

    #[tokio::test]
    async fn files_round_trip_and_paths_are_checked() {
        let s = FakeSession::new();
        s.write_file("src/a.py", b"x = 1\n").await.unwrap();
        assert_eq!(
            s.read_file("/workspace/src/a.py").await.unwrap(),
            b"x = 1\n"
        );
        let listed = s.list_dir(".").await.unwrap();
        assert_eq!(
            listed,
            [DirEntry {
                name: "src".into(),
                kind: "dir".into(),
                size: 0,
                mtime_ns: 0,
            }]
        );
        assert!(matches!(
            s.read_file("../etc/passwd").await,
            Err(Error::SessionFile {
                kind: FileErrorKind::OutsideSession,
                ..
            })
        ));
        assert!(matches!(
            s.read_file("src").await,
            Err(Error::SessionFile {
                kind: FileErrorKind::IsADirectory,
                ..
            })
        ));
        s.remove("src").await.unwrap();
        assert!(matches!(
            s.read_file("src/a.py").await,
            Err(Error::SessionFile {
                kind: FileErrorKind::NotFound,
                ..
            })
        ));
    }

    #[tokio::test]
    async fn scripted_commands_and_edits_through_the_tools() {
        let fake = FakeSession::new()
            .with_file("calc.py", "def add(a, b):\n    return a - b\n")
            .respond_with(
                |c| c.starts_with("pytest"),
                |_, _| ExecResult {
                    exit_code: 1,
                    stdout: "1 failed".into(),
                    ..Default::default()
                },
            );
        let tools = SessionTools::new(fake.clone());
        let r = tools
            .call("shell", json!({"command": "pytest -q"}))
            .await
            .unwrap();
        assert_eq!(r["exit_code"], 1);
        let r = tools
            .call("edit_file", json!({"path": "calc.py", "edits": [{"old": "return a - b", "new": "return a + b"}]}))
            .await
            .unwrap();
        assert_eq!(r["applied"], 1, "{r}");
        assert_eq!(
            fake.file("calc.py").unwrap(),
            b"def add(a, b):\n    return a + b\n"
        );
        let r = tools
            .call(
                "edit_file",
                json!({"path": "calc.py", "edits": [{"old": "nowhere", "new": "x"}]}),
            )
            .await
            .unwrap();
        assert!(r["error"].as_str().unwrap().contains("not found"), "{r}");
        let r = tools.call("shell", json!({"cmd": "ls"})).await.unwrap();
        assert!(r["error"].as_str().unwrap().contains("command"), "{r}");
        let r = tools.call("unknown", json!({})).await.unwrap();
        assert!(r["error"].as_str().unwrap().contains("no tool named"));
        assert_eq!(fake.commands(), ["pytest -q"]);
        let unscripted = fake.exec("ls").await.unwrap();
        assert_eq!(unscripted.exit_code, 127);
        let _ = Edit::default();
    }

    /// Both edit shapes reach `apply_edits` through the tool, and the reply
    /// is `applied` with per-change line counts.
    #[tokio::test]
    async fn edit_file_takes_both_shapes_and_reports_line_counts() {
        let fake = FakeSession::new().with_file("m.py", "import os\n\ndef main():\n    pass\n");
        let tools = SessionTools::new(fake.clone());
        let edits = json!([
            {"old": "import os", "insert": "after", "content": "import sys"},
            {"from": "def main():", "to": "    pass", "content": "def main():\n    print(1)\n    return 0"},
            {"insert": "main()", "at": "end"},
        ]);
        let r = tools
            .call("edit_file", json!({"path": "m.py", "edits": edits}))
            .await
            .unwrap();
        assert_eq!(
            r,
            json!({"applied": 3, "changes": [
                {"line": 2, "removed": 0, "added": 1},
                {"line": 3, "removed": 2, "added": 3},
                {"line": 5, "removed": 0, "added": 1},
            ]})
        );
        assert_eq!(
            fake.file("m.py").unwrap(),
            b"import os\nimport sys\n\ndef main():\n    print(1)\n    return 0\nmain()"
        );
        let schema = &tools.definitions()[3].parameters["properties"]["edits"]["items"];
        assert_eq!(
            schema["properties"]["from"]["type"],
            json!(["string", "integer"])
        );
    }

    #[tokio::test]
    async fn read_only_tools_refuse_writes() {
        let tools = SessionTools::read_only(FakeSession::new().with_file("a", "1"));
        let r = tools
            .call("write_file", json!({"path": "a", "content": "2"}))
            .await
            .unwrap();
        assert!(r["error"]
            .as_str()
            .unwrap()
            .contains("no tool named `write_file`"));
        assert_eq!(
            tools.call("read_file", json!({"path": "a"})).await.unwrap()["content"],
            "1"
        );
    }
}
