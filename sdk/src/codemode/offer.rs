//! What one execution is offered beyond its tools' names: the module tree
//! (`tools`, `tools.<path>`, `skills`), the stubs the type checker reads
//! for them, and the tools' stubs a skill is checked against when the code
//! saves one.

use std::collections::BTreeMap;

use super::protocol::ModuleOffer;
use super::skills::{Skill, SAVE_SKILL, SKILLS_MODULE};
use super::toolset::Toolset;
use crate::error::{Error, Result};

/// The name the bridge calls skill `name` by.
pub(crate) fn skill_call_name(name: &str) -> String {
    format!("{SKILLS_MODULE}.{name}")
}

/// The skill a call name of the bridge's stands for (`skills.<name>`).
pub(crate) fn skill_named(call: &str) -> Option<&str> {
    call.strip_prefix(SKILLS_MODULE)?.strip_prefix('.')
}

/// The names to add to the toolset's (the kept skills') and the modules,
/// for code `code`; stubs when the code is type-checked.
pub(crate) fn module_offer(
    tools: &Toolset,
    code: &str,
    type_check: bool,
) -> Result<(Vec<String>, ModuleOffer)> {
    tools
        .check_modules()
        .map_err(|why| Error::spec("toolset", why))?;
    // The text check only spares other executions the stubs; a save the
    // text hides still reaches the bridge, which then checks against none
    // and refuses calls of tools it cannot see.
    let saving = tools.skill_store().is_some() && code.contains(SAVE_SKILL);
    let mut offer = ModuleOffer {
        modules: tools.module_tree(),
        module_stubs: if type_check || saving {
            tools.module_stubs()
        } else {
            BTreeMap::new()
        },
        skill_stubs: saving.then(|| tools.stubs()),
    };
    let skills: Vec<Skill> = tools.kept_skills();
    let names: Vec<String> = skills.iter().map(|s| skill_call_name(&s.name)).collect();
    if !skills.is_empty() {
        offer.modules.insert(
            SKILLS_MODULE.to_string(),
            skills
                .iter()
                .map(|s| (s.name.clone(), skill_call_name(&s.name)))
                .collect(),
        );
        if type_check || saving {
            let mut stubs = String::from(super::toolset::STUB_PREAMBLE);
            for s in &skills {
                stubs.push_str(&s.stub);
                stubs.push('\n');
            }
            offer.module_stubs.insert(SKILLS_MODULE.to_string(), stubs);
        }
    }
    Ok((names, offer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codemode::{SkillStore, Tool};

    #[test]
    fn skills_and_stubs_are_offered_when_they_can_be_used() {
        let dir = tempfile::tempdir().unwrap();
        let store = SkillStore::at(dir.path()).unwrap();
        let saved = serde_json::json!({"name": "inc", "source": "def inc(x): return x + 1",
                                       "stub": "def inc(x: int) -> int:\n    ...\n"});
        store.save(saved.as_object().unwrap()).unwrap();
        let tools = Toolset::new()
            .tool(Tool::new("now", "The time.").in_module("time"))
            .skills(store);
        let (names, offer) = module_offer(&tools, "x = 1", false).unwrap();
        assert_eq!(names, ["skills.inc"]);
        assert_eq!(offer.modules["skills"]["inc"], "skills.inc");
        assert_eq!(offer.modules["tools.time"]["now"], "now");
        assert!(offer.module_stubs.is_empty() && offer.skill_stubs.is_none());
        let (_, saving) = module_offer(&tools, "save_skill(f)", false).unwrap();
        assert!(saving
            .skill_stubs
            .unwrap()
            .contains("async def now() -> Any:"));
        assert!(saving.module_stubs["skills"].contains("def inc(x: int) -> int:"));
        let bad = Toolset::new().tool(Tool::new("t", "").in_module("a-b"));
        assert!(module_offer(&bad, "", false).is_err());
    }
}
