//! One watchdog container per process, so that what the process created goes
//! when the process goes, even by SIGKILL, without anyone calling `reap()`.
//!
//! Sessions and code hosts already leave with their owner (their programs
//! exit when their stdin closes, and the daemon removes them). One-shots
//! cannot: their container must outlive its program until the outputs are
//! read. The watchdog covers them and anything else labelled with this
//! process's session id: it holds an attach connection from this process,
//! and when the kernel closes that connection it removes every container and
//! volume carrying the session's label.
//!
//! The connection lives on a thread of its own with its own runtime, not on
//! the caller's: a test's runtime ending, or one of several clients being
//! dropped, must not look like the process dying.
//!
//! While it watches, it also follows the daemon's events, so the scratch
//! volumes of a container removed from outside (`docker rm -f`) go at once,
//! not when the owner goes.
//!
//! It holds the daemon's socket, so it runs nothing but dockhand's own
//! static program, from an image dockhand makes (`image::watchdog`), never a
//! file of a caller's image: as root (the socket is root's; no capability
//! is needed to open one's own file), with every capability dropped, a
//! read-only root, no network and no shell.
//!
//! Only a daemon reached through a local socket can be watched this way (the
//! socket is mounted into the watchdog). For other daemons, `reap()` from a
//! later process removes what a dead one left.

use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;

use super::{labels, ContainerSpec, Engine, LogChunk, Mount};

/// Where the daemon's socket appears inside the watchdog.
const SOCKET_INSIDE: &str = "/run/dockhand/docker.sock";
/// Label kind of the watchdog container.
pub const KIND: &str = labels::WATCHDOG;
/// After this many failed starts, stop trying.
const MAX_FAILURES: u32 = 3;
/// How long finding or making the image may take (the first time on a
/// machine it compiles the program: a minute or two).
const IMAGE_TIMEOUT: Duration = Duration::from_secs(900);
/// How long a starting watchdog may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Not running; how many starts failed so far.
    Off {
        failures: u32,
    },
    Starting,
    Watching,
}

static PHASE: Mutex<Phase> = Mutex::new(Phase::Off { failures: 0 });

fn set_phase(phase: Phase) {
    *PHASE.lock().unwrap_or_else(|p| p.into_inner()) = phase;
}

/// Makes sure this process's watchdog runs, starting it in the background if
/// not (never waits for it).
pub(super) fn ensure(engine: &Engine) {
    let Some(socket) = local_socket(engine.endpoint()) else {
        return;
    };
    let Some(image) = engine.watchdog_image else {
        return;
    };
    let failures = {
        let mut phase = PHASE.lock().unwrap_or_else(|p| p.into_inner());
        match *phase {
            Phase::Off { failures } if failures < MAX_FAILURES => {
                *phase = Phase::Starting;
                failures
            }
            _ => return,
        }
    };
    let engine = engine.clone();
    let spawned = std::thread::Builder::new()
        .name("dockhand-watchdog".into())
        .spawn(move || watch(engine, image, socket, failures));
    if spawned.is_err() {
        fail(failures, "no thread for the watchdog".into());
    }
}

/// The socket path of a local daemon endpoint.
fn local_socket(endpoint: &str) -> Option<String> {
    if let Some(path) = endpoint.strip_prefix("unix://") {
        return Some(path.to_string());
    }
    endpoint.starts_with('/').then(|| endpoint.to_string())
}

fn fail(failures: u32, reason: String) {
    set_phase(Phase::Off {
        failures: failures + 1,
    });
    tracing::warn!(
        %reason,
        "the watchdog did not start: if this process is killed, `Client::reap()` \
         in a later one removes what it left"
    );
}

/// The watchdog's thread: start it, then hold its stdin open for as long as
/// it runs (for the life of this process, normally).
fn watch(engine: Engine, image: super::WatchdogImage, socket: String, failures: u32) {
    let fail = |reason: String| fail(failures, reason);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(format!("no runtime: {e}")),
    };
    runtime.block_on(async move {
        let docker = match engine.reconnect() {
            Ok(docker) => docker,
            Err(e) => return fail(e.to_string()),
        };
        let engine = Engine { docker, ..engine };
        let image = match tokio::time::timeout(IMAGE_TIMEOUT, image(engine.clone())).await {
            Ok(Ok(image)) => image,
            Ok(Err(e)) => return fail(format!("no watchdog image: {e}")),
            Err(_) => return fail(format!("no watchdog image within {IMAGE_TIMEOUT:?}")),
        };
        let spec = spec(image, socket);
        let container = match engine.create_container(&spec).await {
            Ok(container) => container,
            Err(e) => return fail(e.to_string()),
        };
        let id = container.id().to_string();
        let attached = match engine.attach(&id).await {
            Ok(attached) => attached,
            Err(e) => return fail(e.to_string()),
        };
        let mut output = attached.output;
        // Held, never written: closing it is what tells the watchdog to act.
        let _stdin = attached.input;
        if let Err(e) = engine.start_container(&id).await {
            return fail(e.to_string());
        }
        let mut said = Vec::new();
        let ready = tokio::time::timeout(READY_TIMEOUT, async {
            while let Some(Ok(chunk)) = output.next().await {
                let (LogChunk::Stdout(bytes) | LogChunk::Stderr(bytes)) = chunk;
                said.extend_from_slice(&bytes);
                if said.starts_with(b"ready\n") {
                    return true;
                }
            }
            false
        })
        .await;
        if ready != Ok(true) {
            return fail(format!(
                "it said: {}",
                String::from_utf8_lossy(&said).trim()
            ));
        }
        set_phase(Phase::Watching);
        tracing::debug!(container = %id, "watchdog watching");
        while output.next().await.is_some() {}
        // Removed or stopped from outside: the next container made starts another.
        tracing::info!(container = %id, "the watchdog went away; one starts with the next container");
        set_phase(Phase::Off { failures: 0 });
        drop(container);
    });
}

fn spec(image: String, socket: String) -> ContainerSpec {
    ContainerSpec {
        image,
        // The image's own entrypoint: its only file.
        env: vec![format!("DOCKHAND_OWNER_SESSION={}", labels::session_id())],
        // The socket is root's; root needs no capability to open its own file.
        user: Some("0:0".into()),
        kind: KIND,
        memory_bytes: Some(32 * 1024 * 1024),
        // The program and its event follower.
        pids_limit: Some(8),
        cap_drop_all: true,
        no_new_privileges: true,
        read_only_rootfs: true,
        mounts: vec![Mount {
            host_path: socket,
            container_path: SOCKET_INSIDE.into(),
            read_only: false,
        }],
        open_stdin: true,
        no_log: true,
        auto_remove: true,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_sockets_are_watched() {
        assert_eq!(
            local_socket("unix:///var/run/docker.sock").as_deref(),
            Some("/var/run/docker.sock")
        );
        assert_eq!(local_socket("/run/d.sock").as_deref(), Some("/run/d.sock"));
        assert_eq!(local_socket("tcp://host:2376"), None);
        assert_eq!(local_socket("ssh://me@host"), None);
    }
}
