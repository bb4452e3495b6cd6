"""Typed failures of an execution, written for a model to act on: the kind,
the message, and the line and column in the user's code."""


MESSAGE_LIMIT = 4096


def clip(text):
    """Error messages are for a model to read: keep them short."""
    if len(text) <= MESSAGE_LIMIT:
        return text
    return text[:MESSAGE_LIMIT] + f"... ({len(text):,} characters in all)"


class Failed(Exception):
    """Ends an execution with a typed error for the host."""

    def __init__(self, **error):
        error["message"] = clip(str(error.get("message", "")))
        super().__init__(error["message"])
        self.error = error


def frame_of(error, prepared):
    """(line, column) in the user's code of the innermost frame of the user's feed."""
    line = col = 0
    try:
        frames = error.traceback()
    except Exception:
        return 0, 0
    for f in frames:
        # <python-input-0> is the prelude; later feeds are the user's.
        if f.filename.startswith("<python-input-") and f.filename != "<python-input-0>":
            line, col = f.line, f.column
    if prepared is not None and line:
        col = prepared.user_column(line, col)
    return line, col


def runtime_error(error, prepared, tool_errors, loop_limit):
    inner = error.exception()
    kind = type(inner).__name__
    message = str(inner)
    line, col = frame_of(error, prepared)
    if kind == "TimeoutError" and "time limit" in message:
        return Failed(kind="timeout", message=message)
    if kind == "MemoryError" and "memory limit" in message:
        return Failed(kind="memory", message=message)
    if kind == "KeyboardInterrupt" and "_dh_loop_limit" in message:
        loop_line = int("".join(c for c in message.split(":")[-1] if c.isdigit()) or 0)
        return Failed(kind="loop_limit", line=loop_line,
                      message=f"the loop at line {loop_line} ran more than {loop_limit:,} iterations")
    if kind == "RuntimeError" and message in tool_errors:
        return Failed(kind="tool", message=message, line=line, col=col)
    return Failed(kind="runtime", type=kind, message=message, line=line, col=col)


def typing_error(error, prepared):
    text = error.display()
    line = col = 0
    for word in text.split():
        parts = word.rstrip(":").split(":")
        if len(parts) >= 3 and parts[-2].isdigit() and parts[-1].isdigit():
            line, col = int(parts[-2]), int(parts[-1])
            break
    if prepared is not None and line:
        col = prepared.user_column(line, col)
    return Failed(kind="validation", rule="type", message=text.strip(), line=line, col=col)
