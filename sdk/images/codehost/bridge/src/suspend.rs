//! Executions that stop at a call that needs the host's approval.
//!
//! The Monty session is dumped (Monty serializes a session paused at an
//! external call), together with what the bridge knows of the execution: the
//! replies of the futures the code already holds, the calls counted, the
//! output printed. All of it goes to the host, which seals it; the session
//! is then ended, so the code host keeps nothing. A `resume` request brings
//! the state back into a fresh worker of any code host, answers the stopped
//! call with the host's reply, and drives the code on from there.
//!
//! Calls that were still running when the approval call came are waited
//! for before the dump, so the saved state holds their replies and nothing
//! is lost with the worker.

use base64::Engine as _;
use monty_pool::{on_print_sync, Checkout, ResumeValue, TurnEvent};
use monty_types::CallArgs;
use serde_json::{json, Map, Value};

use crate::calls::Waiting;
use crate::execution::{Execution, Outcome};
use crate::failures::Failed;
use crate::lock;
use crate::rules::thousands;
use crate::values::wire_args;

/// A call that stops the execution: the tool and its arguments.
pub struct ApprovalCall {
    name: String,
    args: Vec<Value>,
    kwargs: Map<String, Value>,
}

impl Execution {
    /// The arguments of a call that needs approval, or the error the code
    /// gets for arguments that cannot reach the host (as for any tool).
    pub(crate) fn approval_args(
        &mut self,
        name: &str,
        args: &CallArgs,
    ) -> Result<ApprovalCall, ResumeValue> {
        match wire_args(args.args(), args.kwargs(), self.bridge.config.encoding) {
            Ok((args, kwargs)) => Ok(ApprovalCall {
                name: name.to_string(),
                args,
                kwargs,
            }),
            Err(e) => Err(self.bad_arguments(name, &e)),
        }
    }

    /// Saves the session stopped at `call`, with the replies of every call
    /// already made, for the host.
    pub(crate) async fn suspend(&mut self, session: &mut Checkout, call: ApprovalCall) -> Outcome {
        self.send_held();
        while !self.all_answered() {
            if let Err(outcome) = self.receive().await {
                return outcome;
            }
        }
        let state = match session.dump().await {
            Ok(state) => state,
            Err(e) => return Outcome::Failed(self.failure(e)),
        };
        let limit = self.bridge.config.suspend_limit;
        if state.len() > limit {
            return Outcome::Failed(Failed::new(
                "suspend_limit",
                format!(
                    "the execution's state is {} bytes, over the {} bytes a suspended execution may take; \
                     keep less data in variables before calls that need approval",
                    thousands(state.len()),
                    thousands(limit)
                ),
            ));
        }
        let mut futures = Vec::with_capacity(self.waiting.len());
        for (call_id, waiting) in std::mem::take(&mut self.waiting) {
            let Waiting::One(number) = waiting else {
                // Gathers do not fan out when a tool needs approval.
                return Outcome::Failed(Failed::new(
                    "crash",
                    "a fan-out was pending at a suspension",
                ));
            };
            let reply = self.answered.remove(&number).unwrap_or_default();
            futures.push(json!({"call_id": call_id, "reply": reply}));
        }
        let mut errors: Vec<&String> = self.tool_errors.iter().collect();
        errors.sort();
        Outcome::Suspended(json!({
            "tool": call.name,
            "args": call.args,
            "kwargs": call.kwargs,
            "state": base64::engine::general_purpose::STANDARD.encode(&state),
            "futures": futures,
            "calls": self.calls,
            "tool_errors": errors,
        }))
    }

    /// Whether every future handed to the code has its reply.
    fn all_answered(&self) -> bool {
        self.waiting.values().all(|w| match w {
            Waiting::One(number) => self.answered.contains_key(number),
            Waiting::Fan(fan) => fan.remaining == 0 || fan.failed.is_some(),
        })
    }

    /// Brings back a suspended execution (`saved`, as [`Execution::suspend`]
    /// made it, with the output printed before) and answers the call it
    /// stopped at with `reply` (`{"ok", "value" | "error"}`).
    pub(crate) async fn resume(
        &mut self,
        session: &mut Checkout,
        saved: &Value,
        reply: &Value,
    ) -> Result<Value, Outcome> {
        self.prepare()?;
        self.calls = saved["calls"].as_u64().unwrap_or_default();
        self.tool_errors = saved["tool_errors"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e.as_str().map(String::from))
            .collect();
        {
            let mut printed = lock(&self.printed);
            printed.push(saved["stdout"].as_str().unwrap_or_default());
            printed.cut |= saved["stdout_truncated"].as_bool() == Some(true);
        }
        let state = base64::engine::general_purpose::STANDARD
            .decode(saved["state"].as_str().unwrap_or_default())
            .map_err(|e| {
                Failed::new("suspension", format!("the saved state is not base64: {e}"))
            })?;
        let printed = self.printed.clone();
        let mut on_print = on_print_sync(move |_, text| lock(&printed).push(text));
        let mounts = self.bridge.mounts.get().cloned().unwrap_or_default();
        let (event, _) = session
            .restore(state, mounts, &mut on_print)
            .await
            .map_err(|e| self.failure(e))?;
        let Some(TurnEvent::FunctionCall {
            function_name,
            call_id,
            position,
            ..
        }) = event
        else {
            return Err(
                Failed::new("suspension", "the saved state does not stop at a tool call").into(),
            );
        };
        if saved["tool"].as_str() != Some(function_name.as_str()) {
            return Err(Failed::new(
                "suspension",
                format!("the saved state stops at `{function_name}`, not at the tool it names"),
            )
            .into());
        }
        for future in saved["futures"].as_array().into_iter().flatten() {
            let Some(id) = future["call_id"]
                .as_u64()
                .and_then(|id| u32::try_from(id).ok())
            else {
                continue;
            };
            let number = self.bridge.next_call_number();
            self.answered.insert(number, future["reply"].clone());
            self.waiting.insert(id, Waiting::One(number));
        }
        self.count_calls(1)?;
        let value = if self.is_sync(&position) {
            self.result_of(reply)
        } else {
            let number = self.bridge.next_call_number();
            self.answered.insert(number, reply.clone());
            self.waiting.insert(call_id, Waiting::One(number));
            ResumeValue::Future
        };
        let event = session.resume(value, &mut on_print).await;
        self.drive(session, event).await
    }
}
