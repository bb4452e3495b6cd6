//! Kernels: a long-lived container running real Jupyter kernels (ipykernel,
//! and Deno, bash_kernel or IRkernel for other languages)
//! for data analysis. State persists across runs; results come back as MIME
//! bundles (text, HTML, PNG, SVG, DataFrames as data, matplotlib figures as
//! data too); a run that raises returns its error as data.
//!
//! Each named *context* is a kernel process of its own with its own
//! variables and working directory. Contexts share the container, its user
//! and its files: they keep state apart, they are not a wall between
//! mutually distrustful code (use one kernel per tenant for that).
//!
//! The host speaks the Jupyter messaging protocol (`jupyter-protocol`'s
//! types) to a small relay inside the container over the container's attach
//! stream, so kernels work with the network off, on remote daemons and
//! under gVisor. The relay talks to each Python kernel over unix sockets
//! (other languages' kernels over loopback TCP), checks every message's
//! signature, and tags it with the context it came from; the host keeps
//! only messages that answer the run in progress. Python contexts are
//! forked from a fork server that imported ipykernel and the startup's
//! modules once, so a new context starts in about 0.1 s. Modules bound to a
//! name ([`KernelConfig::bind_module`]: the data-science preset's `pd`,
//! `np`, `plt`) are imported when the code first uses them, so a kernel's
//! start does not pay for imports its code may never make.
//!
//! A context runs one [`Language`]: Python (ipykernel), or those
//! [`KernelConfig::languages`] adds (Deno for JavaScript and TypeScript,
//! `bash_kernel`, IRkernel).
//!
//! ```no_run
//! # async fn demo() -> dockhand::Result<()> {
//! use dockhand::kernel::KernelConfig;
//! let client = dockhand::Client::connect().await?;
//! let kernel = client.kernel(KernelConfig::data_science());
//! kernel.start().await?;
//! kernel.run("df = pd.DataFrame({'x': [1, 2, 3]})").await?;
//! let ex = kernel.run("df.plot(); df.describe()").await?;
//! assert!(ex.main_result().and_then(|r| r.html()).is_some());
//! assert_eq!(ex.pngs().len(), 1);
//! kernel.close().await?;
//! # Ok(()) }
//! ```

mod config;
mod execution;
mod language;
mod link;
mod live;
mod notebook;
mod options;
mod takeover;
mod wire;

pub use crate::error::KernelError;
pub use crate::error::Language;
pub use config::KernelConfig;
pub use execution::{
    Chart, Execution, ExecutionError, KernelEvent, RichResult, CHART_MIME, DATAFRAME_MIME,
};
pub use link::{KERNEL_STARTUP, KERNEL_ZYGOTE, RELAY};
pub use live::{Kernel, DEFAULT_CONTEXT};
pub use options::{ContextOptions, RunOptions};
