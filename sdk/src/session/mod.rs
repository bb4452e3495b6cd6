//! Interactive sessions: a persistent container an agent works in, step by
//! step: shell commands, file reads and writes, whitespace-tolerant edits and
//! snapshots. [`SessionTools`] exposes them to any LLM framework;
//! [`crate::testing::FakeSession`] stands in for a real session in tests.
//!
//! The container runs a small agent that serves commands and file
//! operations over its attached stdin/stdout, so a command costs a few
//! milliseconds instead of a `docker exec`: dockhand's static program
//! (`sdk/images/agent`), so the image needs no interpreter (a `/bin/sh`
//! for commands given as text). The SDK carries it for its own platform
//! and compiles it once per machine for another; a cluster's pods take it
//! from its image (`Client::session_agent_image`).
//!
//! ```no_run
//! # async fn demo() -> dockhand::Result<()> {
//! use dockhand::session::{Edit, SessionApi, SessionConfig};
//! let client = dockhand::Client::connect().await?;
//! let s = client.session(SessionConfig::new().workspace("/workspace"));
//! s.start().await?;
//! s.write_file("calc.py", b"def add(a, b):\n    return a - b\n").await?;
//! s.edit_file("calc.py", &[Edit::replace("return a - b", "return a + b")]).await?;
//! let r = s.exec("python3 -c 'import calc; print(calc.add(2, 3))'").await?;
//! assert_eq!(r.stdout, "5\n");
//! let snapshot = s.snapshot().await?; // start a new session from it later
//! s.close().await?;
//! # Ok(()) }
//! ```

mod api;
mod config;
pub mod edits;
pub(crate) mod live;
pub(crate) mod paths;
pub(crate) mod protocol;
mod tools;

pub use crate::volume::VolumeMount;
pub use api::{ExecOptions, ExecResult, SessionApi};
pub use config::{LazyValue, SessionConfig, Snapshot};
pub use edits::{apply_edits, Change, Edit, EditError, EditResult, InsertAt};
pub use live::SetupHook;
pub(crate) use live::{Channel, HELPERS_DIR};
pub use live::{
    ExecEvent, ExposedPort, FileEvent, FileEventKind, FileWatch, KeptSession, PauseMode, Paused,
    PortStream, ProcessControl, Session, SessionDescription, SpawnOptions, Spawned,
    AGENT_FROM_IMAGE_ENV, MAX_FORKS,
};
pub use protocol::{DirEntry, FileInfo, TerminalSize};
pub use tools::{SessionTools, ToolDefinition, ALL_TOOLS, READ_ONLY_TOOLS};
