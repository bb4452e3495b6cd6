//! Tools as a tree of importable modules: `tools` holds the tools with no
//! module, `tools.<path>` the tools put there ([`Tool::in_module`]; each MCP
//! server's tools are in `tools.<server>`). The code imports what it needs
//! (`from tools.time import get_current_time`, `import tools.time as t`),
//! and a model discovers them as a file tree: the prompt names the modules
//! and `read_module(path)` gives one module's stubs as text. The bridge
//! answers the imports through Monty's host modules; the type checker sees
//! the same stubs.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Value};

use super::discovery::summary;
use super::skills::{Skill, SKILLS_MODULE};
use super::tools::{ParamType, Tool};
use super::toolset::Toolset;
use crate::util::is_identifier;

/// The root module every tool is under.
pub const TOOLS_MODULE: &str = "tools";
/// Names of the module discovery tools.
pub const LIST_MODULES: &str = "list_modules";
/// See [`LIST_MODULES`].
pub const READ_MODULE: &str = "read_module";

/// One module of tools, as [`Toolset::modules`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ToolModule {
    /// Its dotted path (`tools`, `tools.github`).
    pub path: String,
    /// What it is for: the description given with
    /// [`Toolset::describe_module`], or the first tools' summaries.
    pub summary: String,
    /// The names of its tools, as the code imports them.
    pub tools: Vec<String>,
}

/// `tools` and `tools.<path>` for a tool's module.
pub(crate) fn full_path(module: Option<&str>) -> String {
    match module {
        Some(path) => format!("{TOOLS_MODULE}.{path}"),
        None => TOOLS_MODULE.to_string(),
    }
}

impl Toolset {
    /// Every module with tools, `tools` first, then by path.
    ///
    /// ```
    /// use dockhand::codemode::{Tool, Toolset};
    /// let tools = Toolset::new()
    ///     .tool(Tool::new("double", "Doubles x."))
    ///     .tool(Tool::new("now", "The time.").in_module("time"));
    /// let paths: Vec<String> = tools.modules().into_iter().map(|m| m.path).collect();
    /// assert_eq!(paths, ["tools", "tools.time"]);
    /// ```
    pub fn modules(&self) -> Vec<ToolModule> {
        let mut modules: Vec<ToolModule> = self
            .by_module()
            .into_iter()
            .map(|(path, tools)| {
                let summary = self.module_description(&path).map_or_else(
                    || {
                        tools
                            .iter()
                            .take(3)
                            .map(|(_, t)| summary(&t.description))
                            .filter(|s| !s.is_empty())
                            .collect::<Vec<_>>()
                            .join(" ")
                    },
                    summary,
                );
                ToolModule {
                    path,
                    summary,
                    tools: tools.into_iter().map(|(attr, _)| attr).collect(),
                }
            })
            .collect();
        let skills = self.kept_skills();
        if !skills.is_empty() {
            modules.push(ToolModule {
                path: SKILLS_MODULE.to_string(),
                summary: "Functions earlier code saved with save_skill.".to_string(),
                tools: skills.into_iter().map(|s| s.name).collect(),
            });
        }
        modules
    }

    /// The skills the store keeps now (none without a store).
    pub(crate) fn kept_skills(&self) -> Vec<Skill> {
        self.skill_store()
            .and_then(|store| store.list().ok())
            .unwrap_or_default()
    }

    /// The `skills` module's stubs, each with its description.
    fn skills_source(&self) -> Option<String> {
        let skills = self.kept_skills();
        if skills.is_empty() {
            return None;
        }
        let mut text = String::from("# skills: functions earlier code saved with save_skill\n\n");
        for s in skills {
            text.push_str(&format!(
                "# v{}: {}\n{}\n",
                s.version, s.description, s.stub
            ));
        }
        Some(text)
    }

    /// A module's stubs as the model reads them: its description, then each
    /// tool's signature and docstring. `None` for a path with no tools.
    ///
    /// ```
    /// use dockhand::codemode::{ParamType, Tool, Toolset};
    /// let tools = Toolset::new().tool(
    ///     Tool::new("now", "The time in a zone.").param("zone", ParamType::Str, "").in_module("time"),
    /// );
    /// let text = tools.module_source("tools.time").unwrap();
    /// assert!(text.contains("def now(zone: str) -> Any:"));
    /// assert!(tools.module_source("tools.nothing").is_none());
    /// ```
    pub fn module_source(&self, path: &str) -> Option<String> {
        if path == SKILLS_MODULE {
            return self.skills_source();
        }
        let modules = self.by_module();
        let tools = modules.get(path)?;
        let mut text = format!("# {path}");
        if let Some(d) = self.module_description(path) {
            text.push_str(": ");
            text.push_str(d);
        }
        text.push_str("\n\n");
        let below: Vec<&String> = modules
            .keys()
            .filter(|p| {
                p.strip_prefix(path)
                    .is_some_and(|rest| rest.starts_with('.'))
            })
            .collect();
        if !below.is_empty() {
            text.push_str(&format!(
                "# submodules: {}\n\n",
                below
                    .iter()
                    .map(|p| p.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        for (attr, t) in tools {
            text.push_str(&t.python_signature_as(attr));
            text.push_str("\n\n");
        }
        Some(text)
    }

    /// Module path -> (name in the module, tool), `tools` first.
    fn by_module(&self) -> BTreeMap<String, Vec<(String, &Tool)>> {
        let mut modules: BTreeMap<String, Vec<(String, &Tool)>> = BTreeMap::new();
        for t in self.iter() {
            let (path, attr) = match &t.module {
                Some((path, attr)) => (full_path(Some(path)), attr.clone()),
                None => (full_path(None), t.name.clone()),
            };
            modules.entry(path).or_default().push((attr, t));
        }
        modules
    }

    /// Refuses module paths and names the code could not import.
    pub(crate) fn check_modules(&self) -> Result<(), String> {
        for t in self.iter() {
            if let Some((path, attr)) = &t.module {
                if !path.split('.').all(is_identifier) || !is_identifier(attr) {
                    return Err(format!(
                        "tool `{}` is in module `tools.{path}` as `{attr}`: each part of a \
                         module path, and the name, must be a Python identifier",
                        t.name
                    ));
                }
            }
        }
        Ok(())
    }

    /// The tree the bridge answers imports from: module path -> name in
    /// the module -> the tool's name.
    pub(crate) fn module_tree(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.by_module()
            .into_iter()
            .map(|(path, tools)| {
                let names = tools
                    .into_iter()
                    .map(|(attr, t)| (attr, t.name.clone()))
                    .collect();
                (path, names)
            })
            .collect()
    }

    /// Each module's stubs for the type checker (`async def`, as
    /// [`Toolset::stubs`] gives them).
    pub(crate) fn module_stubs(&self) -> BTreeMap<String, String> {
        self.by_module()
            .into_iter()
            .map(|(path, tools)| {
                let mut text = String::from(super::toolset::STUB_PREAMBLE);
                for (attr, t) in tools {
                    text.push_str("async ");
                    text.push_str(&t.python_signature_as(&attr));
                    text.push_str("\n    ...\n\n");
                }
                (path, text)
            })
            .collect()
    }
}

impl Toolset {
    /// `list_modules()` and `read_module(path)` over this toolset's modules
    /// (read when called, so skills saved since show).
    pub(crate) fn module_tools(&self) -> Vec<Tool> {
        let listed = Arc::new(self.clone());
        let read = listed.clone();
        vec![
            Tool::new(
                LIST_MODULES,
                "The tool modules: a list of dicts with `path`, `summary` and `tools` (the \
             names to import from it).",
            )
            .returns("list[dict[str, Any]]")
            .handler(move |_| {
                let listing = json!(listed.modules());
                async move { Ok(listing) }
            }),
            Tool::new(
                READ_MODULE,
                "A tool module's functions (signatures and docstrings) as Python text.",
            )
            .param("path", ParamType::Str, "the module, like `tools.github`")
            .returns("str")
            .handler(move |args| {
                let path = args["path"].as_str().unwrap_or_default().to_string();
                let found = read.module_source(&path).ok_or_else(|| {
                    let paths: Vec<String> = read.modules().into_iter().map(|m| m.path).collect();
                    format!(
                        "there is no module `{path}`; the modules are {}",
                        paths.join(", ")
                    )
                });
                async move { found.map(Value::String) }
            }),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> Toolset {
        Toolset::new()
            .tool(Tool::new("double", "Doubles x.").param("x", ParamType::Int, ""))
            .tool(Tool::new("gh_search", "Finds issues. Slowly.").in_module_as("github", "search"))
            .tool(Tool::new("now", "The time.").in_module("time"))
            .tool(Tool::new("deep", "Deep.").in_module("github.admin"))
            .describe_module("tools.github", "GitHub's issues and pulls.")
    }

    #[test]
    fn modules_are_listed_and_read_as_the_code_imports_them() {
        let tools = set();
        let listed = tools.modules();
        let paths: Vec<&str> = listed.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(
            paths,
            ["tools", "tools.github", "tools.github.admin", "tools.time"]
        );
        assert_eq!(listed[1].tools, ["search"]);
        assert_eq!(listed[1].summary, "GitHub's issues and pulls.");
        assert_eq!(listed[3].summary, "The time.");
        let github = tools.module_source("tools.github").unwrap();
        assert!(
            github.starts_with("# tools.github: GitHub's issues and pulls.\n"),
            "{github}"
        );
        assert!(
            github.contains("# submodules: tools.github.admin"),
            "{github}"
        );
        assert!(github.contains("def search() -> Any:"), "{github}");
        assert!(!github.contains("gh_search"), "{github}");
        let tree = tools.module_tree();
        assert_eq!(tree["tools.github"]["search"], "gh_search");
        assert_eq!(tree["tools"]["double"], "double");
        assert!(tools.module_stubs()["tools.time"].contains("async def now() -> Any:"));
        assert!(tools.check_modules().is_ok());
    }

    #[test]
    fn paths_the_code_cannot_import_are_refused() {
        let bad = Toolset::new().tool(Tool::new("t", "").in_module("my-server"));
        let why = bad.check_modules().unwrap_err();
        assert!(why.contains("tools.my-server"), "{why}");
        let bad = Toolset::new().tool(Tool::new("t", "").in_module("a..b"));
        assert!(bad.check_modules().is_err());
    }

    #[tokio::test]
    async fn the_discovery_tools_read_the_tree() {
        let tools = set();
        let [list, read] = <[Tool; 2]>::try_from(tools.module_tools()).unwrap();
        let call = |t: &Tool, args: Value| {
            let bound = t.bind(&[], args.as_object().unwrap()).unwrap();
            match &t.kind {
                super::super::tools::ToolKind::Handler(h) => h(bound),
                _ => unreachable!(),
            }
        };
        let listed = call(&list, json!({})).await.unwrap();
        assert_eq!(listed[2]["path"], "tools.github.admin");
        let text = call(&read, json!({"path": "tools.time"})).await.unwrap();
        assert!(text.as_str().unwrap().contains("def now()"));
        let missing = call(&read, json!({"path": "tools.nope"}))
            .await
            .unwrap_err();
        assert!(missing.contains("tools.github"), "{missing}");
    }
}
