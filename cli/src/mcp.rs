//! `dockhand mcp`: sandboxes for LLM clients over the Model Context Protocol
//! (stdio). Tools: `run_python` (a one-shot), the session tools (`shell`,
//! `read_file`, `write_file`, `edit_file`, `list_dir`) on sessions made on
//! demand, code mode's `execute`, and `run_code` in a Jupyter kernel (one
//! per client, a context per name) whose charts come back as images.
//! Everything is removed when the client goes.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use dockhand::kernel::{ContextOptions, Execution, Kernel, KernelConfig, Language, RunOptions};
use dockhand::session::{PauseMode, Session, SessionConfig, SessionTools};
use dockhand::{CacheMode, Client, Egress, ImageSpec, Network, Sandbox, Secret};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, Content, ServerCapabilities, ServerInfo};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{Mutex, OnceCell};

#[derive(Args, Debug)]
pub struct McpArgs {
    /// What sessions and kernels may reach: `--network` for everything
    /// (run_python stays offline then), or `--allow-host`s for listed hosts
    /// only, through dockhand's egress gateway (run_python included).
    #[command(flatten)]
    network: crate::network::NetworkArgs,
    /// A secret for sessions, kernels and run_python: NAME=env:VAR, or
    /// NAME=env:VAR@host,host to keep it outside the sandbox (the egress
    /// gateway swaps its placeholder for those hosts only).
    #[arg(long = "secret", value_name = "NAME=env:VAR[@HOST]")]
    secrets: Vec<String>,
    /// Languages run_code runs beside Python: javascript, typescript, bash,
    /// r (comma-separated; their kernels are added to the kernel's image).
    #[arg(long, value_delimiter = ',')]
    languages: Vec<Language>,
    #[command(flatten)]
    code_mode: crate::mcp_codemode::CodeModeArgs,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RunPython {
    /// Python source; what it prints is returned.
    code: String,
    /// pip packages to install first (the image is built once and reused).
    #[serde(default)]
    pip: Vec<String>,
    /// Time limit in seconds (default 60, at most 3600).
    #[schemars(range(min = 0.001, max = 3600.0))]
    timeout: Option<f64>,
    /// Hosts this run may reach: some of those the server allows (its
    /// `--allow-host` entries, as written); default all of them. Never more.
    #[serde(default)]
    allow_hosts: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Shell {
    /// A shell command, run in the session's workspace.
    command: String,
    /// Which session (made on first use; default "default").
    session: Option<String>,
    /// Time limit in seconds (default: none, the session's own).
    #[schemars(range(min = 0.001, max = 86400.0))]
    timeout: Option<f64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct PathArgs {
    /// A path relative to the workspace.
    path: String,
    /// Which session (default "default").
    session: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListDir {
    /// A path relative to the workspace (default the workspace).
    path: Option<String>,
    /// Which session (default "default").
    session: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct WriteFile {
    /// A path relative to the workspace; parents are created.
    path: String,
    /// The whole new content.
    content: String,
    /// Which session (default "default").
    session: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct EditFile {
    /// A path relative to the workspace.
    path: String,
    /// Edits, all applied or none: {old, new, all?}; {old, delete: true};
    /// {old, insert: "before"|"after", content}; {insert: "start"|"end", content};
    /// {from, to, content} (text or 1-based lines).
    edits: Vec<Value>,
    /// Which session (default "default").
    session: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct ForkSession {
    /// The session to fork (default "default").
    session: Option<String>,
    /// Names for the new sessions (1 to 8), each then used as `session`
    /// in the other tools.
    #[schemars(length(min = 1, max = 8))]
    names: Vec<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Execute {
    /// Code for Monty, a sandboxed Python subset. `python(code=...)` runs
    /// full CPython in a fresh sandbox and returns what it printed. The
    /// value of the last expression is returned with what was printed.
    code: String,
    /// Variables the code starts with.
    #[serde(default)]
    inputs: serde_json::Map<String, Value>,
}

/// No arguments, and no others taken.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArguments {}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadModule {
    /// The module, as list_modules names it (`tools`, `tools.time`, `skills`).
    path: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Resume {
    /// The id `execute` returned in `suspended`.
    id: String,
    /// What the user decided: "approve" runs the call, "reject" raises
    /// ToolError(reason) in the code, "answer" returns `value` instead.
    decision: String,
    /// Why the call was rejected.
    reason: Option<String>,
    /// The call's answer, for "answer".
    value: Option<Value>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RunCode {
    /// Python for a Jupyter kernel with pandas (pd), numpy (np) and
    /// matplotlib (plt). Variables persist between calls; charts are
    /// returned as images without plt.show().
    code: String,
    /// Which context (kernel state) to run in, made on first use; default
    /// "default" for Python, the language's name for the others.
    context: Option<String>,
    /// The code's language: "python" (default) or one the server was
    /// started with (--languages): "javascript", "typescript", "bash", "r".
    language: Option<String>,
    /// Time limit in seconds (default 60, at most 3600); past it the run is interrupted, and the state kept.
    #[schemars(range(min = 0.001, max = 3600.0))]
    timeout: Option<f64>,
}

/// What a connection owns; all of it goes when the client does.
struct Owned {
    sessions: Mutex<HashMap<String, SessionTools<Session>>>,
    code_mode: crate::mcp_codemode::CodeMode,
    kernel: OnceCell<Kernel>,
}

/// A kernel run as MCP content: a JSON summary, then each image.
fn execution_content(execution: &Execution) -> CallToolResult {
    let results: Vec<Value> = execution
        .results
        .iter()
        .map(|r| {
            let mut summary =
                json!({"main": r.is_main, "types": r.data.keys().collect::<Vec<_>>()});
            if let Some(text) = r.text() {
                summary["text"] = json!(text);
            }
            if let Some(chart) = r.chart() {
                summary["chart"] = json!(chart);
            }
            summary
        })
        .collect();
    let mut body =
        json!({"stdout": execution.stdout, "stderr": execution.stderr, "results": results});
    if let Some(e) = &execution.error {
        body["error"] =
            json!({"name": e.name, "value": e.value, "line": e.line, "traceback": e.traceback});
    }
    let mut content = vec![text(body)];
    for r in &execution.results {
        for (mime, data) in [("image/png", r.png()), ("image/jpeg", r.jpeg())] {
            if data.is_some() {
                if let Some(b64) = r.data.get(mime).and_then(Value::as_str) {
                    content.push(Content::image(
                        b64.split_whitespace().collect::<String>(),
                        mime,
                    ));
                }
            }
        }
    }
    if execution.error.is_some() {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    }
}

#[derive(Clone)]
pub struct Server {
    client: Client,
    network: Network,
    secrets: Vec<Secret>,
    languages: Vec<Language>,
    owned: Arc<Owned>,
}

fn text(value: Value) -> Content {
    Content::text(value.to_string())
}

/// A dockhand error as an MCP tool error: the model reads it and adapts.
fn tool_error(e: impl std::fmt::Display) -> CallToolResult {
    CallToolResult::error(vec![Content::text(e.to_string())])
}

/// A `timeout` argument: a positive number of seconds up to `max`, else a
/// tool error the model can act on (never quietly bent into range).
fn seconds(given: Option<f64>, default: f64, max: f64) -> Result<Duration, String> {
    let t = given.unwrap_or(default);
    if t.is_finite() && t > 0.0 && t <= max {
        Ok(Duration::from_secs_f64(t))
    } else {
        Err(format!(
            "timeout must be a number of seconds more than 0 and at most {max}, got {t}"
        ))
    }
}

/// The session tools answer `{"error": ...}` for what the model can fix.
fn session_reply(reply: dockhand::Result<Value>) -> CallToolResult {
    match reply {
        Ok(v) if v.get("error").is_some() => CallToolResult::error(vec![text(v)]),
        Ok(v) => CallToolResult::success(vec![text(v)]),
        Err(e) => tool_error(e),
    }
}

impl Server {
    /// run_python's network: offline, or the server's egress policy, or a
    /// part of it the call names (never more than the server allows).
    fn run_python_network(&self, asked: Option<Vec<String>>) -> Result<Network, String> {
        let Network::Egress(policy) = &self.network else {
            return match asked {
                Some(hosts) if !hosts.is_empty() => Err(
                    "this server gives run_python no network: allow_hosts cannot be used".into(),
                ),
                _ => Ok(Network::None),
            };
        };
        let Some(hosts) = asked else {
            return Ok(self.network.clone());
        };
        if let Some(extra) = hosts.iter().find(|h| !policy.allowed().contains(h)) {
            return Err(format!(
                "`{extra}` is not among the hosts this server allows: {}",
                policy.allowed().join(", ")
            ));
        }
        Ok(Network::Egress(
            Egress::allow(hosts).deny(policy.denied().to_vec()),
        ))
    }
}

#[tool_router]
impl Server {
    fn new(
        client: Client,
        network: Network,
        secrets: Vec<Secret>,
        languages: Vec<Language>,
        code_mode: crate::mcp_codemode::CodeModeArgs,
    ) -> Self {
        Server {
            client,
            network,
            secrets,
            languages,
            owned: Arc::new(Owned {
                sessions: Mutex::default(),
                code_mode: crate::mcp_codemode::CodeMode::new(code_mode),
                kernel: OnceCell::new(),
            }),
        }
    }

    /// The session named `name`, started on first use.
    async fn session(&self, name: Option<String>) -> dockhand::Result<SessionTools<Session>> {
        let name = name.unwrap_or_else(|| "default".into());
        let mut sessions = self.owned.sessions.lock().await;
        if let Some(tools) = sessions.get(&name) {
            return Ok(tools.clone());
        }
        let mut config = SessionConfig::new()
            .image(ImageSpec::default().trust_host_certificates())
            .pausable(true)
            .network(self.network.clone());
        for secret in &self.secrets {
            config = config.secret(secret.clone());
        }
        let session = self.client.session(config);
        session.start().await?;
        let tools = SessionTools::new(session);
        sessions.insert(name, tools.clone());
        Ok(tools)
    }

    async fn call_session(
        &self,
        session: Option<String>,
        tool: &str,
        args: Value,
    ) -> CallToolResult {
        match self.session(session).await {
            Ok(tools) => session_reply(tools.call(tool, args).await),
            Err(e) => tool_error(e),
        }
    }

    #[tool(
        description = "Runs Python code once in a fresh sandbox container and returns its exit code, stdout and stderr. It is offline unless the server allows hosts; allow_hosts narrows those for one run."
    )]
    async fn run_python(
        &self,
        Parameters(args): Parameters<RunPython>,
    ) -> Result<CallToolResult, ErrorData> {
        let timeout = match seconds(args.timeout, 60.0, 3600.0) {
            Ok(t) => t,
            Err(refused) => return Ok(tool_error(refused)),
        };
        let network = match self.run_python_network(args.allow_hosts) {
            Ok(network) => network,
            Err(refused) => return Ok(tool_error(refused)),
        };
        let image = ImageSpec::default().pip(args.pip).trust_host_certificates();
        let mut sandbox = Sandbox::code("run_python", args.code)
            .verbatim()
            .image(image)
            .timeout(timeout)
            .cache(CacheMode::Disable)
            .accept_exit_codes(1..=255);
        if let Network::Egress(_) = &network {
            for secret in &self.secrets {
                sandbox = sandbox.secret(secret.clone());
            }
        }
        let sandbox = sandbox.network(network).build();
        let sandbox = match sandbox {
            Ok(s) => s,
            Err(e) => return Ok(tool_error(e)),
        };
        Ok(match self.client.run(&sandbox, dockhand::NO_INPUTS).await {
            Ok(out) => {
                let body = json!({"exit_code": out.exit_code, "stdout": out.stdout.text, "stderr": out.stderr.text});
                if out.exit_code == 0 {
                    CallToolResult::success(vec![text(body)])
                } else {
                    CallToolResult::error(vec![text(body)])
                }
            }
            Err(e) => tool_error(e),
        })
    }

    #[tool(
        description = "Runs a shell command in a persistent session container (made on first use) and returns exit_code, stdout and stderr."
    )]
    async fn shell(
        &self,
        Parameters(args): Parameters<Shell>,
    ) -> Result<CallToolResult, ErrorData> {
        let mut call = json!({"command": args.command});
        if let Some(t) = args.timeout {
            if let Err(refused) = seconds(Some(t), t, 86400.0) {
                return Ok(tool_error(refused));
            }
            call["timeout"] = json!(t);
        }
        Ok(self.call_session(args.session, "shell", call).await)
    }

    #[tool(description = "Reads a file of a session (path relative to its workspace).")]
    async fn read_file(
        &self,
        Parameters(args): Parameters<PathArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(self
            .call_session(args.session, "read_file", json!({"path": args.path}))
            .await)
    }

    #[tool(description = "Writes a whole file in a session, creating parent directories.")]
    async fn write_file(
        &self,
        Parameters(args): Parameters<WriteFile>,
    ) -> Result<CallToolResult, ErrorData> {
        let call = json!({"path": args.path, "content": args.content});
        Ok(self.call_session(args.session, "write_file", call).await)
    }

    #[tool(
        description = "Edits a file in a session; all edits apply or none. Anchors tolerate trailing whitespace and different indentation."
    )]
    async fn edit_file(
        &self,
        Parameters(args): Parameters<EditFile>,
    ) -> Result<CallToolResult, ErrorData> {
        let call = json!({"path": args.path, "edits": args.edits});
        Ok(self.call_session(args.session, "edit_file", call).await)
    }

    #[tool(
        description = "Copies a session's files into new sessions under the given names, to try different approaches from one state; each then changes apart from the others."
    )]
    async fn fork_session(
        &self,
        Parameters(args): Parameters<ForkSession>,
    ) -> Result<CallToolResult, ErrorData> {
        if args.names.is_empty() || args.names.len() > 8 {
            return Ok(tool_error("give 1 to 8 names"));
        }
        {
            let sessions = self.owned.sessions.lock().await;
            if let Some(taken) = args.names.iter().find(|n| sessions.contains_key(*n)) {
                return Ok(tool_error(format!(
                    "a session named `{taken}` exists already"
                )));
            }
        }
        let parent = match self.session(args.session).await {
            Ok(tools) => tools.session().clone(),
            Err(e) => return Ok(tool_error(e)),
        };
        let forks = match parent.fork(args.names.len(), PauseMode::Filesystem).await {
            Ok(forks) => forks,
            Err(e) => return Ok(tool_error(e)),
        };
        let mut sessions = self.owned.sessions.lock().await;
        for (name, fork) in args.names.iter().zip(forks) {
            sessions.insert(name.clone(), SessionTools::new(fork));
        }
        Ok(CallToolResult::success(vec![text(
            json!({"sessions": args.names}),
        )]))
    }

    #[tool(description = "Lists a directory of a session (default its workspace).")]
    async fn list_dir(
        &self,
        Parameters(args): Parameters<ListDir>,
    ) -> Result<CallToolResult, ErrorData> {
        let call = json!({"path": args.path.unwrap_or_else(|| ".".into())});
        Ok(self.call_session(args.session, "list_dir", call).await)
    }

    #[tool(
        description = "Runs Python in a stateful Jupyter kernel (pandas as pd, numpy as np, matplotlib.pyplot as plt): variables persist between calls; returns stdout, stderr, results and charts as images. Files written with the session tools are not visible here; read data with Python."
    )]
    async fn run_code(
        &self,
        Parameters(args): Parameters<RunCode>,
    ) -> Result<CallToolResult, ErrorData> {
        let kernel = self
            .owned
            .kernel
            .get_or_try_init(|| async {
                let config = KernelConfig::data_science().languages(self.languages.clone());
                let image = config.image_spec().clone().trust_host_certificates();
                let (network, secrets) = (self.network.clone(), self.secrets.clone());
                let kernel = self.client.kernel(config.image(image).session(|s| {
                    secrets
                        .into_iter()
                        .fold(s.network(network), |s, secret| s.secret(secret))
                }));
                kernel.start().await?;
                Ok::<_, dockhand::Error>(kernel)
            })
            .await;
        let kernel = match kernel {
            Ok(kernel) => kernel,
            Err(e) => return Ok(tool_error(e)),
        };
        let language = match args
            .language
            .as_deref()
            .unwrap_or("python")
            .parse::<Language>()
        {
            Ok(l) => l,
            Err(e) => return Ok(tool_error(e)),
        };
        let context = args.context.unwrap_or_else(|| match language {
            Language::Python => dockhand::kernel::DEFAULT_CONTEXT.into(),
            other => other.as_str().into(),
        });
        if !kernel.languages().contains(&language) {
            return Ok(tool_error(format!(
                "language `{language}` is not on: this server runs python{}; start it with `dockhand mcp --languages {language}`",
                self.languages.iter().map(|l| format!(", {l}")).collect::<String>()
            )));
        }
        if !kernel.contexts().contains(&context) {
            let options = ContextOptions::new().language(language);
            if let Err(e) = kernel.create_context_with(&context, options).await {
                return Ok(tool_error(e));
            }
        }
        let timeout = match seconds(args.timeout, 60.0, 3600.0) {
            Ok(t) => t,
            Err(refused) => return Ok(tool_error(refused)),
        };
        let options = RunOptions::new().context(context).timeout(timeout);
        Ok(match kernel.run_with(&args.code, options).await {
            Ok(execution) => execution_content(&execution),
            Err(e) => tool_error(e),
        })
    }

    #[tool(
        description = "Runs orchestration code in code mode (Monty, a sandboxed Python subset); python(code=...) runs full CPython in a fresh sandbox, and the tools of the server's configured MCP servers are functions too. Returns the last expression's value and what was printed. A call of a tool that needs approval stops the code: the result's `suspended` names it; ask the user, then call resume."
    )]
    async fn execute(
        &self,
        Parameters(args): Parameters<Execute>,
    ) -> Result<CallToolResult, ErrorData> {
        let code_mode = &self.owned.code_mode;
        Ok(
            match code_mode
                .execute(&self.client, &args.code, args.inputs)
                .await
            {
                Ok(body) => CallToolResult::success(vec![text(body)]),
                Err(e) => tool_error(format!("{e:#}")),
            },
        )
    }

    #[tool(
        description = "Lists the modules execute's code may import tools from (`tools`, `tools.<server>` for each configured MCP server, `skills` for functions earlier code saved with save_skill): each with its path, what it is for and the names in it. Read one with read_module, then import what you need: `from tools.time import get_current_time`.",
        annotations(read_only_hint = true)
    )]
    async fn list_modules(
        &self,
        Parameters(NoArguments {}): Parameters<NoArguments>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.owned.code_mode.list_modules().await {
            Ok(listing) => CallToolResult::success(vec![text(listing)]),
            Err(e) => tool_error(format!("{e:#}")),
        })
    }

    #[tool(
        description = "The functions of one module execute's code may import (see list_modules): their signatures and docstrings as Python text.",
        annotations(read_only_hint = true)
    )]
    async fn read_module(
        &self,
        Parameters(args): Parameters<ReadModule>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.owned.code_mode.read_module(&args.path).await {
            Ok(source) => CallToolResult::success(vec![Content::text(source)]),
            Err(e) => tool_error(format!("{e:#}")),
        })
    }

    #[tool(
        description = "Goes on with code that execute stopped for approval, as the user decided: approve (the call runs), reject (the code gets ToolError with the reason) or answer (the call returns `value`). Each suspension resumes once.",
        annotations(destructive_hint = true)
    )]
    async fn resume(
        &self,
        Parameters(args): Parameters<Resume>,
    ) -> Result<CallToolResult, ErrorData> {
        let code_mode = &self.owned.code_mode;
        let resumed = code_mode
            .resume(
                &self.client,
                &args.id,
                &args.decision,
                args.reason,
                args.value,
            )
            .await;
        Ok(match resumed {
            Ok(body) => CallToolResult::success(vec![text(body)]),
            Err(e) => tool_error(format!("{e:#}")),
        })
    }
}

#[tool_handler]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerInfo {
        ServerInfo::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(
            "Sandboxed code execution in Docker containers: run_python for one-off Python; \
             shell, read_file, write_file, edit_file and list_dir work in persistent sessions \
             (named by `session`, made on first use); execute runs code-mode orchestration; \
             run_code runs Python in a stateful Jupyter kernel and returns charts as images.",
        )
    }
}

pub async fn serve(args: McpArgs, host: Option<String>) -> Result<ExitCode> {
    let network = args.network.network()?;
    let secrets = args
        .secrets
        .iter()
        .map(|s| crate::spec::parse_secret(s))
        .collect::<Result<Vec<_>>>()?;
    // stdout is the protocol: nothing else may be printed there.
    let client = crate::connect(host, true).await?;
    let server = Server::new(client, network, secrets, args.languages, args.code_mode);
    let owned = server.owned.clone();
    let running = server.serve(rmcp::transport::stdio()).await?;
    let ended = running.waiting().await;
    // The client went: close what it had.
    for (_, tools) in owned.sessions.lock().await.drain() {
        let _ = tools.session().close().await;
    }
    if let Some(host) = owned.code_mode.started() {
        let _ = host.close().await;
    }
    if let Some(kernel) = owned.kernel.get() {
        let _ = kernel.close().await;
    }
    ended?;
    Ok(ExitCode::SUCCESS)
}
