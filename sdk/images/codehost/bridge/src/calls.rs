//! An execution's calls out of Monty: tool calls (one by one or fanned
//! out), sleeps, and the replies the host sends back for them.

use std::time::{Duration, Instant};

use monty_pool::ResumeValue;
use monty_types::{ExcType, MontyException, MontyObject};
use serde_json::{Map, Value};

use crate::execution::{Answer, Execution, Outcome, HOLD};
use crate::failures::Failed;
use crate::rules::thousands;
use crate::values::{from_wire, wire_args};

impl Execution {
    /// Whether a tool call at `position` waits for its value (`x = tool(a)`,
    /// or any call in code `eval` runs) rather than giving a future (awaited
    /// or gathered).
    pub(crate) fn is_sync(&self, position: &monty_types::SourceRange) -> bool {
        position.filename == "<string>"
            || !self
                .prepared
                .as_ref()
                .is_some_and(|p| p.async_calls.contains(&position.start))
    }

    pub(crate) fn tool_call(
        &mut self,
        name: &str,
        args: &monty_types::CallArgs,
        call_id: u32,
        position: &monty_types::SourceRange,
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
        if self.is_sync(position) {
            return Ok(Answer::Wait(number));
        }
        self.waiting.insert(call_id, Waiting::One(number));
        Ok(Answer::Resume(ResumeValue::Future))
    }

    /// `_dh_fanout(packs)`: every `(name, (args, kwargs))` pack becomes a
    /// host call, all answered by one future. They go out at once: they are
    /// a batch already, and the code is about to wait for them.
    pub(crate) fn fan(
        &mut self,
        args: &monty_types::CallArgs,
        call_id: u32,
    ) -> Result<Answer, Outcome> {
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
            if !self.tools.contains(&name) || name == crate::skills::SAVE_SKILL {
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
    pub(crate) fn sleep(&mut self, delay: Duration, call_id: u32, as_future: bool) -> Answer {
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
    pub(crate) fn call_host(
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
    pub(crate) fn hold_or_send(&mut self) {
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
    pub(crate) async fn settle(
        &mut self,
        pending: &[u32],
    ) -> Result<Vec<(u32, ResumeValue)>, Outcome> {
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
    pub(crate) fn settled(&mut self, id: u32) -> Option<ResumeValue> {
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
    pub(crate) fn fan_result(&mut self, fan: &FanCalls) -> Option<ResumeValue> {
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
    pub(crate) fn file(&mut self, number: u64, reply: Value) {
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

    pub(crate) fn tool_failed(&mut self, message: String) -> ResumeValue {
        self.tool_errors.insert(message.clone());
        ResumeValue::Error(MontyException::new(ExcType::RuntimeError, Some(message)))
    }
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
