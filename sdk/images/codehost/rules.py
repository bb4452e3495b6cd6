"""dockhand code-mode rules: checks and rewrites applied before Monty runs code.

None of this is a security boundary: Monty is the boundary inside the code
host's container (no filesystem, network, environment or process access, and
uncatchable time, memory and recursion limits) and the container is the one
outside it. These rules are product features that keep model-written code
honest and its errors clear:

- imports are limited to the modules dockhand offers;
- no dunder names or attributes (a class may still *define* `__init__` & co.,
  and `super().__init__()` is fine);
- no `eval`, `exec`, `compile`, `open`, `input` or `breakpoint`;
- no names starting with `_dh` (dockhand's own helpers);
- string and bytes literals up to a set size;
- every loop is guarded: a `for` loop or comprehension stops after a set number
  of iterations per entry, a `while` loop after that many in one execution.

The code is parsed with the bridge's CPython `ast`. Code that CPython cannot
parse is handed to Monty unchanged, so Monty's own syntax error (or, for syntax
newer than the bridge's CPython, Monty's own behaviour) decides.

`prepare(code, tools, ...)` returns a `Prepared`: the code to feed, the byte
offsets of tool calls made synchronously (`x = tool(a)`, answered with a value
rather than a future), and a column map back to the user's code.

With `fan_out`, a gather over a comprehension of calls of one tool becomes one
external call for all of them (as bridge/src/fanout.rs explains):
`gather(*[t(x) for x in xs])` -> `_dh_fan(gather)(*[("t", _dh_args(x)) for x in xs])`,
unless the code binds the tool's name or `gather`.
"""

import ast
import re

ALLOWED_IMPORTS = (
    "asyncio", "base64", "binascii", "bisect", "collections", "copy", "csv",
    "dataclasses", "datetime", "decimal", "functools", "hashlib", "itertools",
    "json", "math", "random", "re", "sys", "time", "tomllib", "typing", "unicodedata",
)
BLOCKED_BUILTINS = ("eval", "exec", "compile", "open", "input", "breakpoint")
RESERVED_PREFIX = "_dh"
GATHER_NAMES = ("gather",)
FORMAT_DUNDER = re.compile(r"\{[^{}]*(\.|\[)\s*_")


class Rejected(Exception):
    """The code broke a rule; carries the rule, line and column (1-based)."""

    def __init__(self, rule, message, node=None, line=0, col=0):
        super().__init__(message)
        self.rule = rule
        self.line = getattr(node, "lineno", line) or line
        self.col = (getattr(node, "col_offset", col - 1) + 1) if node is not None else col


class Prepared:
    """Code ready for Monty."""

    def __init__(self, code, sync_calls, inserted):
        self.code = code
        self.sync_calls = sync_calls
        # (line, 1-based column in the user's code, length), in the order
        # the inserted texts stand in the fed code.
        self._inserted = inserted

    def user_column(self, line, col):
        """Maps a 1-based column of the fed code back to the user's code."""
        shift = 0
        for (l, at, n) in self._inserted:
            if l != line:
                continue
            fed_at = at + shift
            if col < fed_at:
                break
            if col < fed_at + n:
                return at  # inside inserted text: where it went in
            shift += n
        return max(1, col - shift)


def _is_dunder(name):
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _is_gather(func):
    if isinstance(func, ast.Name):
        return func.id in GATHER_NAMES
    return (isinstance(func, ast.Attribute) and func.attr == "gather"
            and isinstance(func.value, ast.Name) and func.value.id == "asyncio")


def _is_super_call(node):
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "super")


class _Checker(ast.NodeVisitor):
    def __init__(self, max_literal):
        self.max_literal = max_literal
        self.class_depth = 0

    def visit_Import(self, node):
        for alias in node.names:
            self._check_module(alias.name, node)

    def visit_ImportFrom(self, node):
        if node.level:
            raise Rejected("import", "relative imports are not available", node)
        self._check_module(node.module or "", node)
        for alias in node.names:
            if _is_dunder(alias.name) or alias.name.startswith(RESERVED_PREFIX):
                raise Rejected("dunder", f"`{alias.name}` cannot be imported", node)

    def _check_module(self, name, node):
        if name.split(".")[0] not in ALLOWED_IMPORTS:
            raise Rejected(
                "import",
                f"module `{name}` is not available; the modules offered are "
                + ", ".join(ALLOWED_IMPORTS), node)

    def visit_Name(self, node):
        if _is_dunder(node.id):
            raise Rejected("dunder", f"dunder names like `{node.id}` are not allowed", node)
        if node.id.startswith(RESERVED_PREFIX):
            raise Rejected("reserved", f"names starting with `{RESERVED_PREFIX}` are reserved", node)
        if node.id in BLOCKED_BUILTINS and isinstance(node.ctx, ast.Load):
            raise Rejected("builtin", f"`{node.id}` is not available in this sandbox", node)

    def visit_Attribute(self, node):
        if node.attr.startswith("__") and not _is_super_call(node.value):
            raise Rejected(
                "dunder", f"dunder attributes like `.{node.attr}` are not allowed", node)
        self.generic_visit(node)

    def visit_ClassDef(self, node):
        self._check_binding(node.name, node)
        self.class_depth += 1
        self.generic_visit(node)
        self.class_depth -= 1

    def visit_FunctionDef(self, node):
        # Special methods are how classes work: a class body may define them.
        if not (self.class_depth and _is_dunder(node.name)):
            self._check_binding(node.name, node)
        self._check_arguments(node.args)
        saved, self.class_depth = self.class_depth, 0
        self.generic_visit(node)
        self.class_depth = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        self._check_arguments(node.args)
        self.generic_visit(node)

    def _check_arguments(self, args):
        every = args.posonlyargs + args.args + args.kwonlyargs
        every += [a for a in (args.vararg, args.kwarg) if a is not None]
        for a in every:
            self._check_binding(a.arg, a)

    def visit_ExceptHandler(self, node):
        if node.name:
            self._check_binding(node.name, node)
        self.generic_visit(node)

    def visit_alias(self, node):
        if node.asname:
            self._check_binding(node.asname, node)

    def _check_binding(self, name, node):
        if _is_dunder(name):
            raise Rejected("dunder", f"dunder names like `{name}` are not allowed", node)
        if name.startswith(RESERVED_PREFIX):
            raise Rejected("reserved", f"names starting with `{RESERVED_PREFIX}` are reserved", node)

    def visit_Constant(self, node):
        if isinstance(node.value, (str, bytes)):
            if len(node.value) > self.max_literal:
                raise Rejected(
                    "literal_size",
                    f"a literal of {len(node.value):,} characters is over the limit of "
                    f"{self.max_literal:,}; pass large data as an input or get it from a tool",
                    node)
            if isinstance(node.value, str) and FORMAT_DUNDER.search(node.value):
                raise Rejected(
                    "dunder", "format fields may not reach attributes or items starting with `_`", node)


def _bound_names(tree):
    """Every name the code binds anywhere; importing asyncio or its gather
    binds nothing the prelude has not."""
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            names.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.arg):
            names.add(n.arg)
        elif isinstance(n, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and n.name:
            names.add(n.name)
        elif isinstance(n, ast.MatchMapping) and n.rest:
            names.add(n.rest)
        elif isinstance(n, ast.Import):
            for a in n.names:
                top = a.name.split(".")[0]
                if a.asname or top != "asyncio":
                    names.add(a.asname or top)
        elif isinstance(n, ast.ImportFrom):
            for a in n.names:
                if a.asname or n.module != "asyncio" or a.name != "gather":
                    names.add(a.asname or a.name)
    return names


def _suspends(node, tools):
    """Whether an expression awaits, yields or calls a tool."""
    for n in ast.walk(node):
        if isinstance(n, (ast.Await, ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in tools:
            return True
    return False


def _fan_out_call(node, tools, bound):
    """The one tool call a gather `node` over a comprehension makes, if it
    may fan out."""
    if not _is_gather(node.func) or node.keywords or len(node.args) != 1:
        return None
    gather = node.func.id if isinstance(node.func, ast.Name) else "asyncio"
    star = node.args[0]
    if (gather in bound or not isinstance(star, ast.Starred)
            or not isinstance(star.value, (ast.ListComp, ast.GeneratorExp))):
        return None
    call = star.value.elt
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
        return None
    if call.func.id not in tools or call.func.id in bound:
        return None
    if any(_suspends(a, tools) for a in call.args + call.keywords):
        return None
    return call


class _Rewriter(ast.NodeVisitor):
    """Collects loop-guard insertions and synchronous tool calls."""

    def __init__(self, tools, bound=None):
        self.tools = tools
        self.bound = bound  # names the code binds; None: no fan-out
        self.insertions = []  # (line, col, depth, text, is_close)
        self.sync_calls = []  # (line, col)
        self.loops = 0
        self.gather_depth = 0
        self.awaited = set()

    def _wrap(self, expr, before, after, depth):
        self.insertions.append((expr.lineno, expr.col_offset, depth, before, False))
        self.insertions.append((expr.end_lineno, expr.end_col_offset, depth, after, True))

    def _guard_for(self, node):
        self._wrap(node.iter, "_dh_loop(", f", {node.iter.lineno})", self._depth(node.iter))

    def _depth(self, expr):
        """How far the expression reaches: outer loops reach further."""
        return (expr.end_lineno - expr.lineno) * 100_000 + expr.end_col_offset - expr.col_offset

    def visit_For(self, node):
        self._guard_for(node)
        self.generic_visit(node)

    visit_AsyncFor = visit_For

    def visit_comprehension(self, node):
        self._guard_for(node)
        self.generic_visit(node)

    def visit_While(self, node):
        self.loops += 1
        self._wrap(node.test, f"_dh_tick({self.loops}, {node.lineno}) and (", ")",
                   self._depth(node.test))
        self.generic_visit(node)

    def visit_Await(self, node):
        if isinstance(node.value, ast.Call):
            self.awaited.add(id(node.value))
        self.generic_visit(node)

    def visit_Call(self, node):
        fan = None if self.bound is None else _fan_out_call(node, self.tools, self.bound)
        if fan is not None:
            self._wrap(node.func, "_dh_fan(", ")", self._depth(node.func))
            self._wrap(fan.func, '("', '", _dh_args', self._depth(fan.func))
            self.insertions.append((fan.end_lineno, fan.end_col_offset, self._depth(fan), ")", True))
        if (isinstance(node.func, ast.Name) and node.func.id in self.tools
                and not self.gather_depth and id(node) not in self.awaited):
            self.sync_calls.append((node.lineno, node.col_offset))
        if _is_gather(node.func):
            self.gather_depth += 1
            self.generic_visit(node)
            self.gather_depth -= 1
        else:
            self.generic_visit(node)


def _line_starts(data):
    starts = [0]
    for i, b in enumerate(data):
        if b == 0x0A:
            starts.append(i + 1)
    return starts


def prepare(code, tools, max_literal=10_000, max_code_bytes=1 << 20, fan_out=False):
    """Checks `code` and rewrites it for Monty; raises `Rejected`."""
    data = code.encode("utf-8", "surrogatepass")
    if len(data) > max_code_bytes:
        raise Rejected("code_size", f"the code is {len(data):,} bytes; the limit is {max_code_bytes:,}",
                       line=1, col=1)
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        # Monty parses it and reports its own syntax error (or runs syntax the
        # bridge's CPython does not know, without the checks).
        return Prepared(code, set(), [])
    try:
        _Checker(max_literal).visit(tree)
        rewriter = _Rewriter(set(tools), _bound_names(tree) if fan_out else None)
        rewriter.visit(tree)
    except RecursionError:
        raise Rejected("nesting", "the code is nested too deeply; flatten it", line=1, col=1)
    starts = _line_starts(data)
    out = bytearray(data)
    inserted = []
    # From the end, so earlier offsets stay valid. Text inserted at an offset
    # lands before text inserted there earlier: at one offset an outer loop's
    # closing text goes in first, its opening text last.
    def order(t):
        line, col, depth, _, is_close = t
        return (starts[line - 1] + col, is_close, depth if is_close else -depth)

    for line, col, depth, text, is_close in sorted(rewriter.insertions, key=order, reverse=True):
        at = starts[line - 1] + col
        out[at:at] = text.encode()
        inserted.append((line, col + 1, len(text)))
    fed = out.decode("utf-8", "surrogatepass")
    sync = set()
    if rewriter.sync_calls:
        # Offsets of the synchronous calls in the fed code: parse it again.
        again = _Rewriter(set(tools))
        again.visit(ast.parse(fed))
        fed_starts = _line_starts(out)
        sync = {fed_starts[l - 1] + c for (l, c) in again.sync_calls}
    return Prepared(fed, sync, inserted[::-1])
