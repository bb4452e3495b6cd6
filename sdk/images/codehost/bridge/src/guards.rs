//! Loop guards and synchronous tool calls: what `rules::prepare` inserts
//! into the code and which calls it answers with a value.
//!
//! Under the strict policy every `for` loop and comprehension iterates
//! through `_dh_loop((it), line)` and every `while` test starts with
//! `_dh_tick(n, line)` (both defined by the prelude). A tool call that is neither awaited nor inside `gather(...)`
//! is synchronous: the bridge waits for its value instead of handing Monty a
//! future. A gather over a comprehension of calls of one tool may fan out
//! (see `fanout`).

use std::collections::HashSet;

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{self as ast, Expr, Stmt};
use ruff_text_size::{Ranged, TextRange};

use crate::fanout;
use crate::rules::{Lines, Prepared};

/// Which rewrites [`rewrite`] makes besides marking synchronous calls.
#[derive(Debug, Clone, Copy)]
pub struct Rewrites {
    /// Gathers of calls of one tool become one suspension (see `fanout`).
    pub fan_out: bool,
    /// Loops count their iterations (the strict policy).
    pub guard_loops: bool,
}

/// The synchronous calls of `body` marked in `code`, with the rewrites `how`
/// asks for.
pub fn rewrite(
    code: &str,
    lines: &Lines<'_>,
    tools: &HashSet<String>,
    body: &[Stmt],
    how: Rewrites,
) -> Prepared {
    let bound = how.fan_out.then(|| fanout::bound_names(body));
    let mut rewriter = Rewriter {
        lines,
        tools,
        guard_loops: how.guard_loops,
        bound: bound.as_ref(),
        insertions: Vec::new(),
        async_calls: Vec::new(),
        loops: 0,
        gather_depth: 0,
        awaited: HashSet::new(),
    };
    rewriter.visit_body(body);
    apply(code, lines, rewriter)
}

pub(crate) fn is_gather(func: &Expr) -> bool {
    match func {
        Expr::Name(n) => n.id.as_str() == "gather",
        Expr::Attribute(a) => {
            a.attr.id.as_str() == "gather"
                && matches!(&*a.value, Expr::Name(n) if n.id.as_str() == "asyncio")
        }
        _ => false,
    }
}

/// One piece of text the loop guards insert.
struct Insertion {
    at: usize,
    depth: usize,
    text: String,
    is_close: bool,
}

/// Collects loop-guard insertions and the calls that give a future.
struct Rewriter<'a> {
    lines: &'a Lines<'a>,
    tools: &'a HashSet<String>,
    guard_loops: bool,
    /// The names the code binds; `None`: no fan-out.
    bound: Option<&'a HashSet<String>>,
    insertions: Vec<Insertion>,
    /// Calls awaited or inside `gather(...)`, whatever they call.
    async_calls: Vec<usize>,
    loops: usize,
    gather_depth: usize,
    awaited: HashSet<usize>,
}

impl Rewriter<'_> {
    fn wrap(&mut self, range: TextRange, before: String, after: String) {
        // How far the expression reaches: outer loops reach further.
        let depth = range.len().to_usize();
        self.insertions.push(Insertion {
            at: range.start().to_usize(),
            depth,
            text: before,
            is_close: false,
        });
        self.insertions.push(Insertion {
            at: range.end().to_usize(),
            depth,
            text: after,
            is_close: true,
        });
    }

    /// Inserts `text` at the end of `range`, closing what began inside it.
    fn close(&mut self, range: TextRange, text: &str) {
        self.insertions.push(Insertion {
            at: range.end().to_usize(),
            depth: range.len().to_usize(),
            text: text.into(),
            is_close: true,
        });
    }

    fn guard_for(&mut self, iter: &Expr) {
        if !self.guard_loops {
            return;
        }
        let (line, _) = self.lines.position(iter.start().to_usize());
        // In parentheses: `for x in a, b:` iterates one tuple, not two arguments.
        self.wrap(iter.range(), "_dh_loop((".into(), format!("), {line})"));
    }

    /// A `for` statement iterates `islice` of its iterable, and its `else:`
    /// (added, or the one it has, before its first statement) looks for one
    /// item more: no `chain` per item (see the prelude's `_dh_guard`).
    fn guard_for_statement(&mut self, f: &ast::StmtFor) {
        if !self.guard_loops {
            return;
        }
        if f.is_async {
            return self.guard_for(&f.iter);
        }
        self.loops += 1;
        let k = self.loops;
        let (line, _) = self.lines.position(f.iter.start().to_usize());
        self.wrap(
            f.iter.range(),
            format!("(_dh_g{k} := _dh_guard(("),
            ")))[0]".into(),
        );
        let check = format!("_dh_end(_dh_g{k}, {line})");
        let code = self.lines.code();
        match (f.orelse.first(), f.body.last()) {
            (None, Some(last)) => {
                // After the body, at the `for`'s own indentation (a `for`
                // always begins its line).
                let at = last.end().to_usize();
                let indent = self.lines.indentation(f.start().to_usize());
                self.insertions.push(Insertion {
                    at,
                    depth: f.range().len().to_usize(),
                    text: format!("\n{indent}else: {check}"),
                    is_close: true,
                });
            }
            (Some(first), _) => {
                let at = first.start().to_usize();
                let before = &code[self.lines.line_start(at)..at];
                let text = if before.trim().is_empty() {
                    // The first statement has a line of its own: the check
                    // takes one before it, at the same indentation.
                    format!("{check}\n{before}")
                } else {
                    // `else: stmt`: simple statements only, joined by `;`.
                    format!("{check}; ")
                };
                self.insertions.push(Insertion {
                    at,
                    // Before anything else that opens here.
                    depth: usize::MAX / 2,
                    text,
                    is_close: false,
                });
            }
            (None, None) => {}
        }
    }
}

impl<'a> Visitor<'a> for Rewriter<'_> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::For(f) => self.guard_for_statement(f),
            Stmt::While(w) if self.guard_loops => {
                self.loops += 1;
                let (line, _) = self.lines.position(w.start().to_usize());
                self.wrap(
                    w.test.range(),
                    format!("_dh_tick({}, {line}) and (", self.loops),
                    ")".into(),
                );
            }
            _ => {}
        }
        visitor::walk_stmt(self, stmt);
    }

    fn visit_comprehension(&mut self, comprehension: &'a ast::Comprehension) {
        self.guard_for(&comprehension.iter);
        visitor::walk_comprehension(self, comprehension);
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Await(a) => {
                if let Expr::Call(c) = &*a.value {
                    self.awaited.insert(c.start().to_usize());
                }
                visitor::walk_expr(self, expr);
            }
            Expr::Call(c) => {
                let start = c.start().to_usize();
                // Any callee: a tool is also reached through an alias, a
                // module attribute or a variable.
                if self.gather_depth > 0 || self.awaited.contains(&start) {
                    self.async_calls.push(start);
                }
                if let Some(fan) = self.bound.and_then(|b| fanout::plan(c, self.tools, b)) {
                    self.wrap(fan.gather, "_dh_fan(".into(), ")".into());
                    self.wrap(fan.tool, "(\"".into(), "\", _dh_args".into());
                    self.close(fan.call, ")");
                }
                let gather = is_gather(&c.func);
                self.gather_depth += usize::from(gather);
                visitor::walk_expr(self, expr);
                self.gather_depth -= usize::from(gather);
            }
            _ => visitor::walk_expr(self, expr),
        }
    }
}

fn apply(code: &str, lines: &Lines<'_>, rewriter: Rewriter<'_>) -> Prepared {
    let mut insertions = rewriter.insertions;
    // Text inserted at one offset goes in this order: closing texts first
    // (inner loops before outer ones), then opening texts (outer before inner).
    insertions.sort_by_key(|i| {
        let rank = if i.is_close {
            (0, i.depth as isize)
        } else {
            (1, -(i.depth as isize))
        };
        (i.at, rank)
    });
    let mut out = String::with_capacity(code.len() + insertions.len() * 16);
    let mut inserted = Vec::with_capacity(insertions.len());
    let mut copied = 0;
    let mut newlines = Vec::new();
    for i in &insertions {
        out.push_str(&code[copied..i.at]);
        copied = i.at;
        out.push_str(&i.text);
        let (line, col) = lines.position(i.at);
        if i.text.contains('\n') {
            // Lines of their own: they move the lines after them, not columns.
            newlines.extend(std::iter::repeat_n(line, i.text.matches('\n').count()));
        } else {
            inserted.push((line, col, i.text.chars().count()));
        }
    }
    out.push_str(&code[copied..]);
    // A call's offset in the fed code: everything inserted at or before its
    // start precedes it.
    let async_calls = rewriter
        .async_calls
        .iter()
        .map(|&start| {
            let shift: usize = insertions
                .iter()
                .filter(|i| i.at <= start)
                .map(|i| i.text.len())
                .sum();
            (start + shift) as u32
        })
        .collect();
    Prepared {
        code: out,
        async_calls,
        inserted,
        newlines,
    }
}
