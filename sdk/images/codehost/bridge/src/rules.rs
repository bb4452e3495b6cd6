//! dockhand code-mode rules: checks and rewrites applied before Monty runs code.
//!
//! None of this is a security boundary: Monty is the boundary inside the code
//! host's container (no filesystem, network, environment or process access,
//! and uncatchable time, memory and recursion limits) and the container is
//! the one outside it. These rules are product features that keep
//! model-written code honest and its errors clear:
//!
//! - imports are limited to the modules dockhand offers;
//! - no dunder names or attributes (a class may still *define* `__init__` &
//!   co., and `super().__init__()` is fine);
//! - no `eval`, `exec`, `compile`, `open`, `input` or `breakpoint`;
//! - no names starting with `_dh` (dockhand's own helpers);
//! - string and bytes literals up to a set size;
//! - every loop is guarded: a `for` loop or comprehension stops after a set
//!   number of iterations per entry, a `while` loop after that many in one
//!   execution.
//!
//! The code is parsed with Ruff's parser, the one Monty itself uses. Code it
//! cannot parse is handed to Monty unchanged, so Monty's own syntax error
//! decides.

use std::collections::HashSet;

use crate::guards;

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{
    self as ast, Expr, ExprContext, InterpolatedStringElement, Parameters, Stmt,
};
use ruff_text_size::TextRange;

/// The modules `import` may name.
pub const ALLOWED_IMPORTS: &[&str] = &[
    "asyncio",
    "base64",
    "binascii",
    "bisect",
    "collections",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "functools",
    "hashlib",
    "itertools",
    "json",
    "math",
    "random",
    "re",
    "sys",
    "time",
    "tomllib",
    "typing",
    "unicodedata",
];
const BLOCKED_BUILTINS: &[&str] = &["eval", "exec", "compile", "open", "input", "breakpoint"];
const RESERVED_PREFIX: &str = "_dh";
/// Deeper bracket nesting than this is refused before parsing: the parser
/// and the checks recurse, and Monty refuses far less anyway.
const MAX_NESTING: usize = 200;

/// The code broke a rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    pub rule: &'static str,
    pub message: String,
    /// 1-based line and column (in characters) in the user's code.
    pub line: usize,
    pub col: usize,
}

/// Code ready for Monty.
#[derive(Debug, Default)]
pub struct Prepared {
    pub code: String,
    /// Byte offsets, in `code`, of tool calls made synchronously
    /// (`x = tool(a)`): answered with a value rather than a future.
    pub sync_calls: HashSet<u32>,
    /// Text inserted by the loop guards: (line, 1-based column in characters
    /// of the user's code, characters inserted).
    pub(crate) inserted: Vec<(usize, usize, usize)>,
}

impl Prepared {
    /// Maps a 1-based column of the fed code back to the user's code.
    pub fn user_column(&self, line: usize, col: usize) -> usize {
        // `inserted` is in order of position; walk this line's insertions,
        // each seen where the fed code has it (after the ones before it).
        let mut shift = 0;
        for &(_, at, n) in self.inserted.iter().filter(|(l, _, _)| *l == line) {
            let fed_at = at + shift;
            if col < fed_at {
                break;
            }
            if col < fed_at + n {
                // Inside inserted text: the user's code is where it went in.
                return at;
            }
            shift += n;
        }
        col.saturating_sub(shift).max(1)
    }
}

/// Line starts of `code`, for turning byte offsets into lines and columns.
pub struct Lines<'a> {
    code: &'a str,
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    pub fn new(code: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(code.match_indices('\n').map(|(i, _)| i + 1));
        Self { code, starts }
    }

    /// 1-based line and column (in characters) of byte `offset`.
    pub fn position(&self, offset: usize) -> (usize, usize) {
        let line = self.starts.partition_point(|s| *s <= offset).max(1);
        let start = self.starts[line - 1];
        let col = self
            .code
            .get(start..offset.min(self.code.len()))
            .map_or(0, |s| s.chars().count());
        (line, col + 1)
    }
}

fn is_dunder(name: &str) -> bool {
    name.len() > 4 && name.starts_with("__") && name.ends_with("__")
}

fn is_super_call(expr: &Expr) -> bool {
    matches!(expr, Expr::Call(c) if matches!(&*c.func, Expr::Name(n) if n.id.as_str() == "super"))
}

/// A `{...}` format field reaching an attribute or item that starts with `_`.
fn format_reaches_underscore(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'{' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'{' && bytes[j] != b'}' {
                if bytes[j] == b'.' || bytes[j] == b'[' {
                    let rest = text[j + 1..].trim_start();
                    if rest.starts_with('_') {
                        return true;
                    }
                }
                j += 1;
            }
            i = j;
        } else {
            i += 1;
        }
    }
    false
}

struct Checker<'a> {
    lines: &'a Lines<'a>,
    max_literal: usize,
    class_depth: usize,
    found: Option<Rejected>,
}

impl Checker<'_> {
    fn reject(&mut self, rule: &'static str, message: String, range: TextRange) {
        if self.found.is_none() {
            let (line, col) = self.lines.position(range.start().to_usize());
            self.found = Some(Rejected {
                rule,
                message,
                line,
                col,
            });
        }
    }

    fn check_module(&mut self, name: &str, range: TextRange) {
        let top = name.split('.').next().unwrap_or_default();
        if !ALLOWED_IMPORTS.contains(&top) {
            self.reject(
                "import",
                format!(
                    "module `{name}` is not available; the modules offered are {}",
                    ALLOWED_IMPORTS.join(", ")
                ),
                range,
            );
        }
    }

    fn check_binding(&mut self, name: &str, range: TextRange) {
        if is_dunder(name) {
            self.reject(
                "dunder",
                format!("dunder names like `{name}` are not allowed"),
                range,
            );
        } else if name.starts_with(RESERVED_PREFIX) {
            self.reject(
                "reserved",
                format!("names starting with `{RESERVED_PREFIX}` are reserved"),
                range,
            );
        }
    }

    fn check_parameters(&mut self, parameters: &Parameters) {
        for p in parameters.iter() {
            let name = p.name();
            self.check_binding(name.id.as_str(), name.range);
        }
    }

    fn check_text(&mut self, text: &str, chars: usize, is_str: bool, range: TextRange) {
        if chars > self.max_literal {
            self.reject(
                "literal_size",
                format!(
                    "a literal of {} characters is over the limit of {}; pass large data as an input or get it from a tool",
                    thousands(chars),
                    thousands(self.max_literal)
                ),
                range,
            );
        } else if is_str && format_reaches_underscore(text) {
            self.reject(
                "dunder",
                "format fields may not reach attributes or items starting with `_`".into(),
                range,
            );
        }
    }
}

impl<'a> Visitor<'a> for Checker<'_> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        if self.found.is_some() {
            return;
        }
        match stmt {
            Stmt::Import(s) => {
                for alias in &s.names {
                    self.check_module(alias.name.id.as_str(), s.range);
                    if let Some(asname) = &alias.asname {
                        self.check_binding(asname.id.as_str(), asname.range);
                    }
                }
            }
            Stmt::ImportFrom(s) => {
                if s.level > 0 {
                    self.reject(
                        "import",
                        "relative imports are not available".into(),
                        s.range,
                    );
                }
                let module = s.module.as_ref().map_or("", |m| m.id.as_str());
                self.check_module(module, s.range);
                for alias in &s.names {
                    let name = alias.name.id.as_str();
                    if is_dunder(name) || name.starts_with(RESERVED_PREFIX) {
                        self.reject("dunder", format!("`{name}` cannot be imported"), s.range);
                    }
                    if let Some(asname) = &alias.asname {
                        self.check_binding(asname.id.as_str(), asname.range);
                    }
                }
            }
            Stmt::ClassDef(c) => {
                self.check_binding(c.name.id.as_str(), c.range);
                self.class_depth += 1;
                visitor::walk_stmt(self, stmt);
                self.class_depth -= 1;
            }
            Stmt::FunctionDef(f) => {
                // Special methods are how classes work: a class body may define them.
                if !(self.class_depth > 0 && is_dunder(f.name.id.as_str())) {
                    self.check_binding(f.name.id.as_str(), f.range);
                }
                self.check_parameters(&f.parameters);
                let saved = std::mem::replace(&mut self.class_depth, 0);
                visitor::walk_stmt(self, stmt);
                self.class_depth = saved;
            }
            _ => visitor::walk_stmt(self, stmt),
        }
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        if self.found.is_some() {
            return;
        }
        match expr {
            Expr::Name(n) => {
                let id = n.id.as_str();
                if is_dunder(id) {
                    self.reject(
                        "dunder",
                        format!("dunder names like `{id}` are not allowed"),
                        n.range,
                    );
                } else if id.starts_with(RESERVED_PREFIX) {
                    self.reject(
                        "reserved",
                        format!("names starting with `{RESERVED_PREFIX}` are reserved"),
                        n.range,
                    );
                } else if BLOCKED_BUILTINS.contains(&id) && n.ctx == ExprContext::Load {
                    self.reject(
                        "builtin",
                        format!("`{id}` is not available in this sandbox"),
                        n.range,
                    );
                }
            }
            Expr::Attribute(a) => {
                if a.attr.id.as_str().starts_with("__") && !is_super_call(&a.value) {
                    self.reject(
                        "dunder",
                        format!(
                            "dunder attributes like `.{}` are not allowed",
                            a.attr.id.as_str()
                        ),
                        a.range,
                    );
                }
                visitor::walk_expr(self, expr);
            }
            Expr::Lambda(l) => {
                if let Some(parameters) = &l.parameters {
                    self.check_parameters(parameters);
                }
                visitor::walk_expr(self, expr);
            }
            Expr::StringLiteral(s) => {
                let text = s.value.to_str();
                self.check_text(text, text.chars().count(), true, s.range);
            }
            Expr::BytesLiteral(b) => {
                let len: usize = b.value.iter().map(|part| part.as_slice().len()).sum();
                self.check_text("", len, false, b.range);
            }
            _ => visitor::walk_expr(self, expr),
        }
    }

    fn visit_except_handler(&mut self, handler: &'a ast::ExceptHandler) {
        let ast::ExceptHandler::ExceptHandler(h) = handler;
        if let Some(name) = &h.name {
            self.check_binding(name.id.as_str(), name.range);
        }
        visitor::walk_except_handler(self, handler);
    }

    fn visit_interpolated_string_element(&mut self, element: &'a InterpolatedStringElement) {
        if let InterpolatedStringElement::Literal(l) = element {
            self.check_text(&l.value, l.value.chars().count(), true, l.range);
        }
        visitor::walk_interpolated_string_element(self, element);
    }
}

/// The deepest bracket nesting of `code`, outside strings and comments not
/// told apart: an over-estimate is fine for a limit this far above real code.
fn bracket_depth(code: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for b in code.bytes() {
        match b {
            b'(' | b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Limits of [`prepare`].
pub struct Limits {
    pub max_literal: usize,
    pub max_code_bytes: usize,
}

/// Checks `code` and rewrites it for Monty; `fan_out` lets gathers of tool
/// calls fan out (see `fanout`).
pub fn prepare(
    code: &str,
    tools: &HashSet<String>,
    limits: &Limits,
    fan_out: bool,
) -> Result<Prepared, Rejected> {
    if code.len() > limits.max_code_bytes {
        return Err(Rejected {
            rule: "code_size",
            message: format!(
                "the code is {} bytes; the limit is {}",
                thousands(code.len()),
                thousands(limits.max_code_bytes)
            ),
            line: 1,
            col: 1,
        });
    }
    let nesting = Rejected {
        rule: "nesting",
        message: "the code is nested too deeply; flatten it".into(),
        line: 1,
        col: 1,
    };
    if bracket_depth(code) > MAX_NESTING {
        return Err(nesting);
    }
    let Ok(parsed) = ruff_python_parser::parse_module(code) else {
        // Monty parses it and reports its own syntax error.
        return Ok(Prepared {
            code: code.to_string(),
            ..Prepared::default()
        });
    };
    let lines = Lines::new(code);
    let body = &parsed.syntax().body;
    if statement_depth(body) > MAX_NESTING {
        return Err(nesting);
    }
    let mut checker = Checker {
        lines: &lines,
        max_literal: limits.max_literal,
        class_depth: 0,
        found: None,
    };
    checker.visit_body(body);
    if let Some(rejected) = checker.found {
        return Err(rejected);
    }
    Ok(guards::rewrite(code, &lines, tools, body, fan_out))
}

/// How deeply statements nest (an indentation bound for the recursive checks).
fn statement_depth(body: &[Stmt]) -> usize {
    let mut deepest = 0;
    let mut stack: Vec<(&[Stmt], usize)> = vec![(body, 1)];
    while let Some((stmts, depth)) = stack.pop() {
        deepest = deepest.max(depth);
        for stmt in stmts {
            for child in child_bodies(stmt) {
                stack.push((child, depth + 1));
            }
        }
    }
    deepest
}

fn child_bodies(stmt: &Stmt) -> Vec<&[Stmt]> {
    match stmt {
        Stmt::FunctionDef(s) => vec![&s.body],
        Stmt::ClassDef(s) => vec![&s.body],
        Stmt::For(s) => vec![&s.body, &s.orelse],
        Stmt::While(s) => vec![&s.body, &s.orelse],
        Stmt::If(s) => {
            let mut v: Vec<&[Stmt]> = vec![&s.body];
            v.extend(s.elif_else_clauses.iter().map(|c| &c.body[..]));
            v
        }
        Stmt::With(s) => vec![&s.body],
        Stmt::Try(s) => {
            let mut v: Vec<&[Stmt]> = vec![&s.body, &s.orelse, &s.finalbody];
            for h in &s.handlers {
                let ast::ExceptHandler::ExceptHandler(h) = h;
                v.push(&h.body);
            }
            v
        }
        Stmt::Match(s) => s.cases.iter().map(|c| &c.body[..]).collect(),
        _ => Vec::new(),
    }
}

/// `12345` as `12,345`, as the messages print numbers.
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prep(code: &str, tools: &[&str]) -> Result<Prepared, Rejected> {
        let tools = tools.iter().map(|t| t.to_string()).collect();
        prepare(
            code,
            &tools,
            &Limits {
                max_literal: 10_000,
                max_code_bytes: 1 << 20,
            },
            true,
        )
    }

    #[test]
    fn loops_are_guarded_and_columns_map_back() {
        let p = prep("for x in range(3):\n    pass\nwhile x:\n    x -= 1\n", &[]).unwrap();
        assert!(
            p.code.contains("for x in _dh_loop(range(3), 1):"),
            "{}",
            p.code
        );
        assert!(
            p.code.contains("while _dh_tick(1, 3) and (x):"),
            "{}",
            p.code
        );
        // `range` is at column 10 of the user's line; `_dh_loop(` shifts it by 9.
        assert_eq!(p.user_column(1, 19), 10);
    }

    #[test]
    fn nested_comprehensions_wrap_inner_then_outer() {
        let p = prep("[y for x in a for y in x]", &[]).unwrap();
        assert_eq!(
            p.code,
            "[y for x in _dh_loop(a, 1) for y in _dh_loop(x, 1)]"
        );
    }

    #[test]
    fn sync_calls_are_found_at_their_fed_offsets() {
        let p = prep("for i in t(1):\n    x = t(i)\ny = await t(2)\n", &["t"]).unwrap();
        let mut offsets: Vec<u32> = p.sync_calls.iter().copied().collect();
        offsets.sort();
        let found: Vec<&str> = offsets
            .iter()
            .map(|&o| &p.code[o as usize..o as usize + 4])
            .collect();
        assert_eq!(found, vec!["t(1)", "t(i)"]);
        let p = prep("r = gather(t(1), t(2))", &["t"]).unwrap();
        assert!(p.sync_calls.is_empty());
    }

    #[test]
    fn rules_name_what_is_wrong() {
        let rule = |code: &str| prep(code, &[]).unwrap_err().rule;
        assert_eq!(rule("import os"), "import");
        assert_eq!(rule("x = (1).__class__"), "dunder");
        assert_eq!(rule("__import__('os')"), "dunder");
        assert_eq!(rule("eval('1')"), "builtin");
        assert_eq!(rule("_dh_loop = 1"), "reserved");
        assert_eq!(rule("'{0.__class__}'.format(1)"), "dunder");
        assert_eq!(
            rule(&format!("x = '{}'", "a".repeat(10_001))),
            "literal_size"
        );
        assert_eq!(rule(&"(".repeat(300)), "nesting");
        let e = prep("x = 1\ny = open('f')", &[]).unwrap_err();
        assert_eq!((e.line, e.col), (2, 5));
    }

    #[test]
    fn classes_may_define_special_methods() {
        let code = "class A:\n    def __init__(self):\n        super().__init__()\n";
        assert!(prep(code, &[]).is_ok());
    }

    #[test]
    fn unparsable_code_goes_to_monty_unchanged() {
        let p = prep("def f(:\n", &[]).unwrap();
        assert_eq!(p.code, "def f(:\n");
    }

    #[test]
    fn numbers_print_with_separators() {
        assert_eq!(thousands(1_048_576), "1,048,576");
        assert_eq!(thousands(999), "999");
    }
}
