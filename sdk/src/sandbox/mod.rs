//! One-shot sandboxes: declare a job once, run it many times, each run in a
//! fresh container that is always removed.
//!
//! Three modes:
//! - **auto-IO** (default for code): each input is a Python variable of its
//!   type; each declared scalar/JSON output is written from the variable of the
//!   same name. File and Dir values are paths (`/var/inputs/<name>`); File and
//!   Dir outputs are written by the code to `/var/outputs/<name>`.
//! - **verbatim** ([`SandboxBuilder::verbatim`]): the script runs as written and
//!   reads `/var/inputs/<name>` / writes `/var/outputs/<name>` itself.
//! - **command** ([`Sandbox::command`]): any program; `{{name}}` in an argument
//!   becomes the input's text, or its path for File and Dir inputs.
//!
//! Inputs travel in one archive upload and outputs in one download, so no bind
//! mount is needed and a remote daemon works.
//!
//! ```no_run
//! # async fn demo() -> dockhand::Result<()> {
//! use dockhand::{Client, Sandbox, Type, Value};
//! let client = Client::connect().await?;
//! let count = Sandbox::command("count", "sh")
//!     .args(["-c", "grep -c . {{text}} > /var/outputs/lines"])
//!     .input("text", Type::File)
//!     .output("lines", Type::Int)
//!     .build()?;
//! let out = client.run(&count, [("text", Value::file("notes.txt"))]).await?;
//! println!("{} lines", out.get::<i64>("lines")?);
//! # Ok(()) }
//! ```

mod attempt;
mod cache;
mod capture;
mod conclusion;
mod frame;
mod inputs;
mod launch;
#[cfg(feature = "kubernetes")]
pub(crate) mod on_cluster;
mod outputs;
pub(crate) mod preamble;
mod quick;
mod retries;
mod run;
mod spec;
mod traceback;
mod value;
mod verdict;

pub use crate::settings::{parse_memory, Memory};

pub(crate) use crate::settings::confine;
pub(crate) use crate::settings::{redact, redact_cut, Cut};
pub use crate::settings::{
    CacheMode, Hardening, Isolation, Network, Resources, Runtime, DEFAULT_CPUS, DEFAULT_MEMORY,
    DEFAULT_PIDS, UNPRIVILEGED_USER,
};
pub use crate::settings::{Secret, SecretMount, SECRETS_DIR};
pub use attempt::{Attempt, RunOptions, RunOutput};
pub use cache::{CacheStats, OutputCache, DEFAULT_CACHE_LIMIT};
pub(crate) use capture::tail as capture_tail;
pub use capture::{CapturedText, OutputHandler, OutputLine, StreamKind, LINE_PIECE};
pub(crate) use inputs::{inline_runner, named as named_inputs, secrets_archive, INLINE_RUNNER_ENV};
pub(crate) use launch::shape as one_shot_shape;
pub(crate) use outputs::collect as collect_outputs;
pub use outputs::{FromOutputs, Outputs};
pub use quick::NO_INPUTS;
pub use spec::{Param, Program, Sandbox, SandboxBuilder, DEFAULT_OUTPUT_LIMIT};
pub use value::{FromValue, Type, Value};
