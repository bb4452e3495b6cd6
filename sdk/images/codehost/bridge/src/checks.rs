//! The checks `rules::prepare` makes before Monty runs code, by policy.
//!
//! Under both policies names starting with `_dh` are refused: they are the
//! prelude's, and code that rebinds them would break its own loop guards and
//! fan-outs. The rest is the strict policy's (see `rules`).

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{
    self as ast, Expr, ExprContext, InterpolatedStringElement, Parameters, Stmt,
};
use ruff_text_size::TextRange;

use crate::rules::{thousands, Lines, Policy, Rejected};

/// The modules `import` may name under the strict policy.
pub const ALLOWED_IMPORTS: &[&str] = &[
    "__future__",
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
/// The host's modules (tools and skills, see `modules`): the host answers
/// their imports, and an import of one it does not offer fails as any
/// missing module does.
pub const HOST_MODULES: &[&str] = &["tools", "skills"];
/// Builtins the strict policy refuses by name.
const BLOCKED_BUILTINS: &[&str] = &["eval", "exec", "compile", "open", "input", "breakpoint"];
/// Dunder attributes that reach the interpreter's internals (a class's
/// bases and subclasses, a function's globals and code, the builtins): the
/// paths out of a Python sandbox. The strict policy refuses them; other
/// dunders (`type(x).__name__`, `a.__add__(b)`) are ordinary code.
const INTERNAL_DUNDERS: &[&str] = &[
    "__base__",
    "__bases__",
    "__builtins__",
    "__class__",
    "__closure__",
    "__code__",
    "__defaults__",
    "__dict__",
    "__frame__",
    "__func__",
    "__getattribute__",
    "__globals__",
    "__import__",
    "__init_subclass__",
    "__kwdefaults__",
    "__loader__",
    "__mro__",
    "__reduce__",
    "__reduce_ex__",
    "__self__",
    "__spec__",
    "__subclasses__",
    "__traceback__",
    "__wrapped__",
];
/// Dunder names code may read under the strict policy.
const READABLE_DUNDER_NAMES: &[&str] = &["__name__", "__doc__"];
const RESERVED_PREFIX: &str = "_dh";

fn is_dunder(name: &str) -> bool {
    name.len() > 4 && name.starts_with("__") && name.ends_with("__")
}

fn is_internal(name: &str) -> bool {
    INTERNAL_DUNDERS.contains(&name)
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
            // After `!` or `:` comes a conversion or a format spec, where
            // `.` and `_` are options; a nested field starts over at `{`.
            let mut in_spec = false;
            while j < bytes.len() && bytes[j] != b'{' && bytes[j] != b'}' {
                if bytes[j] == b':' || bytes[j] == b'!' {
                    in_spec = true;
                }
                if !in_spec && (bytes[j] == b'.' || bytes[j] == b'[') {
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

/// The first rule `body` breaks under `policy`, if any.
pub fn check(
    body: &[Stmt],
    lines: &Lines<'_>,
    policy: Policy,
    max_literal: usize,
) -> Option<Rejected> {
    let mut checker = Checker {
        lines,
        policy,
        max_literal,
        class_depth: 0,
        defined_dunders: std::collections::HashSet::new(),
        found: None,
    };
    checker.visit_body(body);
    checker.found
}

struct Checker<'a> {
    lines: &'a Lines<'a>,
    policy: Policy,
    max_literal: usize,
    /// Dunder-named functions the code defined (special methods a
    /// decorator may put into a class).
    defined_dunders: std::collections::HashSet<String>,
    /// How many class bodies enclose the statement being checked (a
    /// function body starts again at zero).
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
        if self.policy.imports && !ALLOWED_IMPORTS.contains(&top) && !HOST_MODULES.contains(&top) {
            self.reject(
                "import",
                format!(
                    "module `{name}` is not available; the modules offered are {}",
                    ALLOWED_IMPORTS[1..].join(", ")
                ),
                range,
            );
        }
    }

    /// A name the code binds (`def`, `class`, a parameter, `as`).
    fn check_binding(&mut self, name: &str, range: TextRange) {
        if name.starts_with(RESERVED_PREFIX) {
            self.reject(
                "reserved",
                format!("names starting with `{RESERVED_PREFIX}` are reserved"),
                range,
            );
        } else if self.policy.dunders && is_dunder(name) && self.class_depth == 0 {
            self.reject(
                "dunder",
                format!("dunder names like `{name}` are not allowed"),
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

    fn check_name(&mut self, name: &ast::ExprName) {
        let id = name.id.as_str();
        if id.starts_with(RESERVED_PREFIX) {
            self.reject(
                "reserved",
                format!("names starting with `{RESERVED_PREFIX}` are reserved"),
                name.range,
            );
            return;
        }
        if is_dunder(id) && self.policy.dunders {
            // A class body may set its special attributes (`__hash__ = None`).
            let class_attribute = self.class_depth > 0 && name.ctx == ExprContext::Store;
            // A special method the code defined, read to put it in a class.
            let own = name.ctx == ExprContext::Load && self.defined_dunders.contains(id);
            if !(class_attribute || own || READABLE_DUNDER_NAMES.contains(&id)) || is_internal(id) {
                self.reject(
                    "dunder",
                    format!("dunder names like `{id}` are not allowed"),
                    name.range,
                );
            }
        } else if self.policy.builtins
            && BLOCKED_BUILTINS.contains(&id)
            && name.ctx == ExprContext::Load
        {
            self.reject(
                "builtin",
                format!("`{id}` is not available in this sandbox"),
                name.range,
            );
        }
    }

    fn check_text(&mut self, text: &str, chars: usize, is_str: bool, range: TextRange) {
        if self.policy.literal_size && chars > self.max_literal {
            self.reject(
                "literal_size",
                format!(
                    "a literal of {} characters is over the limit of {}; pass large data as an input or get it from a tool",
                    thousands(chars),
                    thousands(self.max_literal)
                ),
                range,
            );
        } else if self.policy.dunders && is_str && format_reaches_underscore(text) {
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
                if self.policy.imports && s.level > 0 {
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
                    if name.starts_with(RESERVED_PREFIX)
                        || (self.policy.dunders && is_internal(name))
                    {
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
                // Special methods are how classes work: a class body may
                // define them, and so may a decorator that puts one into a
                // class. Naming a function is no way out; the reserved
                // prefix still applies.
                let name = f.name.id.as_str();
                if is_dunder(name) {
                    self.defined_dunders.insert(name.to_string());
                } else {
                    self.check_binding(name, f.range);
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
            Expr::Name(n) => self.check_name(n),
            Expr::Attribute(a) => {
                let attr = a.attr.id.as_str();
                if self.policy.dunders && is_internal(attr) && !is_super_call(&a.value) {
                    self.reject(
                        "dunder",
                        format!("`.{attr}` reaches the interpreter's internals and is not allowed"),
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
