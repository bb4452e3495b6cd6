//! `dockhand kernel`: Jupyter kernels from the shell. `run` runs cells (files
//! split at `# %%` lines, or `-c` code) in a fresh kernel or in one that
//! `start` keeps; charts go to a folder, the history to a notebook.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use dockhand::kernel::{ContextOptions, Execution, Kernel, Language, RunOptions};
use serde_json::{json, Value};

use crate::session::{self, StartArgs};

#[derive(Subcommand, Debug)]
pub enum KernelCommand {
    /// Start a kernel (pandas, numpy, matplotlib) held by a background
    /// process; prints its id for `run --id`, `notebook` and `close`.
    Start(StartArgs),
    /// Run cells: each file (split at `# %%` lines) and each `-c`, in order.
    Run(RunArgs),
    /// Write a kept kernel's history as a notebook (.ipynb).
    Notebook {
        /// The kernel's id.
        id: String,
        /// Where to write it.
        out: PathBuf,
        /// The context (default `default`).
        #[arg(long)]
        context: Option<String>,
    },
    /// Close a kept kernel (its container is removed).
    Close {
        /// The kernel's id.
        id: String,
    },
    /// Pause a kept kernel: `memory` keeps every context's variables
    /// (gVisor with checkpoints); `filesystem` keeps files only.
    Pause {
        /// The kernel's id.
        id: String,
        #[arg(long, default_value = "memory")]
        mode: dockhand::session::PauseMode,
    },
    /// Resume a paused kernel.
    Resume {
        /// The kernel's id.
        id: String,
    },
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Python files; `-` reads stdin.
    files: Vec<PathBuf>,
    /// Code of a cell (repeatable).
    #[arg(short = 'c', long = "code")]
    code: Vec<String>,
    /// Run in the kernel `dockhand kernel start` printed, not a fresh one.
    #[arg(long)]
    id: Option<String>,
    /// The context to run in (made on first use).
    #[arg(long)]
    context: Option<String>,
    /// The language of the cells: python (default), javascript, typescript,
    /// bash or r. Without --context they run in a context of that name.
    #[arg(long, default_value = "python")]
    language: Language,
    /// Save every image a cell displays (PNG, SVG, JPEG) into this folder.
    #[arg(long)]
    images: Option<PathBuf>,
    /// Write the cells and their outputs as a notebook (.ipynb).
    #[arg(long)]
    notebook: Option<PathBuf>,
    /// Files to copy into the kernel's working directory first.
    #[arg(long)]
    upload: Vec<PathBuf>,
    /// Time limit of each cell in seconds.
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
    /// Settings of a fresh kernel.
    #[command(flatten)]
    start: StartArgs,
}

/// Splits a file into cells at `# %%` lines (the percent format editors use).
fn cells(source: &str) -> Vec<String> {
    let mut cells = vec![String::new()];
    for line in source.split_inclusive('\n') {
        if line.trim_start().starts_with("# %%") {
            cells.push(String::new());
        } else if let Some(cell) = cells.last_mut() {
            cell.push_str(line);
        }
    }
    cells.retain(|c| !c.trim().is_empty());
    cells
}

/// Where cells run: a kernel of this process, or one a keeper holds.
enum Target {
    Fresh(Kernel),
    Kept(String),
}

impl Target {
    async fn run(
        &self,
        code: &str,
        context: Option<&str>,
        language: Language,
        timeout: f64,
    ) -> Result<Execution> {
        match self {
            Target::Fresh(kernel) => {
                let mut options = RunOptions::new().timeout(Duration::from_secs_f64(timeout));
                if let Some(context) = context {
                    if !kernel.contexts().iter().any(|c| c == context) {
                        let made = ContextOptions::new().language(language);
                        kernel.create_context_with(context, made).await?;
                    }
                    options = options.context(context);
                }
                Ok(kernel.run_with(code, options).await?)
            }
            Target::Kept(id) => {
                let reply = session::request(
                    id,
                    json!({"op": "run_code", "code": code, "context": context, "language": language.as_str(), "timeout": timeout}),
                )
                .await?;
                Ok(serde_json::from_value(reply["execution"].clone())?)
            }
        }
    }

    async fn notebook(&self, context: Option<&str>) -> Result<Value> {
        let context = context.unwrap_or(dockhand::kernel::DEFAULT_CONTEXT);
        match self {
            Target::Fresh(kernel) => Ok(kernel.notebook(context).await?),
            Target::Kept(id) => {
                let reply =
                    session::request(id, json!({"op": "notebook", "context": context})).await?;
                Ok(reply["notebook"].clone())
            }
        }
    }
}

pub async fn run(command: KernelCommand, host: Option<String>, json: bool) -> Result<ExitCode> {
    match command {
        KernelCommand::Start(mut args) => {
            args.kernel = true;
            session::start(args, host, json).await
        }
        KernelCommand::Run(args) => run_cells(args, host, json).await,
        KernelCommand::Notebook { id, out, context } => {
            let notebook = Target::Kept(id).notebook(context.as_deref()).await?;
            write_notebook(&out, &notebook)?;
            Ok(ExitCode::SUCCESS)
        }
        KernelCommand::Close { id } => {
            session::request(&id, json!({"op": "close"})).await?;
            Ok(ExitCode::SUCCESS)
        }
        KernelCommand::Pause { id, mode } => {
            let reply =
                session::request(&id, json!({"op": "pause", "mode": mode.to_string()})).await?;
            if json {
                println!("{reply}");
            } else {
                println!("paused {id} ({mode})");
            }
            Ok(ExitCode::SUCCESS)
        }
        KernelCommand::Resume { id } => {
            let reply = session::request(&id, json!({"op": "resume"})).await?;
            if json {
                println!("{reply}");
            } else {
                println!("resumed {id}");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn write_notebook(path: &Path, notebook: &Value) -> Result<()> {
    std::fs::write(path, serde_json::to_vec_pretty(notebook)?)
        .with_context(|| format!("writing {}", path.display()))
}

async fn run_cells(args: RunArgs, host: Option<String>, json: bool) -> Result<ExitCode> {
    anyhow::ensure!(
        args.timeout.is_finite() && args.timeout > 0.0,
        "--timeout must be a positive number of seconds"
    );
    let mut sources = Vec::new();
    for file in &args.files {
        let text = if file.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin()).context("reading cells from stdin")?
        } else {
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
        };
        sources.extend(cells(&text));
    }
    sources.extend(args.code.iter().cloned());
    anyhow::ensure!(!sources.is_empty(), "nothing to run: give files or -c CODE");
    let target = match &args.id {
        Some(id) => Target::Kept(id.clone()),
        None => {
            let client = crate::connect(host, json).await?;
            let config = args.start.kernel_config()?.languages([args.language]);
            let kernel = client.kernel(config);
            kernel.start().await?;
            Target::Fresh(kernel)
        }
    };
    let outcome = run_all(&args, &target, &sources, json).await;
    if let Target::Fresh(kernel) = &target {
        kernel.close().await?;
    }
    outcome
}

async fn run_all(
    args: &RunArgs,
    target: &Target,
    sources: &[String],
    json: bool,
) -> Result<ExitCode> {
    use dockhand::session::SessionApi;
    for path in &args.upload {
        let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let name = path
            .file_name()
            .context("an upload needs a file name")?
            .to_string_lossy();
        match target {
            Target::Fresh(kernel) => kernel.write_file(&name, &data).await?,
            Target::Kept(id) => {
                use base64::Engine as _;
                let encoded = base64::engine::general_purpose::STANDARD.encode(&data);
                session::request(
                    id,
                    json!({"op": "write", "path": name, "content_base64": encoded}),
                )
                .await?;
            }
        }
    }
    if let Some(dir) = &args.images {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // Another language than Python runs in a context of its name.
    let context = match (&args.context, args.language) {
        (Some(name), _) => Some(name.as_str()),
        (None, Language::Python) => None,
        (None, other) => Some(other.as_str()),
    };
    let mut failed = false;
    let mut reports = Vec::new();
    for (n, code) in sources.iter().enumerate() {
        let execution = target
            .run(code, context, args.language, args.timeout)
            .await?;
        let saved = match &args.images {
            Some(dir) => save_images(dir, n + 1, &execution)?,
            None => Vec::new(),
        };
        failed |= execution.error.is_some();
        if json {
            reports.push(json!({"cell": n + 1, "execution": execution, "images": saved}));
            continue;
        }
        print!("{}", execution.stdout);
        eprint!("{}", execution.stderr);
        if let Some(text) = execution.text() {
            println!("{text}");
        }
        for path in saved {
            eprintln!("saved {path}");
        }
        if let Some(e) = &execution.error {
            eprintln!("{}", e.traceback);
        }
    }
    if json {
        println!("{}", Value::Array(reports));
    }
    if let Some(path) = &args.notebook {
        write_notebook(path, &target.notebook(args.context.as_deref()).await?)?;
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Writes a cell's images as `cell<N>-<K>.<ext>`; returns their paths.
fn save_images(dir: &Path, cell: usize, execution: &Execution) -> Result<Vec<String>> {
    let mut saved = Vec::new();
    for (k, result) in execution.results.iter().enumerate() {
        let images = [
            ("png", result.png()),
            ("jpeg", result.jpeg()),
            ("svg", result.svg().map(|s| s.as_bytes().to_vec())),
        ];
        for (ext, bytes) in images {
            if let Some(bytes) = bytes {
                let path = dir.join(format!("cell{cell}-{}.{ext}", k + 1));
                std::fs::write(&path, bytes)
                    .with_context(|| format!("writing {}", path.display()))?;
                saved.push(path.display().to_string());
            }
        }
    }
    Ok(saved)
}

#[cfg(test)]
mod tests {
    use super::cells;

    #[test]
    fn files_split_into_cells_at_percent_markers() {
        let source = "import x\n# %%\ny = 1\n\n# %% [markdown]\n\n#%%no\nz\n";
        assert_eq!(cells(source), ["import x\n", "y = 1\n\n", "\n#%%no\nz\n"]);
        assert_eq!(cells("only\n"), ["only\n"]);
    }
}
