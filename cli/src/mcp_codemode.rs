//! Code mode in `dockhand mcp`: the `execute` tool's code host and tools
//! (the python sandbox, the tools of the MCP servers in `--mcp-config`),
//! and approvals. A call of a tool that needs approval stops the code; the
//! result names the suspension, and the `resume` tool goes on with it once
//! the user decided (MCP clients ask the user before a call of `resume`).

use std::path::PathBuf;

use clap::Args;
use dockhand::codemode::{CodeHost, CodeHostConfig, Decision, Execution, SuspensionStore, Toolset};
use dockhand::Client;
use serde_json::{json, Value};
use tokio::sync::OnceCell;

#[derive(Args, Debug, Clone)]
pub struct CodeModeArgs {
    /// MCP servers whose tools `execute`'s code may call, in the
    /// `mcpServers` JSON that MCP clients share (with optional
    /// `requiresApproval`: a list of tools, or true).
    #[arg(long, value_name = "FILE")]
    mcp_config: Option<PathBuf>,
    /// A tool of `execute`'s code whose calls need approval (repeatable;
    /// `python` included): the code stops there until `resume`.
    #[arg(long = "require-approval", value_name = "TOOL")]
    require_approval: Vec<String>,
    /// Keep skills here: `execute`'s code may save functions with
    /// `save_skill(fn)`, and later code imports them (`from skills import ...`).
    #[arg(long, value_name = "DIR", env = "DOCKHAND_SKILLS")]
    skills: Option<PathBuf>,
}

/// The code host and tools of one MCP connection, made on first use.
pub struct CodeMode {
    args: CodeModeArgs,
    store: SuspensionStore,
    host: OnceCell<CodeHost>,
    tools: OnceCell<Toolset>,
}

impl CodeMode {
    pub fn new(args: CodeModeArgs) -> Self {
        CodeMode {
            args,
            store: SuspensionStore::default(),
            host: OnceCell::new(),
            tools: OnceCell::new(),
        }
    }

    /// The code host, if one was started.
    pub fn started(&self) -> Option<&CodeHost> {
        self.host.get()
    }

    async fn toolset(&self) -> anyhow::Result<&Toolset> {
        self.tools
            .get_or_try_init(|| {
                crate::code::tools(
                    self.args.mcp_config.as_ref(),
                    &self.args.require_approval,
                    self.args.skills.as_ref(),
                )
            })
            .await
    }

    /// The modules `execute`'s code may import: a list of `path`,
    /// `summary` and `tools`.
    pub async fn list_modules(&self) -> anyhow::Result<Value> {
        Ok(json!(self.toolset().await?.modules()))
    }

    /// One module's functions, signatures and docstrings, as Python text.
    pub async fn read_module(&self, path: &str) -> anyhow::Result<String> {
        let tools = self.toolset().await?;
        tools.module_source(path).ok_or_else(|| {
            let paths: Vec<String> = tools.modules().into_iter().map(|m| m.path).collect();
            anyhow::anyhow!(
                "there is no module `{path}`; the modules are {}",
                paths.join(", ")
            )
        })
    }

    async fn ready(&self, client: &Client) -> anyhow::Result<(&CodeHost, &Toolset)> {
        let tools = self.toolset().await?;
        let host = self
            .host
            .get_or_try_init(|| async {
                let host = client.code_host(CodeHostConfig::new().suspensions(self.store.clone()));
                host.start().await?;
                Ok::<_, dockhand::Error>(host)
            })
            .await?;
        Ok((host, tools))
    }

    /// Runs code; the JSON the `execute` tool answers with.
    pub async fn execute(
        &self,
        client: &Client,
        code: &str,
        inputs: serde_json::Map<String, Value>,
    ) -> anyhow::Result<Value> {
        let (host, tools) = self.ready(client).await?;
        let run = host.execute(code, Value::Object(inputs), tools).await?;
        self.answer(run).await
    }

    /// Goes on with a suspension by id: `approve`, `reject` (with a
    /// reason) or `answer` (with a value).
    pub async fn resume(
        &self,
        client: &Client,
        id: &str,
        decision: &str,
        reason: Option<String>,
        value: Option<Value>,
    ) -> anyhow::Result<Value> {
        let decision = match decision {
            "approve" => Decision::Approve,
            "reject" => Decision::Reject(reason.unwrap_or_default()),
            "answer" => Decision::Return(value.unwrap_or(Value::Null)),
            other => anyhow::bail!("decision must be approve, reject or answer, not {other:?}"),
        };
        let (host, tools) = self.ready(client).await?;
        let suspended = self.store.kept(id).await?;
        let run = host.resume(&suspended, decision, tools).await;
        self.store.forget(id).await?;
        self.answer(run?).await
    }

    async fn answer(&self, run: Execution) -> anyhow::Result<Value> {
        let mut body = json!({"value": run.value, "stdout": run.stdout});
        if let Some(stopped) = &run.suspended {
            self.store.keep(stopped).await?;
            body["suspended"] = json!({
                "id": stopped.id(),
                "tool": stopped.tool(),
                "args": stopped.args(),
                "next": "ask the user whether to allow this call, then call resume with this id",
            });
        }
        Ok(body)
    }
}
