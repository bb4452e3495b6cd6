//! One execution: feeds the prepared code to a Monty session and answers its
//! suspensions (tool calls, futures, undefined names, OS calls) until it
//! completes.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use monty_pool::{on_print_sync, Checkout, PoolError, ResumeValue, TurnEvent};
use monty_types::{ExcType, MontyObject, NameLookupResult};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::calls::Waiting;
use crate::failures::{frame_of, runtime_error, typing_error, Failed};
use crate::fanout::FANOUT_FUNCTION;
use crate::modules::Modules;
use crate::oscalls::os_call;
use crate::printed::Printed;
use crate::rules::{self, thousands, Prepared};
use crate::values::{from_wire, to_wire};
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
    pub(crate) id: String,
    pub(crate) code: String,
    pub(crate) inputs: Map<String, Value>,
    pub(crate) tools: HashSet<String>,
    /// Tools whose calls stop the execution until the host approves them.
    pub(crate) approval: HashSet<String>,
    pub(crate) printed: Arc<Mutex<Printed>>,
    pub(crate) prepared: Option<Prepared>,
    pub(crate) tool_errors: HashSet<String>,
    pub(crate) calls: u64,
    pub(crate) inbox_tx: mpsc::UnboundedSender<(u64, Value)>,
    pub(crate) inbox: mpsc::UnboundedReceiver<(u64, Value)>,
    /// Host call number -> reply not consumed yet.
    pub(crate) answered: HashMap<u64, Value>,
    /// Monty call id -> the host calls its future stands for.
    pub(crate) waiting: HashMap<u32, Waiting>,
    /// Whether gathers of tool calls may fan out (see `fanout`).
    pub(crate) fan_out: bool,
    /// Host call number -> the fan-out it belongs to, until it is answered.
    pub(crate) fan_of: HashMap<u64, u32>,
    /// Tool calls not sent to the host yet, and since when the oldest waits.
    pub(crate) held: Vec<u8>,
    pub(crate) held_since: Option<Instant>,
    /// The host's modules (`tools`, `skills`; see `modules`).
    pub(crate) modules: Modules,
    /// The tools' stubs a skill is checked against when saved; only sent
    /// when the code may save one.
    pub(crate) skill_stubs: Option<String>,
}

/// How long a tool call may wait to go out with the ones after it while the
/// code keeps running. Code that issues many calls in a row (a gather over a
/// list) makes one suspension per call; sending each on its own costs the
/// host a wake-up per call and delays the last one. Code that blocks sends
/// what it holds at once.
pub(crate) const HOLD: Duration = Duration::from_millis(1);

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
            modules: Modules::from_request(request),
            skill_stubs: request["skill_stubs"].as_str().map(String::from),
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
        // A save goes through the bridge's own check, never straight to
        // the host as a fanned-out call would.
        let mut fanned = self.tools.clone();
        fanned.remove(crate::skills::SAVE_SKILL);
        let prepared =
            rules::prepare(&self.code, &fanned, &limits, self.fan_out).map_err(Failed::from)?;
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
                Answer::Lookup(found) => Step::Lookup(found),
                Answer::SaveSkill(call) => {
                    self.send_held();
                    let number = self.save_skill(&call).await;
                    if call.sync {
                        let reply = self.wait_for(number).await?;
                        Step::Resume(self.result_of(&reply))
                    } else {
                        self.waiting.insert(call.call_id, Waiting::One(number));
                        Step::Resume(ResumeValue::Future)
                    }
                }
            };
            event = match answer {
                Step::Resume(v) => {
                    let resumed = session.resume(v, &mut on_print);
                    self.sending_held_calls_meanwhile(resumed).await
                }
                Step::Futures(results) => session.resume_futures(results, &mut on_print).await,
                Step::Lookup(found) => {
                    let resumed = session.resume_name_lookup(found, &mut on_print);
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
    pub(crate) async fn sending_held_calls_meanwhile<T>(
        &mut self,
        turn: impl Future<Output = T>,
    ) -> T {
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

    pub(crate) fn finish(&self, value: &MontyObject) -> Result<Value, Outcome> {
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

    pub(crate) fn answer(&mut self, event: TurnEvent) -> Result<Answer, Outcome> {
        match event {
            // A tool is a value too (`f = tool`, `map(tool, xs)`): a host
            // function, whose calls are tool calls.
            TurnEvent::NameLookup {
                name,
                object_id: None,
                ..
            } if self.tools.contains(&name) => Ok(Answer::Lookup(NameLookupResult::Value(
                MontyObject::function(name, None),
            ))),
            TurnEvent::NameLookup { .. } => Ok(Answer::Lookup(NameLookupResult::Undefined)),
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
                // The host's modules (`import tools`) before anything else.
                None => match self.modules.answer(&function_name, &args) {
                    Some(module) => Answer::Resume(module),
                    None => Answer::Os(os_call(&function_name, &args, &self.bridge.config.env)),
                },
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
            } if function_name == crate::skills::SAVE_SKILL
                && self.tools.contains(&function_name) =>
            {
                Ok(Answer::SaveSkill(crate::saving::SaveCall::new(
                    &args,
                    call_id,
                    self.is_sync(&position),
                )))
            }
            TurnEvent::FunctionCall {
                function_name,
                args,
                call_id,
                position,
                ..
            } => self.tool_call(&function_name, &args, call_id, &position),
            TurnEvent::Complete(_) => Err(Failed::new("crash", "completed twice").into()),
        }
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
    /// An undefined name: a tool's, or none.
    Lookup(NameLookupResult),
    /// `save_skill(fn)` (see `skills`).
    SaveSkill(crate::saving::SaveCall),
}

enum Step {
    Resume(ResumeValue),
    Futures(Vec<(u32, ResumeValue)>),
    Lookup(NameLookupResult),
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
