//! A sandbox's commands: those running, by pid, and the last ones it ran;
//! and how a request names one. The process service (`process`) starts,
//! feeds and ends them.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use dockhand::session::ProcessControl;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::broadcast;

use super::connect::ConnectError;

/// One command's events as envd sends them.
#[derive(Clone, Debug)]
pub(super) enum Event {
    Data(&'static str, Bytes),
    End(Value),
    Failed(ConnectError),
}

pub(super) struct Process {
    pub(super) pid: u32,
    pub(super) tag: Option<String>,
    pub(super) config: Value,
    pub(super) stdin: bool,
    pub(super) terminal: bool,
    pub(super) control: ProcessControl,
    pub(super) events: broadcast::Sender<Event>,
}

/// Commands a sandbox remembers having run, for its operator's page.
const REMEMBERED: usize = 50;
/// The longest command line remembered.
const REMEMBERED_CHARS: usize = 500;

/// A command a sandbox ran (or runs), as the dashboard lists it.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ran {
    pub pid: u32,
    pub command: String,
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// `None` while it runs; negative: ended by that signal.
    pub exit_code: Option<i64>,
}

/// A sandbox's running commands by pid, and the last ones it ran.
#[derive(Default)]
pub struct Processes {
    pub(super) running: Mutex<BTreeMap<u32, Arc<Process>>>,
    pub(super) history: Mutex<VecDeque<Ran>>,
}

impl Processes {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Arc<Process>>> {
        super::lock(&self.running)
    }

    pub(super) fn find(&self, selector: &Selector) -> Result<Arc<Process>, ConnectError> {
        let running = self.lock();
        let found = match selector {
            Selector { pid: Some(pid), .. } => running.get(pid).cloned(),
            Selector { tag: Some(tag), .. } => running
                .values()
                .find(|p| p.tag.as_deref() == Some(tag))
                .cloned(),
            _ => return Err(ConnectError::new("invalid_argument", "no process selected")),
        };
        found.ok_or_else(|| ConnectError::new("not_found", "process not found"))
    }

    /// Forgets every command (their container is going).
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// The commands run last, the newest last.
    pub fn ran(&self) -> Vec<Ran> {
        super::lock(&self.history).iter().cloned().collect()
    }

    pub(super) fn remember(&self, pid: u32, config: &ProcessConfig) {
        let mut line = config.cmd.clone();
        for arg in &config.args {
            line.push(' ');
            line.push_str(arg);
        }
        let mut history = super::lock(&self.history);
        if history.len() == REMEMBERED {
            history.pop_front();
        }
        history.push_back(Ran {
            pid,
            command: line.chars().take(REMEMBERED_CHARS).collect(),
            started_at: chrono::Utc::now(),
            exit_code: None,
        });
    }

    pub(super) fn ended(&self, pid: u32, code: i64) {
        let mut history = super::lock(&self.history);
        if let Some(ran) = history
            .iter_mut()
            .rev()
            .find(|r| r.pid == pid && r.exit_code.is_none())
        {
            ran.exit_code = Some(code);
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ProcessConfig {
    pub(super) cmd: String,
    pub(super) args: Vec<String>,
    pub(super) envs: BTreeMap<String, String>,
    pub(super) cwd: Option<String>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub(super) struct Selector {
    pub(super) pid: Option<u32>,
    pub(super) tag: Option<String>,
}
