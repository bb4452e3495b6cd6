//! `save_skill(fn)`: the source of a function the code defined, cut out of
//! the execution's code with what it needs, so the host can keep it as a
//! skill that later executions import (`from skills import fn`).
//!
//! A skill is the function's top-level `def` with its decorators, every
//! top-level function or class it refers to (and what those refer to), and
//! the code's top-level imports. Nothing here runs it: the bridge then feeds
//! that source to a fresh, type-checked Monty session, which only defines
//! it, before the host keeps it.

use std::collections::{BTreeSet, HashSet};

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{self as ast, Expr, Stmt};
use ruff_text_size::Ranged;
use serde_json::{json, Value};

/// The tool name the code saves a skill with, and the host keeps it by.
pub const SAVE_SKILL: &str = "save_skill";

/// Largest skill source kept, in bytes.
pub const MAX_SKILL_BYTES: usize = 64 * 1024;

/// A skill cut out of the code.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    pub name: String,
    /// The source to keep: imports, then dependencies, then the function.
    pub source: String,
    /// The function's signature and docstring as a `.pyi` stub.
    pub stub: String,
    pub is_async: bool,
    /// The docstring's first paragraph, or empty.
    pub summary: String,
}

impl Skill {
    /// The host call that keeps it.
    pub fn to_kwargs(&self, description: Option<&str>) -> serde_json::Map<String, Value> {
        let description = description
            .map(str::to_string)
            .unwrap_or_else(|| self.summary.clone());
        let value = json!({
            "name": self.name,
            "source": self.source,
            "stub": self.stub,
            "is_async": self.is_async,
            "description": description,
        });
        match value {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        }
    }
}

/// The name `save_skill`'s first argument stands for: a function (whose
/// value reaches the bridge as its repr, `<function 'f' at 0x...>`, which
/// the value's own repr may wrap) or its name as a string.
pub fn named(argument: &str) -> Option<String> {
    let function = argument
        .find("<function ")
        .map(|at| &argument[at + "<function ".len()..]);
    let name = match function {
        Some(rest) => rest
            .trim_start_matches(['\'', '"'])
            .split(['\'', '"', ' ', '>'])
            .next()
            .unwrap_or_default(),
        None => argument,
    };
    // A method or a nested function (`A.f`, `outer.<locals>.f`) is not a
    // top-level function.
    let ok = !name.is_empty()
        && name.chars().all(|c| c.is_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    ok.then(|| name.to_string())
}

/// Cuts skill `name` out of `code`.
pub fn extract(code: &str, name: &str) -> Result<Skill, String> {
    let parsed = ruff_python_parser::parse_module(code)
        .map_err(|e| format!("the code could not be read: {e}"))?;
    let body = &parsed.syntax().body;
    let defined = |wanted: &str| {
        body.iter().find(|s| match s {
            Stmt::FunctionDef(f) => f.name.as_str() == wanted,
            Stmt::ClassDef(c) => c.name.as_str() == wanted,
            _ => false,
        })
    };
    let Some(Stmt::FunctionDef(function)) = defined(name) else {
        return Err(format!(
            "`{name}` is not a function defined at the top level of this code; \
             define it with `def {name}(...)` and pass the function"
        ));
    };
    // What it refers to, and what that refers to.
    let mut needed: BTreeSet<usize> = BTreeSet::new();
    let mut queue = vec![name.to_string()];
    let mut seen = HashSet::new();
    while let Some(wanted) = queue.pop() {
        if !seen.insert(wanted.clone()) {
            continue;
        }
        let Some(stmt) = defined(&wanted) else {
            continue;
        };
        needed.insert(stmt.start().to_usize());
        let mut names = Names::default();
        names.visit_stmt(stmt);
        queue.extend(names.0);
    }
    let mut parts: Vec<&str> = body
        .iter()
        .filter(|s| matches!(s, Stmt::Import(_) | Stmt::ImportFrom(_)))
        .map(|s| &code[s.range()])
        .collect();
    for stmt in body {
        if needed.contains(&stmt.start().to_usize()) {
            parts.push(statement_text(code, stmt));
        }
    }
    let source = parts.join("\n\n") + "\n";
    if source.len() > MAX_SKILL_BYTES {
        return Err(format!(
            "the skill's source is {} bytes; the limit is {MAX_SKILL_BYTES}",
            source.len()
        ));
    }
    let doc = docstring(&function.body);
    let header_end = function
        .body
        .first()
        .map_or(function.end().to_usize(), |s| s.start().to_usize());
    // From the line of `def` (decorators stay out of the stub).
    let name_at = function.name.start().to_usize();
    let header_start = code[..name_at].rfind('\n').map_or(0, |i| i + 1);
    let header = code[header_start..header_end].trim();
    let stub = match &doc {
        Some(doc) => format!(
            "{header}\n    \"\"\"{}\"\"\"\n    ...\n",
            doc.replace("\"\"\"", "'''")
        ),
        None => format!("{header}\n    ...\n"),
    };
    let summary = doc
        .as_deref()
        .and_then(|d| d.trim().split("\n\n").next())
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    Ok(Skill {
        name: name.to_string(),
        source,
        stub,
        is_async: function.is_async,
        summary,
    })
}

/// A statement's text with its decorators.
fn statement_text<'c>(code: &'c str, stmt: &Stmt) -> &'c str {
    let decorators = match stmt {
        Stmt::FunctionDef(f) => &f.decorator_list,
        Stmt::ClassDef(c) => &c.decorator_list,
        _ => return &code[stmt.range()],
    };
    let start = decorators
        .iter()
        .map(|d| d.start().to_usize())
        .chain([stmt.start().to_usize()])
        .min()
        .unwrap_or_default();
    &code[start..stmt.end().to_usize()]
}

fn docstring(body: &[Stmt]) -> Option<String> {
    match body.first()? {
        Stmt::Expr(e) => match &*e.value {
            Expr::StringLiteral(s) => Some(s.value.to_str().trim().to_string()),
            _ => None,
        },
        _ => None,
    }
}

/// The names a statement reads.
#[derive(Default)]
struct Names(Vec<String>);

impl<'a> Visitor<'a> for Names {
    fn visit_expr(&mut self, expr: &'a Expr) {
        if let Expr::Name(n) = expr {
            if n.ctx == ast::ExprContext::Load {
                self.0.push(n.id.to_string());
            }
        }
        visitor::walk_expr(self, expr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CODE: &str = r#"import json
from tools.github import search_issues

RATE = 3

def helper(x):
    return x * 2

def unused():
    return 0

class Box:
    def __init__(self, v):
        self.v = v

async def summarize(repo: str, limit: int = 5) -> str:
    """Titles of a repo's issues.

    More words."""
    found = await search_issues(repo)
    return json.dumps([helper(i) for i in found[:limit]] + [Box(1).v])

summarize("x")
"#;

    #[test]
    fn a_skill_keeps_what_it_uses_and_nothing_else() {
        let s = extract(CODE, "summarize").unwrap();
        assert!(
            s.source
                .starts_with("import json\n\nfrom tools.github import search_issues\n\n"),
            "{}",
            s.source
        );
        assert!(s.source.contains("def helper(x):"));
        assert!(s.source.contains("class Box:"));
        assert!(!s.source.contains("unused"), "{}", s.source);
        assert!(
            !s.source.contains("summarize(\"x\")"),
            "calls at the top level are not kept"
        );
        assert!(s.is_async);
        assert_eq!(s.summary, "Titles of a repo's issues.");
        assert!(
            s.stub.starts_with(
                "async def summarize(repo: str, limit: int = 5) -> str:\n    \"\"\"Titles"
            ),
            "{}",
            s.stub
        );
        assert!(s.stub.ends_with("    ...\n"));
    }

    #[test]
    fn only_top_level_functions_are_skills() {
        assert!(extract(CODE, "Box").unwrap_err().contains("not a function"));
        assert!(extract(CODE, "nothing").unwrap_err().contains("top level"));
        assert!(extract("def (", "f")
            .unwrap_err()
            .contains("could not be read"));
    }

    #[test]
    fn the_argument_names_the_function() {
        assert_eq!(
            named("<function 'summarize' at 0x7f>").as_deref(),
            Some("summarize")
        );
        assert_eq!(
            named("<function summarize at 0x7f>").as_deref(),
            Some("summarize")
        );
        assert_eq!(named("summarize").as_deref(), Some("summarize"));
        assert_eq!(
            named("Repr(\"<function 'summarize' at 0x6c>\")").as_deref(),
            Some("summarize")
        );
        assert_eq!(named("<function 'A.f' at 0x1>"), None);
        assert_eq!(named("x; import os"), None);
        assert_eq!(named(""), None);
    }

    #[test]
    fn decorators_come_with_the_function() {
        let code = "def deco(f):\n    return f\n\n@deco\ndef g():\n    return 1\n";
        let s = extract(code, "g").unwrap();
        assert!(s.source.contains("@deco\ndef g():"), "{}", s.source);
        assert!(s.source.contains("def deco(f):"), "{}", s.source);
    }
}
