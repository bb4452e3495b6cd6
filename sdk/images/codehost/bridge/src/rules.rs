//! dockhand code-mode rules: what `prepare` checks and rewrites before Monty
//! runs code.
//!
//! None of this is a security boundary: Monty is the boundary inside the code
//! host's container (no filesystem, network, environment or process access
//! but what the bridge answers, and uncatchable time, memory and recursion
//! limits) and the container is the one outside it. So the default policy
//! adds to Monty only what Monty does not do itself:
//!
//! - a limit on the code's size and nesting (the parser and checks recurse);
//! - no names starting with `_dh` (the prelude's helpers);
//! - tool calls made synchronously or fanned out (see `guards`, `fanout`).
//!
//! The strict policy adds checks that keep model-written code to a known
//! shape (see `checks`):
//!
//! - imports limited to the modules dockhand offers;
//! - no dunder access that reaches interpreter internals (`__class__`,
//!   `__subclasses__`, `__globals__`, `__import__` and the like), while
//!   `__name__`, special method definitions and `if __name__ == "__main__":`
//!   stay allowed;
//! - no `eval`, `exec`, `compile`, `open`, `input` or `breakpoint`;
//! - string and bytes literals up to a set size;
//! - every loop guarded: a `for` loop or comprehension stops after a set
//!   number of iterations per entry, a `while` loop after that many in one
//!   execution.
//!
//! The code is parsed with Ruff's parser, the one Monty itself uses. Code it
//! cannot parse is handed to Monty unchanged, so Monty's own syntax error
//! decides.

use std::collections::HashSet;

use crate::{checks, guards};

use ruff_python_ast::{self as ast, Stmt};

/// Which checks `prepare` makes beyond Monty's own: the strict policy's
/// rules, each on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Policy {
    /// Imports limited to the modules offered.
    pub imports: bool,
    /// No dunder access that reaches interpreter internals.
    pub dunders: bool,
    /// No `eval`, `exec`, `compile`, `open`, `input`, `breakpoint`.
    pub builtins: bool,
    /// String and bytes literals up to a set size.
    pub literal_size: bool,
    /// Every loop guarded.
    pub loop_guard: bool,
}

impl Policy {
    /// Monty's own rules, with dockhand's size limits.
    pub const DEFAULT: Policy = Policy {
        imports: false,
        dunders: false,
        builtins: false,
        literal_size: false,
        loop_guard: false,
    };
    /// Every rule.
    pub const STRICT: Policy = Policy {
        imports: true,
        dunders: true,
        builtins: true,
        literal_size: true,
        loop_guard: true,
    };

    /// The policy the host names: `"strict"`, or `"rules"` with the list
    /// of rules on (`import`, `dunder`, `builtin`, `literal_size`,
    /// `loop_guard`); anything else is the default.
    pub fn named(name: &str, rules: Option<&serde_json::Value>) -> Self {
        match name {
            "strict" => Policy::STRICT,
            "rules" => {
                let on = |rule: &str| {
                    rules
                        .and_then(serde_json::Value::as_array)
                        .is_some_and(|list| list.iter().any(|r| r.as_str() == Some(rule)))
                };
                Policy {
                    imports: on("import"),
                    dunders: on("dunder"),
                    builtins: on("builtin"),
                    literal_size: on("literal_size"),
                    loop_guard: on("loop_guard"),
                }
            }
            _ => Policy::DEFAULT,
        }
    }
}

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
    /// Byte offsets, in `code`, of calls awaited or gathered: a tool call
    /// there is answered with a future, anywhere else (`x = tool(a)`, or
    /// code run by `eval`) with its value.
    pub async_calls: HashSet<u32>,
    /// Text inserted by the loop guards: (line, 1-based column in characters
    /// of the user's code, characters inserted).
    pub(crate) inserted: Vec<(usize, usize, usize)>,
    /// Line breaks the loop guards inserted, each by the user's line it went
    /// into (in order): the lines after it are one further down when fed.
    pub(crate) newlines: Vec<usize>,
}

impl Prepared {
    /// Maps a 1-based line of the fed code back to the user's code (an
    /// inserted line is the user's line it was inserted into).
    pub fn user_line(&self, fed: usize) -> usize {
        let mut shift = 0;
        for &line in &self.newlines {
            // That break ends fed line `line + shift`.
            if fed > line + shift {
                shift += 1;
            } else {
                break;
            }
        }
        fed - shift
    }

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

    /// The code.
    pub fn code(&self) -> &'a str {
        self.code
    }

    /// Byte offset where the line holding byte `offset` starts.
    pub fn line_start(&self, offset: usize) -> usize {
        let line = self.starts.partition_point(|s| *s <= offset).max(1);
        self.starts[line - 1]
    }

    /// The whitespace that begins the line holding byte `offset`.
    pub fn indentation(&self, offset: usize) -> &'a str {
        let start = self.line_start(offset);
        let line = &self.code[start..];
        let end = line
            .find(|c: char| c != ' ' && c != '\t')
            .unwrap_or(line.len());
        &line[..end]
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
    pub policy: Policy,
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
    if let Some(rejected) = checks::check(body, &lines, limits.policy, limits.max_literal) {
        return Err(rejected);
    }
    let guard_loops = limits.policy.loop_guard;
    Ok(guards::rewrite(
        code,
        &lines,
        tools,
        body,
        guards::Rewrites {
            fan_out,
            guard_loops,
        },
    ))
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

    fn prep_with(policy: Policy, code: &str, tools: &[&str]) -> Result<Prepared, Rejected> {
        let tools = tools.iter().map(|t| t.to_string()).collect();
        let limits = Limits {
            max_literal: 10_000,
            max_code_bytes: 1 << 20,
            policy,
        };
        prepare(code, &tools, &limits, true)
    }

    fn strict(code: &str) -> Result<Prepared, Rejected> {
        prep_with(Policy::STRICT, code, &[])
    }

    fn default(code: &str) -> Result<Prepared, Rejected> {
        prep_with(Policy::DEFAULT, code, &[])
    }

    #[test]
    fn strict_loops_are_guarded_and_columns_map_back() {
        let p = strict("for x in range(3):\n    pass\nwhile x:\n    x -= 1\n").unwrap();
        assert_eq!(
            p.code,
            "for x in (_dh_g1 := _dh_guard((range(3))))[0]:\n    pass\nelse: _dh_end(_dh_g1, 1)\n\
             while _dh_tick(2, 3) and (x):\n    x -= 1\n"
        );
        // `range` is at column 10 of the user's line; the guard shifts it by 22.
        assert_eq!(p.user_column(1, 32), 10);
        // The added `else:` is the loop's last line; the `while` moved down one.
        assert_eq!((p.user_line(3), p.user_line(4)), (2, 3));
    }

    #[test]
    fn a_loop_over_a_bare_tuple_stays_one_argument() {
        for (code, fed) in [
            (
                "for x in a, b:\n    pass\n",
                "for x in (_dh_g1 := _dh_guard((a, b)))[0]:",
            ),
            (
                "for x in *a, *b:\n    pass\n",
                "for x in (_dh_g1 := _dh_guard((*a, *b)))[0]:",
            ),
        ] {
            let p = strict(code).unwrap();
            assert!(p.code.starts_with(fed), "{}", p.code);
        }
    }

    fn parses(code: &str) {
        assert!(
            ruff_python_parser::parse_module(code).is_ok(),
            "not Python:\n{code}"
        );
    }

    #[test]
    fn a_loop_with_an_else_checks_before_its_first_statement() {
        let p =
            strict("for x in a:\n    pass\nelse:\n    done = 1\n    more = 2\ny = 3\n").unwrap();
        assert_eq!(
            p.code,
            "for x in (_dh_g1 := _dh_guard((a)))[0]:\n    pass\nelse:\n    _dh_end(_dh_g1, 1)\n    done = 1\n    more = 2\ny = 3\n"
        );
        parses(&p.code);
        assert_eq!(
            (p.user_line(4), p.user_line(5), p.user_line(7)),
            (4, 4, 6),
            "the check is on the else's first line; the rest move down one"
        );
        let p = strict("for x in a:\n    pass\nelse: done = 1\n").unwrap();
        assert!(
            p.code.ends_with("else: _dh_end(_dh_g1, 1); done = 1\n"),
            "{}",
            p.code
        );
        parses(&p.code);
        assert_eq!(p.user_line(3), 3);
    }

    #[test]
    fn nested_and_one_line_loops_close_inner_first() {
        let code = "def f(a):\n\tfor x in a:\n\t\tfor y in x: print(y)  # inner\n\treturn 1\nfor z in b: pass\nf(c)\n";
        let p = strict(code).unwrap();
        parses(&p.code);
        assert!(
            p.code.contains(
                "print(y)\n\t\telse: _dh_end(_dh_g2, 3)\n\telse: _dh_end(_dh_g1, 2)  # inner\n\treturn 1"
            ),
            "{}",
            p.code
        );
        assert!(
            p.code.contains("pass\nelse: _dh_end(_dh_g3, 5)\nf(c)"),
            "{}",
            p.code
        );
        // Fed lines: 1 def, 2 for, 3 for, 4-5 added, 6 return, 7 for, 8 added, 9 f(c).
        let lines: Vec<usize> = (1..=9).map(|l| p.user_line(l)).collect();
        assert_eq!(lines, [1, 2, 3, 3, 3, 4, 5, 5, 6]);
    }

    #[test]
    fn the_default_policy_leaves_loops_alone() {
        let code = "for x in a, b:\n    pass\nwhile x:\n    x -= 1\n";
        assert_eq!(default(code).unwrap().code, code);
    }

    #[test]
    fn nested_comprehensions_wrap_inner_then_outer() {
        let p = strict("[y for x in a for y in x]").unwrap();
        assert_eq!(
            p.code,
            "[y for x in _dh_loop((a), 1) for y in _dh_loop((x), 1)]"
        );
    }

    #[test]
    fn awaited_and_gathered_calls_are_found_at_their_fed_offsets() {
        for policy in [Policy::DEFAULT, Policy::STRICT] {
            let p = prep_with(
                policy,
                "for i in t(1):\n    x = t(i)\ny = await t(2)\nz = await m.u(3)\n",
                &["t"],
            )
            .unwrap();
            let mut offsets: Vec<u32> = p.async_calls.iter().copied().collect();
            offsets.sort();
            let found: Vec<&str> = offsets
                .iter()
                .map(|&o| &p.code[o as usize..o as usize + 4])
                .collect();
            assert_eq!(found, vec!["t(2)", "m.u("], "{policy:?}");
            let p = prep_with(policy, "r = gather(t(1), f(2))", &["t"]).unwrap();
            assert_eq!(p.async_calls.len(), 2);
        }
    }

    #[test]
    fn strict_rules_name_what_is_wrong() {
        let rule = |code: &str| strict(code).unwrap_err().rule;
        assert_eq!(rule("import os"), "import");
        assert_eq!(rule("x = (1).__class__"), "dunder");
        assert_eq!(rule("x = f.__globals__"), "dunder");
        assert_eq!(rule("x = C.__subclasses__()"), "dunder");
        assert_eq!(rule("__import__('os')"), "dunder");
        assert_eq!(rule("eval('1')"), "builtin");
        assert_eq!(rule("_dh_loop = 1"), "reserved");
        assert_eq!(rule("'{0.__class__}'.format(1)"), "dunder");
        assert_eq!(
            rule(&format!("x = '{}'", "a".repeat(10_001))),
            "literal_size"
        );
        assert_eq!(rule(&"(".repeat(300)), "nesting");
        let e = strict("x = 1\ny = open('f')").unwrap_err();
        assert_eq!((e.line, e.col), (2, 5));
    }

    #[test]
    fn strict_allows_everyday_dunders() {
        for code in [
            "class A:\n    def __init__(self):\n        super().__init__()\n",
            "class A:\n    __hash__ = None\n",
            "name = type(x).__name__",
            "if __name__ == '__main__':\n    pass\n",
            "from __future__ import annotations",
            "y = a.__add__(b)",
        ] {
            assert!(strict(code).is_ok(), "{code}: {:?}", strict(code));
        }
    }

    #[test]
    fn the_default_policy_refuses_only_reserved_names_and_sizes() {
        for code in [
            "import os",
            "x = (1).__class__",
            "p.__class__ is Point",
            "eval('1')",
            "try:\n    import pandas\nexcept ImportError:\n    pandas = None\n",
            "if __name__ == '__main__':\n    pass\n",
        ] {
            assert!(default(code).is_ok(), "{code}: {:?}", default(code));
        }
        assert_eq!(default("_dh_fan = 1").unwrap_err().rule, "reserved");
        assert_eq!(default(&"(".repeat(300)).unwrap_err().rule, "nesting");
        let big = "x = 1\n".repeat(300_000);
        assert_eq!(default(&big).unwrap_err().rule, "code_size");
    }

    #[test]
    fn policies_are_named_by_the_host() {
        assert_eq!(Policy::named("strict", None), Policy::STRICT);
        assert_eq!(Policy::named("default", None), Policy::DEFAULT);
        let rules = serde_json::json!(["dunder", "loop_guard"]);
        let some = Policy::named("rules", Some(&rules));
        assert!(some.dunders && some.loop_guard && !some.imports && !some.builtins);
    }

    #[test]
    fn each_strict_rule_is_on_or_off_by_itself() {
        let only = |rules: &[&str], code: &str| {
            let rules = serde_json::json!(rules);
            prep_with(Policy::named("rules", Some(&rules)), code, &[])
        };
        assert_eq!(
            only(&["import"], "import os").err().map(|e| e.rule),
            Some("import")
        );
        assert!(only(&["dunder"], "import os").is_ok());
        assert_eq!(
            only(&["dunder"], "x = f.__globals__").err().map(|e| e.rule),
            Some("dunder")
        );
        assert!(only(&["import", "builtin"], "x = f.__globals__").is_ok());
        assert_eq!(
            only(&["builtin"], "eval('1')").err().map(|e| e.rule),
            Some("builtin")
        );
        assert!(only(&["dunder"], "eval('1')").is_ok());
        let long = format!("x = '{}'", "a".repeat(10_001));
        assert_eq!(
            only(&["literal_size"], &long).err().map(|e| e.rule),
            Some("literal_size")
        );
        assert!(only(&["import"], &long).is_ok());
        let guarded = only(&["loop_guard"], "for i in x:\n    pass\n").unwrap();
        assert!(guarded.code.contains("_dh_guard"), "{}", guarded.code);
        let unguarded = only(&["dunder"], "for i in x:\n    pass\n").unwrap();
        assert!(!unguarded.code.contains("_dh_guard"));
    }

    #[test]
    fn strict_false_positives_are_allowed() {
        // A format spec, not a field reaching `_`.
        assert!(strict("'{:._}'.format(True)").is_ok());
        assert!(strict("'{0:_>10}'.format(1)").is_ok());
        assert!(strict("'{x!r:_^9}'.format(x=1)").is_ok());
        assert_eq!(strict("'{0._x}'.format(1)").unwrap_err().rule, "dunder");
        assert_eq!(
            strict("'{0:{1._x}}'.format(1, 2)").unwrap_err().rule,
            "dunder"
        );
        // A special method a decorator puts into a class.
        let injected = "def with_init(cls):\n    def __init__(self, v):\n        self.v = v\n    cls.__init__ = __init__\n    return cls\n";
        assert!(strict(injected).is_ok(), "{:?}", strict(injected));
        // Other dunder bindings outside a class stay refused.
        assert_eq!(strict("__builtins__ = 1").unwrap_err().rule, "dunder");
    }

    #[test]
    fn unparsable_code_goes_to_monty_unchanged() {
        let p = default("def f(:\n").unwrap();
        assert_eq!(p.code, "def f(:\n");
    }

    #[test]
    fn numbers_print_with_separators() {
        assert_eq!(thousands(1_048_576), "1,048,576");
        assert_eq!(thousands(999), "999");
    }
}
