//! `dockhand session ...`: a session that outlives one command. `start`
//! launches a detached keeper process that owns it; the other commands talk
//! to the keeper by the session's id.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use dockhand::kernel::KernelConfig;
use dockhand::session::SessionConfig;
use dockhand::ImageSpec;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

mod attach;
mod keeper;

#[derive(Subcommand, Debug)]
pub enum SessionCommand {
    /// Start a session; prints its id.
    Start(StartArgs),
    /// Run a shell command in it; exits with the command's exit code.
    Exec {
        id: String,
        /// The command (one shell string).
        command: String,
        /// Working directory (relative to the workspace).
        #[arg(long)]
        cwd: Option<String>,
        /// Time limit in seconds.
        #[arg(long)]
        timeout: Option<f64>,
    },
    /// Print a file.
    Read { id: String, path: String },
    /// Write a file from stdin (or --content).
    Write {
        id: String,
        path: String,
        #[arg(long)]
        content: Option<String>,
    },
    /// Apply edits given as JSON (a list; dockhand's or agentick's shape).
    Edit {
        id: String,
        path: String,
        edits: String,
    },
    /// Commit the session's container to an image.
    Snapshot { id: String },
    /// Pause it: its container stops (no CPU, no memory) until `resume`.
    Pause {
        id: String,
        /// `memory` (processes and memory; needs gVisor and a daemon with
        /// checkpoints) or `filesystem` (files only).
        #[arg(long, default_value = "filesystem")]
        mode: dockhand::session::PauseMode,
    },
    /// Resume a paused session.
    Resume { id: String },
    /// Start sessions from this one's state; prints their ids. Forks live
    /// as long as their parent's session.
    Fork {
        id: String,
        /// How many.
        #[arg(short = 'n', long, default_value_t = 1)]
        count: usize,
        /// `filesystem` (files) or `memory` (processes and memory too).
        #[arg(long, default_value = "filesystem")]
        mode: dockhand::session::PauseMode,
    },
    /// Close the session (its container is removed).
    Close { id: String },
    /// List running sessions.
    Ls,
    /// An interactive shell: each line runs as a command (`cd` is remembered).
    Shell { id: String },
    /// Reach a port inside the session from this host: prints a local
    /// address (on 127.0.0.1) whose connections reach it, for as long as the
    /// session lives. The session needs no network for it.
    Expose { id: String, port: u16 },
    /// Attach this terminal to a shell in the session (bash where the image
    /// has it): keys go to it as typed, the window's size follows; exits with
    /// the shell's exit code.
    Attach { id: String },
    /// (internal) Hold a session; started by `start`.
    #[command(hide = true)]
    Serve {
        #[arg(long)]
        id: String,
        #[command(flatten)]
        start: StartArgs,
    },
}

#[derive(Args, Debug, Clone)]
pub struct StartArgs {
    /// Use this image as it is (it needs python3).
    #[arg(long)]
    image: Option<String>,
    /// pip packages to add to the image.
    #[arg(long = "pip")]
    pip: Vec<String>,
    #[command(flatten)]
    network: crate::network::NetworkArgs,
    /// Memory: 512Mi, 1Gi or bytes.
    #[arg(long)]
    memory: Option<String>,
    /// CPUs.
    #[arg(long)]
    cpus: Option<f64>,
    /// The kernel boundary: `gvisor`, or any runtime the daemon has registered.
    #[arg(long)]
    runtime: Option<String>,
    /// Mount a named volume (`dockhand volume create`): NAME:PATH, or
    /// NAME:PATH:ro to mount it read-only (repeatable).
    #[arg(long = "volume")]
    volumes: Vec<String>,
    /// Close the session after this many seconds without a command.
    #[arg(long, default_value_t = 3600)]
    idle_timeout: u64,
    /// Hold a Jupyter kernel (`dockhand kernel start`) rather than a session.
    #[arg(long, hide = true)]
    pub kernel: bool,
    /// A kernel's languages beside Python: javascript, typescript, bash, r
    /// (comma-separated or repeated; their kernels are added to the image).
    #[arg(long, value_delimiter = ',')]
    pub languages: Vec<dockhand::kernel::Language>,
}

impl StartArgs {
    /// The kernel to hold: the data-science spec plus `--pip`, or `--image`
    /// as it is (it needs ipykernel), with the session's settings.
    pub fn kernel_config(&self) -> anyhow::Result<KernelConfig> {
        let base = KernelConfig::data_science();
        let image = match &self.image {
            Some(reference) => ImageSpec::prebuilt(reference.clone()),
            None => base
                .image_spec()
                .clone()
                .pip(self.pip.clone())
                .trust_host_certificates(),
        };
        let session = self.config()?;
        Ok(base
            .image(image)
            .languages(self.languages.iter().copied())
            .session(|_| session.no_timeout()))
    }

    fn config(&self) -> anyhow::Result<SessionConfig> {
        let image = match &self.image {
            Some(reference) => ImageSpec::prebuilt(reference.clone()),
            None => ImageSpec::default()
                .pip(self.pip.clone())
                .trust_host_certificates(),
        };
        // Pausable, so `pause` and `fork` work (the keeper removes it).
        let mut config = SessionConfig::new()
            .image(image)
            .pausable(true)
            .network(self.network.network()?);
        if let Some(memory) = &self.memory {
            config = config.memory(memory.as_str());
        }
        if let Some(cpus) = self.cpus {
            config = config.cpus(cpus);
        }
        if let Some(runtime) = &self.runtime {
            config = config.isolation(crate::spec::parse_isolation(runtime));
        }
        for v in &self.volumes {
            config = match v.split(':').collect::<Vec<_>>()[..] {
                [name, path] => config.volume(name, path),
                [name, path, "ro"] => config.volume_read_only(name, path),
                _ => bail!("--volume {v}: give NAME:PATH or NAME:PATH:ro"),
            };
        }
        Ok(config)
    }

    fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(image) = &self.image {
            args.extend(["--image".into(), image.clone()]);
        }
        for p in &self.pip {
            args.extend(["--pip".into(), p.clone()]);
        }
        args.extend(self.network.to_args());
        if let Some(m) = &self.memory {
            args.extend(["--memory".into(), m.clone()]);
        }
        if let Some(c) = self.cpus {
            args.extend(["--cpus".into(), c.to_string()]);
        }
        if let Some(r) = &self.runtime {
            args.extend(["--runtime".into(), r.clone()]);
        }
        for v in &self.volumes {
            args.extend(["--volume".into(), v.clone()]);
        }
        args.extend(["--idle-timeout".into(), self.idle_timeout.to_string()]);
        if self.kernel {
            args.push("--kernel".into());
        }
        args
    }
}

/// A connection to a session's keeper.
async fn keeper_connection(id: &str) -> Result<tokio::net::UnixStream> {
    tokio::net::UnixStream::connect(keeper::socket_path(id))
        .await
        .with_context(|| {
            format!("no session `{id}` (is it started? `dockhand session ls` lists them)")
        })
}

/// Sends one request to a session's keeper.
pub async fn request(id: &str, body: Value) -> Result<Value> {
    let (read, mut write) = keeper_connection(id).await?.into_split();
    write.write_all(format!("{body}\n").as_bytes()).await?;
    let mut line = String::new();
    BufReader::new(read).read_line(&mut line).await?;
    let reply: Value =
        serde_json::from_str(&line).context("the session's keeper answered nothing")?;
    if let Some(e) = reply.get("error").and_then(Value::as_str) {
        let exit_code = reply["exit_code"]
            .as_u64()
            .and_then(|c| u8::try_from(c).ok())
            .unwrap_or(crate::outcome::INTERNAL);
        return Err(crate::outcome::Relayed {
            message: e.to_string(),
            exit_code,
        }
        .into());
    }
    Ok(reply)
}

fn print(json: bool, reply: &Value, text: impl FnOnce(&Value) -> String) {
    if json {
        println!("{reply}");
    } else {
        let out = text(reply);
        if !out.is_empty() {
            println!("{out}");
        }
    }
}

pub async fn run(command: SessionCommand, host: Option<String>, json: bool) -> Result<ExitCode> {
    match command {
        SessionCommand::Start(args) => start(args, host, json).await,
        SessionCommand::Serve { id, start } => {
            let idle = Duration::from_secs(start.idle_timeout.max(1));
            let kernel = start.kernel.then(|| start.kernel_config()).transpose()?;
            keeper::serve(id, start.config()?, kernel, idle, host).await?;
            Ok(ExitCode::SUCCESS)
        }
        SessionCommand::Exec {
            id,
            command,
            cwd,
            timeout,
        } => {
            let reply = request(
                &id,
                json!({"op": "exec", "command": command, "cwd": cwd, "timeout": timeout}),
            )
            .await?;
            if json {
                println!("{reply}");
            } else {
                print!("{}", reply["stdout"].as_str().unwrap_or(""));
                eprint!("{}", reply["stderr"].as_str().unwrap_or(""));
            }
            let code = reply["exit_code"].as_i64().unwrap_or(1);
            Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
        }
        SessionCommand::Read { id, path } => {
            use base64::Engine as _;
            let reply = request(&id, json!({"op": "read", "path": path, "binary": !json})).await?;
            if json {
                println!("{reply}");
            } else {
                // The bytes as they are: a binary file is not mangled.
                let data = base64::engine::general_purpose::STANDARD
                    .decode(reply["content_base64"].as_str().unwrap_or(""))
                    .context("the keeper's answer is not base64")?;
                std::io::Write::write_all(&mut std::io::stdout(), &data)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        SessionCommand::Write { id, path, content } => {
            use base64::Engine as _;
            let data = match content {
                Some(c) => c.into_bytes(),
                None => {
                    let mut data = Vec::new();
                    std::io::Read::read_to_end(&mut std::io::stdin(), &mut data)
                        .context("reading stdin")?;
                    data
                }
            };
            let encoded = base64::engine::general_purpose::STANDARD.encode(&data);
            let reply = request(
                &id,
                json!({"op": "write", "path": path, "content_base64": encoded}),
            )
            .await?;
            print(json, &reply, |r| {
                format!("wrote {} bytes", r["written_bytes"])
            });
            Ok(ExitCode::SUCCESS)
        }
        SessionCommand::Edit { id, path, edits } => {
            let edits: Value = serde_json::from_str(&edits).context("edits must be a JSON list")?;
            let reply = request(&id, json!({"op": "edit", "path": path, "edits": edits})).await?;
            print(json, &reply, |r| format!("applied {}", r["applied"]));
            Ok(ExitCode::SUCCESS)
        }
        SessionCommand::Snapshot { id } => {
            let reply = request(&id, json!({"op": "snapshot"})).await?;
            print(json, &reply, |r| {
                r["image"].as_str().unwrap_or("").to_string()
            });
            Ok(ExitCode::SUCCESS)
        }
        SessionCommand::Pause { id, mode } => {
            let reply = request(&id, json!({"op": "pause", "mode": mode.to_string()})).await?;
            print(json, &reply, |r| {
                format!("paused {id} ({})", r["mode"].as_str().unwrap_or(""))
            });
            Ok(ExitCode::SUCCESS)
        }
        SessionCommand::Resume { id } => {
            let reply = request(&id, json!({"op": "resume"})).await?;
            print(json, &reply, |_| format!("resumed {id}"));
            Ok(ExitCode::SUCCESS)
        }
        SessionCommand::Fork { id, count, mode } => {
            let reply = request(
                &id,
                json!({"op": "fork", "count": count, "mode": mode.to_string()}),
            )
            .await?;
            print(json, &reply, |r| {
                r["forks"]
                    .as_array()
                    .map(|ids| {
                        ids.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join("\n")
                    })
                    .unwrap_or_default()
            });
            Ok(ExitCode::SUCCESS)
        }
        SessionCommand::Close { id } => {
            let reply = request(&id, json!({"op": "close"})).await?;
            print(json, &reply, |_| format!("closed {id}"));
            Ok(ExitCode::SUCCESS)
        }
        SessionCommand::Ls => ls(json).await,
        SessionCommand::Shell { id } => shell(&id).await,
        SessionCommand::Expose { id, port } => {
            let reply = request(&id, json!({"op": "expose", "port": port})).await?;
            print(json, &reply, |r| {
                r["url"].as_str().unwrap_or("").to_string()
            });
            Ok(ExitCode::SUCCESS)
        }
        SessionCommand::Attach { id } => attach::attach(keeper_connection(&id).await?).await,
    }
}

/// Launches the keeper detached (its own process group, so the terminal's
/// signals do not reach it) and waits until it answers.
pub async fn start(args: StartArgs, host: Option<String>, json: bool) -> Result<ExitCode> {
    use std::os::unix::process::CommandExt;
    // Bad settings are said here, not in the keeper's log.
    args.config()?;
    let id = format!("s{}", &uuid::Uuid::new_v4().simple().to_string()[..11]);
    let dir = keeper::socket_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let log_path = dir.join(format!("{id}.log"));
    let log = std::fs::File::create(&log_path)?;
    let mut command = std::process::Command::new(std::env::current_exe()?);
    if let Some(host) = &host {
        command.args(["--host", host]);
    }
    command
        .args(["session", "serve", "--id", &id])
        .args(args.to_args())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0);
    // The keeper lives as long as the session: it must not hold what the
    // caller inherited (a lock file, a pipe a script waits on to close).
    // SAFETY: the closure only makes async-signal-safe system calls.
    unsafe {
        command.pre_exec(|| {
            close_inherited_descriptors();
            Ok(())
        });
    }
    let mut child = command.spawn().context("starting the session keeper")?;
    let started = Instant::now();
    loop {
        if let Ok(reply) = request(&id, json!({"op": "describe"})).await {
            if json {
                println!(
                    "{}",
                    json!({"id": id, "container_id": reply["container_id"]})
                );
            } else {
                println!("{id}");
            }
            return Ok(ExitCode::SUCCESS);
        }
        if let Some(status) = child.try_wait()? {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            bail!("the session did not start ({status}): {}", log.trim());
        }
        if started.elapsed() > Duration::from_secs(600) {
            let _ = child.kill();
            bail!("the session did not start within 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn ls(json: bool) -> Result<ExitCode> {
    let mut found = Vec::new();
    if let Ok(entries) = std::fs::read_dir(keeper::socket_dir()) {
        for entry in entries.flatten() {
            let path: PathBuf = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("sock") {
                continue;
            }
            let Some(id) = path.file_stem().and_then(|s| s.to_str()).map(String::from) else {
                continue;
            };
            if let Ok(d) = request(&id, json!({"op": "describe"})).await {
                found.push(json!({"id": id, "state": d["state"], "container_id": d["container_id"], "commands": d["commands"]}));
            }
        }
    }
    if json {
        println!("{}", json!({ "sessions": found }));
    } else {
        for s in &found {
            println!(
                "{} {} {}",
                s["id"].as_str().unwrap_or(""),
                s["state"],
                s["container_id"].as_str().unwrap_or("")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A line-by-line shell: each line runs as a command in the session, in the
/// directory the last `cd` chose.
async fn shell(id: &str) -> Result<ExitCode> {
    request(id, json!({"op": "ping"})).await?;
    let mut cwd: Option<String> = None;
    let stdin = std::io::stdin();
    loop {
        eprint!("{}$ ", cwd.as_deref().unwrap_or("~"));
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            eprintln!();
            return Ok(ExitCode::SUCCESS);
        }
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "exit" {
            return Ok(ExitCode::SUCCESS);
        }
        // `cd` changes where later lines run: ask the session where it leads.
        let command = match line.strip_prefix("cd") {
            Some(rest) if rest.is_empty() || rest.starts_with(' ') => {
                format!("cd {} && pwd", rest.trim())
            }
            _ => line.to_string(),
        };
        let reply = request(id, json!({"op": "exec", "command": command, "cwd": cwd})).await;
        match reply {
            Ok(r) => {
                let stdout = r["stdout"].as_str().unwrap_or("");
                if command.ends_with("&& pwd") && r["exit_code"] == 0 {
                    cwd = Some(stdout.trim().to_string());
                } else {
                    print!("{stdout}");
                }
                eprint!("{}", r["stderr"].as_str().unwrap_or(""));
                let _ = std::io::stdout().flush();
            }
            Err(e) => eprintln!("dockhand: {e:#}"),
        }
    }
}

/// Marks every descriptor above 2 close-on-exec, so the program about to be
/// executed starts with stdin, stdout and stderr only. Runs between fork and
/// exec: system calls only, no allocation.
fn close_inherited_descriptors() {
    // close_range(3, ~0, CLOSE_RANGE_CLOEXEC), Linux 5.11 and later.
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: plain system calls on descriptor numbers.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) == 0 {
            return;
        }
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(1 << 16) as libc::c_int
        } else {
            1024
        };
        for fd in 3..top {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}
