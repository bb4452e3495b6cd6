//! [`CodeHost`]: one long-lived, hardened container running the code-mode runner.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::errors::{CodeError, CodeFailure};
use super::protocol::{self, ExecResult, FromRunner, Limits, LineBuffer, ToRunner};
use super::tools::{ToolCallRecord, ToolKind, Toolset};
use crate::client::Client;
use crate::engine::{ContainerGuard, ContainerSpec, LogChunk};
use crate::error::{Error, Result};
use crate::image::ImageSpec;
use crate::lifecycle::{State, Tracked};
use crate::sandbox::{
    confine, Hardening, Network, Outputs, Resources, Sandbox, Type, Value as SbValue,
};
use crate::util::{is_identifier, lock, push_tail};

/// The runner program, uploaded into each code host's container.
pub const RUNNER: &str = include_str!("../../../images/codehost/runner.py");
const RUNNER_DIR: &str = "/var/inputs";
const RUNNER_PATH: &str = "/var/inputs/.dockhand/codehost.py";

/// Settings of a code host: the container's limits and each execution's.
#[derive(Debug, Clone, PartialEq)]
pub struct CodeHostConfig {
    /// The image (needs python3; the default Python base is enough).
    pub image: ImageSpec,
    /// CPUs of the container.
    pub cpus: f64,
    /// Memory of the whole container, in bytes.
    pub memory_bytes: i64,
    /// Processes of the whole container.
    pub pids: i64,
    /// Wall-clock limit of one execution (tool calls included).
    pub exec_timeout: Duration,
    /// Memory limit of one execution's process, in bytes.
    pub exec_memory_bytes: i64,
    /// Iterations any single loop may run.
    pub loop_limit: u64,
    /// Characters of `print()` output kept per execution.
    pub print_limit: usize,
    /// Bytes of JSON the final value may take.
    pub value_limit: usize,
    /// How long starting may take.
    pub start_timeout: Duration,
}

impl Default for CodeHostConfig {
    fn default() -> Self {
        CodeHostConfig {
            image: ImageSpec::default(),
            cpus: 1.0,
            memory_bytes: 1 << 30,
            pids: 256,
            exec_timeout: Duration::from_secs(30),
            exec_memory_bytes: 512 << 20,
            loop_limit: 10_000,
            print_limit: 16 * 1024,
            value_limit: 1 << 20,
            start_timeout: Duration::from_secs(60),
        }
    }
}

/// A successful execution.
#[derive(Debug, Clone, PartialEq)]
pub struct Execution {
    /// The value of the code's last expression (`null` when it ends in a statement).
    pub value: Value,
    /// Captured `print()` output.
    pub stdout: String,
    /// Whether it was cut at the limit.
    pub stdout_truncated: bool,
    /// The tool calls made, in the order they finished.
    pub tool_calls: Vec<ToolCallRecord>,
    /// Wall time of the execution.
    pub duration: Duration,
}

/// What [`CodeHost::describe`] reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostDescription {
    /// The container id, while there is one.
    pub container_id: Option<String>,
    /// The lifecycle state.
    pub state: State,
    /// The image reference (once started).
    pub image: Option<String>,
    /// CPUs of the container.
    pub cpus: f64,
    /// Memory of the container.
    pub memory_bytes: i64,
    /// Execution time limit.
    pub exec_timeout: Duration,
    /// Execution memory limit.
    pub exec_memory_bytes: i64,
    /// Executions completed (successful or not).
    pub executions: u64,
    /// Why the host is in `error`, if it is.
    pub last_error: Option<String>,
}

struct Status {
    life: Tracked,
    executions: u64,
}

/// The attached runner.
struct Runner {
    container: ContainerGuard,
    input: std::pin::Pin<Box<dyn AsyncWrite + Send>>,
    output: std::pin::Pin<Box<dyn Stream<Item = Result<LogChunk>> + Send>>,
    lines: LineBuffer,
    queue: VecDeque<FromRunner>,
    stderr: String,
}

impl Runner {
    async fn send(&mut self, message: &ToRunner) -> Result<()> {
        let line = protocol::encode(message);
        self.input
            .write_all(&line)
            .await
            .map_err(|e| Error::io("writing to the code runner", e))?;
        self.input
            .flush()
            .await
            .map_err(|e| Error::io("writing to the code runner", e))
    }

    /// The next message; `None` when the runner's output ended (it died).
    async fn next(&mut self) -> Option<Result<FromRunner>> {
        loop {
            if let Some(m) = self.queue.pop_front() {
                return Some(Ok(m));
            }
            match self.output.next().await? {
                Err(e) => return Some(Err(e)),
                Ok(LogChunk::Stderr(b)) => {
                    push_tail(&mut self.stderr, &b, 8192);
                }
                Ok(LogChunk::Stdout(b)) => {
                    for line in self.lines.push(&b) {
                        match protocol::decode(&line) {
                            Ok(m) => self.queue.push_back(m),
                            Err(e) => {
                                tracing::warn!(error = %e, "unreadable line from the code runner")
                            }
                        }
                    }
                }
            }
        }
    }
}

/// File and Dir values returned by sandbox tools, kept on the host while the
/// code passes opaque handles around.
#[derive(Default)]
struct Handles {
    next: AtomicU64,
    values: Mutex<HashMap<String, SbValue>>,
    owners: Mutex<Vec<Outputs>>,
}

impl Handles {
    fn register(&self, name: &str, value: SbValue) -> Value {
        let id = format!("h{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let kind = if matches!(value, SbValue::Dir(_)) {
            "Dir"
        } else {
            "File"
        };
        lock(&self.values).insert(id.clone(), value);
        serde_json::json!({"$handle": id, "kind": kind, "name": name})
    }

    fn resolve(&self, handle: &Value) -> Option<SbValue> {
        let id = handle.get("$handle")?.as_str()?;
        lock(&self.values).get(id).cloned()
    }
}

struct Inner {
    client: Client,
    config: CodeHostConfig,
    status: Mutex<Status>,
    runner: tokio::sync::Mutex<Option<Runner>>,
    handles: Handles,
    ids: AtomicU64,
}

/// A long-lived container that runs LLM-written Python against tools.
///
/// Each execution runs in a fresh, pre-forked process inside the container, so
/// an execution costs milliseconds and nothing leaks between executions;
/// [`CodeHost::session`] gives a namespace that persists instead.
///
/// ```no_run
/// # async fn demo() -> dockhand::Result<()> {
/// use dockhand::codemode::{CodeHostConfig, ParamType, Tool, Toolset};
/// let client = dockhand::Client::connect().await?;
/// let tools = Toolset::new().tool(
///     Tool::new("double", "Doubles x.")
///         .param("x", ParamType::Int, "a number")
///         .handler(|a| async move { Ok(serde_json::json!(a["x"].as_i64().unwrap_or(0) * 2)) }),
/// );
/// let host = client.code_host(CodeHostConfig::default());
/// host.start().await?;
/// let run = host.execute("double(x=20) + 2", serde_json::json!({}), &tools).await?;
/// assert_eq!(run.value, 42);
/// host.close().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CodeHost {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CodeHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeHost")
            .field("state", &self.state())
            .finish()
    }
}

impl Client {
    /// A code host with these settings, in state `init` (nothing started yet).
    pub fn code_host(&self, config: CodeHostConfig) -> CodeHost {
        CodeHost {
            inner: Arc::new(Inner {
                client: self.clone(),
                config,
                status: Mutex::new(Status {
                    life: Tracked::new(),
                    executions: 0,
                }),
                runner: tokio::sync::Mutex::new(None),
                handles: Handles::default(),
                ids: AtomicU64::new(0),
            }),
        }
    }
}

impl CodeHost {
    fn set_state(&self, to: State) -> Result<()> {
        lock(&self.inner.status).life.transition(to)
    }

    fn fail(&self, why: String) {
        lock(&self.inner.status).life.fail(why);
    }

    /// The current state.
    pub fn state(&self) -> State {
        lock(&self.inner.status).life.state
    }

    /// Id, state, image, limits and executions run.
    pub fn describe(&self) -> HostDescription {
        let status = lock(&self.inner.status);
        let c = &self.inner.config;
        HostDescription {
            container_id: status.life.container_id.clone(),
            state: status.life.state,
            image: status.life.image.clone(),
            cpus: c.cpus,
            memory_bytes: c.memory_bytes,
            exec_timeout: c.exec_timeout,
            exec_memory_bytes: c.exec_memory_bytes,
            executions: status.executions,
            last_error: status.life.last_error.clone(),
        }
    }

    /// Starts the container (from `init`, or again after `error`/`stop`).
    pub async fn start(&self) -> Result<()> {
        let mut slot = self.inner.runner.lock().await;
        lock(&self.inner.status).life.check_startable()?;
        self.set_state(State::Running)?;
        match self.launch().await {
            Ok((runner, image)) => {
                {
                    let life = &mut lock(&self.inner.status).life;
                    life.container_id = Some(runner.container.id().to_string());
                    life.image = Some(image);
                }
                *slot = Some(runner);
                self.set_state(State::Idle)
            }
            Err(e) => {
                self.fail(format!("start failed: {e}"));
                Err(e)
            }
        }
    }

    async fn launch(&self) -> Result<(Runner, String)> {
        let c = &self.inner.config;
        let client = &self.inner.client;
        let image = client.images().resolve(&c.image).await?;
        let engine = client.engine();
        let mut spec = ContainerSpec {
            image: image.reference.clone(),
            cmd: vec!["python3".into(), "-u".into(), RUNNER_PATH.into()],
            entrypoint: Some(Vec::new()),
            env: vec!["HOME=/tmp".into(), "PYTHONDONTWRITEBYTECODE=1".into()],
            working_dir: Some("/tmp".into()),
            kind: "code-host",
            scratch_volumes: vec![RUNNER_DIR.into()],
            open_stdin: true,
            no_log: true,
            ..Default::default()
        };
        // Always fully hardened and offline: the code is a model's.
        let resources = Resources {
            cpus: c.cpus,
            memory_bytes: c.memory_bytes,
            pids: c.pids,
        };
        let hardening = Hardening {
            tmp_size: "256m".into(),
            ..Hardening::default()
        };
        confine(&mut spec, &resources, &hardening, &Network::None);
        let container = engine.create_container(&spec).await?;
        engine
            .upload_file(container.id(), RUNNER_DIR, ".dockhand/codehost.py", RUNNER)
            .await?;
        let attached = engine.attach(container.id()).await?;
        engine.start_container(container.id()).await?;
        let mut runner = Runner {
            container,
            input: attached.input,
            output: attached.output,
            lines: LineBuffer::default(),
            queue: VecDeque::new(),
            stderr: String::new(),
        };
        let ready = tokio::time::timeout(c.start_timeout, async {
            loop {
                match runner.next().await {
                    Some(Ok(FromRunner::Ready { .. })) => return Ok(()),
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err(e),
                    None => {
                        return Err(Error::Docker {
                            operation: "start code host",
                            message: format!("the runner exited: {}", runner.stderr.trim()),
                        })
                    }
                }
            }
        })
        .await;
        match ready {
            Ok(Ok(())) => Ok((runner, image.reference)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::Docker {
                operation: "start code host",
                message: format!(
                    "the runner did not report ready within {:?}",
                    c.start_timeout
                ),
            }),
        }
    }

    /// Stops the container; `start` brings the host back (state `error`, reason `stopped`).
    pub async fn stop(&self) -> Result<()> {
        let mut slot = self.inner.runner.lock().await;
        self.state().transition(State::Error)?;
        if let Some(runner) = slot.take() {
            runner.container.remove().await?;
        }
        self.fail("stopped".into());
        Ok(())
    }

    /// Closes the host for good: the container is removed.
    pub async fn close(&self) -> Result<()> {
        let mut slot = self.inner.runner.lock().await;
        self.set_state(State::Closed)?;
        lock(&self.inner.status).life.container_id = None;
        lock(&self.inner.handles.owners).clear();
        match slot.take() {
            Some(runner) => runner.container.remove().await,
            None => Ok(()),
        }
    }

    /// Runs `code` in a fresh process with `inputs` (a JSON object whose keys
    /// become variables) and `tools`. A host still in `init` is started first.
    pub async fn execute(
        &self,
        code: &str,
        inputs: impl Serialize,
        tools: &Toolset,
    ) -> Result<Execution> {
        self.run(code, inputs, tools, None).await
    }

    /// A namespace that persists across executions (a REPL), in its own process.
    pub fn session(&self) -> CodeSession {
        let id = format!("s{}", self.inner.ids.fetch_add(1, Ordering::Relaxed) + 1);
        CodeSession {
            host: self.clone(),
            id,
        }
    }

    async fn run(
        &self,
        code: &str,
        inputs: impl Serialize,
        tools: &Toolset,
        session: Option<&str>,
    ) -> Result<Execution> {
        let inputs = match serde_json::to_value(inputs) {
            Ok(Value::Object(map)) => map,
            Ok(Value::Null) => Map::new(),
            Ok(other) => {
                return Err(Error::spec(
                    "code inputs",
                    format!("inputs must be a JSON object of variables, got {other}"),
                ))
            }
            Err(e) => return Err(Error::spec("code inputs", e.to_string())),
        };
        if let Some(bad) = inputs.keys().find(|k| !is_variable_name(k)) {
            return Err(Error::spec(
                "code inputs",
                format!("`{bad}` is not a usable variable name"),
            ));
        }
        if self.state() == State::Init {
            self.start().await?;
        }
        let mut slot = self.inner.runner.lock().await;
        let Some(runner) = slot.as_mut() else {
            let state = self.state();
            return Err(Error::InvalidTransition {
                from: state.to_string(),
                to: State::Running.to_string(),
            });
        };
        self.set_state(State::Running)?;
        let started = Instant::now();
        let c = &self.inner.config;
        let id = format!("e{}", self.inner.ids.fetch_add(1, Ordering::Relaxed) + 1);
        let request = ToRunner::Execute {
            id: id.clone(),
            code: code.to_string(),
            inputs,
            tools: tools.names(),
            limits: Limits {
                timeout_s: c.exec_timeout.as_secs_f64(),
                memory_bytes: c.exec_memory_bytes,
                loop_limit: c.loop_limit,
                print_limit: c.print_limit,
                value_limit: c.value_limit,
            },
            session: session.map(String::from),
        };
        let outcome = self.converse(runner, &request, tools).await;
        match outcome {
            Ok((result, calls)) => {
                self.set_state(State::Idle)?;
                lock(&self.inner.status).executions += 1;
                finish(result, calls, started.elapsed(), c.exec_timeout)
            }
            Err(e) => {
                // The runner is gone or unreadable: the container is of no more use.
                let stderr = slot.take().map(|r| r.stderr).unwrap_or_default();
                self.fail(format!("the runner died: {e} {}", stderr.trim()));
                Err(Error::Code(Box::new(CodeFailure {
                    error: CodeError::Crashed {
                        message: format!("the code runner died ({e}); start the host again"),
                    },
                    stdout: String::new(),
                    stdout_truncated: false,
                    tool_calls: Vec::new(),
                })))
            }
        }
    }

    /// Sends the request, serves tool calls concurrently, returns the result.
    async fn converse(
        &self,
        runner: &mut Runner,
        request: &ToRunner,
        tools: &Toolset,
    ) -> Result<(ExecResult, Vec<ToolCallRecord>)> {
        runner.send(request).await?;
        let mut pending = FuturesUnordered::new();
        let mut calls = Vec::new();
        loop {
            tokio::select! {
                message = runner.next() => match message {
                    None => return Err(Error::Docker { operation: "code host", message: "the runner's output ended".into() }),
                    Some(Err(e)) => return Err(e),
                    Some(Ok(FromRunner::Result(result))) => return Ok((result, calls)),
                    Some(Ok(FromRunner::ToolCall { call, name, args, kwargs })) => {
                        pending.push(self.call_tool(tools, call, name, args, kwargs));
                    }
                    Some(Ok(_)) => {}
                },
                Some((call, record, reply)) = pending.next(), if !pending.is_empty() => {
                    let (ok, value, error) = match reply {
                        Ok(v) => (true, Some(v), None),
                        Err(e) => (false, None, Some(e)),
                    };
                    runner.send(&ToRunner::ToolResult { call, ok, value, error }).await?;
                    calls.push(record);
                }
            }
        }
    }

    fn call_tool(
        &self,
        tools: &Toolset,
        call: u64,
        name: String,
        args: Vec<Value>,
        kwargs: Map<String, Value>,
    ) -> impl std::future::Future<Output = (u64, ToolCallRecord, std::result::Result<Value, String>)>
           + Send
           + 'static {
        let started = Instant::now();
        let tool = tools.get(&name).cloned();
        let inner = self.inner.clone();
        async move {
            let (shown_args, reply) = match tool {
                None => (
                    Value::Array(args),
                    Err(format!("there is no tool named `{name}`")),
                ),
                Some(tool) => match tool.bind(&args, &kwargs) {
                    Err(why) => (Value::Array(args), Err(why)),
                    Ok(bound) => {
                        let shown = Value::Object(bound.clone());
                        let reply = match &tool.kind {
                            ToolKind::Handler(h) => h(bound).await,
                            ToolKind::Sandbox(sb) => run_sandbox_tool(&inner, sb, bound).await,
                        };
                        (shown, reply)
                    }
                },
            };
            let record = ToolCallRecord {
                name,
                args: shown_args,
                duration: started.elapsed(),
                ok: reply.is_ok(),
                error: reply.as_ref().err().cloned(),
            };
            (call, record, reply)
        }
    }
}

fn is_variable_name(name: &str) -> bool {
    is_identifier(name) && !name.starts_with("__") && !name.starts_with("_dh")
}

fn finish(
    result: ExecResult,
    calls: Vec<ToolCallRecord>,
    duration: Duration,
    timeout: Duration,
) -> Result<Execution> {
    if result.ok {
        return Ok(Execution {
            value: result.value,
            stdout: result.stdout,
            stdout_truncated: result.stdout_truncated,
            tool_calls: calls,
            duration,
        });
    }
    let error = result
        .error
        .as_ref()
        .map(|e| CodeError::from_runner(e, timeout))
        .unwrap_or(CodeError::Crashed {
            message: "the runner reported a failure without details".into(),
        });
    Err(Error::Code(Box::new(CodeFailure {
        error,
        stdout: result.stdout,
        stdout_truncated: result.stdout_truncated,
        tool_calls: calls,
    })))
}

/// Runs a sandbox tool: JSON arguments to typed inputs, outputs back to JSON
/// (File and Dir outputs become handles).
async fn run_sandbox_tool(
    inner: &Arc<Inner>,
    sandbox: &Sandbox,
    args: Map<String, Value>,
) -> std::result::Result<Value, String> {
    let mut inputs = Vec::new();
    for p in sandbox.inputs() {
        let v = args.get(&p.name).cloned().unwrap_or(Value::Null);
        let value = match p.ty {
            Type::Int => v.as_i64().map(SbValue::Int),
            Type::Float => v.as_f64().map(SbValue::Float),
            Type::Str => v.as_str().map(|s| SbValue::Str(s.to_string())),
            Type::Bool => v.as_bool().map(SbValue::Bool),
            Type::Datetime => v
                .as_str()
                .and_then(|s| SbValue::parse(Type::Datetime, s).ok()),
            Type::Timedelta => v
                .as_f64()
                .filter(|s| *s >= 0.0)
                .map(|s| SbValue::Timedelta(Duration::from_secs_f64(s))),
            Type::Json => Some(SbValue::Json(v.clone())),
            Type::File | Type::Dir => inner.handles.resolve(&v).filter(|h| h.type_of() == p.ty),
        };
        let value =
            value.ok_or_else(|| format!("argument `{}` is not a valid {}", p.name, p.ty))?;
        inputs.push((p.name.clone(), value));
    }
    let out = inner
        .client
        .run(sandbox, inputs)
        .await
        .map_err(|e| e.to_string())?;
    let mut result = Map::new();
    for (name, value) in out.outputs.iter() {
        let json = match value {
            SbValue::Int(i) => Value::from(*i),
            SbValue::Float(f) => Value::from(*f),
            SbValue::Str(s) => Value::from(s.clone()),
            SbValue::Bool(b) => Value::from(*b),
            SbValue::Datetime(d) => Value::from(d.format("%Y-%m-%dT%H:%M:%S%.f").to_string()),
            SbValue::Timedelta(d) => Value::from(d.as_secs_f64()),
            SbValue::Json(j) => j.clone(),
            SbValue::File(_) | SbValue::Dir(_) => inner.handles.register(name, value.clone()),
        };
        result.insert(name.to_string(), json);
    }
    // Keep File/Dir outputs on disk while handles to them may be used.
    lock(&inner.handles.owners).push(out.outputs);
    Ok(match result.len() {
        1 => result
            .into_iter()
            .next()
            .map(|(_, v)| v)
            .unwrap_or(Value::Null),
        _ => Value::Object(result),
    })
}

/// A persistent namespace on a code host (see [`CodeHost::session`]).
#[derive(Debug, Clone)]
pub struct CodeSession {
    host: CodeHost,
    id: String,
}

impl CodeSession {
    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Runs `code` in this session's namespace: variables and functions from
    /// earlier executions are still there.
    pub async fn execute(
        &self,
        code: &str,
        inputs: impl Serialize,
        tools: &Toolset,
    ) -> Result<Execution> {
        self.host.run(code, inputs, tools, Some(&self.id)).await
    }

    /// Ends the session's process; its namespace is gone.
    pub async fn close(self) -> Result<()> {
        let mut slot = self.host.inner.runner.lock().await;
        if let Some(runner) = slot.as_mut() {
            runner
                .send(&ToRunner::CloseSession {
                    session: self.id.clone(),
                })
                .await?;
            while let Some(m) = runner.next().await {
                if matches!(m?, FromRunner::SessionClosed { .. }) {
                    break;
                }
            }
        }
        Ok(())
    }
}
