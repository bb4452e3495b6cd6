//! [`Sandbox`]: a one-shot job declared once and run many times.

use serde::{Deserialize, Serialize};

use std::time::Duration;

use super::value::Type;
use crate::error::{Error, Result};
use crate::image::ImageSpec;
use crate::settings::Secret;
use crate::settings::{check_env_and_secrets, Memory};
use crate::settings::{CacheMode, Hardening, Network, Runtime};
use crate::util::is_identifier;

/// Default cap on captured stdout and stderr, each.
pub const DEFAULT_OUTPUT_LIMIT: usize = 1024 * 1024;

/// A declared input or output.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Param {
    /// Its name: a Python identifier, also the file name under `/var/inputs` or `/var/outputs`.
    pub name: String,
    /// Its type.
    pub ty: Type,
}

/// What a sandbox runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Program {
    /// Python source.
    Code {
        /// The source.
        source: String,
        /// Auto-IO: inputs become Python variables and declared outputs are
        /// written from variables of the same names. Off = verbatim: the script
        /// reads `/var/inputs` and writes `/var/outputs` itself.
        auto_io: bool,
    },
    /// Any program with arguments. `{{name}}` in an argument is replaced by the
    /// input's text (its path, `/var/inputs/name`, for File and Dir inputs).
    Command {
        /// The program (looked up in the image's PATH).
        program: String,
        /// Its arguments.
        args: Vec<String>,
    },
}

/// A one-shot sandbox: code or a command, typed inputs and outputs, an image.
///
/// Specs are plain data (`Clone`, `Send + Sync`, serde), validated once by
/// [`SandboxBuilder::build`]; run them with [`Client::run`](crate::Client::run).
///
/// ```
/// use dockhand::{Sandbox, Type};
///
/// let double = Sandbox::code("double", "result = x * 2")
///     .input("x", Type::Int)
///     .output("result", Type::Int)
///     .build()
///     .unwrap();
/// assert_eq!(double.name(), "double");
///
/// let both = Sandbox::builder("bad").code("print(1)").command("ls").build();
/// assert!(both.is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Sandbox {
    pub(crate) name: String,
    pub(crate) program: Program,
    pub(crate) inputs: Vec<Param>,
    pub(crate) outputs: Vec<Param>,
    pub(crate) image: ImageSpec,
    pub(crate) output_limit: usize,
    pub(crate) runtime: Runtime,
}

impl Sandbox {
    /// Starts a builder.
    pub fn builder(name: impl Into<String>) -> SandboxBuilder {
        SandboxBuilder {
            name: name.into(),
            code: None,
            command: None,
            args: Vec::new(),
            auto_io: true,
            inputs: Vec::new(),
            outputs: Vec::new(),
            image: ImageSpec::default(),
            output_limit: DEFAULT_OUTPUT_LIMIT,
            runtime: Runtime::default(),
            memory: None,
        }
    }

    /// A Python code sandbox (auto-IO on).
    pub fn code(name: impl Into<String>, source: impl Into<String>) -> SandboxBuilder {
        Sandbox::builder(name).code(source)
    }

    /// A command sandbox.
    pub fn command(name: impl Into<String>, program: impl Into<String>) -> SandboxBuilder {
        Sandbox::builder(name).command(program)
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it runs.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Declared inputs, in order.
    pub fn inputs(&self) -> &[Param] {
        &self.inputs
    }

    /// Declared outputs, in order.
    pub fn outputs(&self) -> &[Param] {
        &self.outputs
    }

    /// The image it runs in.
    pub fn image(&self) -> &ImageSpec {
        &self.image
    }

    /// Cap on captured stdout and stderr, each, in bytes.
    pub fn output_limit(&self) -> usize {
        self.output_limit
    }

    /// Runtime controls (limits, timeout, retries, env, secrets, network, hardening, cache).
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }
}

/// Builds a [`Sandbox`]; [`build`](SandboxBuilder::build) validates it.
#[derive(Debug, Clone)]
#[must_use = "call .build() to get a Sandbox"]
pub struct SandboxBuilder {
    name: String,
    code: Option<String>,
    command: Option<String>,
    args: Vec<String>,
    auto_io: bool,
    inputs: Vec<Param>,
    outputs: Vec<Param>,
    image: ImageSpec,
    output_limit: usize,
    runtime: Runtime,
    memory: Option<Memory>,
}

impl SandboxBuilder {
    /// Runs Python source.
    pub fn code(mut self, source: impl Into<String>) -> Self {
        self.code = Some(source.into());
        self
    }

    /// Runs a program.
    pub fn command(mut self, program: impl Into<String>) -> Self {
        self.command = Some(program.into());
        self
    }

    /// Arguments of the command; `{{name}}` is replaced by input `name`.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Declares an input.
    pub fn input(mut self, name: impl Into<String>, ty: Type) -> Self {
        self.inputs.push(Param {
            name: name.into(),
            ty,
        });
        self
    }

    /// Declares an output.
    pub fn output(mut self, name: impl Into<String>, ty: Type) -> Self {
        self.outputs.push(Param {
            name: name.into(),
            ty,
        });
        self
    }

    /// Turns auto-IO off: the script runs exactly as written.
    pub fn verbatim(mut self) -> Self {
        self.auto_io = false;
        self
    }

    /// Sets auto-IO explicitly (on by default for code).
    pub fn auto_io(mut self, on: bool) -> Self {
        self.auto_io = on;
        self
    }

    /// The image to run in (default: [`ImageSpec::default`], plain Python).
    pub fn image(mut self, image: ImageSpec) -> Self {
        self.image = image;
        self
    }

    /// Caps captured stdout and stderr at `bytes` each (default 1 MiB).
    pub fn output_limit(mut self, bytes: usize) -> Self {
        self.output_limit = bytes;
        self
    }

    /// Caps what `/var/outputs` may hold when the run ends (default 1 GiB);
    /// more is [`Error::OutputTooLarge`](crate::Error::OutputTooLarge). File
    /// and Dir outputs stream to disk, so this bounds disk use, not memory.
    pub fn outputs_limit(mut self, bytes: u64) -> Self {
        self.runtime.outputs_limit = bytes;
        self
    }

    crate::settings::resource_methods!(resources: runtime.resources, memory: memory, isolation: runtime.isolation);

    /// Wall-clock limit per attempt, from start to exit; on expiry the container
    /// is killed and the run fails with [`Error::Timeout`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.runtime.timeout = Some(timeout);
        self
    }

    /// Re-runs a failed attempt up to `n` more times, each in a fresh container.
    /// Input and image errors are not retried. The attempt number is in the
    /// container's `DOCKHAND_ATTEMPT` variable (1-based).
    pub fn retries(mut self, n: u32) -> Self {
        self.runtime.retries = n;
        self
    }

    /// Sets an environment variable.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.runtime.env.push((name.into(), value.into()));
        self
    }

    /// Adds a secret (see [`Secret`]).
    pub fn secret(mut self, secret: Secret) -> Self {
        self.runtime.secrets.push(secret);
        self
    }

    /// Network access: `false`/[`Network::None`] (the default), `true`/
    /// [`Network::Bridge`], a [`Network::Named`] network, or an
    /// [`Egress`](crate::Egress) policy (listed hosts only).
    pub fn network(mut self, network: impl Into<Network>) -> Self {
        self.runtime.network = network.into();
        self
    }

    /// Security settings (safe by default; see [`Hardening`]).
    pub fn hardening(mut self, hardening: Hardening) -> Self {
        self.runtime.hardening = hardening;
        self
    }

    /// Output cache mode (default [`CacheMode::Disable`]: every call runs).
    /// [`CacheMode::Auto`] replays a stored result for an identical call;
    /// use it for deterministic sandboxes only.
    pub fn cache(mut self, mode: CacheMode) -> Self {
        self.runtime.cache = mode;
        self
    }

    /// Exit codes that count as success besides 0 (a test runner that exits
    /// 1 when tests fail, say); [`RunOutput::exit_code`](crate::RunOutput)
    /// says which one it was.
    pub fn accept_exit_codes(mut self, codes: impl IntoIterator<Item = i64>) -> Self {
        for code in codes {
            if !self.runtime.accepted_exit_codes.contains(&code) {
                self.runtime.accepted_exit_codes.push(code);
            }
        }
        self
    }

    /// Allows caching runs with network access (off by default: what such a
    /// run fetched may have changed, and a hit would replay the old data).
    pub fn cache_with_network(mut self, allow: bool) -> Self {
        self.runtime.cache_with_network = allow;
        self
    }

    /// Allows caching runs that use secrets (off by default: a result may
    /// depend on a secret's value, which is never part of the cache key).
    pub fn cache_with_secrets(mut self, allow: bool) -> Self {
        self.runtime.cache_with_secrets = allow;
        self
    }

    /// Validates and returns the sandbox.
    pub fn build(mut self) -> Result<Sandbox> {
        crate::settings::settle_resources(&mut self.runtime.resources, &mut self.memory)
            .and_then(|()| check_runtime(&self.runtime))
            .map_err(|msg| Error::spec("sandbox", format!("`{}`: {msg}", self.name)))?;
        let bad = |msg: String| Err(Error::spec("sandbox", format!("`{}`: {msg}", self.name)));
        let name_ok = !self.name.is_empty()
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
        if !name_ok {
            return bad("a name is letters, digits, `_`, `.` and `-`".into());
        }
        crate::settings::check_network(&self.runtime.network, &self.runtime.secrets)?;
        let program = match (self.code, self.command) {
            (Some(_), Some(_)) => return bad("give either code or a command, not both".into()),
            (None, None) => return bad("give code or a command".into()),
            (Some(source), None) => {
                if source.trim().is_empty() {
                    return bad("the code is empty".into());
                }
                if !self.args.is_empty() {
                    return bad("arguments are for commands; code reads its inputs".into());
                }
                Program::Code {
                    source,
                    auto_io: self.auto_io,
                }
            }
            (None, Some(program)) => {
                if program.trim().is_empty() {
                    return bad("the command is empty".into());
                }
                Program::Command {
                    program,
                    args: self.args,
                }
            }
        };
        for (what, params) in [("input", &self.inputs), ("output", &self.outputs)] {
            let mut seen = std::collections::HashSet::new();
            for p in params {
                if let Err(why) = check_param_name(&p.name) {
                    return bad(format!("{what} name `{}` {why}", p.name));
                }
                if !seen.insert(&p.name) {
                    return bad(format!("{what} `{}` is declared twice", p.name));
                }
            }
        }
        if let Program::Command { args, .. } = &program {
            for arg in args {
                for name in placeholders(arg) {
                    if !self.inputs.iter().any(|p| p.name == name) {
                        return bad(format!("argument `{arg}` names `{{{{{name}}}}}`, which is not a declared input"));
                    }
                }
            }
        }
        if self.output_limit == 0 {
            return bad("the output limit must be at least one byte".into());
        }
        self.image.validate()?;
        Ok(Sandbox {
            name: self.name,
            program,
            inputs: self.inputs,
            outputs: self.outputs,
            image: self.image,
            output_limit: self.output_limit,
            runtime: self.runtime,
        })
    }
}

fn check_runtime(rt: &Runtime) -> std::result::Result<(), String> {
    if rt.timeout.is_some_and(|t| t.is_zero()) {
        return Err("the timeout must be longer than zero".into());
    }
    check_env_and_secrets(rt.env.iter().map(|(name, _)| name.as_str()), &rt.secrets)
}

const PYTHON_KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// Names are Python identifiers (they become variables) and file names.
fn check_param_name(name: &str) -> std::result::Result<(), &'static str> {
    if !is_identifier(name) {
        return Err(
            "must be an ASCII identifier (letters, digits, `_`, not starting with a digit)",
        );
    }
    if PYTHON_KEYWORDS.contains(&name) {
        return Err("is a Python keyword");
    }
    if name.starts_with("_dh") {
        return Err("starts with `_dh`, which dockhand reserves");
    }
    Ok(())
}

/// The `{{name}}` placeholders in an argument.
pub(crate) fn placeholders(arg: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = arg;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => {
                found.push(after[..end].trim());
                rest = &after[end + 2..];
            }
            None => break,
        }
    }
    found
}

/// Replaces each `{{name}}` with `lookup(name)`.
pub(crate) fn substitute(arg: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let mut rest = arg;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        out.push_str(&rest[..start]);
        let name = after[..end].trim();
        match lookup(name) {
            Some(v) => out.push_str(&v),
            None => out.push_str(&rest[start..start + 2 + end + 2]),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_and_command_are_exclusive() {
        let err = Sandbox::builder("x")
            .code("1")
            .command("ls")
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("not both"), "{err}");
        assert!(Sandbox::builder("x").build().is_err());
        assert!(Sandbox::code("x", "  ").build().is_err());
        assert!(Sandbox::code("x", "1").args(["a"]).build().is_err());
    }

    #[test]
    fn names_are_checked() {
        for bad in ["1x", "a-b", "class", "_dh_x", "", "a b"] {
            let r = Sandbox::code("x", "1").input(bad, Type::Int).build();
            assert!(r.is_err(), "{bad:?} accepted");
        }
        let dup = Sandbox::code("x", "1")
            .output("y", Type::Int)
            .output("y", Type::Str)
            .build();
        assert!(dup.unwrap_err().to_string().contains("twice"));
        assert!(Sandbox::code("bad name", "1").build().is_err());
    }

    #[test]
    fn placeholders_must_name_inputs() {
        let ok = Sandbox::command("c", "echo")
            .args(["{{x}}", "--n={{ n }}"])
            .input("x", Type::Str)
            .input("n", Type::Int)
            .build();
        assert!(ok.is_ok());
        let err = Sandbox::command("c", "echo")
            .args(["{{y}}"])
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("`{{y}}`"), "{err}");
    }

    #[test]
    fn substitution() {
        let look = |n: &str| (n == "x").then(|| "42".to_string());
        assert_eq!(substitute("a{{x}}b{{ x }}", look), "a42b42");
        assert_eq!(substitute("{{y}} {{x", look), "{{y}} {{x");
        assert_eq!(substitute("plain", look), "plain");
    }

    #[test]
    fn specs_serialise_and_replay() {
        let s = Sandbox::code("double", "result = x * 2")
            .input("x", Type::Int)
            .output("result", Type::Int)
            .build()
            .unwrap();
        let json = serde_json::to_string(&s).unwrap();
        let back: Sandbox = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<Sandbox>();
    }
}
