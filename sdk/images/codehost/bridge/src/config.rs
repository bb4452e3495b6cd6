//! The host's settings for the bridge (its first argument, JSON) and the
//! Monty settings that follow from them.

use std::time::Duration;

use monty_types::{DateTimeSource, OsPolicy, RandomSeed, RandomStart, ResourceLimits, SleepMode};
use serde_json::Value;

use crate::{rules, values};

/// The host's settings for this bridge (its first argument, JSON).
pub struct Config {
    pub loop_limit: u64,
    pub print_limit: usize,
    pub value_limit: usize,
    /// Bytes a suspended execution's saved state may take.
    pub suspend_limit: usize,
    pub timeout: Duration,
    pub max_tool_calls: u64,
    pub max_sessions: usize,
    pub memory_bytes: usize,
    pub recursion_limit: usize,
    /// Which checks code gets beyond Monty's own (see `rules`).
    pub policy: rules::Policy,
    /// How values go to the host (see `values`).
    pub encoding: values::Encoding,
    /// What `os.getenv` and `os.environ` see: this map only.
    pub env: serde_json::Map<String, Value>,
    /// Clocks, random state and sleeps (see [`Config::os_policy`]).
    clock: Option<(i64, u32)>,
    random_seed: Option<u64>,
    /// The host's Unix socket (inside the container) and the token to greet it with.
    pub socket: Option<String>,
    pub token: Option<String>,
}

impl Config {
    pub fn from_json(v: &Value) -> Self {
        let int = |key: &str, default: u64| v.get(key).and_then(Value::as_u64).unwrap_or(default);
        let timeout = v.get("timeout_s").and_then(Value::as_f64).unwrap_or(30.0);
        Self {
            loop_limit: int("loop_limit", 10_000),
            print_limit: int("print_limit", 16 * 1024) as usize,
            value_limit: int("value_limit", 1 << 20) as usize,
            suspend_limit: int("suspend_limit", 16 << 20) as usize,
            timeout: Duration::from_secs_f64(timeout.clamp(0.001, 1e7)),
            max_tool_calls: int("max_tool_calls", 10_000),
            max_sessions: int("max_sessions", 8) as usize,
            memory_bytes: int("memory_bytes", 256 << 20) as usize,
            recursion_limit: int("recursion_limit", 200) as usize,
            policy: rules::Policy::named(
                v.get("policy").and_then(Value::as_str).unwrap_or(""),
                v.get("rules"),
            ),
            encoding: if v.get("exact_values").and_then(Value::as_bool) == Some(true) {
                values::Encoding::Exact
            } else {
                values::Encoding::Plain
            },
            env: v
                .get("env")
                .and_then(Value::as_object)
                .map(|env| {
                    env.iter()
                        .filter(|(_, value)| value.is_string())
                        .map(|(k, value)| (k.clone(), value.clone()))
                        .collect()
                })
                .unwrap_or_default(),
            clock: v
                .get("clock_unix_micros")
                .and_then(Value::as_i64)
                .map(|micros| {
                    (
                        micros.div_euclid(1_000_000),
                        micros.rem_euclid(1_000_000) as u32,
                    )
                }),
            random_seed: v.get("random_seed").and_then(Value::as_u64),
            socket: v.get("socket").and_then(Value::as_str).map(String::from),
            token: v.get("token").and_then(Value::as_str).map(String::from),
        }
    }

    pub fn limits(&self) -> ResourceLimits {
        ResourceLimits {
            max_feed_duration: Some(self.timeout),
            max_memory: Some(self.memory_bytes),
            max_recursion_depth: self.recursion_limit,
            // Each tool call may cost a call and a future resolution; the prelude a few more.
            max_suspensions: 2 * self.max_tool_calls as usize + 100,
            ..ResourceLimits::default()
        }
    }

    /// Monty's clock, random and sleep settings: the real clock unless the
    /// host fixed one, OS entropy unless it gave a seed (so an execution can
    /// be replayed), and sleeps the bridge waits out itself, each capped at
    /// the execution's time limit (its deadline ends them sooner).
    pub fn os_policy(&self) -> OsPolicy {
        OsPolicy {
            datetime: match self.clock {
                Some((unix_seconds, microsecond)) => DateTimeSource::Fixed {
                    unix_seconds,
                    microsecond,
                },
                None => DateTimeSource::System,
            },
            random_start: match self.random_seed {
                Some(seed) => RandomStart::Seed(RandomSeed::Int(seed.into())),
                None => RandomStart::System,
            },
            sleep: SleepMode::System(self.timeout),
            ..OsPolicy::default()
        }
    }

    /// The timeout as the messages print it (`30.0s`, `0.5s`).
    pub fn timeout_text(&self) -> String {
        let s = self.timeout.as_secs_f64();
        if s.fract() == 0.0 {
            format!("{s:.1}s")
        } else {
            format!("{s}s")
        }
    }
}
