//! The defence against commands that use up the container's pids (fork
//! bombs): how the agent reads the pids in use and the forks the limit
//! refused, ends what holds them, and waits until they are free.

use std::collections::HashMap;
use std::io;
use std::sync::OnceLock;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::agent;
use crate::sys::{kill, kill_group, reap};

const PIDS_CURRENT: [&str; 2] = [
    "/sys/fs/cgroup/pids.current",
    "/sys/fs/cgroup/pids/pids.current",
];
const PIDS_EVENTS: [&str; 2] = [
    "/sys/fs/cgroup/pids.events",
    "/sys/fs/cgroup/pids/pids.events",
];

/// One process of the container, from `/proc/<pid>/stat`.
#[derive(Clone, Copy)]
pub struct Proc {
    pub state: u8,
    pub ppid: u32,
    pub pgid: u32,
}

/// Every process in the container, by pid.
pub fn processes() -> HashMap<u32, Proc> {
    let mut found = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name may hold spaces and parentheses: the fields
        // start after the last ')'.
        let Some(rest) = text.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let (Some(state), Some(ppid), Some(pgid)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (Ok(ppid), Ok(pgid)) = (ppid.parse(), pgid.parse()) else {
            continue;
        };
        found.insert(
            pid,
            Proc {
                state: state.as_bytes().first().copied().unwrap_or(b'?'),
                ppid,
                pgid,
            },
        );
    }
    found
}

/// Processes in a process group, zombies included (they hold pids too).
pub fn group_size(pgid: u32) -> usize {
    processes().values().filter(|p| p.pgid == pgid).count()
}

/// The first of `candidates` that exists (cgroup v2's file, else v1's),
/// looked for once: every command reads it, and a failed lookup is not free.
fn found(
    cell: &'static OnceLock<Option<&'static str>>,
    candidates: [&'static str; 2],
) -> Option<&'static str> {
    *cell.get_or_init(|| {
        candidates
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
    })
}

/// How many forks the container's pids limit has refused so far.
pub fn fork_refusals() -> u64 {
    static EVENTS: OnceLock<Option<&'static str>> = OnceLock::new();
    let Some(text) = found(&EVENTS, PIDS_EVENTS).and_then(|p| std::fs::read_to_string(p).ok())
    else {
        return 0;
    };
    text.lines()
        .find_map(|line| line.strip_prefix("max "))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0)
}

/// The container's pids in use (threads count), or 0 when unknown.
pub fn pids_in_use() -> u64 {
    static CURRENT: OnceLock<Option<&'static str>> = OnceLock::new();
    found(&CURRENT, PIDS_CURRENT)
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0)
}

pub fn near_pids_limit() -> bool {
    let limit = agent().pids_limit;
    limit > 0 && pids_in_use() >= limit.saturating_sub(2)
}

/// Whether `e` says the process table is full (no thread, no fork).
pub fn out_of_pids(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EAGAIN) || e.kind() == io::ErrorKind::WouldBlock
}

/// `make()` (a fork or a thread's start), tried again for a moment while
/// the pids are used up: what a bomb left may still be going. Nothing has
/// run when it fails, so trying again is safe.
pub fn with_pids<T>(mut make: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match make() {
            Ok(made) => return Ok(made),
            Err(e) if out_of_pids(&e) && Instant::now() < deadline => {
                contain_exhaustion(None);
                sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Waits (a bounded time) until no process of group `pgid` is left and
/// the pids are free again, reaping those that were handed to the agent.
pub fn settle_group(pgid: u32) {
    let own = std::process::id();
    let limit = agent().pids_limit;
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut quiet = 0;
    while Instant::now() < deadline {
        let left: Vec<(u32, Proc)> = processes()
            .into_iter()
            .filter(|(_, p)| p.pgid == pgid)
            .collect();
        // Processes being torn down still hold pids after /proc stops
        // listing them, and one forked as the group was killed may not be
        // listed yet: wait until at most half the limit is in use, seen
        // three times in a row, ending the group again each time.
        end_strays(own);
        if left.is_empty() && (limit == 0 || pids_in_use() <= limit / 2) {
            quiet += 1;
            if quiet >= 3 {
                return;
            }
            kill_group(pgid, libc::SIGKILL);
            sleep(Duration::from_millis(50));
            continue;
        }
        quiet = 0;
        if left.iter().any(|(_, p)| p.state != b'Z') {
            // A bomb's members forked after the last kill: end those too.
            kill_group(pgid, libc::SIGKILL);
        } else if left.is_empty() {
            // Its remains left the group (setsid): end what holds the pids.
            contain_exhaustion(None);
        }
        for (pid, p) in &left {
            if p.state == b'Z' && p.ppid == own {
                reap(*pid);
            }
        }
        sleep(Duration::from_millis(20));
    }
}

/// Waits (a bounded time) until at most half the pids are in use, seen
/// three times in a row, ending what holds them meanwhile.
pub fn settle_pids() {
    let own = std::process::id();
    let limit = agent().pids_limit;
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut quiet = 0;
    while limit > 0 && Instant::now() < deadline {
        if pids_in_use() <= limit / 2 {
            quiet += 1;
            if quiet >= 3 {
                return;
            }
        } else {
            quiet = 0;
            contain_exhaustion(None);
            end_strays(own);
        }
        sleep(Duration::from_millis(50));
    }
}

/// Ends every process outside the running commands' groups: after a
/// command used up the pids, what left its group (setsid) is its bomb's.
fn end_strays(own: u32) {
    let running = agent().running();
    for (pid, p) in processes() {
        if pid != own && p.state != b'Z' && !running.contains(&p.pgid) {
            kill(pid, libc::SIGKILL);
        }
    }
}

/// The pids are (nearly) all in use: end the running command whose
/// process group holds the most processes (`first`'s, if it holds any), so
/// the session answers again at once. If no command's group holds any (its
/// processes left the group), end every process but the agent.
pub fn contain_exhaustion(first: Option<u32>) {
    let table = processes();
    let mut members: HashMap<u32, usize> = HashMap::new();
    for p in table.values().filter(|p| p.state != b'Z') {
        *members.entry(p.pgid).or_default() += 1;
    }
    let running: Vec<u32> = match first {
        Some(pid) => {
            agent().mark_exhausted(pid);
            vec![pid]
        }
        None => agent().running().into_iter().collect(),
    };
    let culprit = running
        .into_iter()
        .max_by_key(|g| members.get(g).copied().unwrap_or(0));
    if let Some(culprit) = culprit {
        if members.get(&culprit).copied().unwrap_or(0) > 0 {
            agent().mark_exhausted(culprit);
            kill_group(culprit, libc::SIGKILL);
            return;
        }
    }
    let own = std::process::id();
    for pid in table.keys() {
        if *pid != own {
            kill(*pid, libc::SIGKILL);
        }
    }
}
