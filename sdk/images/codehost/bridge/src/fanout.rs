//! Fan-out: `gather(*[tool(x) for x in xs])` as one suspension.
//!
//! Each call of a tool is a suspension of Monty's worker, a round trip
//! between two processes (tens of microseconds on a busy machine). The most
//! common shape of concurrent code, a gather over a comprehension of calls of
//! one tool, would make one per item. `guards` rewrites that shape so the
//! comprehension builds the calls' arguments and gather becomes a single
//! external call, `_dh_fanout`, carrying all of them:
//!
//! ```text
//! gather(*[t(x) for x in xs])  ->  _dh_fan(gather)(*[("t", _dh_args(x)) for x in xs])
//! ```
//!
//! (only insertions, so columns still map back to the user's code). The
//! bridge sends every call to the host at once and resolves the one future
//! with all the results in order, or with the first failure, as
//! `asyncio.gather` does. The arguments are all evaluated before the first
//! call goes out; CPython starts none of them before gather either.
//!
//! Only applied where the names mean what they seem: neither the tool nor
//! `gather` is bound by the code, and the code runs in a fresh session (a
//! REPL session may have bound them in an earlier execution) without type
//! checking (which checks calls against the tools' stubs).

use std::collections::HashSet;

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{self as ast, Expr, ExprContext, Stmt};
use ruff_text_size::{Ranged, TextRange};

use crate::guards::is_gather;

/// The external function the rewritten gather calls (see the prelude).
pub const FANOUT_FUNCTION: &str = "_dh_fanout";

/// Where to insert text for one gather to fan out.
#[derive(Debug, PartialEq)]
pub struct Fan {
    /// The callee `gather` (or `asyncio.gather`): wrapped in `_dh_fan(...)`.
    pub gather: TextRange,
    /// The tool's name in the comprehension: becomes `("name", _dh_args`.
    pub tool: TextRange,
    /// The whole call of the tool: closed with `)`.
    pub call: TextRange,
}

/// The fan-out for `call`, if it is a gather over a comprehension of calls
/// of one tool whose name, like `gather`, the code never binds.
pub fn plan(call: &ast::ExprCall, tools: &HashSet<String>, bound: &HashSet<String>) -> Option<Fan> {
    if !is_gather(&call.func) {
        return None;
    }
    // The name the callee is reached by: `gather`, or `asyncio` in `asyncio.gather`.
    let gather_name = match &*call.func {
        Expr::Attribute(_) => "asyncio",
        _ => "gather",
    };
    // `return_exceptions=` changes what gather gives back: leave it be.
    let arguments = &call.arguments;
    if bound.contains(gather_name) || !arguments.keywords.is_empty() || arguments.args.len() != 1 {
        return None;
    }
    let Expr::Starred(starred) = &arguments.args[0] else {
        return None;
    };
    let element = match &*starred.value {
        Expr::ListComp(c) => &c.elt,
        Expr::Generator(g) => &g.elt,
        _ => return None,
    };
    let Expr::Call(tool_call) = &**element else {
        return None;
    };
    let Expr::Name(tool) = &*tool_call.func else {
        return None;
    };
    let name = tool.id.as_str();
    if !tools.contains(name) || bound.contains(name) {
        return None;
    }
    // Arguments that call a tool or await would run in a different order.
    let mut inner = Suspends {
        tools,
        found: false,
    };
    inner.visit_arguments(&tool_call.arguments);
    if inner.found {
        return None;
    }
    Some(Fan {
        gather: call.func.range(),
        tool: tool.range,
        call: tool_call.range(),
    })
}

/// Whether expressions call a tool, await or yield.
struct Suspends<'a> {
    tools: &'a HashSet<String>,
    found: bool,
}

impl<'a> Visitor<'a> for Suspends<'_> {
    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Await(_) | Expr::Yield(_) | Expr::YieldFrom(_) => self.found = true,
            Expr::Call(c) if matches!(&*c.func, Expr::Name(n) if self.tools.contains(n.id.as_str())) =>
            {
                self.found = true;
            }
            _ => visitor::walk_expr(self, expr),
        }
    }
}

/// Every name `body` binds anywhere: assignments, definitions, parameters,
/// imports, `except ... as`, patterns and type parameters. `import asyncio`
/// and `from asyncio import gather` bind what the prelude already does and
/// are left out.
pub fn bound_names(body: &[Stmt]) -> HashSet<String> {
    let mut names = BoundNames::default();
    names.visit_body(body);
    names.0
}

#[derive(Default)]
struct BoundNames(HashSet<String>);

impl BoundNames {
    fn add(&mut self, name: &str) {
        self.0.insert(name.to_string());
    }
}

impl<'a> Visitor<'a> for BoundNames {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::FunctionDef(f) => self.add(f.name.id.as_str()),
            Stmt::ClassDef(c) => self.add(c.name.id.as_str()),
            Stmt::Import(s) => {
                for alias in &s.names {
                    match &alias.asname {
                        Some(asname) => self.add(asname.id.as_str()),
                        None => {
                            let top = alias.name.id.as_str().split('.').next().unwrap_or_default();
                            if top != "asyncio" {
                                self.add(top);
                            }
                        }
                    }
                }
            }
            Stmt::ImportFrom(s) => {
                let from_asyncio = s
                    .module
                    .as_ref()
                    .is_some_and(|m| m.id.as_str() == "asyncio");
                for alias in &s.names {
                    match &alias.asname {
                        Some(asname) => self.add(asname.id.as_str()),
                        None if from_asyncio && alias.name.id.as_str() == "gather" => {}
                        None => self.add(alias.name.id.as_str()),
                    }
                }
            }
            _ => {}
        }
        visitor::walk_stmt(self, stmt);
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        if let Expr::Name(n) = expr {
            if n.ctx != ExprContext::Load {
                self.add(n.id.as_str());
            }
        }
        visitor::walk_expr(self, expr);
    }

    fn visit_parameter(&mut self, parameter: &'a ast::Parameter) {
        self.add(parameter.name.id.as_str());
        visitor::walk_parameter(self, parameter);
    }

    fn visit_except_handler(&mut self, handler: &'a ast::ExceptHandler) {
        let ast::ExceptHandler::ExceptHandler(h) = handler;
        if let Some(name) = &h.name {
            self.add(name.id.as_str());
        }
        visitor::walk_except_handler(self, handler);
    }

    fn visit_pattern(&mut self, pattern: &'a ast::Pattern) {
        let name = match pattern {
            ast::Pattern::MatchAs(p) => p.name.as_ref(),
            ast::Pattern::MatchStar(p) => p.name.as_ref(),
            ast::Pattern::MatchMapping(p) => p.rest.as_ref(),
            _ => None,
        };
        if let Some(name) = name {
            self.add(name.id.as_str());
        }
        visitor::walk_pattern(self, pattern);
    }

    fn visit_type_param(&mut self, type_param: &'a ast::TypeParam) {
        self.add(type_param.name().id.as_str());
        visitor::walk_type_param(self, type_param);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fed(code: &str, fan_out: bool) -> String {
        let tools = ["t", "u"].iter().map(|t| t.to_string()).collect();
        let limits = crate::rules::Limits {
            max_literal: 10_000,
            max_code_bytes: 1 << 20,
            policy: crate::rules::Policy::STRICT,
        };
        crate::rules::prepare(code, &tools, &limits, fan_out)
            .unwrap()
            .code
    }

    #[test]
    fn a_gather_over_calls_of_one_tool_fans_out() {
        assert_eq!(
            fed("rs = await gather(*[t(i) for i in range(3)])", true),
            "rs = await _dh_fan(gather)(*[(\"t\", _dh_args(i)) for i in _dh_loop((range(3)), 1)])"
        );
        assert_eq!(
            fed("import asyncio\nr = asyncio.gather(*(t(x, k=1) for x in xs if x))", true),
            "import asyncio\nr = _dh_fan(asyncio.gather)(*((\"t\", _dh_args(x, k=1)) for x in _dh_loop((xs), 2) if x))"
        );
        assert_eq!(
            fed("from asyncio import gather\nawait gather(*[t(i) for i in a])", true),
            "from asyncio import gather\nawait _dh_fan(gather)(*[(\"t\", _dh_args(i)) for i in _dh_loop((a), 2)])"
        );
    }

    #[test]
    fn fan_outs_need_no_loop_guard() {
        let tools = ["t"].iter().map(|t| t.to_string()).collect();
        let limits = crate::rules::Limits {
            max_literal: 10_000,
            max_code_bytes: 1 << 20,
            policy: crate::rules::Policy::DEFAULT,
        };
        let p = crate::rules::prepare(
            "r = await gather(*[t(i) for i in a])",
            &tools,
            &limits,
            true,
        )
        .unwrap();
        assert_eq!(
            p.code,
            "r = await _dh_fan(gather)(*[(\"t\", _dh_args(i)) for i in a])"
        );
    }

    #[test]
    fn other_shapes_and_rebound_names_do_not_fan_out() {
        for code in [
            "await gather(*[t(i) for i in a], return_exceptions=True)",
            "await gather(*[t(i) for i in a], t(0))",
            "await gather(t(0), t(1))",
            "await gather(*[len(i) for i in a])",
            "await gather(*[t(u(i)) for i in a])",
            "await gather(*[t(await x) for x in a])",
            "await gather(*[i.t(1) for i in a])",
            "t = print\nawait gather(*[t(i) for i in a])",
            "def gather(*a): return a\nawait gather(*[t(i) for i in a])",
            "import json as asyncio\nawait asyncio.gather(*[t(i) for i in a])",
            "await gather(*[t for t in a])",
        ] {
            assert!(!fed(code, true).contains("_dh_fan"), "{code}");
        }
        assert!(!fed("await gather(*[t(i) for i in a])", false).contains("_dh_fan"));
    }

    #[test]
    fn columns_map_back_through_a_fan_out() {
        let tools = ["t"].iter().map(|t| t.to_string()).collect();
        let limits = crate::rules::Limits {
            max_literal: 10_000,
            max_code_bytes: 1 << 20,
            policy: crate::rules::Policy::STRICT,
        };
        let p = crate::rules::prepare("r = gather(*[t(1/i) for i in a])", &tools, &limits, true)
            .unwrap();
        // `1/i` is at column 16 of the user's line.
        let fed_col = p.code.find("1/i").unwrap() + 1;
        assert_eq!(p.user_column(1, fed_col), 16);
        // The fan-out call itself reports where the user's gather is.
        assert_eq!(p.user_column(1, 5), 5);
    }

    fn bound(code: &str) -> HashSet<String> {
        let parsed = ruff_python_parser::parse_module(code).unwrap();
        bound_names(&parsed.syntax().body)
    }

    #[test]
    fn every_kind_of_binding_is_found() {
        let code = "a = 1\nb: int = 2\ndef c(d, *e, f=1, **g): pass\nclass H: pass\n\
                    import i.j\nimport k as l\nfrom m import n, o as p\n\
                    try:\n    pass\nexcept Exception as q:\n    pass\n\
                    for r in []: pass\n[s for s in []]\n(t := 1)\nlambda u: u\n\
                    match a:\n    case [v, *w]: pass\n    case {'x': 1, **x}: pass\n\
                    del a\nwith open('f') as y: pass\n";
        let found = bound(code);
        for name in [
            "a", "b", "c", "d", "e", "f", "g", "H", "i", "l", "n", "p", "q", "r", "s", "t", "u",
            "v", "w", "x", "y",
        ] {
            assert!(found.contains(name), "{name} not in {found:?}");
        }
        assert!(!found.contains("open"));
    }

    #[test]
    fn importing_asyncio_or_its_gather_binds_nothing_new() {
        let found = bound("import asyncio\nfrom asyncio import gather\n");
        assert!(found.is_empty(), "{found:?}");
        let found = bound("from asyncio import sleep as gather\nimport json as asyncio\n");
        assert!(
            found.contains("gather") && found.contains("asyncio"),
            "{found:?}"
        );
    }
}
