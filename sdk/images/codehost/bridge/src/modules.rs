//! The host's modules (`tools`, `tools.<server>`, `skills`) as Monty host
//! modules: an `import` Monty cannot answer itself comes here as an OS call
//! and gets a module object whose attributes are host functions (a call of
//! one is a tool call by the tool's name) and its submodules; before a
//! type-checked feed, Monty asks for the stubs of the modules it imports.
//!
//! The host sends the tree with each execution:
//! `"modules": {"tools": {"double": "double"}, "tools.time": {"now": "time_now"}}`
//! (module path -> attribute -> the tool's name) and, when it type-checks,
//! `"module_stubs": {"tools.time": "<.pyi source>"}`.

use std::collections::BTreeMap;

use monty_pool::ResumeValue;
use monty_types::{MontyObject, MontyUuid};
use serde_json::Value;

/// Module path -> attribute -> tool name, and module path -> stub source.
#[derive(Debug, Default, Clone)]
pub struct Modules {
    tree: BTreeMap<String, BTreeMap<String, String>>,
    stubs: BTreeMap<String, String>,
}

impl Modules {
    pub fn from_request(request: &Value) -> Self {
        let strings = |v: &Value| -> BTreeMap<String, String> {
            v.as_object()
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                        .collect()
                })
                .unwrap_or_default()
        };
        let tree = request["modules"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), strings(v))).collect())
            .unwrap_or_default();
        Modules {
            tree,
            stubs: strings(&request["module_stubs"]),
        }
    }

    /// The module object for `import <name>` (a top-level name), with every
    /// submodule below it, or `None` when the host offers no such module.
    pub fn import(&self, name: &str) -> Option<MontyObject> {
        self.tree
            .keys()
            .any(|path| top(path) == name)
            .then(|| self.module(name))
    }

    fn module(&self, path: &str) -> MontyObject {
        let functions = self
            .tree
            .get(path)
            .into_iter()
            .flatten()
            .map(|(attr, tool)| {
                (
                    MontyObject::string(attr.as_str()),
                    MontyObject::function(tool.as_str(), None),
                )
            });
        let prefix = format!("{path}.");
        // Direct children only; a child's own children hang below it.
        let children: Vec<&str> = self
            .tree
            .keys()
            .filter_map(|p| p.strip_prefix(&prefix))
            .filter_map(|rest| rest.split('.').next())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let submodules = children.into_iter().map(|child| {
            (
                MontyObject::string(child),
                self.module(&format!("{prefix}{child}")),
            )
        });
        let attrs: Vec<_> = functions.chain(submodules).collect();
        MontyObject::module(path, identity(path), attrs)
    }

    /// The answer to Monty's `import_stubs` request for these top-level
    /// names: every stub below them, or `NotHandled` for none.
    pub fn import_stubs(&self, names: &[String]) -> ResumeValue {
        let pairs: Vec<(MontyObject, MontyObject)> = self
            .stubs
            .iter()
            .filter(|(path, _)| names.iter().any(|n| n == top(path)))
            .map(|(path, source)| {
                (
                    MontyObject::string(path.as_str()),
                    MontyObject::string(source.as_str()),
                )
            })
            .collect();
        if pairs.is_empty() {
            ResumeValue::NotHandled
        } else {
            ResumeValue::Return(MontyObject::dict(pairs))
        }
    }

    /// Answers Monty's `import` and `import_stubs` OS calls; `None` for any
    /// other call.
    pub fn answer(&self, call: &str, args: &monty_types::CallArgs) -> Option<ResumeValue> {
        match call {
            monty_types::IMPORT_CALL => {
                let name = args
                    .args()
                    .next()
                    .and_then(|a| a.as_str().map(String::from));
                Some(
                    name.and_then(|n| self.import(&n))
                        .map_or(ResumeValue::NotFound, ResumeValue::Return),
                )
            }
            monty_types::IMPORT_STUBS_CALL => {
                let names: Vec<String> = args
                    .args()
                    .next()
                    .and_then(|a| a.items())
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|n| n.as_str().map(String::from))
                    .collect();
                Some(self.import_stubs(&names))
            }
            _ => None,
        }
    }
}

fn top(path: &str) -> &str {
    path.split('.').next().unwrap_or(path)
}

/// A stable identity per module path, so the same module imported twice in
/// one execution is the same module.
fn identity(path: &str) -> MontyUuid {
    use std::hash::{Hash, Hasher};
    let half = |i: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (i, "dockhand-module", path).hash(&mut h);
        u128::from(h.finish())
    };
    MontyUuid::from_u128(half(0) << 64 | half(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn modules() -> Modules {
        Modules::from_request(&json!({
            "modules": {
                "tools": {"double": "double"},
                "tools.time": {"now": "time_now"},
                "tools.git.hub": {"search": "gh_search"},
                "skills": {"summarize": "skills.summarize"},
            },
            "module_stubs": {"tools.time": "def now() -> str: ...", "skills": "def summarize() -> str: ..."},
        }))
    }

    #[test]
    fn a_top_level_import_brings_its_whole_tree() {
        let m = modules();
        let tools = m.import("tools").expect("offered").py_repr();
        assert!(tools.contains("tools"), "{tools}");
        assert!(m.import("tools").is_some());
        assert!(m.import("skills").is_some());
        assert!(m.import("os").is_none());
        assert!(
            m.import("time").is_none(),
            "only top-level names are modules"
        );
    }

    #[test]
    fn stubs_are_given_for_the_names_asked_only() {
        let m = modules();
        match m.import_stubs(&["tools".into()]) {
            ResumeValue::Return(v) => {
                let text = v.py_repr();
                assert!(text.contains("tools.time"), "{text}");
                assert!(!text.contains("summarize"), "{text}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            m.import_stubs(&["json".into()]),
            ResumeValue::NotHandled
        ));
    }
}
