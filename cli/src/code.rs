//! `dockhand code FILE`: code mode, with a full CPython sandbox as a tool,
//! MCP servers' tools from a config file, and approvals: a call of a tool
//! that needs one stops the program, which is kept by id until
//! `dockhand code --resume ID --approve` (or `--reject`, `--answer`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use dockhand::codemode::{
    CodeHost, CodeHostConfig, Decision, Execution, McpServer, SkillStore, SuspensionStore, Toolset,
};
use dockhand::{CacheMode, Sandbox, Type};

/// The exit code of a program that stopped for approval.
pub const SUSPENDED: u8 = 3;

#[derive(Args, Debug)]
pub struct CodeArgs {
    /// The program (the Python subset Monty runs); `-` reads stdin.
    #[arg(required_unless_present_any = ["resume", "list_modules", "read_module"])]
    file: Option<PathBuf>,
    /// Inputs as one JSON object; each key becomes a variable.
    #[arg(long, default_value = "{}")]
    inputs: String,
    /// Time limit of the execution in seconds.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    /// MCP servers whose tools the program may call, in the `mcpServers`
    /// JSON that MCP clients share (`command`/`args`/`env` or `url`, and
    /// optionally `requiresApproval`: a list of tools, or true).
    #[arg(long, value_name = "FILE")]
    mcp_config: Option<PathBuf>,
    /// A tool whose calls need approval (repeatable; `python` included).
    #[arg(long = "require-approval", value_name = "TOOL")]
    require_approval: Vec<String>,
    /// Type-check the program against the tools' stubs before it runs.
    #[arg(long)]
    type_check: bool,
    /// Keep skills here: the program may save functions with
    /// `save_skill(fn)` and import the ones kept with `from skills import ...`.
    #[arg(long, value_name = "DIR", env = "DOCKHAND_SKILLS")]
    skills: Option<PathBuf>,
    /// Print the tool modules (`tools`, `tools.<server>`, `skills`) the
    /// program may import, and exit.
    #[arg(long, conflicts_with_all = ["file", "resume", "read_module"])]
    list_modules: bool,
    /// Print one module's functions (signatures and docstrings), and exit.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["file", "resume"])]
    read_module: Option<String>,
    /// Go on with a program that stopped for approval (its id).
    #[arg(long, value_name = "ID", conflicts_with = "file")]
    resume: Option<String>,
    /// With --resume: run the call and go on.
    #[arg(long, requires = "resume", conflicts_with_all = ["reject", "answer"])]
    approve: bool,
    /// With --resume: refuse the call; the program sees ToolError(REASON).
    #[arg(
        long,
        value_name = "REASON",
        requires = "resume",
        conflicts_with = "answer"
    )]
    reject: Option<String>,
    /// With --resume: answer the call with this JSON instead of running it.
    #[arg(long, value_name = "JSON", requires = "resume")]
    answer: Option<String>,
}

/// The tool code-mode programs get: `python(code=...)` runs full CPython in a
/// fresh one-shot sandbox and returns what it printed.
pub fn python_tool() -> Result<Sandbox> {
    let runner = "import contextlib, io\n\
                  buffer = io.StringIO()\n\
                  with contextlib.redirect_stdout(buffer):\n    exec(code, {'__name__': '__main__'})\n\
                  stdout = buffer.getvalue()";
    Ok(Sandbox::code("python", runner)
        .input("code", Type::Str)
        .output("stdout", Type::Str)
        .cache(CacheMode::Disable)
        .build()?)
}

/// The python tool, the configured MCP servers' tools, which need
/// approval, and the skill store.
pub async fn tools(
    mcp_config: Option<&PathBuf>,
    approval: &[String],
    skills: Option<&PathBuf>,
) -> Result<Toolset> {
    let mut tools = Toolset::new().sandbox(python_tool()?);
    if let Some(dir) = skills {
        tools = tools.skills(SkillStore::at(dir)?);
    }
    if let Some(path) = mcp_config {
        for server in McpServer::from_config_file(path)? {
            for tool in server.connect().await? {
                tools = tools.tool(tool);
            }
        }
    }
    for name in approval {
        let tool = tools
            .get(name)
            .cloned()
            .with_context(|| format!("--require-approval {name}: there is no such tool"))?;
        tools = tools.tool(tool.requires_approval());
    }
    Ok(tools)
}

/// What the application decided, from the flags.
fn decision(args: &CodeArgs) -> Result<Decision> {
    if args.approve {
        return Ok(Decision::Approve);
    }
    if let Some(reason) = &args.reject {
        return Ok(Decision::Reject(reason.clone()));
    }
    if let Some(answer) = &args.answer {
        let value = serde_json::from_str(answer).context("--answer is not JSON")?;
        return Ok(Decision::Return(value));
    }
    anyhow::bail!("--resume needs --approve, --reject REASON or --answer JSON")
}

pub async fn run(args: CodeArgs, host: Option<String>, json: bool) -> Result<ExitCode> {
    anyhow::ensure!(
        args.timeout.is_finite() && args.timeout > 0.0,
        "--timeout must be a positive number of seconds"
    );
    let store = SuspensionStore::default();
    let config = CodeHostConfig::new()
        .timeout(std::time::Duration::from_secs_f64(args.timeout))
        .type_check(args.type_check)
        .suspensions(store.clone());
    if let Some(id) = &args.resume {
        let decision = decision(&args)?;
        let suspended = store.kept(id).await?;
        let tools = tools(
            args.mcp_config.as_ref(),
            &args.require_approval,
            args.skills.as_ref(),
        )
        .await?;
        let client = crate::connect(host, json).await?;
        let code_host = client.code_host(config);
        let result = code_host.resume(&suspended, decision, &tools).await;
        // Once claimed it cannot be resumed again; a bad toolset refused
        // it before the claim, and it stays for another try.
        if !matches!(result, Err(dockhand::Error::InvalidSpec { .. })) {
            store.forget(id).await?;
        }
        return finish(&code_host, &store, result, json).await;
    }
    if args.list_modules || args.read_module.is_some() {
        let tools = tools(
            args.mcp_config.as_ref(),
            &args.require_approval,
            args.skills.as_ref(),
        )
        .await?;
        return print_modules(&tools, args.read_module.as_deref(), json);
    }
    let file = args.file.clone().unwrap_or_default();
    let source = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading code from stdin")?
    } else {
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?
    };
    let inputs: serde_json::Value =
        serde_json::from_str(&args.inputs).context("--inputs is not a JSON object")?;
    anyhow::ensure!(inputs.is_object(), "--inputs must be a JSON object");
    let tools = tools(
        args.mcp_config.as_ref(),
        &args.require_approval,
        args.skills.as_ref(),
    )
    .await?;
    let client = crate::connect(host, json).await?;
    let code_host = client.code_host(config);
    code_host.start().await?;
    let result = code_host.execute(&source, inputs, &tools).await;
    finish(&code_host, &store, result, json).await
}

/// `--list-modules` and `--read-module PATH`.
fn print_modules(tools: &Toolset, read: Option<&str>, json: bool) -> Result<ExitCode> {
    if let Some(path) = read {
        let source = tools.module_source(path).with_context(|| {
            let paths: Vec<String> = tools.modules().into_iter().map(|m| m.path).collect();
            format!(
                "there is no module `{path}`; the modules are {}",
                paths.join(", ")
            )
        })?;
        if json {
            println!("{}", serde_json::json!({"path": path, "source": source}));
        } else {
            print!("{source}");
        }
    } else if json {
        println!("{}", serde_json::json!(tools.modules()));
    } else {
        for m in tools.modules() {
            println!("{} ({}): {}", m.path, m.tools.join(", "), m.summary);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Closes the host and prints the outcome; a program that stopped for
/// approval is kept by id and exits with [`SUSPENDED`].
async fn finish(
    code_host: &CodeHost,
    store: &SuspensionStore,
    result: dockhand::Result<Execution>,
    json: bool,
) -> Result<ExitCode> {
    code_host.close().await?;
    let run = result?;
    if let Some(stopped) = &run.suspended {
        store.keep(stopped).await?;
    }
    if json {
        let mut body = serde_json::json!({
            "value": run.value,
            "stdout": run.stdout,
            "tool_calls": run.tool_calls.len(),
            "duration_ms": run.duration.as_millis() as u64,
        });
        if let Some(stopped) = &run.suspended {
            body["suspended"] = serde_json::json!({
                "id": stopped.id(), "tool": stopped.tool(), "args": stopped.args(),
            });
        }
        println!("{body}");
    } else {
        print!("{}", run.stdout);
        if let Some(stopped) = &run.suspended {
            eprintln!(
                "dockhand: stopped for approval of {}({})\n\
                 go on with: dockhand code --resume {} --approve   (or --reject REASON, --answer JSON)",
                stopped.tool(),
                stopped.args(),
                stopped.id()
            );
        } else if !run.value.is_null() {
            println!("{}", run.value);
        }
    }
    Ok(if run.suspended.is_some() {
        ExitCode::from(SUSPENDED)
    } else {
        ExitCode::SUCCESS
    })
}
