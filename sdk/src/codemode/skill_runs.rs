//! Calls of skills within one execution: each runs as an execution of its
//! own in the same bridge (the same limits and policy), with the calling
//! execution's tools except those that need approval, and its value or
//! failure is the call's reply. Skills may call skills, a few deep; a few
//! run at once and the rest wait their turn, so a gather of many cannot
//! take every interpreter the bridge has.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use serde_json::{json, Map, Value};

use super::offer::module_offer;
use super::protocol::{ExecResult, ModuleOffer, ToRunner};
use super::skills::SAVE_SKILL;
use super::toolset::Toolset;
use crate::error::ToolCallRecord;

/// How deep skills may call skills.
pub(crate) const MAX_SKILL_DEPTH: u32 = 4;
/// Skill executions running at once in one execution.
const MAX_RUNNING: usize = 4;

/// A reply for a call: its number, its record, its outcome.
pub(crate) type Reply = (u64, ToolCallRecord, std::result::Result<Value, String>);

/// What becomes of a call of a skill.
pub(crate) enum Step {
    /// Send this to start it.
    Start(Box<ToRunner>),
    /// It waits for a place.
    Queued,
    /// Refused: the reply for the call.
    Refused(Box<Reply>),
}

struct Call {
    number: u64,
    name: String,
    args: Vec<Value>,
    kwargs: Map<String, Value>,
    depth: u32,
    started: Instant,
}

/// The skill executions of one execution.
pub(crate) struct SkillRuns {
    main: String,
    /// Execution id -> how deep in skills it is (the main one is 0).
    depth: HashMap<String, u32>,
    running: HashMap<String, Call>,
    waiting: VecDeque<Call>,
    started: u64,
    /// See `child_offer`.
    offer: Option<(Vec<String>, ModuleOffer)>,
}

impl SkillRuns {
    pub(crate) fn new(main: &str) -> Self {
        SkillRuns {
            main: main.to_string(),
            depth: HashMap::from([(main.to_string(), 0)]),
            running: HashMap::new(),
            waiting: VecDeque::new(),
            started: 0,
            offer: None,
        }
    }

    /// The code's call `number` of skill `name`, made by `execution`.
    pub(crate) fn call(
        &mut self,
        tools: &Toolset,
        execution: Option<&str>,
        number: u64,
        name: &str,
        args: Vec<Value>,
        kwargs: Map<String, Value>,
    ) -> Step {
        let depth = execution
            .and_then(|e| self.depth.get(e))
            .copied()
            .unwrap_or(0)
            + 1;
        let call = Call {
            number,
            name: name.to_string(),
            args,
            kwargs,
            depth,
            started: Instant::now(),
        };
        if depth > MAX_SKILL_DEPTH {
            return refusal(
                call,
                format!("skills may call skills {MAX_SKILL_DEPTH} deep at most"),
            );
        }
        if self.running.len() >= MAX_RUNNING {
            self.waiting.push_back(call);
            return Step::Queued;
        }
        self.start(tools, call)
    }

    fn start(&mut self, tools: &Toolset, call: Call) -> Step {
        let skill = match tools.skill_store().map(|s| s.get(&call.name)) {
            Some(Ok(Some(skill))) => skill,
            Some(Ok(None)) | None => {
                let why = format!("there is no skill `{}`", call.name);
                return refusal(call, why);
            }
            Some(Err(e)) => {
                let why = format!("skill `{}` could not be read: {e}", call.name);
                return refusal(call, why);
            }
        };
        let (names, modules) = match self.child_offer(tools) {
            Ok(offer) => offer.clone(),
            Err(e) => return refusal(call, e),
        };
        self.started += 1;
        let id = format!("{}.skill{}", self.main, self.started);
        let code = format!(
            "{}\n{}{}(*dockhand_args, **dockhand_kwargs)\n",
            skill.source,
            if skill.is_async { "await " } else { "" },
            skill.name
        );
        let mut inputs = Map::new();
        inputs.insert("dockhand_args".into(), Value::Array(call.args.clone()));
        inputs.insert("dockhand_kwargs".into(), Value::Object(call.kwargs.clone()));
        self.depth.insert(id.clone(), call.depth);
        self.running.insert(id.clone(), call);
        Step::Start(Box::new(ToRunner::Execute {
            id,
            code,
            inputs,
            tools: names,
            session: None,
            type_stubs: None,
            approval: Vec::new(),
            modules,
        }))
    }

    /// The tools and modules every skill execution of this execution is
    /// offered, read (the store's skills included) once.
    fn child_offer(
        &mut self,
        tools: &Toolset,
    ) -> std::result::Result<&(Vec<String>, ModuleOffer), String> {
        if self.offer.is_none() {
            let (skill_names, modules) =
                module_offer(tools, "", false).map_err(|e| e.to_string())?;
            let approval = tools.approval_names();
            let mut names: Vec<String> = tools
                .names()
                .into_iter()
                .filter(|n| n != SAVE_SKILL && !approval.contains(n))
                .collect();
            names.extend(skill_names);
            self.offer = Some((names, modules));
        }
        Ok(self.offer.get_or_insert_with(Default::default))
    }

    /// A result of one of the skill executions: the reply for its call,
    /// and the requests that start calls that waited for its place (or
    /// their refusals). `None` for a result that is not a skill's of this
    /// execution.
    pub(crate) fn finished(
        &mut self,
        tools: &Toolset,
        result: &ExecResult,
    ) -> Option<(Vec<Reply>, Vec<ToRunner>)> {
        let call = self.running.remove(&result.id)?;
        self.depth.remove(&result.id);
        let outcome = if result.ok {
            Ok(result.value.clone())
        } else {
            let error = result.error.clone().unwrap_or_default();
            let at = if error.line > 0 {
                format!(" at line {} of the skill", error.line)
            } else {
                String::new()
            };
            Err(format!(
                "skill `{}` failed ({}{at}): {}",
                call.name, error.kind, error.message
            ))
        };
        let mut replies = vec![reply(call, outcome)];
        let mut starts = Vec::new();
        while self.running.len() < MAX_RUNNING {
            let Some(next) = self.waiting.pop_front() else {
                break;
            };
            match self.start(tools, next) {
                Step::Start(start) => starts.push(*start),
                Step::Refused(refused) => replies.push(*refused),
                Step::Queued => {}
            }
        }
        Some((replies, starts))
    }

    /// Cancels for the skill executions still running (the execution that
    /// called them is over).
    pub(crate) fn cancels(&self) -> Vec<ToRunner> {
        self.running
            .keys()
            .map(|id| ToRunner::Cancel { id: id.clone() })
            .collect()
    }
}

fn refusal(call: Call, why: String) -> Step {
    Step::Refused(Box::new(reply(call, Err(why))))
}

fn reply(call: Call, outcome: std::result::Result<Value, String>) -> Reply {
    let record = ToolCallRecord {
        name: super::offer::skill_call_name(&call.name),
        args: json!({"args": call.args, "kwargs": call.kwargs}),
        duration: call.started.elapsed(),
        ok: outcome.is_ok(),
        error: outcome.as_ref().err().cloned(),
    };
    (call.number, record, outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codemode::SkillStore;

    fn store_with(names: &[&str]) -> (tempfile::TempDir, Toolset) {
        let dir = tempfile::tempdir().unwrap();
        let store = SkillStore::at(dir.path()).unwrap();
        for name in names {
            let saved = json!({"name": name, "source": format!("async def {name}(x):\n    return x"),
                               "is_async": true});
            store.save(saved.as_object().unwrap()).unwrap();
        }
        (dir, Toolset::new().skills(store))
    }

    fn result(id: &str, ok: bool) -> ExecResult {
        serde_json::from_value(json!({"id": id, "ok": ok, "value": 7,
            "error": {"kind": "timeout", "message": "ran too long", "line": 2}}))
        .unwrap()
    }

    fn started(step: Step) -> (String, String, Map<String, Value>, Vec<String>) {
        let Step::Start(start) = step else {
            panic!("not started");
        };
        let ToRunner::Execute {
            id,
            code,
            inputs,
            tools,
            ..
        } = *start
        else {
            panic!("not an execution");
        };
        (id, code, inputs, tools)
    }

    fn refused(step: Step) -> String {
        match step {
            Step::Refused(reply) => reply.2.clone().unwrap_err(),
            _ => panic!("not refused"),
        }
    }

    #[test]
    fn a_skill_runs_as_an_execution_of_its_own() {
        let (_dir, tools) = store_with(&["echo"]);
        let mut runs = SkillRuns::new("e1");
        let step = runs.call(&tools, Some("e1"), 5, "echo", vec![json!(1)], Map::new());
        let (id, code, inputs, names) = started(step);
        assert_eq!(id, "e1.skill1");
        assert!(
            code.ends_with("await echo(*dockhand_args, **dockhand_kwargs)\n"),
            "{code}"
        );
        assert_eq!(inputs["dockhand_args"], json!([1]));
        assert!(names.contains(&"skills.echo".to_string()));
        assert!(!names.contains(&SAVE_SKILL.to_string()));
        let (replies, _) = runs.finished(&tools, &result(&id, true)).unwrap();
        assert_eq!((replies[0].0, replies[0].2.clone()), (5, Ok(json!(7))));
        assert!(runs.finished(&tools, &result(&id, true)).is_none(), "once");
    }

    #[test]
    fn depth_turns_and_failures_are_bounded_and_told() {
        let (_dir, tools) = store_with(&["echo"]);
        let mut runs = SkillRuns::new("e1");
        let missing = refused(runs.call(&tools, None, 1, "nope", vec![], Map::new()));
        assert_eq!(missing, "there is no skill `nope`");
        // Each skill calls the next, as deep as allowed.
        let mut caller = "e1".to_string();
        for depth in 1..=MAX_SKILL_DEPTH {
            let step = runs.call(
                &tools,
                Some(&caller),
                u64::from(depth),
                "echo",
                vec![],
                Map::new(),
            );
            caller = started(step).0;
        }
        let deep = refused(runs.call(&tools, Some(&caller), 99, "echo", vec![], Map::new()));
        assert!(deep.contains("deep"), "{deep}");
        // A fifth at once waits for a place, and starts when one ends.
        let queued = runs.call(&tools, Some("e1"), 50, "echo", vec![], Map::new());
        assert!(matches!(queued, Step::Queued));
        assert_eq!(runs.cancels().len(), MAX_RUNNING);
        let (replies, starts) = runs.finished(&tools, &result(&caller, false)).unwrap();
        assert_eq!(starts.len(), 1);
        let error = replies[0].2.clone().unwrap_err();
        assert_eq!(
            error,
            "skill `echo` failed (timeout at line 2 of the skill): ran too long"
        );
    }
}
