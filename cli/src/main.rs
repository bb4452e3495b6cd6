//! `dockhand`: sandboxes from the shell, and an MCP server for LLM clients.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod code;
mod doctor;
mod images;
mod kernel;
mod mcp;
mod mcp_codemode;
mod network;
mod outcome;
mod progress;
mod run;
mod serve;
mod session;
mod spec;
mod volume;

/// Run code in Docker containers, safely and fast.
#[derive(Parser, Debug)]
#[command(name = "dockhand", version, about, propagate_version = true)]
struct Cli {
    /// Print results as JSON (one object) instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// The Docker daemon (`unix:///path`, `tcp://host:2376`, `ssh://user@host`); by default
    /// chosen as the docker CLI chooses (DOCKER_HOST, DOCKER_CONTEXT, the current context,
    /// the local socket). TLS from DOCKER_TLS_VERIFY and DOCKER_CERT_PATH.
    #[arg(short = 'H', long, global = true)]
    host: Option<String>,
    /// A Docker context by name (`docker context ls`), over DOCKER_HOST.
    #[arg(long, global = true, conflicts_with = "host")]
    context: Option<String>,
    /// Where sandboxes run: `docker` (a daemon, the default) or
    /// `kubernetes` (the cluster of the current kubeconfig context, as
    /// pods; docs/scale-out.md says what runs there).
    #[arg(long, global = true, value_enum, env = "DOCKHAND_BACKEND")]
    backend: Option<Backend>,
    /// The kubeconfig context to use on `--backend kubernetes` (default: the current one).
    #[arg(long, global = true, env = "DOCKHAND_KUBE_CONTEXT")]
    kube_context: Option<String>,
    /// The namespace pods are made in on `--backend kubernetes` (default: the context's).
    #[arg(long, global = true, env = "DOCKHAND_KUBE_NAMESPACE")]
    kube_namespace: Option<String>,
    /// On `--backend kubernetes`: a repository (`registry.example.com/team/sandboxes`)
    /// the images dockhand builds are pushed to, built by the Docker daemon
    /// (`--host`, or chosen as usual), pulled by the nodes by digest. Without it only prebuilt
    /// images run on the cluster.
    #[arg(long, global = true, env = "DOCKHAND_KUBE_REGISTRY")]
    kube_registry: Option<String>,
    /// On `--backend kubernetes`: the StorageClass of the claims volumes and
    /// pausable sessions keep their files on (default: the cluster's default class).
    #[arg(long, global = true, env = "DOCKHAND_KUBE_STORAGE_CLASS")]
    kube_storage_class: Option<String>,
    /// How log lines are written to stderr: `text`, or `json` (one object
    /// a line, for a log collector). DOCKHAND_LOG sets what is logged.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run code or a command once in a fresh sandbox.
    Run(Box<run::RunArgs>),
    /// Run a code-mode program (Python for Monty) with a Python sandbox offered as the tool `python`.
    Code(code::CodeArgs),
    /// Sessions that outlive one command: start, exec, read, write, edit, snapshot, close, shell.
    Session {
        #[command(subcommand)]
        command: session::SessionCommand,
    },
    /// Jupyter kernels: run cells with rich results, save charts, export notebooks.
    Kernel {
        #[command(subcommand)]
        command: kernel::KernelCommand,
    },
    /// Named volumes that outlive sessions: create, ls, rm.
    Volume {
        #[command(subcommand)]
        command: volume::VolumeCommand,
    },
    /// List or prune the images dockhand made.
    Images {
        #[command(subcommand)]
        command: images::ImagesCommand,
    },
    /// Remove what dead dockhand processes left behind.
    Reap,
    /// Check this machine: daemon, registry, base image, debootstrap, CA bundle, disk.
    Doctor,
    /// Serve sandboxes to an MCP client over stdio.
    Mcp(mcp::McpArgs),
    /// Serve E2B's API (control plane, envd, code interpreter) so the E2B SDKs run against this Docker host.
    Serve(serve::ServeArgs),
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Docker,
    #[value(alias = "k8s")]
    Kubernetes,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Set before any thread exists; the session keeper, a child process,
    // inherits the choice.
    if let Some(context) = &cli.context {
        std::env::set_var("DOCKER_CONTEXT", context);
        std::env::remove_var("DOCKER_HOST");
    }
    // The SDK reads its backend from these when connecting.
    if let Some(backend) = cli.backend {
        let name = match backend {
            Backend::Docker => "docker",
            Backend::Kubernetes => "kubernetes",
        };
        std::env::set_var("DOCKHAND_BACKEND", name);
    }
    for (name, value) in [
        ("DOCKHAND_KUBE_CONTEXT", &cli.kube_context),
        ("DOCKHAND_KUBE_NAMESPACE", &cli.kube_namespace),
        ("DOCKHAND_KUBE_REGISTRY", &cli.kube_registry),
        ("DOCKHAND_KUBE_STORAGE_CLASS", &cli.kube_storage_class),
    ] {
        if let Some(value) = value {
            std::env::set_var(name, value);
        }
    }
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(dispatch(cli)),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::from(125)
        }
    }
}

async fn dispatch(cli: Cli) -> ExitCode {
    // A server logs each request unless told otherwise.
    let default_filter = match cli.command {
        Command::Serve(_) => "warn,dockhand::serve=info,dockhand::requests=info",
        _ => "warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("DOCKHAND_LOG")
        .unwrap_or_else(|_| default_filter.into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
    let json = cli.json;
    let result = match cli.command {
        Command::Run(args) => run::run(*args, cli.host, json).await,
        Command::Code(args) => code::run(args, cli.host, json).await,
        Command::Session { command } => session::run(command, cli.host, json).await,
        Command::Kernel { command } => kernel::run(command, cli.host, json).await,
        Command::Images { command } => images::run(command, cli.host, json).await,
        Command::Volume { command } => volume::run(command, cli.host, json).await,
        Command::Reap => images::reap(cli.host, json).await,
        Command::Doctor => doctor::run(cli.host, json).await,
        Command::Mcp(args) => mcp::serve(args, cli.host).await,
        Command::Serve(args) => serve::serve(args, cli.host)
            .await
            .map(|()| ExitCode::SUCCESS),
    };
    close_clients().await;
    match result {
        Ok(code) => code,
        Err(e) => outcome::fail(&e, json),
    }
}

/// A client for `host`, with progress bars for slow image work on a terminal.
/// On `--backend kubernetes`, a client of the kubeconfig's cluster; with
/// `--kube-registry`, images are built by the local Docker daemon and pushed.
async fn connect(host: Option<String>, json: bool) -> anyhow::Result<dockhand::Client> {
    let mut builder = dockhand::Client::builder();
    if let Some(host) = &host {
        builder = builder.endpoint(host);
    }
    if !json {
        builder = builder.on_progress(progress::bars());
    }
    if let Some(config) = kube_config(host, json).await? {
        builder = builder.kubernetes(config);
    }
    let client = builder.connect().await?;
    lock_clients().push(client.clone());
    Ok(client)
}

/// The clients this command connected, closed when it ends (see `close_clients`).
static CLIENTS: std::sync::Mutex<Vec<dockhand::Client>> = std::sync::Mutex::new(Vec::new());

fn lock_clients() -> std::sync::MutexGuard<'static, Vec<dockhand::Client>> {
    CLIENTS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Ends the command's clients while the runtime still runs: on a cluster
/// their owner leases go now, with anything they still own, instead of
/// lapsing for a later sweep.
async fn close_clients() {
    let clients = std::mem::take(&mut *lock_clients());
    for client in clients {
        if let Err(e) = client.close().await {
            tracing::warn!(error = %e, "ending the connection to the backend");
        }
    }
}

/// The cluster `--backend kubernetes` (or `DOCKHAND_BACKEND`) names, if any,
/// with `--kube-registry`'s builder.
async fn kube_config(
    host: Option<String>,
    json: bool,
) -> anyhow::Result<Option<dockhand::KubeConfig>> {
    let Some(mut config) = dockhand::KubeConfig::from_env()? else {
        return Ok(None);
    };
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    if let Some(registry) = env("DOCKHAND_KUBE_REGISTRY") {
        // The builder is a Docker client: the backend is chosen here, not
        // from the environment it would read again.
        let mut docker = dockhand::Client::builder().docker();
        if let Some(host) = host {
            docker = docker.endpoint(host);
        }
        if !json {
            docker = docker.on_progress(progress::bars());
        }
        config = config.push_images(
            docker.connect().await?,
            dockhand::image::Registry::new(registry),
        );
    }
    Ok(Some(config))
}
