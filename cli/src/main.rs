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
    match result {
        Ok(code) => code,
        Err(e) => outcome::fail(&e, json),
    }
}

/// A client for `host`, with progress bars for slow image work on a terminal.
async fn connect(host: Option<String>, json: bool) -> anyhow::Result<dockhand::Client> {
    let mut builder = dockhand::Client::builder();
    if let Some(host) = host {
        builder = builder.endpoint(host);
    }
    if !json {
        builder = builder.on_progress(progress::bars());
    }
    Ok(builder.connect().await?)
}
