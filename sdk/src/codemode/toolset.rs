//! The tools one execution may call, the prompt and stubs that describe them,
//! and the record of each call.

use super::config::CodePolicy;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::tools::Tool;
use crate::sandbox::Sandbox;

/// A record of one tool call made by the code.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ToolCallRecord {
    /// The tool.
    pub name: String,
    /// Its arguments, by name (as given when they could not be bound).
    pub args: Value,
    /// How long the host took.
    pub duration: Duration,
    /// Whether it succeeded.
    pub ok: bool,
    /// The error message, when it failed.
    pub error: Option<String>,
}

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
    /// `search_tools` and `describe_tool`, past the threshold.
    discovery: Vec<Tool>,
}

impl Default for Toolset {
    fn default() -> Self {
        Toolset {
            tools: Vec::new(),
            full_listing: Toolset::DEFAULT_FULL_LISTING,
            discovery: Vec::new(),
        }
    }
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
const STUB_PREAMBLE: &str = "\
from typing import Any

FileHandle = dict[str, Any]
DirHandle = dict[str, Any]
Handle = dict[str, Any]

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

    fn refresh_discovery(&mut self) {
        self.discovery = if self.tools.len() > self.full_listing {
            super::discovery::discovery_tools(&self.tools)
        } else {
            Vec::new()
        };
    }

    /// Adds a one-shot sandbox as a tool (see [`Tool::sandbox`]).
    pub fn sandbox(self, sandbox: Sandbox) -> Self {
        self.tool(Tool::sandbox(sandbox))
    }

    /// A tool by name (the discovery tools too, when offered).
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.all().find(|t| t.name == name)
    }

    /// Tool names, the discovery tools' too when offered.
    pub fn names(&self) -> Vec<String> {
        self.all().map(|t| t.name.clone()).collect()
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
        if policy == CodePolicy::Strict {
            text.push('\n');
            text.push_str(STRICT_LANGUAGE_RULES);
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
        text
    }
}
