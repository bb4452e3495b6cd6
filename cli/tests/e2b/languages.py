"""run_code(language=...) and create_code_context(language=...) of the real
e2b-code-interpreter SDK, against a template whose kernels carry every
language. Prints what each gave, as JSON."""

import json

from e2b_code_interpreter import Sandbox


def outcome(ex):
    return {
        "text": ex.text,
        "results": [r.text for r in ex.results],
        "stdout": "".join(ex.logs.stdout),
        "error": None if ex.error is None else {
            "name": ex.error.name, "value": ex.error.value, "traceback": ex.error.traceback},
    }


def refusal(call):
    """What a call the server should refuse raised ("accepted" if none)."""
    try:
        call()
        return "accepted"
    except Exception as e:
        return "%s: %s" % (type(e).__name__, e)


out = {}
sbx = Sandbox.create(template="polyglot")
try:
    for language, setup, code in [
        ("js", "var n = 40", "n + 2"),
        ("typescript", "const m: number = 40", "m + 2"),
        ("bash", "N=40", "echo $((N + 2))"),
        ("r", "n <- 40", "n + 2"),
    ]:
        sbx.run_code(setup, language=language)
        out[language] = outcome(sbx.run_code(code, language=language))
    out["js_error"] = outcome(sbx.run_code("throw new RangeError('too far')", language="js"))
    out["r_error"] = outcome(sbx.run_code("stop('too far')", language="r"))
    out["bash_env"] = outcome(sbx.run_code("echo \"$GREETING\"", language="bash",
                                           envs={"GREETING": "it's here"}))
    out["python_still"] = outcome(sbx.run_code("6 * 7"))

    context = sbx.create_code_context(language="r")
    out["context_language"] = context.language
    sbx.run_code("k <- 6 * 7", context=context)
    out["r_context"] = outcome(sbx.run_code("k", context=context))
    # The language's default context is another one: k is not there.
    out["r_default_after"] = outcome(sbx.run_code("exists('k')", language="r"))
    out["listed"] = sorted(c.language for c in sbx.list_code_contexts())

    out["cobol"] = refusal(lambda: sbx.run_code("x", language="cobol"))
finally:
    sbx.kill()

# The default template carries Python only: another language is refused,
# with what to do.
plain = Sandbox.create()
try:
    out["plain_r"] = refusal(lambda: plain.run_code("1", language="r"))
finally:
    plain.kill()
print(json.dumps(out))
