//! An execution's `save_skill(fn)` call: the skill is cut out of its code
//! (see `skills`), checked in a fresh type-checked Monty session that only
//! defines it, and handed to the host to keep. Its answer is an ordinary
//! tool reply, so a refusal is the `ToolError` the code can catch.

use monty_types::CallArgs;
use serde_json::json;

use crate::execution::{Execution, Outcome};
use crate::skills;

/// What a `save_skill(...)` call asked for.
pub struct SaveCall {
    /// The function's name, if the first argument named one.
    pub name: Option<String>,
    /// What the first argument was, for the error when it named none.
    pub given: String,
    pub description: Option<String>,
    pub call_id: u32,
    /// Whether the code waits for the answer (not awaited or gathered).
    pub sync: bool,
}

impl SaveCall {
    pub fn new(args: &CallArgs, call_id: u32, sync: bool) -> Self {
        let first = args.args().next().or_else(|| args.kwarg("fn"));
        let given = first.map_or_else(
            || "nothing".to_string(),
            |a| a.as_str().map_or_else(|| a.py_repr(), String::from),
        );
        let name = skills::named(&given);
        let given: String = given.chars().take(80).collect();
        let description = args
            .kwarg("description")
            .and_then(|d| d.as_str().map(String::from));
        SaveCall {
            name,
            given,
            description,
            call_id,
            sync,
        }
    }
}

impl Execution {
    /// Checks the skill and asks the host to keep it; returns the number
    /// of the call whose reply answers the code (a refusal is filed as
    /// that reply at once).
    pub(crate) async fn save_skill(&mut self, call: &SaveCall) -> u64 {
        match self.checked_skill(call).await {
            Ok(kwargs) => {
                let number = self.call_host(skills::SAVE_SKILL, Vec::new(), kwargs);
                self.send_held();
                number
            }
            Err(message) => {
                let number = self.bridge.next_call_number();
                self.answered
                    .insert(number, json!({"ok": false, "error": message}));
                number
            }
        }
    }

    async fn checked_skill(
        &mut self,
        call: &SaveCall,
    ) -> Result<serde_json::Map<String, serde_json::Value>, String> {
        let name = call.name.clone().ok_or_else(|| {
            format!(
                "save_skill(fn) takes a function defined at the top level of this code, or its \
                 name; it got {}",
                call.given
            )
        })?;
        let skill =
            skills::extract(&self.code, &name).map_err(|e| format!("save_skill({name}): {e}"))?;
        let stubs = self.skill_stubs.clone().unwrap_or_default();
        let mut checkout = self
            .bridge
            .fresh(Some(stubs))
            .await
            .map_err(|f| format!("save_skill({name}): {}", f.message))?;
        // Defines the skill and calls nothing: no tools, no inputs.
        let request = json!({
            "id": format!("{}-skill-check", self.id),
            "code": skill.source,
            "modules": serde_json::Value::Null,
        });
        let mut check = Execution::new(self.bridge.clone(), &request);
        check.modules = self.modules.clone();
        // Boxed: a check is an execution inside an execution.
        let checked = Box::pin(check.run(&mut checkout)).await;
        drop(checkout);
        match checked {
            Ok(_) => Ok(skill.to_kwargs(call.description.as_deref())),
            Err(Outcome::Failed(f)) if f.rule == Some("type") => Err(format!(
                "save_skill({name}): the skill does not type-check:\n{}",
                f.message
            )),
            Err(Outcome::Failed(f)) => Err(format!(
                "save_skill({name}): defining the skill failed ({}): {}",
                f.kind, f.message
            )),
            Err(_) => Err(format!("save_skill({name}): the check was stopped")),
        }
    }
}
