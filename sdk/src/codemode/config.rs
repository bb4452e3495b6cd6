//! A code host's settings and what it reports.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::protocol::BridgeConfig;
use crate::error::ToolCallRecord;
use crate::error::{Error, Result};
use crate::image::ImageSpec;
use crate::lifecycle::State;
use crate::sandbox::Resources;
use crate::settings::{settle_resources, Memory};

/// Settings of a code host: the container's limits and each execution's,
/// set with the same builder methods as a sandbox's or a session's.
///
/// Every execution limit is enforced by Monty inside the container (time,
/// memory, recursion, tool calls) or by the bridge (wall-clock time with tool
/// calls, loops, printed output, the final value); the host adds its own
/// deadline in case the container stops answering. Settings are checked when
/// the host starts.
///
/// ```
/// use std::time::Duration;
/// use dockhand::codemode::CodeHostConfig;
/// let config = CodeHostConfig::new()
///     .memory("2Gi")
///     .cpus(2.0)
///     .timeout(Duration::from_secs(10))
///     .exec_memory("128Mi")
///     .max_tool_calls(100);
/// assert_eq!(config.exec_timeout(), Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct CodeHostConfig {
    pub(crate) image: ImageSpec,
    pub(crate) resources: Resources,
    pub(crate) memory: Option<Memory>,
    pub(crate) isolation: crate::Isolation,
    pub(crate) exec_timeout: Duration,
    pub(crate) exec_memory: Memory,
    pub(crate) recursion_limit: u32,
    pub(crate) loop_limit: u64,
    pub(crate) max_tool_calls: u64,
    pub(crate) print_limit: usize,
    pub(crate) value_limit: usize,
    pub(crate) tool_result_limit: usize,
    pub(crate) max_sessions: u32,
    pub(crate) type_check: bool,
    pub(crate) start_timeout: Duration,
    pub(crate) policy: CodePolicy,
    pub(crate) env: std::collections::BTreeMap<String, String>,
    pub(crate) clock: Option<std::time::SystemTime>,
    pub(crate) random_seed: Option<u64>,
    pub(crate) exact_values: bool,
    pub(crate) keep: super::kept::KeepLimits,
    pub(crate) mounts: Vec<super::mounts::Mount>,
    pub(crate) mounts_size: u64,
    pub(crate) suspensions: super::SuspensionStore,
}

/// What code mode checks before Monty runs code, beyond Monty's own rules.
///
/// Monty is the sandbox: code reaches no file, socket, environment variable
/// or process but what the code host answers, and its time, memory and
/// recursion limits cannot be caught. Neither policy is a security
/// boundary; they differ in how much model-written code they let through.
///
/// | | [`Default`](CodePolicy::Default) | [`Strict`](CodePolicy::Strict) |
/// |---|---|---|
/// | code size (1 MiB) and nesting (200 levels) | checked | checked |
/// | names starting with `_dh` (dockhand's helpers) | refused | refused |
/// | imports | Monty's modules | `asyncio base64 binascii bisect collections copy csv dataclasses datetime decimal functools hashlib itertools json math random re sys time tomllib typing unicodedata` and `__future__` |
/// | `eval exec compile open input breakpoint` | as Monty has them (`open` raises `PermissionError`) | refused |
/// | dunders | all | refused where they reach internals (`__class__`, `__subclasses__`, `__globals__`, `__import__`, `__dict__`, `__mro__`, ...); `__name__`, special methods and `if __name__ == "__main__":` allowed |
/// | string literals | any size | up to 10,000 characters |
/// | loops | Monty's time limit | also [`loop_limit`](CodeHostConfig::loop_limit) iterations per loop |
///
/// [`CodePolicy::Rules`] turns each of the strict policy's rules on or off
/// by itself.
///
/// A refused piece of code is a [`CodeError::Validation`](super::CodeError::Validation)
/// naming the rule, its line and column; nothing of it has run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CodePolicy {
    /// Monty's own rules, with dockhand's size limits.
    #[default]
    Default,
    /// Also the import, builtin, dunder and literal rules and the loop guard.
    Strict,
    /// The strict rules chosen here, the others off.
    ///
    /// ```
    /// use dockhand::codemode::{CodeHostConfig, CodePolicy, StrictRule, StrictRules};
    /// let rules = StrictRules::ALL.without(StrictRule::Imports);
    /// let config = CodeHostConfig::new().policy(CodePolicy::Rules(rules));
    /// assert!(CodePolicy::Rules(rules).rules().contains(StrictRule::LoopGuard));
    /// # let _ = config;
    /// ```
    Rules(StrictRules),
}

impl CodePolicy {
    /// The strict rules this policy applies.
    pub fn rules(self) -> StrictRules {
        match self {
            CodePolicy::Default => StrictRules::NONE,
            CodePolicy::Strict => StrictRules::ALL,
            CodePolicy::Rules(rules) => rules,
        }
    }

    fn wire_name(self) -> &'static str {
        match self {
            CodePolicy::Default => "default",
            CodePolicy::Strict => "strict",
            CodePolicy::Rules(_) => "rules",
        }
    }

    fn wire_rules(self) -> Vec<&'static str> {
        match self {
            CodePolicy::Rules(rules) => StrictRule::ALL
                .into_iter()
                .filter(|r| rules.contains(*r))
                .map(StrictRule::wire_name)
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// One rule of the strict policy (see [`CodePolicy`]'s table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StrictRule {
    /// Imports limited to the modules listed (and `tools`, `skills`).
    Imports,
    /// No dunder access that reaches the interpreter's internals.
    Dunders,
    /// No `eval`, `exec`, `compile`, `open`, `input` or `breakpoint`.
    Builtins,
    /// String and bytes literals up to 10,000 characters.
    LiteralSize,
    /// Every loop stops after [`CodeHostConfig::loop_limit`] iterations.
    LoopGuard,
}

impl StrictRule {
    /// Every rule.
    pub const ALL: [StrictRule; 5] = [
        StrictRule::Imports,
        StrictRule::Dunders,
        StrictRule::Builtins,
        StrictRule::LiteralSize,
        StrictRule::LoopGuard,
    ];

    /// The rule's name, as [`CodeError::Validation`](super::CodeError::Validation)'s
    /// `rule` says it (`literal_size` for [`StrictRule::LiteralSize`]).
    pub fn wire_name(self) -> &'static str {
        match self {
            StrictRule::Imports => "import",
            StrictRule::Dunders => "dunder",
            StrictRule::Builtins => "builtin",
            StrictRule::LiteralSize => "literal_size",
            StrictRule::LoopGuard => "loop_guard",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of [`StrictRule`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct StrictRules(u8);

impl StrictRules {
    /// No rule.
    pub const NONE: StrictRules = StrictRules(0);
    /// Every rule: [`CodePolicy::Strict`].
    pub const ALL: StrictRules = StrictRules(0b1_1111);

    /// These rules and `rule`.
    pub fn with(self, rule: StrictRule) -> Self {
        StrictRules(self.0 | rule.bit())
    }

    /// These rules but `rule`.
    pub fn without(self, rule: StrictRule) -> Self {
        StrictRules(self.0 & !rule.bit())
    }

    /// Whether `rule` is one of them.
    pub fn contains(self, rule: StrictRule) -> bool {
        self.0 & rule.bit() != 0
    }
}

impl Default for CodeHostConfig {
    fn default() -> Self {
        CodeHostConfig {
            // pip reaches PyPI through whatever TLS interception the host trusts.
            image: ImageSpec::default().trust_host_certificates(),
            resources: Resources::default(),
            memory: None,
            isolation: crate::Isolation::Default,
            exec_timeout: Duration::from_secs(30),
            exec_memory: Memory::Bytes(256 << 20),
            recursion_limit: 200,
            loop_limit: 10_000,
            max_tool_calls: 10_000,
            print_limit: 16 * 1024,
            value_limit: 1 << 20,
            tool_result_limit: 8 << 20,
            max_sessions: 8,
            type_check: false,
            start_timeout: Duration::from_secs(300),
            policy: CodePolicy::Default,
            env: Default::default(),
            clock: None,
            random_seed: None,
            exact_values: false,
            keep: super::kept::KeepLimits::default(),
            mounts: Vec::new(),
            mounts_size: super::mounts::DEFAULT_MOUNTS_SIZE,
            suspensions: super::SuspensionStore::default(),
        }
    }
}

impl CodeHostConfig {
    /// Defaults: the Python base image with Monty added, 1 CPU, 1 GiB for the
    /// container, 30 s and 256 MiB per execution.
    pub fn new() -> Self {
        Self::default()
    }

    /// The image. Monty (`pydantic-monty`, pinned) is added to it when it is
    /// built; a prebuilt image must have it installed.
    pub fn image(mut self, image: ImageSpec) -> Self {
        self.image = image;
        self
    }

    crate::settings::resource_methods!(resources: resources, memory: memory, isolation: isolation);

    /// Wall-clock limit of one execution, tool calls included (default 30 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.exec_timeout = timeout;
        self
    }

    /// Monty's heap limit for one execution (default 256 MiB), as text with a
    /// unit or bytes.
    pub fn exec_memory(mut self, size: impl Into<Memory>) -> Self {
        self.exec_memory = size.into();
        self
    }

    /// How deep calls may nest (Monty's recursion limit; default 200).
    pub fn recursion_limit(mut self, depth: u32) -> Self {
        self.recursion_limit = depth;
        self
    }

    /// Iterations any single loop may run (default 10,000).
    pub fn loop_limit(mut self, iterations: u64) -> Self {
        self.loop_limit = iterations;
        self
    }

    /// Tool calls one execution may make (default 10,000).
    pub fn max_tool_calls(mut self, calls: u64) -> Self {
        self.max_tool_calls = calls;
        self
    }

    /// Characters of `print()` output kept per execution (default 16 KiB).
    pub fn print_limit(mut self, chars: usize) -> Self {
        self.print_limit = chars;
        self
    }

    /// Bytes of JSON the final value may take (default 1 MiB).
    pub fn value_limit(mut self, bytes: usize) -> Self {
        self.value_limit = bytes;
        self
    }

    /// Bytes of JSON one tool result may take (default 8 MiB); a larger
    /// one raises `ToolError` in the code instead of reaching it.
    pub fn tool_result_limit(mut self, bytes: usize) -> Self {
        self.tool_result_limit = bytes;
        self
    }

    /// REPL sessions ([`CodeHost::session`](super::CodeHost::session)) open at once (default 8).
    pub fn max_sessions(mut self, sessions: u32) -> Self {
        self.max_sessions = sessions;
        self
    }

    /// Type-checks each execution against the tools' stubs before it runs
    /// (Monty's checker); a type error comes back as
    /// [`CodeError::Validation`](super::CodeError::Validation) with rule
    /// `type`. Tools are declared `async` for the checker, so checked code
    /// calls them with `await`.
    pub fn type_check(mut self, on: bool) -> Self {
        self.type_check = on;
        self
    }

    /// Where executions stopped for approval are sealed and their
    /// resumptions recorded (default [`SuspensionStore::default`](super::SuspensionStore)).
    /// Code hosts that resume each other's suspensions share one.
    pub fn suspensions(mut self, store: super::SuspensionStore) -> Self {
        self.suspensions = store;
        self
    }

    /// Which checks code gets beyond Monty's own (default
    /// [`CodePolicy::Default`]).
    ///
    /// ```
    /// use dockhand::codemode::{CodeHostConfig, CodePolicy};
    /// let config = CodeHostConfig::new().policy(CodePolicy::Strict).loop_limit(1_000);
    /// # let _ = config;
    /// ```
    pub fn policy(mut self, policy: CodePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// An environment variable `os.getenv` and `os.environ` show the code.
    /// The code sees these and nothing else: not the container's
    /// environment, not the host's.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Fixes the clock `time.time()`, `datetime.now()` and `date.today()`
    /// read, so an execution can be replayed (default: the real clock).
    pub fn fixed_clock(mut self, at: std::time::SystemTime) -> Self {
        self.clock = Some(at);
        self
    }

    /// Starts `random` as `random.seed(seed)` leaves it, so an execution can
    /// be replayed (default: fresh OS entropy).
    pub fn random_seed(mut self, seed: u64) -> Self {
        self.random_seed = Some(seed);
        self
    }

    /// Values come back from the code, and reach tools, with every Python
    /// type kept: ints past 64 bits, tuples, sets, frozensets, bytes,
    /// non-finite floats, `Decimal`s, dates, datetimes, times, timedeltas
    /// and dicts with keys other than `str` travel as one-key objects that
    /// name their type (`{"$int": "1180591620717411303424"}`,
    /// `{"$tuple": [1, 2]}`, `{"$bytes": "<base64>"}`, ...). Inputs and tool
    /// results may use the same objects in either mode, so a value makes the
    /// round trip unchanged.
    ///
    /// Off by default: values come back as JSON a model reads (tuples and
    /// sets as lists, datetimes as ISO text, timedeltas as seconds), and an
    /// int past 64 bits, the one value plain JSON would change, as
    /// `{"$int": digits}`.
    ///
    /// ```
    /// use dockhand::codemode::CodeHostConfig;
    /// let config = CodeHostConfig::new().exact_values(true);
    /// # let _ = config;
    /// ```
    pub fn exact_values(mut self, on: bool) -> Self {
        self.exact_values = on;
        self
    }

    /// How File and Dir results the code returns are kept for the
    /// application (see [`Execution::files`]): each for `ttl` unless
    /// released first (default 15 minutes), at most `max_files` of them
    /// (default 100) and `max_bytes` together (default 1 GiB); past either
    /// budget the oldest go first, and one larger than `max_bytes` is not
    /// kept.
    pub fn keep_results(mut self, ttl: Duration, max_files: usize, max_bytes: u64) -> Self {
        self.keep = super::kept::KeepLimits {
            ttl,
            max_files,
            max_bytes,
        };
        self
    }

    /// A host directory the code's file calls reach at `virtual_path`
    /// (`open('/data/rows.csv')`, `pathlib.Path('/data').iterdir()`): it is
    /// copied into the container when the host starts, and every path is
    /// resolved inside it (`..` and links cannot leave it). Without a mount,
    /// file calls raise `PermissionError`. The host's directory is never
    /// written: a [`MountMode::ReadWrite`](super::MountMode::ReadWrite)
    /// mount's changes come back through
    /// [`CodeHost::download_mount`](super::CodeHost::download_mount).
    ///
    /// ```
    /// use dockhand::codemode::{CodeHostConfig, MountMode};
    /// let config = CodeHostConfig::new().mount("/data", "./inputs", MountMode::ReadOnly);
    /// # let _ = config;
    /// ```
    pub fn mount(
        mut self,
        virtual_path: impl Into<String>,
        host_dir: impl Into<std::path::PathBuf>,
        mode: super::MountMode,
    ) -> Self {
        self.mounts.push(super::mounts::Mount {
            virtual_path: virtual_path.into(),
            host_dir: host_dir.into(),
            mode,
        });
        self
    }

    /// The most the mounted directories' copies, together with what the code
    /// writes to a read-write mount, may hold (default 256 MiB), and one
    /// file or directory per 4 KiB of it. The copies live in memory, in a
    /// volume of this size: a write or a file past it raises `OSError` (no
    /// space left) in the code, and directories larger than it are refused
    /// before the host starts. The container is charged for
    /// the volume, so with mounts it must fit beside `exec_memory` in the
    /// container's `memory`.
    pub fn mounts_size(mut self, bytes: u64) -> Self {
        self.mounts_size = bytes;
        self
    }

    /// How long starting the container and its bridge may take (default
    /// 300 s). Making the image, the first time on a machine, is not counted:
    /// it compiles the bridge, which takes minutes on a small machine.
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Wall-clock limit of one execution.
    pub fn exec_timeout(&self) -> Duration {
        self.exec_timeout
    }

    /// Everything a start needs, from valid settings.
    pub(crate) fn launch(&self) -> Result<super::bridge::Launch<'_>> {
        let (resources, exec_memory) = self.checked()?;
        Ok(super::bridge::Launch {
            image: &self.image,
            resources,
            isolation: &self.isolation,
            bridge: self.bridge(exec_memory),
            start_timeout: self.start_timeout,
            mounts: &self.mounts,
            mounts_size: self.mounts_size,
            claims: None,
        })
    }

    /// Checks the settings; returns the container's limits and the
    /// execution heap limit in bytes.
    pub(crate) fn checked(&self) -> Result<(Resources, i64)> {
        let bad = |msg: String| Error::spec("code host", msg);
        let mut resources = self.resources;
        settle_resources(&mut resources, &mut self.memory.clone()).map_err(bad)?;
        let exec_memory = self
            .exec_memory
            .bytes()
            .map_err(|e| bad(format!("execution memory: {e}")))?;
        if exec_memory > resources.memory_bytes {
            return Err(bad(format!(
                "execution memory ({exec_memory} bytes) is more than the container's ({} bytes)",
                resources.memory_bytes
            )));
        }
        super::mounts::check(&self.mounts).map_err(bad)?;
        // The mounts' volume is memory the container is charged for: it must
        // fit beside an execution's heap, or a code that fills it is killed
        // for memory instead of getting `OSError`.
        let mounts_size = i64::try_from(self.mounts_size).unwrap_or(i64::MAX);
        if !self.mounts.is_empty()
            && exec_memory.saturating_add(mounts_size) > resources.memory_bytes
        {
            return Err(bad(format!(
                "the mounts' in-memory volume ({mounts_size} bytes, mounts_size) and the execution memory ({exec_memory} bytes) are more than the container's memory ({} bytes)",
                resources.memory_bytes
            )));
        }
        if self.exec_timeout.is_zero() || self.start_timeout.is_zero() {
            return Err(bad("timeouts must be longer than zero".into()));
        }
        let counts = [
            ("recursion limit", self.recursion_limit as u64),
            ("loop limit", self.loop_limit),
            ("print limit", self.print_limit as u64),
            ("value limit", self.value_limit as u64),
            ("max sessions", self.max_sessions as u64),
        ];
        if let Some((what, _)) = counts.iter().find(|(_, n)| *n == 0) {
            return Err(bad(format!("the {what} must be at least 1")));
        }
        Ok((resources, exec_memory))
    }

    pub(crate) fn bridge(&self, exec_memory_bytes: i64) -> BridgeConfig {
        BridgeConfig {
            timeout_s: self.exec_timeout.as_secs_f64(),
            memory_bytes: exec_memory_bytes,
            recursion_limit: self.recursion_limit,
            loop_limit: self.loop_limit,
            print_limit: self.print_limit,
            value_limit: self.value_limit,
            suspend_limit: self.suspensions.state_limit(),
            max_tool_calls: self.max_tool_calls,
            max_sessions: self.max_sessions,
            policy: self.policy.wire_name(),
            rules: self.policy.wire_rules(),
            env: self.env.clone(),
            clock_unix_micros: self.clock.map(unix_micros),
            random_seed: self.random_seed,
            exact_values: self.exact_values,
            mounts: super::mounts::for_bridge(&self.mounts),
            socket: None,
            token: None,
        }
    }

    /// The host's own deadline for one execution: the bridge answers at the
    /// limit; past this the container is taken to have stopped answering.
    pub(crate) fn deadline(&self) -> Duration {
        self.exec_timeout + (self.exec_timeout / 8).max(Duration::from_millis(250))
    }
}

/// Microseconds since the Unix epoch (negative before it).
fn unix_micros(at: std::time::SystemTime) -> i64 {
    match at.duration_since(std::time::UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_micros()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_micros()).unwrap_or(i64::MAX),
    }
}

/// A successful execution.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Execution {
    /// The value of the code's last expression (`null` when it ends in a statement).
    pub value: Value,
    /// Captured `print()` output.
    pub stdout: String,
    /// Whether it was cut at the limit.
    pub stdout_truncated: bool,
    /// The tool calls made, in the order they finished.
    pub tool_calls: Vec<ToolCallRecord>,
    /// Wall time of the execution.
    pub duration: Duration,
    /// The File and Dir results (from sandbox tools) that the value names
    /// by handle, kept on the host for the application: download one with
    /// [`CodeHost::download`](super::CodeHost::download).
    pub files: Vec<super::ResultFile>,
    /// Set when the code stopped at a call of a tool that needs approval
    /// ([`Tool::requires_approval`](super::Tool::requires_approval)):
    /// `value` is then `null` and the code goes on only when the
    /// application resumes it ([`CodeHost::resume`](super::CodeHost::resume)).
    pub suspended: Option<super::Suspended>,
}

impl Execution {
    /// [`Execution::value`] with its Python types: ints past 64 bits as
    /// [`BigInt`](super::BigInt) always, and with
    /// [`CodeHostConfig::exact_values`] tuples, sets, bytes, dates, class
    /// instances and the rest (see [`CodeValue`](super::CodeValue)).
    pub fn typed_value(&self) -> super::CodeValue {
        super::CodeValue::from_json(&self.value)
    }
}

/// What [`CodeHost::describe`](super::CodeHost::describe) reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct HostDescription {
    /// The container id, while there is one.
    pub container_id: Option<String>,
    /// The lifecycle state.
    pub state: State,
    /// The image reference (once started).
    pub image: Option<String>,
    /// CPUs of the container.
    pub cpus: f64,
    /// Memory of the container.
    pub memory_bytes: i64,
    /// Execution time limit.
    pub exec_timeout: Duration,
    /// Execution memory limit.
    pub exec_memory_bytes: i64,
    /// Executions completed (successful or not).
    pub executions: u64,
    /// Sandbox-tool results whose File and Dir outputs the host still holds:
    /// only those of running executions and open REPL sessions.
    pub held_results: usize,
    /// Why the host is in `error`, if it is.
    pub last_error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked_and_memory_resolved() {
        let (resources, exec) = CodeHostConfig::new()
            .memory("2Gi")
            .exec_memory("64Mi")
            .checked()
            .unwrap();
        assert_eq!((resources.memory_bytes, exec), (2 << 30, 64 << 20));
        let cases = [
            (CodeHostConfig::new().memory("lots"), "lots"),
            (
                CodeHostConfig::new().exec_memory("2Gi"),
                "more than the container",
            ),
            (
                CodeHostConfig::new().timeout(Duration::ZERO),
                "longer than zero",
            ),
            (CodeHostConfig::new().print_limit(0), "print limit"),
            (CodeHostConfig::new().cpus(f64::NAN), "cpus"),
            (
                CodeHostConfig::new()
                    .memory("512Mi")
                    .mount("/work", ".", super::super::MountMode::ReadWrite)
                    .mounts_size(300 << 20),
                "mounts_size",
            ),
        ];
        for (config, says) in cases {
            let err = config.checked().unwrap_err().to_string();
            assert!(err.contains(says), "{err} should say {says}");
        }
    }
}
