//! # dockhand
//!
//! Run code in Docker containers, safely and fast. Four ways to use it, all
//! through one [`Client`] (created once, cloned freely), all offline and
//! hardened by default, and all removed when done, even when the process dies.
//!
//! | You need | Use | Container | State between calls |
//! |---|---|---|---|
//! | run a program or a snippet with typed inputs and outputs, many times | [one-shot sandboxes](#one-shot-sandboxes) ([`Sandbox`], [`Client::run`]) | fresh per call | none |
//! | let an LLM write one block of code that calls your tools | [code mode](#code-mode) ([`codemode`]) | one long-lived code host, Monty inside | none: each execution starts clean |
//! | analyse data step by step, with charts and tables | [kernels](#kernels) ([`kernel`]) | one long-lived Jupyter kernel | variables, per context |
//! | let an agent work in a shell and a file tree | [sessions](#sessions) ([`session`]) | one persistent container | files and processes |
//!
//! Warm pools ([`pool`]) take the start off the clock for one-shots and
//! kernels. The `dockhand` command line and its MCP server (`dockhand mcp`)
//! reach the same four from a shell and from LLM clients.
//!
//! Images come from [`ImageSpec`]s: a spec renders a Dockerfile whose content
//! hash is the tag, so each image is built once per machine. The Python base
//! is pulled where a registry answers and made from Debian packages where
//! none does. dockhand's own container programs (the code host's bridge,
//! the watchdog, the egress gateway) are compiled by this crate's build
//! script and embedded, so images copy them rather than compile them; set
//! `DOCKHAND_PREBUILD=0` to skip that (they are then compiled inside an
//! image, once per machine, on first use).
//!
//! ## One-shot sandboxes
//!
//! Declared code, typed inputs and outputs through `/var/inputs/<name>` and
//! `/var/outputs/<name>`, a fresh container per call:
//!
//! ```no_run
//! use dockhand::{Client, Sandbox, Type};
//! # async fn demo() -> dockhand::Result<()> {
//! let client = Client::connect().await?;
//! let double = Sandbox::code("double", "result = x * 2")
//!     .input("x", Type::Int)
//!     .output("result", Type::Int)
//!     .memory("512Mi")
//!     .build()?;
//! let out = client.run(&double, [("x", 21)]).await?;
//! assert_eq!(out.get::<i64>("result")?, 42);
//! # Ok(()) }
//! ```
//!
//! ## Code mode
//!
//! One execution of LLM-written Python (Monty, a sandboxed subset) that calls
//! tools running on the host; only what it prints and its last value come
//! back. A code host runs one execution at a time; for concurrency, take
//! hosts from a pool ([`Client::code_host_pool`]).
//!
//! ```no_run
//! use dockhand::codemode::{CodeHostConfig, ParamType, Tool, Toolset};
//! use serde_json::json;
//! # async fn demo() -> dockhand::Result<()> {
//! let client = dockhand::Client::connect().await?;
//! let tools = Toolset::new().tool(
//!     Tool::new("add", "Adds two numbers.")
//!         .param("a", ParamType::Float, "first")
//!         .param("b", ParamType::Float, "second")
//!         .handler(|args| async move {
//!             Ok(json!(args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0)))
//!         }),
//! );
//! let host = client.code_host(CodeHostConfig::default());
//! host.start().await?;
//! let run = host.execute("total = add(a=1, b=2)\nprint(total)\ntotal", json!({}), &tools).await?;
//! assert_eq!(run.stdout, "3.0\n");
//! host.close().await?;
//! # Ok(()) }
//! ```
//!
//! ## Kernels
//!
//! A real Jupyter kernel: state across runs, contexts, and charts and tables
//! as rich results.
//!
//! ```no_run
//! use dockhand::kernel::KernelConfig;
//! # async fn demo() -> dockhand::Result<()> {
//! let client = dockhand::Client::connect().await?;
//! let kernel = client.kernel(KernelConfig::data_science());
//! kernel.start().await?;
//! kernel.run("df = pd.DataFrame({'x': [1, 2, 3]})").await?;
//! let chart = kernel.run("df.x.plot(title='x')").await?;
//! println!("{} results", chart.results.len());
//! kernel.close().await?;
//! # Ok(()) }
//! ```
//!
//! ## Sessions
//!
//! A persistent container an agent works in: commands, files, targeted
//! edits, snapshots.
//!
//! ```no_run
//! use dockhand::session::{Edit, SessionApi, SessionConfig};
//! # async fn demo() -> dockhand::Result<()> {
//! let client = dockhand::Client::connect().await?;
//! let session = client.session(SessionConfig::new());
//! session.start().await?;
//! session.write_file("calc.py", b"def add(a, b):\n    return a - b\n").await?;
//! session.edit_file("calc.py", &[Edit::replace("a - b", "a + b")]).await?;
//! let run = session.exec("python3 -c 'import calc; print(calc.add(2, 3))'").await?;
//! assert_eq!(run.stdout, "5\n");
//! session.close().await?;
//! # Ok(()) }
//! ```
//!
//! ## On a Kubernetes cluster
//!
//! With the `kubernetes` feature, one-shot runs go to a cluster as hardened
//! pods, fed and read through attach streams, and sessions, code hosts and
//! kernels (and their pools) run as pods whose agent or bridge speaks over its
//! attach stream; everything
//! else a cluster cannot do yet is refused up front with [`Error::Unsupported`].
//!
//! ```no_run
//! # #[cfg(feature = "kubernetes")]
//! # async fn demo() -> dockhand::Result<()> {
//! use dockhand::{Client, ImageSpec, KubeConfig, Sandbox, Type};
//! let client = Client::builder()
//!     .kubernetes(KubeConfig::infer().namespace("sandboxes")) // or DOCKHAND_BACKEND=kubernetes
//!     .connect()
//!     .await?;
//! let job = Sandbox::command("hello", "echo")
//!     .args(["hi"])
//!     .image(ImageSpec::prebuilt("registry.example/tools:1"))
//!     .build()?;
//! let out = client.run(&job, dockhand::NO_INPUTS).await?;
//! assert_eq!(out.stdout.text, "hi\n");
//! # Ok(()) }
//! ```

pub(crate) mod archive;
mod backend;
mod client;
#[cfg(feature = "kubernetes")]
mod cluster;
pub mod codemode;
mod egress;
pub(crate) mod engine;
pub mod error;
mod gateway;
pub mod image;
pub mod kernel;
pub mod lifecycle;
#[cfg(feature = "kubernetes")]
mod manifests;
#[cfg(all(test, feature = "kubernetes"))]
mod manifests_tests;
mod paths;
pub mod pool;
pub mod progress;
pub mod sandbox;
pub mod session;
mod settings;
pub mod testing;
mod util;
pub mod volume;
mod warm;

pub use client::{Client, ClientBuilder, ReapReport};
#[cfg(feature = "kubernetes")]
pub use cluster::KubeConfig;
pub use egress::{Egress, EgressStats};
pub use engine::{DaemonInfo, ManagedImage, ResourceUsage, TlsFiles};
pub use error::{
    ClusterError, Error, FileErrorKind, IndexProblem, PackageManager, PythonError, Result,
};
pub use image::{ImageSource, ImageSpec, ResolvedImage};
pub use lifecycle::State;
pub use paths::CACHE_DIR_ENV;
pub use progress::{Progress, Stage};
pub use sandbox::{
    Attempt, CacheMode, CacheStats, CapturedText, Hardening, Isolation, Memory, Network,
    OutputCache, OutputLine, Outputs, Param, RunOptions, RunOutput, Sandbox, SandboxBuilder,
    Secret, StreamKind, Type, Value, LINE_PIECE, NO_INPUTS,
};
pub use volume::Volume;

#[cfg(feature = "kubernetes")]
pub mod k8s {
    //! Kubernetes manifests for what dockhand runs on Docker (feature
    //! `kubernetes`): a Job per one-shot run, a Pod per code host and session,
    //! agent-sandbox `SandboxTemplate` + `SandboxWarmPool` for pools, and a
    //! deny-all `NetworkPolicy` unless the network was asked for.
    //!
    //! The pods are rendered from the very container spec
    //! the Docker backend creates containers from, so they carry the same
    //! hardening (non-root user, every capability dropped, read-only root, no
    //! privilege escalation, seccomp `RuntimeDefault`), limits, scratch space and
    //! `/var/inputs` / `/var/outputs` wiring; gVisor becomes a `runtimeClassName`.
    //! Secrets are referred to (`secretKeyRef` into one Secret object you create),
    //! never written into a manifest. `docs/scale-out.md` describes the backend
    //! that applies them.
    //!
    //! ```
    //! # fn demo() -> dockhand::Result<()> {
    //! use dockhand::k8s::{self, KubeOptions};
    //! use dockhand::{Sandbox, Type};
    //! let double = Sandbox::code("double", "result = x * 2")
    //!     .input("x", Type::Int)
    //!     .output("result", Type::Int)
    //!     .build()?;
    //! let opts = KubeOptions::new("registry.example/dockhand/double:1");
    //! let yaml = k8s::one_shot(&double, [("x", 21)], &opts)?.to_yaml()?;
    //! assert!(yaml.contains("kind: Job"));
    //! assert!(yaml.contains("kind: NetworkPolicy"));
    //! # Ok(()) }
    //! ```

    pub use crate::cluster::Storage;
    pub use crate::codemode::on_cluster::code_host_manifests as code_host;
    pub use crate::manifests::{
        KubeOptions, Manifests, Object, Placement, PodMetadata, PodTemplate, SandboxTemplate,
        SandboxTemplateSpec, SandboxWarmPool, SandboxWarmPoolSpec, TemplateNetworkPolicy,
        TemplateRef, Toleration, AGENT_SANDBOX_API,
    };
    pub use crate::sandbox::on_cluster::one_shot_manifests as one_shot;
    pub use crate::session::live::on_cluster::session_manifests as session;
}

/// Label keys dockhand puts on every object it creates.
pub mod labels {
    pub use crate::engine::labels::{
        session_id, KIND, MANAGED, OWNER_HOST, OWNER_PID, SESSION, SPEC_HASH, VERSION,
    };
}
