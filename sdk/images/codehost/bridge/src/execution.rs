//! One execution: feeds the prepared code to a Monty session and answers its
//! suspensions (tool calls, futures, undefined names, OS calls) until it
//! completes.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use monty_pool::{on_print_sync, Checkout, PoolError, ResumeValue, TurnEvent};
use monty_types::{ExcType, MontyException, MontyObject, NameLookupResult};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::failures::{frame_of, runtime_error, typing_error, Failed};
use crate::fanout::FANOUT_FUNCTION;
use crate::oscalls::os_call;
use crate::printed::Printed;
use crate::rules::{self, thousands, Prepared};
use crate::values::{from_wire, to_wire, wire_args};
use crate::{lock, Bridge};

/// How an execution ended other than with a value.
pub enum Outcome {
    Failed(Failed),
    Cancelled,
    /// Stopped at a call that needs the host's approval; its saved state
    /// (see `suspend`).
    Suspended(Value),
}

impl From<Failed> for Outcome {
    fn from(f: Failed) -> Self {
        Outcome::Failed(f)
    }
}

pub struct Execution {
    pub(crate) bridge: Arc<Bridge>,
    id: String,
    pub(crate) code: String,
    inputs: Map<String, Value>,
    pub(crate) tools: HashSet<String>,
    /// Tools whose calls stop the execution until the host approves them.
    pub(crate) approval: HashSet<String>,
    pub(crate) printed: Arc<Mutex<Printed>>,
    pub(crate) prepared: Option<Prepared>,
    pub(crate) tool_errors: HashSet<String>,
    pub(crate) calls: u64,
    inbox_tx: mpsc::UnboundedSender<(u64, Value)>,
    inbox: mpsc::UnboundedReceiver<(u64, Value)>,
    /// Host call number -> reply not consumed yet.
    pub(crate) answered: HashMap<u64, Value>,
    /// Monty call id -> the host calls its future stands for.
    pub(crate) waiting: HashMap<u32, Waiting>,
    /// Whether gathers of tool calls may fan out (see `fanout`).
    fan_out: bool,
    /// Host call number -> the fan-out it belongs to, until it is answered.
    fan_of: HashMap<u64, u32>,
    /// Tool calls not sent to the host yet, and since when the oldest waits.
    held: Vec<u8>,
    held_since: Option<Instant>,
}

/// How long a tool call may wait to go out with the ones after it while the
/// code keeps running. Code that issues many calls in a row (a gather over a
/// list) makes one suspension per call; sending each on its own costs the
/// host a wake-up per call and delays the last one. Code that blocks sends
/// what it holds at once.
const HOLD: Duration = Duration::from_millis(1);

impl Execution {
    pub fn new(bridge: Arc<Bridge>, request: &Value) -> Self {
        let (inbox_tx, inbox) = mpsc::unbounded_channel();
        let limit = bridge.config.print_limit;
        Self {
            bridge,
            id: request["id"].as_str().unwrap_or_default().to_string(),
            code: request["code"].as_str().unwrap_or_default().to_string(),
            inputs: request["inputs"].as_object().cloned().unwrap_or_default(),
            tools: names(&request["tools"]),
            // A REPL session's namespace cannot be saved apart from it.
            approval: if request["session"].is_null() {
                names(&request["approval"])
            } else {
                HashSet::new()
            },
            printed: Arc::new(Mutex::new(Printed {
                text: String::new(),
                chars: 0,
                limit,
                cut: false,
            })),
            prepared: None,
            tool_errors: HashSet::new(),
            calls: 0,
            inbox_tx,
            inbox,
            answered: HashMap::new(),
            waiting: HashMap::new(),
            // A REPL session may have bound a tool's name or `gather` in an
            // earlier execution; type checking checks each call's arguments;
            // a call that needs approval must stop the code on its own.
            fan_out: request["session"].is_null()
                && request["type_stubs"].is_null()
                && request["approval"].as_array().is_none_or(Vec::is_empty),
            fan_of: HashMap::new(),
            held: Vec::new(),
            held_since: None,
        }
    }

    /// What the code printed, and whether it was cut at the limit.
    pub fn printed(&self) -> (String, bool) {
        let p = lock(&self.printed);
        (p.text.clone(), p.cut)
    }

    /// Checks and rewrites the code as the policy asks (see `rules`).
    pub(crate) fn prepare(&mut self) -> Result<String, Outcome> {
        let limits = rules::Limits {
            max_literal: 10_000,
            max_code_bytes: 1 << 20,
            policy: self.bridge.config.policy,
        };
        let prepared =
            rules::prepare(&self.code, &self.tools, &limits, self.fan_out).map_err(Failed::from)?;
        let code = prepared.code.clone();
        self.prepared = Some(prepared);
        Ok(code)
    }

    pub async fn run(&mut self, session: &mut Checkout) -> Result<Value, Outcome> {
        let code = self.prepare()?;
        let mut inputs = Vec::with_capacity(self.inputs.len());
        for (name, value) in &self.inputs {
            let value = from_wire(value)
                .map_err(|e| Failed::new("value", format!("input `{name}`: {e}")))?;
            inputs.push((name.clone(), value));
        }
        let printed = self.printed.clone();
        let mut on_print = on_print_sync(move |_, text| lock(&printed).push(text));
        let skip_type_check = false;
        let event = session
            .feed(
                code,
                inputs,
                self.bridge.mounts.get().cloned().unwrap_or_default(),
                skip_type_check,
                &mut on_print,
            )
            .await;
        self.drive(session, event).await
    }

    /// Answers the session's suspensions, from `event` on, until it completes.
    pub(crate) async fn drive(
        &mut self,
        session: &mut Checkout,
        mut event: Result<TurnEvent, PoolError>,
    ) -> Result<Value, Outcome> {
        let printed = self.printed.clone();
        let mut on_print = on_print_sync(move |_, text| lock(&printed).push(text));
        loop {
            let answered = match event {
                Ok(TurnEvent::Complete(value)) => return self.finish(&value),
                Ok(TurnEvent::FunctionCall {
                    ref function_name,
                    ref args,
                    ..
                }) if self.approval.contains(function_name) => {
                    match self.approval_args(function_name, args) {
                        Ok(call) => return Err(self.suspend(session, call).await),
                        Err(refused) => Answer::Resume(refused),
                    }
                }
                Ok(event) => self.answer(event)?,
                Err(e) => return Err(self.failure(e).into()),
            };
            let answer = match answered {
                Answer::Resume(v) => Step::Resume(v),
                Answer::Os(fallback) => match session.resume_from_mounts(&mut on_print).await {
                    Ok(Some(next)) => {
                        event = Ok(next);
                        continue;
                    }
                    Ok(None) => Step::Resume(fallback),
                    Err(e) => return Err(self.failure(e).into()),
                },
                Answer::Wait(number) => {
                    self.send_held();
                    let reply = self.wait_for(number).await?;
                    Step::Resume(self.result_of(&reply))
                }
                Answer::Settle(pending) => {
                    self.send_held();
                    Step::Futures(self.settle(&pending).await?)
                }
                Answer::Lookup => Step::Lookup,
            };
            event = match answer {
                Step::Resume(v) => {
                    let resumed = session.resume(v, &mut on_print);
                    self.sending_held_calls_meanwhile(resumed).await
                }
                Step::Futures(results) => session.resume_futures(results, &mut on_print).await,
                Step::Lookup => {
                    let resumed =
                        session.resume_name_lookup(NameLookupResult::Undefined, &mut on_print);
                    self.sending_held_calls_meanwhile(resumed).await
                }
            };
        }
    }

    /// Sends the held tool calls.
    pub(crate) fn send_held(&mut self) {
        self.held_since = None;
        if !self.held.is_empty() {
            self.bridge.send_lines(std::mem::take(&mut self.held));
        }
    }

    /// Awaits `turn` (the code running on); held tool calls go out once the
    /// oldest has waited [`HOLD`], whether or not the code suspends again.
    async fn sending_held_calls_meanwhile<T>(&mut self, turn: impl Future<Output = T>) -> T {
        let Some(since) = self.held_since else {
            return turn.await;
        };
        tokio::pin!(turn);
        tokio::select! {
            biased;
            event = &mut turn => event,
            () = tokio::time::sleep_until((since + HOLD).into()) => {
                self.send_held();
                turn.await
            }
        }
    }

    fn finish(&self, value: &MontyObject) -> Result<Value, Outcome> {
        let wire =
            to_wire(value, self.bridge.config.encoding).map_err(|e| Failed::new("value", e.0))?;
        let size = serde_json::to_vec(&wire).map_or(usize::MAX, |v| v.len());
        let limit = self.bridge.config.value_limit;
        if size > limit {
            return Err(Failed::new(
                "output_limit",
                format!(
                    "the final value is {} bytes of JSON; the limit is {}",
                    thousands(size),
                    thousands(limit)
                ),
            )
            .into());
        }
        Ok(wire)
    }

    pub(crate) fn failure(&self, error: PoolError) -> Failed {
        let prepared = self.prepared.as_ref();
        match error {
            PoolError::Runtime(e) if e.exc_type() == ExcType::SyntaxError => {
                let (line, col) = frame_of(&e, None);
                let message = e.message().unwrap_or("invalid syntax").to_string();
                Failed::validation("syntax", message).at(line, col)
            }
            PoolError::Runtime(e) => runtime_error(
                &e,
                prepared,
                &self.tool_errors,
                self.bridge.config.loop_limit,
            ),
            PoolError::Typing(report) => typing_error(&report, prepared),
            PoolError::Timeout { .. } => Failed::new(
                "timeout",
                format!(
                    "the execution ran longer than {}",
                    self.bridge.config.timeout_text()
                ),
            ),
            PoolError::Crashed { cause, .. } => {
                Failed::new("crash", format!("the interpreter's worker died: {cause:?}"))
            }
            other => Failed::new("crash", other.to_string()),
        }
    }

    fn answer(&mut self, event: TurnEvent) -> Result<Answer, Outcome> {
        match event {
            TurnEvent::NameLookup { .. } => Ok(Answer::Lookup),
            TurnEvent::ResolveFutures {
                pending_call_ids, ..
            } => Ok(Answer::Settle(pending_call_ids)),
            TurnEvent::OsCall {
                function_name,
                args,
                call_id,
                system_sleep,
                ..
            } => Ok(match system_sleep {
                // `asyncio.sleep` may sit in a gather: always a future.
                Some(delay) => self.sleep(delay, call_id, function_name == "system.async_sleep"),
                None => Answer::Os(os_call(&function_name, &args, &self.bridge.config.env)),
            }),
            TurnEvent::FunctionCall {
                function_name,
                args,
                call_id,
                ..
            } if function_name == FANOUT_FUNCTION => self.fan(&args, call_id),
            TurnEvent::FunctionCall {
                function_name,
                args,
                call_id,
                position,
                ..
            } => self.tool_call(&function_name, &args, call_id, position.start),
            TurnEvent::Complete(_) => Err(Failed::new("crash", "completed twice").into()),
        }
    }

    fn tool_call(
        &mut self,
        name: &str,
        args: &monty_types::CallArgs,
        call_id: u32,
        at: u32,
    ) -> Result<Answer, Outcome> {
        if !self.tools.contains(name) {
            return Ok(Answer::Resume(ResumeValue::Error(MontyException::new(
                ExcType::NameError,
                Some(format!("name '{name}' is not defined")),
            ))));
        }
        self.count_calls(1)?;
        let (positional, keywords) =
            match wire_args(args.args(), args.kwargs(), self.bridge.config.encoding) {
                Ok(parts) => parts,
                Err(e) => return Ok(Answer::Resume(self.bad_arguments(name, &e))),
            };
        let number = self.call_host(name, positional, keywords);
        self.hold_or_send();
        let sync = self
            .prepared
            .as_ref()
            .is_some_and(|p| p.sync_calls.contains(&at));
        if sync {
            return Ok(Answer::Wait(number));
        }
        self.waiting.insert(call_id, Waiting::One(number));
        Ok(Answer::Resume(ResumeValue::Future))
    }

    /// `_dh_fanout(packs)`: every `(name, (args, kwargs))` pack becomes a
    /// host call, all answered by one future. They go out at once: they are
    /// a batch already, and the code is about to wait for them.
    fn fan(&mut self, args: &monty_types::CallArgs, call_id: u32) -> Result<Answer, Outcome> {
        let packs = args
            .args()
            .next()
            .and_then(|p| p.items())
            .unwrap_or_default();
        self.count_calls(packs.len() as u64)?;
        let mut calls = Vec::with_capacity(packs.len());
        for pack in packs {
            let parts = pack.items().unwrap_or_default();
            let call = parts.get(1).and_then(|c| c.items()).unwrap_or_default();
            let ([name, _], [positional, keywords]) = (parts.as_slice(), call.as_slice()) else {
                return Err(Failed::new("crash", "a fan-out call came malformed").into());
            };
            let name = name.as_str().unwrap_or_default().to_string();
            if !self.tools.contains(&name) {
                return Err(Failed::new("crash", "a fan-out named no tool").into());
            }
            let positional = positional.items().unwrap_or_default();
            let keywords = keywords.pairs().unwrap_or_default();
            match wire_args(
                positional.into_iter(),
                keywords.into_iter(),
                self.bridge.config.encoding,
            ) {
                Ok((positional, keywords)) => calls.push((name, positional, keywords)),
                // As the call itself would have raised: before any went out.
                Err(e) => return Ok(Answer::Resume(self.bad_arguments(&name, &e))),
            }
        }
        let numbers: Vec<u64> = calls
            .into_iter()
            .map(|(name, positional, keywords)| self.call_host(&name, positional, keywords))
            .collect();
        self.send_held();
        self.fan_of.extend(numbers.iter().map(|n| (*n, call_id)));
        let fan = FanCalls {
            remaining: numbers.len(),
            numbers,
            failed: None,
        };
        self.waiting.insert(call_id, Waiting::Fan(fan));
        Ok(Answer::Resume(ResumeValue::Future))
    }

    /// `time.sleep` waits here (Monty already capped the delay at the time
    /// limit); `asyncio.sleep` becomes a future, so gathered sleeps overlap.
    /// The execution's deadline or cancellation ends the wait: the timer
    /// then has no one to tell.
    fn sleep(&mut self, delay: Duration, call_id: u32, as_future: bool) -> Answer {
        let number = self.bridge.next_call_number();
        let inbox = self.inbox_tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = inbox.send((number, serde_json::json!({"ok": true, "value": null})));
        });
        if as_future {
            self.waiting.insert(call_id, Waiting::One(number));
            Answer::Resume(ResumeValue::Future)
        } else {
            Answer::Wait(number)
        }
    }

    /// Counts `n` more tool calls against the limit.
    pub(crate) fn count_calls(&mut self, n: u64) -> Result<(), Outcome> {
        self.calls += n;
        let limit = self.bridge.config.max_tool_calls;
        if self.calls > limit {
            return Err(Failed::new(
                "tool_limit",
                format!(
                    "the code made more than {} tool calls",
                    thousands(limit as usize)
                ),
            )
            .into());
        }
        Ok(())
    }

    /// Registers a host call and holds its line; returns its number.
    fn call_host(
        &mut self,
        name: &str,
        positional: Vec<Value>,
        keywords: Map<String, Value>,
    ) -> u64 {
        let (number, line) =
            self.bridge
                .tool_call(&self.id, &self.inbox_tx, name, positional, keywords);
        self.held.extend_from_slice(&line);
        self.held_since.get_or_insert_with(Instant::now);
        number
    }

    /// Sends the held calls if the oldest has waited long enough.
    fn hold_or_send(&mut self) {
        if self.held_since.is_some_and(|since| since.elapsed() >= HOLD) {
            self.send_held();
        }
    }

    /// The reply to the host call `number`.
    pub(crate) async fn wait_for(&mut self, number: u64) -> Result<Value, Outcome> {
        loop {
            if let Some(reply) = self.answered.remove(&number) {
                return Ok(reply);
            }
            self.receive().await?;
        }
    }

    /// Waits for at least one reply, and takes every other one queued, so
    /// gathered calls resume together.
    pub(crate) async fn receive(&mut self) -> Result<(), Outcome> {
        let Some((number, reply)) = self.inbox.recv().await else {
            return Err(Outcome::Cancelled);
        };
        self.file(number, reply);
        while let Ok((number, reply)) = self.inbox.try_recv() {
            self.file(number, reply);
        }
        Ok(())
    }

    /// Results for at least one of the `pending` futures, and every other
    /// one that can be settled.
    async fn settle(&mut self, pending: &[u32]) -> Result<Vec<(u32, ResumeValue)>, Outcome> {
        if !pending.iter().any(|id| self.waiting.contains_key(id)) {
            return Err(
                Failed::new("crash", "the code waits on a call the bridge never made").into(),
            );
        }
        loop {
            let settled: Vec<(u32, ResumeValue)> = pending
                .iter()
                .filter_map(|id| self.settled(*id).map(|result| (*id, result)))
                .collect();
            if !settled.is_empty() {
                return Ok(settled);
            }
            self.receive().await?;
        }
    }

    /// The result of future `id`, if its replies are in.
    fn settled(&mut self, id: u32) -> Option<ResumeValue> {
        let waiting = self.waiting.remove(&id)?;
        let result = match &waiting {
            Waiting::One(number) => self
                .answered
                .remove(number)
                .map(|reply| self.result_of(&reply)),
            Waiting::Fan(fan) => self.fan_result(fan),
        };
        if result.is_none() {
            self.waiting.insert(id, waiting);
        }
        result
    }

    /// A fan-out's values in order once all are in, or its first failure as
    /// soon as it is in, as gather gives them.
    fn fan_result(&mut self, fan: &FanCalls) -> Option<ResumeValue> {
        if let Some(number) = fan.failed {
            let reply = self.answered.remove(&number)?;
            return Some(self.result_of(&reply));
        }
        if fan.remaining > 0 {
            return None;
        }
        let mut values = Vec::with_capacity(fan.numbers.len());
        for number in &fan.numbers {
            let reply = self.answered.remove(number).unwrap_or_default();
            match self.result_of(&reply) {
                ResumeValue::Return(value) => values.push(value),
                failed => return Some(failed),
            }
        }
        Some(ResumeValue::Return(MontyObject::list(values)))
    }

    /// Files a reply; a fan-out's count and first failure are kept as they
    /// come, so a large one is not scanned at every reply.
    fn file(&mut self, number: u64, reply: Value) {
        if let Some(id) = self.fan_of.remove(&number) {
            if let Some(Waiting::Fan(fan)) = self.waiting.get_mut(&id) {
                fan.remaining -= 1;
                if fan.failed.is_none() && reply["ok"] != Value::Bool(true) {
                    fan.failed = Some(number);
                }
            }
        }
        self.answered.insert(number, reply);
    }

    pub(crate) fn result_of(&mut self, reply: &Value) -> ResumeValue {
        if reply["ok"].as_bool() == Some(true) {
            return match from_wire(&reply["value"]) {
                Ok(v) => ResumeValue::Return(v),
                Err(e) => self.tool_failed(format!("the tool's result could not be read: {e}")),
            };
        }
        let message = reply["error"]
            .as_str()
            .filter(|m| !m.is_empty())
            .unwrap_or("the tool failed")
            .to_string();
        self.tool_failed(message)
    }

    /// Arguments that cannot reach the host (not JSON: bytes, NaN, an int
    /// past 64 bits) fail as the host fails every other bad argument (a
    /// wrong type, an unknown name): the catchable `ToolError`.
    pub(crate) fn bad_arguments(&mut self, name: &str, problem: &str) -> ResumeValue {
        self.tool_failed(format!("{name}(): {problem}"))
    }

    fn tool_failed(&mut self, message: String) -> ResumeValue {
        self.tool_errors.insert(message.clone());
        ResumeValue::Error(MontyException::new(ExcType::RuntimeError, Some(message)))
    }
}

/// What a suspension needs before the session can go on.
pub(crate) enum Answer {
    Resume(ResumeValue),
    /// An OS call: the feed's mounts answer it if they cover it, this
    /// otherwise.
    Os(ResumeValue),
    /// A synchronous tool call: its reply.
    Wait(u64),
    /// Every task waits on futures: at least one of them.
    Settle(Vec<u32>),
    /// An undefined name.
    Lookup,
}

/// What a future handed to Monty stands for.
pub(crate) enum Waiting {
    One(u64),
    Fan(FanCalls),
}

/// The host calls of a fan-out.
pub(crate) struct FanCalls {
    /// In the order of the code's comprehension.
    numbers: Vec<u64>,
    /// How many have no reply yet.
    pub(crate) remaining: usize,
    /// The first that failed.
    pub(crate) failed: Option<u64>,
}

enum Step {
    Resume(ResumeValue),
    Futures(Vec<(u32, ResumeValue)>),
    Lookup,
}

/// A JSON array of names as a set.
fn names(v: &Value) -> HashSet<String> {
    v.as_array()
        .map(|t| {
            t.iter()
                .filter_map(|n| n.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}
