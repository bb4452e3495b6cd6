//! `dockhand run`: one sandbox run from the command line.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use dockhand::{CacheMode, ImageSpec, RunOptions, RunOutput, Sandbox, StreamKind, Type, Value};

use crate::spec;

/// What to run and how.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// A Python file to run (`-` reads it from stdin).
    #[arg(conflicts_with_all = ["code", "command"])]
    file: Option<PathBuf>,
    /// Python code to run.
    #[arg(short = 'c', long = "code", conflicts_with = "command")]
    code: Option<String>,
    /// Run this program instead of Python code; its arguments follow (`{{name}}` is an input).
    #[arg(long, num_args = 1.., allow_hyphen_values = true, value_name = "PROG ARGS")]
    command: Option<Vec<String>>,
    /// An input: name=value, name:type=value or name=@path (file, dir, or a typed value read from a file).
    #[arg(short = 'i', long = "input", value_name = "NAME[:TYPE]=VALUE")]
    inputs: Vec<String>,
    /// An output to collect: name:type (int, float, str, bool, datetime, timedelta, json, file, dir).
    #[arg(short = 'o', long = "output", value_name = "NAME:TYPE")]
    outputs: Vec<String>,
    /// Run the file as written: it reads /var/inputs/<name> and writes /var/outputs/<name> itself.
    #[arg(long)]
    verbatim: bool,
    /// pip packages to add to the image.
    #[arg(long = "pip", value_name = "PKG")]
    pip: Vec<String>,
    /// Debian packages to add to the image.
    #[arg(long = "apt", value_name = "PKG")]
    apt: Vec<String>,
    /// The Python version (major.minor).
    #[arg(long, value_name = "X.Y")]
    python: Option<String>,
    /// Use this image as it is instead of building one.
    #[arg(long, value_name = "REF", conflicts_with_all = ["pip", "apt", "python"])]
    image: Option<String>,
    /// CPUs (fractional).
    #[arg(long)]
    cpus: Option<f64>,
    /// Memory: 512Mi, 1Gi, 500M or bytes.
    #[arg(long)]
    memory: Option<String>,
    /// Time limit in seconds (fractions allowed).
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    #[command(flatten)]
    network: crate::network::NetworkArgs,
    /// The kernel boundary: `gvisor`, or any runtime the daemon has registered (default runc).
    #[arg(long, value_name = "gvisor|NAME")]
    runtime: Option<String>,
    /// An environment variable.
    #[arg(short = 'e', long = "env", value_name = "K=V")]
    env: Vec<String>,
    /// A secret from the host's environment: NAME=env:VAR, or NAME=file:VAR for
    /// /run/secrets/NAME; NAME=env:VAR@host,host keeps it outside the sandbox
    /// (it holds a placeholder the egress gateway swaps for those hosts only).
    #[arg(long = "secret", value_name = "NAME=env:VAR[@HOST]")]
    secrets: Vec<String>,
    /// Where File and Dir outputs are copied.
    #[arg(long, default_value = ".")]
    out_dir: PathBuf,
    /// Answer an identical earlier run from the output cache instead of
    /// running (for deterministic programs only; off by default).
    #[arg(long, conflicts_with = "no_cache")]
    cache: bool,
    /// Always run (the default; kept for scripts written against it).
    #[arg(long, hide = true)]
    no_cache: bool,
}

/// Builds the sandbox and its inputs from the arguments.
fn sandbox(args: &RunArgs) -> Result<(Sandbox, Vec<(String, Value)>)> {
    let mut builder = match (&args.file, &args.code, &args.command) {
        (Some(file), None, None) => {
            let source = if file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("reading code from stdin")?
            } else {
                std::fs::read_to_string(file)
                    .with_context(|| format!("reading {}", file.display()))?
            };
            let name = file
                .file_stem()
                .and_then(|s| s.to_str())
                .filter(|s| {
                    s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
                })
                .unwrap_or("script")
                .to_string();
            Sandbox::code(name, source)
        }
        (None, Some(code), None) => Sandbox::code("code", code.clone()),
        (None, None, Some(command)) => {
            let (program, rest) = command.split_first().context("--command needs a program")?;
            Sandbox::command("command", program.clone()).args(rest.iter().cloned())
        }
        _ => bail!("give a FILE, -c CODE or --command PROG [ARGS..]"),
    };
    if args.verbatim {
        builder = builder.verbatim();
    }
    let mut inputs = Vec::new();
    for arg in &args.inputs {
        let (name, ty, value) = spec::parse_input(arg)?;
        builder = builder.input(name.clone(), ty);
        inputs.push((name, value));
    }
    for arg in &args.outputs {
        let (name, ty) = spec::parse_output(arg)?;
        builder = builder.output(name, ty);
    }
    let mut image = match (&args.image, &args.python) {
        (Some(reference), _) => ImageSpec::prebuilt(reference.clone()),
        (None, Some(version)) => ImageSpec::python(version.clone()),
        (None, None) => ImageSpec::default(),
    };
    if args.image.is_none() {
        // Behind a TLS-intercepting proxy pip needs the host's CAs; elsewhere it costs nothing.
        image = image
            .pip(args.pip.clone())
            .apt(args.apt.clone())
            .trust_host_certificates();
    }
    builder = builder.image(image);
    if let Some(cpus) = args.cpus {
        builder = builder.cpus(cpus);
    }
    if let Some(memory) = &args.memory {
        builder = builder.memory(memory.as_str());
    }
    if let Some(secs) = args.timeout {
        if !(secs.is_finite() && secs > 0.0) {
            bail!("--timeout must be a positive number of seconds");
        }
        builder = builder.timeout(Duration::from_secs_f64(secs));
    }
    builder = builder.network(args.network.network()?);
    if let Some(runtime) = &args.runtime {
        builder = builder.isolation(crate::spec::parse_isolation(runtime));
    }
    for arg in &args.env {
        let (k, v) = spec::parse_env(arg)?;
        builder = builder.env(k, v);
    }
    for arg in &args.secrets {
        builder = builder.secret(spec::parse_secret(arg)?);
    }
    builder = builder.cache(if args.cache {
        CacheMode::Auto
    } else {
        CacheMode::Disable
    });
    Ok((builder.build()?, inputs))
}

pub async fn run(args: RunArgs, host: Option<String>, json: bool) -> Result<ExitCode> {
    let (sandbox, inputs) = sandbox(&args)?;
    let client = crate::connect(host, json).await?;
    let mut options = RunOptions::new();
    if !json {
        // Live output as it comes; the captured copy is for --json.
        options = options.on_output(|line| {
            let text = format!("{}\n", line.line);
            let _ = match line.stream {
                StreamKind::Stdout => std::io::stdout().write_all(text.as_bytes()),
                _ => std::io::stderr().write_all(text.as_bytes()),
            };
        });
    }
    let out = match client.run_with(&sandbox, inputs, options).await {
        Ok(out) => out,
        Err(e) => {
            // Its output was shown live: say why it failed, not that again.
            if let Some(line) = (!json)
                .then(|| crate::outcome::after_streamed_output(&e))
                .flatten()
            {
                eprintln!("dockhand: {line}");
                return Ok(ExitCode::from(crate::outcome::code_of_error(&e)));
            }
            return Err(e.into());
        }
    };
    let outputs = collect_outputs(&out, &sandbox, &args.out_dir)?;
    if json {
        let body = serde_json::json!({
            "exit_code": out.exit_code,
            "stdout": out.stdout.text,
            "stderr": out.stderr.text,
            "outputs": outputs,
            "cached": out.cached,
            "duration_ms": out.duration.as_millis() as u64,
        });
        println!("{body}");
    } else {
        if out.cached {
            // Live lines only come from a container; a hit prints what was captured.
            print!("{}", out.stdout.text);
            eprint!("{}", out.stderr.text);
        }
        if !outputs.is_empty() {
            println!("{}", serde_json::to_string_pretty(&outputs)?);
        }
    }
    Ok(ExitCode::from(u8::try_from(out.exit_code).unwrap_or(1)))
}

/// Outputs as JSON values; File and Dir outputs are copied into `out_dir`
/// and given as their paths there.
fn collect_outputs(
    out: &RunOutput,
    sandbox: &Sandbox,
    out_dir: &Path,
) -> Result<serde_json::Map<String, serde_json::Value>> {
    let mut map = serde_json::Map::new();
    for param in sandbox.outputs() {
        let Some(value) = out.outputs.value(&param.name) else {
            continue;
        };
        let json = match (param.ty, value) {
            (Type::File | Type::Dir, Value::File(path) | Value::Dir(path)) => {
                std::fs::create_dir_all(out_dir)
                    .with_context(|| format!("creating {}", out_dir.display()))?;
                let target = out_dir.join(&param.name);
                copy_tree(path, &target).with_context(|| {
                    format!("copying output `{}` to {}", param.name, target.display())
                })?;
                serde_json::Value::String(target.display().to_string())
            }
            (_, Value::Json(j)) => j.clone(),
            (_, other) => serde_json::to_value(other)?
                .get("value")
                .cloned()
                .unwrap_or(serde_json::Value::Null),
        };
        map.insert(param.name.clone(), json);
    }
    Ok(map)
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    if from.is_dir() {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        std::fs::copy(from, to).map(|_| ())
    }
}
