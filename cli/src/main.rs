//! `dockhand`: sandboxes from the shell, and an MCP server for LLM clients.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod code;
mod doctor;
mod images;
mod mcp;
mod outcome;
mod progress;
mod run;
mod session;
mod spec;

/// Run code in Docker containers, safely and fast.
#[derive(Parser, Debug)]
#[command(name = "dockhand", version, about, propagate_version = true)]
struct Cli {
    /// Print results as JSON (one object) instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// The Docker daemon (`unix:///path`, `tcp://host:2376`); defaults to DOCKER_HOST, then the local socket.
    #[arg(long, global = true, env = "DOCKER_HOST", hide_env_values = true)]
    host: Option<String>,
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
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DOCKHAND_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let json = cli.json;
    let result = match cli.command {
        Command::Run(args) => run::run(*args, cli.host, json).await,
        Command::Code(args) => code::run(args, cli.host, json).await,
        Command::Session { command } => session::run(command, cli.host, json).await,
        Command::Images { command } => images::run(command, cli.host, json).await,
        Command::Reap => images::reap(cli.host, json).await,
        Command::Doctor => doctor::run(cli.host, json).await,
        Command::Mcp(args) => mcp::serve(args, cli.host).await,
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
