//! # dockhand
//!
//! Run code in Docker containers, safely and fast.
//!
//! - **One-shot sandboxes**: declare code or a command, typed inputs and outputs
//!   and an [`ImageSpec`]; each run gets a fresh container wired through
//!   `/var/inputs/<name>` and `/var/outputs/<name>`, which is removed afterwards.
//! - **Images without a registry**: specs render a Dockerfile whose content hash
//!   is the tag, so each image is built once per machine; the Python base is
//!   pulled where a registry answers and made from Debian packages where none does.
//!
//! Everything goes through a [`Client`], created once and cloned freely.
//!
//! ```no_run
//! # async fn demo() -> dockhand::Result<()> {
//! let client = dockhand::Client::connect().await?;
//! let image = client.resolve_image(&dockhand::ImageSpec::default()).await?;
//! println!("ready: {}", image.reference);
//! # Ok(()) }
//! ```

pub(crate) mod archive;
mod client;
pub mod codemode;
pub(crate) mod engine;
pub mod error;
pub mod image;
#[cfg(feature = "kubernetes")]
pub mod k8s;
pub mod kernel;
pub mod lifecycle;
mod paths;
pub mod pool;
pub mod progress;
pub mod sandbox;
pub mod session;
mod settings;
pub mod testing;
mod util;

pub use client::{Client, ClientBuilder, ReapReport};
pub use engine::{DaemonInfo, ManagedImage, TlsFiles};
pub use error::{Error, FileErrorKind, IndexProblem, PackageManager, PythonError, Result};
pub use image::{ImageSource, ImageSpec, ResolvedImage};
pub use lifecycle::State;
pub use paths::CACHE_DIR_ENV;
pub use progress::{Progress, Stage};
pub use sandbox::{
    Attempt, CacheMode, CacheStats, CapturedText, Hardening, Isolation, Memory, Network,
    OutputCache, OutputLine, Outputs, Param, RunOptions, RunOutput, Sandbox, SandboxBuilder,
    Secret, StreamKind, Type, Value, LINE_PIECE, NO_INPUTS,
};

/// Label keys dockhand puts on every object it creates.
pub mod labels {
    pub use crate::engine::labels::{
        session_id, KIND, MANAGED, OWNER_HOST, OWNER_PID, SESSION, SPEC_HASH, VERSION,
    };
}
