//! The tools one execution may call, the prompt and stubs that describe them,
//! and the record of each call.

use super::config::{CodePolicy, StrictRule, StrictRules};
use std::collections::BTreeMap;

use super::skills::{SkillStore, SAVE_SKILL};
use super::tools::Tool;
use crate::sandbox::Sandbox;

/// The tools an execution may call.
///
/// ```
/// use dockhand::codemode::{ParamType, Tool, Toolset};
/// let tools = Toolset::new().tool(Tool::new("now", "Current time.").returns("str"));
/// assert!(tools.prompt().contains("def now() -> str:"));
/// ```
///
/// With more tools than [`Toolset::full_listing_up_to`] (default
/// [`Toolset::DEFAULT_FULL_LISTING`]), the prompt lists each by name and a
/// one-line summary, and the code may call two more tools to learn the
/// rest: `search_tools(query, limit=5)` and `describe_tool(name)`.
#[derive(Debug, Clone)]
pub struct Toolset {
    tools: Vec<Tool>,
    full_listing: usize,
    listing: Listing,
    /// `search_tools` and `describe_tool` past the threshold, or
    /// `list_modules` and `read_module` for [`Listing::Modules`].
    discovery: Vec<Tool>,
    /// Module path -> what it is for (see [`Toolset::describe_module`]).
    module_descriptions: BTreeMap<String, String>,
    /// Where `save_skill` keeps skills and `skills` imports them from.
    skills: Option<SkillStore>,
}

impl Default for Toolset {
    fn default() -> Self {
        Toolset {
            tools: Vec::new(),
            full_listing: Toolset::DEFAULT_FULL_LISTING,
            listing: Listing::Auto,
            discovery: Vec::new(),
            module_descriptions: BTreeMap::new(),
            skills: None,
        }
    }
}

/// How [`Toolset::prompt`] shows the tools to a model.
///
/// Whatever the listing, the code may call every tool by its name and
/// import it from its module (see [`Tool::in_module`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Listing {
    /// Every signature up to [`Toolset::full_listing_up_to`] tools, names
    /// and summaries with `search_tools` past that.
    #[default]
    Auto,
    /// Every tool's signature and docstring.
    Full,
    /// Names and one-line summaries; `search_tools(query)` and
    /// `describe_tool(name)` give the rest.
    Search,
    /// The modules only, with what each is for; `list_modules()` and
    /// `read_module(path)` give a module's signatures as text, and the code
    /// imports what it needs. The smallest prompt for many tools.
    Modules,
}

/// The language rules of the sandbox, as told to a model (the default
/// [`CodePolicy`]).
pub const LANGUAGE_RULES: &str = "\
Write Python 3 that runs in Monty, a sandboxed Python interpreter:
- Most of the language works: functions, classes (no inheritance), closures,
  comprehensions, f-strings, try/except, async/await, dataclasses, type hints.
  Not available: generators (yield), class inheritance, the network and
  processes; files outside the directories you were given raise
  PermissionError.
- Already available without importing: json, math, re, datetime, asyncio, gather,
  Counter, defaultdict. Other modules you may import: base64, binascii, bisect,
  collections, copy, csv, dataclasses, decimal, functools, hashlib, itertools,
  random, sys, time, tomllib, typing, unicodedata.
- time.sleep() and asyncio.sleep() wait (gathered sleeps overlap); os.getenv()
  sees only the variables you were given.
- Call tools like functions: `x = tool(a)` or `x = await tool(a)`. To run calls
  concurrently, gather them: `a, b = await gather(tool(1), tool(2))`.
- A failing tool raises ToolError (catch it with `except ToolError as e`).
- Only print() output and the value of the last expression are returned; make the
  last line an expression with the answer (a dict is a good choice).";

/// What [`CodePolicy::Strict`] adds to [`LANGUAGE_RULES`], as told to a model.
pub const STRICT_LANGUAGE_RULES: &str = "\
- Import only the modules listed above. No dunder attributes that reach the
  interpreter's internals (like __class__ or __globals__; __name__ is fine), no
  eval, exec, compile, open, input or breakpoint; string literals up to 10,000
  characters; any loop stops after its iteration limit.";

/// Names the stubs refer to besides the tools (handles of sandbox outputs).
pub(crate) const STUB_PREAMBLE: &str = "\
from typing import Any

FileHandle = dict[str, Any]
DirHandle = dict[str, Any]
Handle = dict[str, Any]

";

/// What the code host's prelude defines without an import, for the type
/// checker (it checks the code, not the prelude). A stub re-exports an
/// import only as `x as x`.
const PRELUDE_STUBS: &str = "\
import asyncio as asyncio
import datetime as datetime
import json as json
import math as math
import re as re
from asyncio import gather as gather
from collections import Counter as Counter, defaultdict as defaultdict

ToolError = RuntimeError

";

impl Toolset {
    /// An empty set.
    pub fn new() -> Self {
        Toolset::default()
    }

    /// Up to how many tools the prompt shows in full.
    pub const DEFAULT_FULL_LISTING: usize = 20;

    /// Adds a tool (replacing one of the same name).
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.retain(|t| t.name != tool.name);
        self.tools.push(tool);
        self.refresh_discovery();
        self
    }

    /// Shows every tool's signature in the prompt up to `n` tools; past
    /// that, names and summaries, with `search_tools` and `describe_tool`.
    ///
    /// ```
    /// use dockhand::codemode::{Tool, Toolset};
    /// let mut tools = Toolset::new().full_listing_up_to(2);
    /// for name in ["a", "b", "c"] {
    ///     tools = tools.tool(Tool::new(name, "Does a thing. In detail."));
    /// }
    /// assert!(tools.prompt().contains("- a: Does a thing."));
    /// assert!(tools.names().contains(&"search_tools".to_string()));
    /// ```
    pub fn full_listing_up_to(mut self, n: usize) -> Self {
        self.full_listing = n;
        self.refresh_discovery();
        self
    }

    /// How the prompt shows the tools (default [`Listing::Auto`]).
    ///
    /// ```
    /// use dockhand::codemode::{Listing, Tool, Toolset};
    /// let tools = Toolset::new()
    ///     .tool(Tool::new("now", "The time.").in_module("time"))
    ///     .listing(Listing::Modules);
    /// assert!(tools.prompt().contains("- tools.time (1 tool): The time."));
    /// assert!(tools.names().contains(&"read_module".to_string()));
    /// ```
    pub fn listing(mut self, listing: Listing) -> Self {
        self.listing = listing;
        self.refresh_discovery();
        self
    }

    /// Says what the module at `path` (`tools.github`) is for, in
    /// [`Toolset::modules`] and the prompt.
    pub fn describe_module(
        mut self,
        path: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        self.module_descriptions
            .insert(path.into(), description.into());
        self.refresh_discovery();
        self
    }

    /// Lets the code save skills (`save_skill(fn)`) in `store` and import
    /// the skills kept there (`from skills import name`); the prompt lists
    /// them. See [`SkillStore`].
    ///
    /// ```
    /// # fn demo() -> dockhand::Result<()> {
    /// use dockhand::codemode::{SkillStore, Toolset};
    /// let store = SkillStore::at(std::env::temp_dir().join("dockhand-skills-doc2"))?;
    /// let tools = Toolset::new().skills(store);
    /// assert!(tools.prompt().contains("save_skill(fn"));
    /// # Ok(()) }
    /// ```
    pub fn skills(mut self, store: SkillStore) -> Self {
        self.skills = Some(store);
        self.refresh_discovery();
        self
    }

    /// The skill store, if the code may save and import skills.
    pub fn skill_store(&self) -> Option<&SkillStore> {
        self.skills.as_ref()
    }

    pub(crate) fn module_description(&self, path: &str) -> Option<&str> {
        self.module_descriptions.get(path).map(String::as_str)
    }

    fn searched(&self) -> bool {
        match self.listing {
            Listing::Auto => self.tools.len() > self.full_listing,
            Listing::Search => true,
            Listing::Full | Listing::Modules => false,
        }
    }

    fn refresh_discovery(&mut self) {
        self.discovery = if self.listing == Listing::Modules {
            self.module_tools()
        } else if self.searched() {
            super::discovery::discovery_tools(&self.tools)
        } else {
            Vec::new()
        };
        // A discovery tool never hides one of the application's.
        self.discovery
            .retain(|d| !self.tools.iter().any(|t| t.name == d.name));
    }

    /// Adds a one-shot sandbox as a tool (see [`Tool::sandbox`]).
    pub fn sandbox(self, sandbox: Sandbox) -> Self {
        self.tool(Tool::sandbox(sandbox))
    }

    /// A tool by name (the discovery tools too, when offered).
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.all().find(|t| t.name == name)
    }

    /// Tool names, the discovery tools' too when offered (and
    /// `save_skill` with a [`SkillStore`]).
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.all().map(|t| t.name.clone()).collect();
        if self.skills.is_some() {
            names.push(SAVE_SKILL.to_string());
        }
        names
    }

    fn all(&self) -> impl Iterator<Item = &Tool> {
        self.tools.iter().chain(&self.discovery)
    }

    /// Names of the tools whose calls need approval.
    pub fn approval_names(&self) -> Vec<String> {
        self.tools
            .iter()
            .filter(|t| t.approval)
            .map(|t| t.name.clone())
            .collect()
    }

    /// The tools.
    pub fn iter(&self) -> impl Iterator<Item = &Tool> {
        self.tools.iter()
    }

    /// The tools as Python stubs (`async def` with hints and docstrings), for
    /// Monty's type checker.
    ///
    /// ```
    /// use dockhand::codemode::{ParamType, Tool, Toolset};
    /// let tools = Toolset::new().tool(Tool::new("add", "Adds.").param("a", ParamType::Int, ""));
    /// assert!(tools.stubs().contains("async def add(a: int) -> Any:"));
    /// ```
    pub fn stubs(&self) -> String {
        let mut text = String::from(STUB_PREAMBLE);
        text.push_str(PRELUDE_STUBS);
        for t in self.all() {
            text.push_str("async ");
            text.push_str(&t.python_signature());
            text.push_str("\n    ...\n\n");
        }
        text
    }

    /// Tool signatures in Python syntax with hints and docstrings, plus the
    /// sandbox's language rules: ready to paste into a system prompt.
    pub fn prompt(&self) -> String {
        self.prompt_for(CodePolicy::Default)
    }

    /// [`Toolset::prompt`] for code hosts with `policy`.
    ///
    /// ```
    /// use dockhand::codemode::{CodePolicy, Toolset};
    /// let strict = Toolset::new().prompt_for(CodePolicy::Strict);
    /// assert!(strict.contains("no\n  eval"));
    /// ```
    pub fn prompt_for(&self, policy: CodePolicy) -> String {
        let mut text = String::from(LANGUAGE_RULES);
        let rules = policy.rules();
        if rules == StrictRules::ALL {
            text.push('\n');
            text.push_str(STRICT_LANGUAGE_RULES);
        } else {
            for rule in StrictRule::ALL.into_iter().filter(|r| rules.contains(*r)) {
                text.push_str(match rule {
                    StrictRule::Imports => "\n- Import only the modules listed above.",
                    StrictRule::Dunders => {
                        "\n- No dunder attributes that reach the interpreter's \
                         internals (like __class__ or __globals__; __name__ is fine)."
                    }
                    StrictRule::Builtins => {
                        "\n- No eval, exec, compile, open, input or breakpoint."
                    }
                    StrictRule::LiteralSize => "\n- String literals up to 10,000 characters.",
                    StrictRule::LoopGuard => "\n- Any loop stops after its iteration limit.",
                });
            }
        }
        if self.listing == Listing::Modules {
            text.push_str(&self.modules_prompt());
            text.push_str(&self.skills_prompt(false));
            return text;
        }
        if !self.discovery.is_empty() {
            text.push_str(&format!(
                "\n\nAvailable tools ({}; call them by these names; describe_tool(name) \
                 gives one's parameters, search_tools(query) finds them by what they do):\n\n",
                self.tools.len()
            ));
            for t in &self.tools {
                text.push_str(&format!(
                    "- {}: {}\n",
                    t.name,
                    super::discovery::summary(&t.description)
                ));
            }
            text.push_str("\n```python\n");
        } else {
            text.push_str("\n\nAvailable tools:\n\n```python\n");
        }
        // Past the threshold, only the discovery tools are shown in full.
        let in_full = if self.discovery.is_empty() {
            &self.tools
        } else {
            &self.discovery
        };
        for t in in_full {
            text.push_str(&t.python_signature());
            text.push_str("\n\n");
        }
        text.push_str("```\n");
        text.push_str(&self.skills_prompt(true));
        text
    }

    /// How to save skills, and (unless the module list shows them) the
    /// skills kept.
    fn skills_prompt(&self, list_them: bool) -> String {
        let Some(store) = &self.skills else {
            return String::new();
        };
        let mut text = String::from(
            "\nSkills: `save_skill(fn, description=None)` keeps a function this code \
             defined at the top level (with the helpers it uses) for later code, which \
             imports it: `from skills import fn`. It is type-checked first; a skill that \
             does not check is refused with the checker's message.\n",
        );
        let kept = store.list().unwrap_or_default();
        if list_them && !kept.is_empty() {
            text.push_str("\nSaved skills (`from skills import ...`):\n\n```python\n");
            for skill in kept {
                text.push_str(&skill.stub);
                text.push('\n');
            }
            text.push_str("```\n");
        }
        text
    }

    /// The module tree part of a [`Listing::Modules`] prompt.
    fn modules_prompt(&self) -> String {
        let mut text = String::from(
            "\n- Tools are functions in Python modules under `tools`; import what you \
             need (`from tools.time import get_current_time`). read_module(path) returns \
             a module's functions (signatures and docstrings) as text; read it before \
             calling them. list_modules() lists the modules.\n\nModules:\n",
        );
        for m in self.modules() {
            let count = m.tools.len();
            text.push_str(&format!(
                "- {} ({count} tool{}): {}\n",
                m.path,
                if count == 1 { "" } else { "s" },
                m.summary
            ));
        }
        text.push_str("\n```python\n");
        for t in &self.discovery {
            text.push_str(&t.python_signature());
            text.push_str("\n\n");
        }
        text.push_str("```\n");
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codemode::tools::tests::filter_tool;

    #[test]
    fn prompt_renders_python_signatures_and_rules() {
        let p = Toolset::new().tool(filter_tool()).prompt();
        assert!(p.contains("def filter_data(data: list, column: str, operator: str, value: Any | None = None) -> list[dict]:"), "{p}");
        assert!(
            p.contains(
                "    \"\"\"Keeps rows matching a condition.\n\n    Args:\n        data: rows\n"
            ),
            "{p}"
        );
        assert!(
            !p.lines().any(|l| l.ends_with(' ')),
            "no trailing spaces: {p}"
        );
        assert!(p.contains("Already available without importing"));
        assert!(p.contains("gather("));
    }
}
