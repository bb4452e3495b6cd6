//! [`CodeHost`]: one long-lived, hardened container running Monty for the host.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::ready;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use serde::Serialize;
use serde_json::{Map, Value};

use super::bridge::{cancel_stale, Runner};
use super::config::{CodeHostConfig, Execution, HostDescription};
use super::durable::Origin;
use super::errors::finish;
use super::handles::{run_sandbox_tool, Handles};
use super::inputs::code_inputs;
use super::launch::launch;
use super::offer::{module_offer, skill_named};
use super::protocol::{self, ExecResult, FromRunner, ToRunner};
use super::session::CodeSession;
use super::skill_runs::{Reply, SkillRuns, Step};
use super::skills::SAVE_SKILL;
use super::tools::ToolKind;
use super::toolset::Toolset;
use crate::client::Client;
use crate::error::ToolCallRecord;
use crate::error::{CodeError, CodeFailure};
use crate::error::{Error, Result};
use crate::lifecycle::{State, Tracked};
use crate::util::lock;

struct Status {
    life: Tracked,
    executions: u64,
    /// The host failed on its own (crash, deadline): the next execution
    /// starts it again. Not after `stop()`, which is the caller's choice.
    restart_on_use: bool,
}

struct Inner {
    client: Client,
    config: CodeHostConfig,
    status: Mutex<Status>,
    runner: tokio::sync::Mutex<Option<Runner>>,
    handles: Handles,
    ids: AtomicU64,
    /// The agent-sandbox pool a pooled host claims its pod from.
    claims: crate::backend::Claims,
}

/// A long-lived container that runs LLM-written Python against tools.
///
/// Each execution runs in a fresh Monty interpreter inside the container, so
/// nothing crosses from one execution to the next; [`CodeHost::session`]
/// gives a namespace that persists instead.
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

impl CodeHost {
    /// The File and Dir results it holds.
    pub(super) fn handles(&self) -> &Handles {
        &self.inner.handles
    }

    pub(super) fn config(&self) -> &CodeHostConfig {
        &self.inner.config
    }

    /// Runs `step` on the running container's id while no execution runs.
    pub(super) async fn with_idle_container<T, F>(
        &self,
        step: impl FnOnce(&Client, &str) -> F,
    ) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        let slot = self.inner.runner.lock().await;
        let Some(runner) = slot.as_ref() else {
            return Err(Error::CodeHostUnavailable {
                reason: "it is not running (its container, and the copies in it, end with stop or close)".into(),
            });
        };
        step(&self.inner.client, runner.container.id()).await
    }
}

impl Client {
    /// A code host with these settings, in state `init` (nothing started yet).
    pub fn code_host(&self, config: CodeHostConfig) -> CodeHost {
        self.code_host_from(config, None)
    }

    /// A code host that, on a cluster with `claims`, starts in a pod
    /// claimed from that agent-sandbox pool (or its own pod, when none is
    /// bound in time).
    pub(crate) fn code_host_from(
        &self,
        config: CodeHostConfig,
        claims: crate::backend::Claims,
    ) -> CodeHost {
        CodeHost {
            inner: Arc::new(Inner {
                client: self.clone(),
                config,
                status: Mutex::new(Status {
                    life: Tracked::new(),
                    executions: 0,
                    restart_on_use: false,
                }),
                runner: tokio::sync::Mutex::new(None),
                handles: Handles::default(),
                ids: AtomicU64::new(0),
                claims,
            }),
        }
    }
}

/// Puts a host that was `running` back to `idle` unless disarmed: a dropped
/// execution future must not leave the host wedged in `running`.
struct BackToIdle<'a> {
    host: &'a CodeHost,
    armed: bool,
}

impl Drop for BackToIdle<'_> {
    fn drop(&mut self) {
        if self.armed {
            let life = &mut lock(&self.host.inner.status).life;
            if life.state == State::Running {
                let _ = life.transition(State::Idle);
            }
        }
    }
}

impl CodeHost {
    fn set_state(&self, to: State) -> Result<()> {
        lock(&self.inner.status).life.transition(to)
    }

    fn fail(&self, why: String, restart_on_use: bool) {
        let mut status = lock(&self.inner.status);
        status.life.fail(why);
        status.restart_on_use = restart_on_use;
    }

    /// The current state.
    pub fn state(&self) -> State {
        lock(&self.inner.status).life.state
    }

    /// Id, state, image, limits and executions run.
    pub fn describe(&self) -> HostDescription {
        let status = lock(&self.inner.status);
        let c = &self.inner.config;
        let (resources, exec_memory) = c
            .checked()
            .unwrap_or((c.resources, c.exec_memory.bytes().unwrap_or_default()));
        HostDescription {
            container_id: status.life.container_id.clone(),
            state: status.life.state,
            image: status.life.image.clone(),
            cpus: resources.cpus,
            memory_bytes: resources.memory_bytes,
            exec_timeout: c.exec_timeout,
            exec_memory_bytes: exec_memory,
            executions: status.executions,
            held_results: self.inner.handles.held(),
            last_error: status.life.last_error.clone(),
        }
    }

    /// Starts the container (from `init`, or again after `error`/`stop`).
    pub async fn start(&self) -> Result<()> {
        let mut slot = self.inner.runner.lock().await;
        self.start_locked(&mut slot).await
    }

    async fn start_locked(&self, slot: &mut Option<Runner>) -> Result<()> {
        lock(&self.inner.status).life.check_startable()?;
        // Bad settings fail the start and leave the host as it was.
        #[allow(unused_mut)]
        let mut how = self.inner.config.launch()?;
        how.claims = self.inner.claims.as_deref();
        self.set_state(State::Running)?;
        // A start dropped half-way leaves `error`, from which start works again.
        let mut pending = FailUnlessDone {
            host: self,
            done: false,
        };
        let launched = launch(&self.inner.client, how).await;
        pending.done = true;
        match launched {
            Ok((runner, image)) => {
                {
                    let mut status = lock(&self.inner.status);
                    status.life.container_id = Some(runner.container.id().to_string());
                    status.life.image = Some(image);
                    status.restart_on_use = false;
                }
                *slot = Some(runner);
                self.set_state(State::Idle)
            }
            Err(e) => {
                self.fail(format!("start failed: {e}"), false);
                Err(e)
            }
        }
    }

    /// Stops the container; `start` brings the host back (state `error`, reason `stopped`).
    pub async fn stop(&self) -> Result<()> {
        let mut slot = self.inner.runner.lock().await;
        self.state().transition(State::Error)?;
        self.fail("stopped".into(), false);
        if let Some(runner) = slot.take() {
            runner.container.remove().await?;
        }
        Ok(())
    }

    /// How many executions one host runs at once: one. More callers wait;
    /// use a pool of hosts for concurrency.
    pub const MAX_CONCURRENT_EXECUTIONS: usize = 1;

    /// Closes the host for good: the container is removed.
    pub async fn close(&self) -> Result<()> {
        let mut slot = self.inner.runner.lock().await;
        self.set_state(State::Closed)?;
        lock(&self.inner.status).life.container_id = None;
        self.inner.handles.clear();
        match slot.take() {
            Some(runner) => runner.container.remove().await,
            None => Ok(()),
        }
    }

    /// Runs `code` in a fresh Monty interpreter with `inputs` (a JSON object
    /// whose keys become variables) and `tools`. A host still in `init`, or
    /// one that failed on its own (crash, unanswered deadline), is started first.
    ///
    /// A host runs one execution at a time ([`CodeHost::MAX_CONCURRENT_EXECUTIONS`]):
    /// concurrent calls wait for their turn. For executions in parallel, take
    /// a host per caller from a pool ([`Client::code_host_pool`](crate::Client::code_host_pool)).
    pub async fn execute(
        &self,
        code: &str,
        inputs: impl Serialize,
        tools: &Toolset,
    ) -> Result<Execution> {
        self.run(code, inputs, tools, None).await
    }

    /// A namespace that persists across executions (a REPL), in a Monty
    /// session of its own. At most [`CodeHostConfig::max_sessions`] are open at once.
    pub fn session(&self) -> CodeSession {
        let id = format!("s{}", self.inner.ids.fetch_add(1, Ordering::Relaxed) + 1);
        CodeSession {
            host: self.clone(),
            id,
        }
    }

    /// Ends the REPL session `id` (see [`CodeSession::close`]).
    pub(super) async fn close_session(&self, id: &str) -> Result<()> {
        self.inner.handles.release(&format!("session:{id}"));
        let mut slot = self.inner.runner.lock().await;
        let Some(runner) = slot.as_mut() else {
            return Ok(());
        };
        if let Some(stale) = runner.in_flight.clone() {
            cancel_stale(runner, &stale).await?;
            runner.in_flight = None;
        }
        let close = async {
            runner
                .send(&ToRunner::CloseSession {
                    session: id.to_string(),
                })
                .await?;
            while let Some(m) = runner.next().await {
                if matches!(m?, FromRunner::SessionClosed { .. }) {
                    break;
                }
            }
            Ok(())
        };
        match tokio::time::timeout(Duration::from_secs(10), close).await {
            Ok(done) => done,
            Err(_) => Err(Error::CodeHostUnavailable {
                reason: "the code host did not answer within 10s".into(),
            }),
        }
    }

    pub(super) async fn run(
        &self,
        code: &str,
        inputs: impl Serialize,
        tools: &Toolset,
        session: Option<&str>,
    ) -> Result<Execution> {
        let inputs = code_inputs(inputs)?;
        let type_check = self.inner.config.type_check;
        let (skill_names, modules) = module_offer(tools, code, type_check)?;
        let mut names = tools.names();
        names.extend(skill_names);
        let origin = Origin {
            code: code.to_string(),
            tools: names,
            approval: tools.approval_names(),
        };
        if session.is_some() && !origin.approval.is_empty() {
            return Err(Error::spec(
                "code session",
                format!(
                    "{} need approval, and a REPL session's namespace cannot be suspended; \
                     run code that calls them with CodeHost::execute",
                    origin.approval.join(", ")
                ),
            ));
        }
        let type_stubs = type_check.then(|| tools.stubs());
        let request = |id: String| ToRunner::Execute {
            id,
            code: code.to_string(),
            inputs,
            tools: origin.tools.clone(),
            session: session.map(String::from),
            type_stubs,
            approval: origin.approval.clone(),
            modules,
        };
        self.exchange(request, tools, session, &origin, Vec::new())
            .await
    }

    /// Sends the request `make` builds for a new execution id, serves its
    /// tool calls, and returns its outcome; `earlier` are tool calls made
    /// for it before (the approved call of a resumed execution).
    pub(super) async fn exchange(
        &self,
        make: impl FnOnce(String) -> ToRunner,
        tools: &Toolset,
        session: Option<&str>,
        origin: &Origin,
        earlier: Vec<ToolCallRecord>,
    ) -> Result<Execution> {
        let mut slot = self.inner.runner.lock().await;
        let restart = {
            let status = lock(&self.inner.status);
            status.life.state == State::Init
                || (status.life.state == State::Error && status.restart_on_use)
        };
        if restart {
            self.start_locked(&mut slot).await?;
        }
        let Some(runner) = slot.as_mut() else {
            return Err(Error::InvalidTransition {
                from: self.state().to_string(),
                to: State::Running.to_string(),
            });
        };
        self.set_state(State::Running)?;
        let mut idle = BackToIdle {
            host: self,
            armed: true,
        };
        let c = &self.inner.config;
        if let Some(stale) = runner.in_flight.clone() {
            // An abandoned execution's results can no longer be referred to.
            self.inner.handles.release(&stale);
            if let Err(e) = cancel_stale(runner, &stale).await {
                idle.armed = false;
                return Err(self.lose_runner(&mut slot, format!("{e}"), CodeError::Crashed {
                    message: format!("the code host did not end an abandoned execution ({e}); it restarts on the next execution"),
                }));
            }
            runner.in_flight = None;
        }
        let started = Instant::now();
        let id = format!("e{}", self.inner.ids.fetch_add(1, Ordering::Relaxed) + 1);
        let request = make(id.clone());
        runner.in_flight = Some(id.clone());
        let scope = session.map_or_else(|| id.clone(), |s| format!("session:{s}"));
        let outcome =
            tokio::time::timeout(c.deadline(), self.converse(runner, &request, tools, &scope))
                .await;
        idle.armed = false;
        if session.is_none() && !matches!(&outcome, Ok(Ok(_))) {
            // Nothing can refer to this execution's results any more (a
            // success releases them once what it returned is kept).
            self.inner.handles.release(&id);
        }
        match outcome {
            Ok(Ok((mut result, mut calls))) => {
                runner.in_flight = None;
                if !earlier.is_empty() {
                    calls.splice(0..0, earlier);
                }
                let saved = result.suspended.take();
                self.set_state(State::Idle)?;
                lock(&self.inner.status).executions += 1;
                let files = if result.ok {
                    self.inner
                        .handles
                        .keep_returned(&scope, &result.value, c.keep)
                        .await
                } else {
                    Vec::new()
                };
                if session.is_none() {
                    self.inner.handles.release(&id);
                }
                let mut execution =
                    finish(result, calls, started.elapsed(), c.exec_timeout, files)?;
                if let Some(saved) = saved {
                    execution.suspended = Some(self.seal(origin, saved, &execution, tools).await?);
                }
                Ok(execution)
            }
            Ok(Err(e)) => {
                let stderr = slot.as_ref().map(|r| r.stderr.trim().to_string());
                let why = format!("the bridge died: {e} {}", stderr.unwrap_or_default());
                Err(self.lose_runner(
                    &mut slot,
                    why,
                    CodeError::Crashed {
                        message: format!(
                            "the code host's bridge died ({e}); it restarts on the next execution"
                        ),
                    },
                ))
            }
            Err(_) => Err(self.lose_runner(
                &mut slot,
                format!("no answer within {:?}", c.deadline()),
                CodeError::Timeout {
                    limit: c.exec_timeout,
                },
            )),
        }
    }

    /// Drops an unusable container (removed in the background by its guard)
    /// and marks the host to start again on its next execution.
    fn lose_runner(&self, slot: &mut Option<Runner>, why: String, error: CodeError) -> Error {
        drop(slot.take());
        self.fail(why, true);
        Error::Code(Box::new(CodeFailure {
            error,
            stdout: String::new(),
            stdout_truncated: false,
            tool_calls: Vec::new(),
        }))
    }

    /// Sends the request, serves tool calls concurrently, returns the result.
    async fn converse(
        &self,
        runner: &mut Runner,
        request: &ToRunner,
        tools: &Toolset,
        scope: &str,
    ) -> Result<(ExecResult, Vec<ToolCallRecord>)> {
        runner.send(request).await?;
        let main = match request {
            ToRunner::Execute { id, .. } | ToRunner::Resume { id, .. } => id.as_str(),
            _ => "",
        };
        let mut skills = SkillRuns::new(main);
        let mut pending = FuturesUnordered::new();
        let mut calls = Vec::new();
        loop {
            tokio::select! {
                message = runner.next() => match message {
                    None => return Err(Error::CodeHostUnavailable { reason: "the bridge's output ended".into() }),
                    Some(Err(e)) => return Err(e),
                    Some(Ok(FromRunner::Result(result))) if result.id == main => {
                        for cancel in skills.cancels() {
                            runner.send(&cancel).await?;
                        }
                        return Ok((result, calls));
                    }
                    Some(Ok(FromRunner::Result(result))) => {
                        // A skill's; anything else is an abandoned
                        // execution's, which nothing waits for.
                        if let Some((replies, starts)) = skills.finished(tools, &result) {
                            for start in &starts {
                                runner.send(start).await?;
                            }
                            for done in replies {
                                pending.push(ready(done).boxed());
                            }
                        }
                    }
                    Some(Ok(FromRunner::ToolCall { call, execution, name, args, kwargs })) => {
                        if let Some(skill) = skill_named(&name) {
                            match skills.call(tools, execution.as_deref(), call, skill, args, kwargs) {
                                Step::Start(start) => runner.send(&start).await?,
                                Step::Queued => {}
                                Step::Refused(refused) => pending.push(ready(*refused).boxed()),
                            }
                        } else if name == SAVE_SKILL {
                            pending.push(ready(save_skill(tools, call, kwargs)).boxed());
                        } else {
                            pending.push(self.call_tool(tools, scope, call, name, args, kwargs).boxed());
                        }
                    }
                    Some(Ok(_)) => {}
                },
                Some(done) = pending.next(), if !pending.is_empty() => {
                    // Tools that finish together (their timers fire on the
                    // same tick, say) go back in one write, so the bridge
                    // resumes the code once for all of them.
                    let mut lines = Vec::new();
                    let mut next = Some(done);
                    while let Some((call, record, reply)) = next {
                        let (ok, value, error) = match reply {
                            Ok(v) => (true, Some(v), None),
                            Err(e) => (false, None, Some(e)),
                        };
                        lines.extend(protocol::encode(&ToRunner::ToolResult { call, ok, value, error }));
                        calls.push(record);
                        next = pending.next().now_or_never().flatten();
                    }
                    runner.send_lines(&lines).await?;
                }
            }
        }
    }

    pub(super) fn call_tool(
        &self,
        tools: &Toolset,
        scope: &str,
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
        let limit = self.inner.config.tool_result_limit;
        let scope = scope.to_string();
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
                            ToolKind::Sandbox(sb) => {
                                run_sandbox_tool(&inner.client, &inner.handles, &scope, sb, bound)
                                    .await
                            }
                        };
                        (shown, reply.and_then(|v| within(&name, v, limit)))
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

/// Marks a start that never finished (its future was dropped) as failed.
struct FailUnlessDone<'a> {
    host: &'a CodeHost,
    done: bool,
}

impl Drop for FailUnlessDone<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.host
                .fail("start was cancelled before it finished".into(), true);
        }
    }
}

/// Keeps a skill the bridge checked; the reply to the code's `save_skill`.
fn save_skill(tools: &Toolset, call: u64, kwargs: Map<String, Value>) -> Reply {
    let started = Instant::now();
    let outcome = match tools.skill_store() {
        Some(store) => store.save(&kwargs),
        None => Err("this toolset keeps no skills".to_string()),
    };
    let name = kwargs.get("name").cloned().unwrap_or_default();
    let record = ToolCallRecord {
        name: SAVE_SKILL.to_string(),
        args: serde_json::json!({ "name": name }),
        duration: started.elapsed(),
        ok: outcome.is_ok(),
        error: outcome.as_ref().err().cloned(),
    };
    (call, record, outcome)
}

/// A tool's result, or the error the code gets when it is over the limit.
fn within(tool: &str, value: Value, limit: usize) -> std::result::Result<Value, String> {
    let size = serde_json::to_vec(&value).map_or(usize::MAX, |v| v.len());
    if size > limit {
        return Err(format!(
            "{tool}() returned {size} bytes of JSON; the limit is {limit} (CodeHostConfig::tool_result_limit)"
        ));
    }
    Ok(value)
}
