//! `dockhand code FILE`: code mode, with a full CPython sandbox as a tool.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use dockhand::codemode::{CodeHostConfig, Toolset};
use dockhand::{CacheMode, Sandbox, Type};

#[derive(Args, Debug)]
pub struct CodeArgs {
    /// The program (the Python subset Monty runs); `-` reads stdin.
    file: PathBuf,
    /// Inputs as one JSON object; each key becomes a variable.
    #[arg(long, default_value = "{}")]
    inputs: String,
    /// Time limit of the execution in seconds.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
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

pub async fn run(args: CodeArgs, host: Option<String>, json: bool) -> Result<ExitCode> {
    let source = if args.file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading code from stdin")?
    } else {
        std::fs::read_to_string(&args.file)
            .with_context(|| format!("reading {}", args.file.display()))?
    };
    let inputs: serde_json::Value =
        serde_json::from_str(&args.inputs).context("--inputs is not a JSON object")?;
    anyhow::ensure!(inputs.is_object(), "--inputs must be a JSON object");
    anyhow::ensure!(
        args.timeout.is_finite() && args.timeout > 0.0,
        "--timeout must be a positive number of seconds"
    );
    let client = crate::connect(host, json).await?;
    let host = client
        .code_host(CodeHostConfig::new().timeout(std::time::Duration::from_secs_f64(args.timeout)));
    host.start().await?;
    let tools = Toolset::new().sandbox(python_tool()?);
    let result = host.execute(&source, inputs, &tools).await;
    host.close().await?;
    let run = result?;
    if json {
        let body = serde_json::json!({
            "value": run.value,
            "stdout": run.stdout,
            "tool_calls": run.tool_calls.len(),
            "duration_ms": run.duration.as_millis() as u64,
        });
        println!("{body}");
    } else {
        print!("{}", run.stdout);
        if !run.value.is_null() {
            println!("{}", run.value);
        }
    }
    Ok(ExitCode::SUCCESS)
}
