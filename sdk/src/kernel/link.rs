//! The host's end of the relay: one helper process in the kernel's
//! container, its output split into events and routed to contexts.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::wire::{Event, Lines, Listed, Op};
use super::KernelError;
use crate::error::Result;
use crate::session::protocol::{unb64, Reply};
use crate::session::{Channel, Session};
use crate::util::{lock, push_tail};

/// The relay program.
pub const RELAY: &str = include_str!("../../images/kernel/relay.py");
/// Run by every kernel at start: chart and DataFrame formatters.
pub const KERNEL_STARTUP: &str = include_str!("../../images/kernel/kernel_startup.py");
/// The fork server the relay makes each context's kernel from.
pub const KERNEL_ZYGOTE: &str = include_str!("../../images/kernel/kernel_zygote.py");
/// Their names among the session's helpers (the relay finds the startup
/// file beside itself).
pub(crate) const RELAY_FILE: &str = "kernel-relay.py";
pub(crate) const STARTUP_FILE: &str = "kernel_startup.py";
pub(crate) const ZYGOTE_FILE: &str = "kernel_zygote.py";
/// How long the relay may take to say it is up.
const READY_LIMIT: Duration = Duration::from_secs(30);
/// The longest line the relay may send: its payload cap, base64 and JSON.
const LINE_LIMIT: usize = 64 << 20;

/// One context's events, and the run whose messages it lets through.
struct Route {
    tx: mpsc::UnboundedSender<Event>,
    current: Option<String>,
}

#[derive(Default)]
struct Routes {
    alive: bool,
    why: String,
    /// The agent ended the relay's group for using up the container's pids.
    pids_exhausted: bool,
    contexts: HashMap<String, Route>,
    /// Who waits for the answer to `list`.
    listing: Option<oneshot::Sender<Vec<Listed>>>,
}

/// A running relay.
pub(crate) struct Link {
    session: Session,
    channel: u64,
    routes: Arc<Mutex<Routes>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Link {
    /// Starts the relay in `session`'s container. It runs from the
    /// session's helpers (root-owned, read-only) in isolated mode (`-I`: no
    /// user site, no `PYTHON*` variables, not its own directory on the
    /// path), so nothing the kernel's code writes is ever loaded by it.
    /// `startup` is the contexts' startup code: the relay's fork server
    /// imports what it imports while the relay itself starts.
    pub(crate) async fn open(session: &Session, startup: &[String]) -> Result<Arc<Link>> {
        let env = BTreeMap::from([(
            "DOCKHAND_KERNEL_STARTUP".to_string(),
            serde_json::to_string(startup).unwrap_or_else(|_| "[]".into()),
        )]);
        let channel = session.open_channel(&relay_command(), env).await?;
        let (link, ready_rx) = Link::over(session, channel);
        match tokio::time::timeout(READY_LIMIT, ready_rx).await {
            Ok(Ok(())) => Ok(link),
            Ok(Err(_)) => {
                let why = link.why();
                // Only a missing module says anything about the image; a
                // container out of processes or memory says so itself.
                let hint = if why.contains("No module named") {
                    " (is ipykernel in the image?)"
                } else {
                    ""
                };
                Err(KernelError::Unavailable {
                    reason: format!("the kernel relay exited at start{hint}: {why}"),
                }
                .into())
            }
            Err(_) => Err(KernelError::Unavailable {
                reason: format!("the kernel relay did not start within {READY_LIMIT:?}"),
            }
            .into()),
        }
    }

    /// The host's end of a relay on `channel`, and the signal of its
    /// `ready`.
    fn over(session: &Session, channel: Channel) -> (Arc<Link>, oneshot::Receiver<()>) {
        let Channel { id, replies } = channel;
        let routes = Arc::new(Mutex::new(Routes {
            alive: true,
            ..Routes::default()
        }));
        let (ready_tx, ready_rx) = oneshot::channel();
        let reader = tokio::spawn(read_events(replies, routes.clone(), ready_tx));
        let link = Arc::new(Link {
            session: session.clone(),
            channel: id,
            routes,
            reader,
        });
        (link, ready_rx)
    }

    /// Takes over the relay an earlier host of this (kept) session left
    /// running, if there is one: its kernels, their variables and all, and
    /// the contexts they run. `None` where no relay runs.
    pub(crate) async fn adopt(session: &Session) -> Result<Option<(Arc<Link>, Vec<Listed>)>> {
        let command = relay_command();
        let Some(open) = session
            .open_channels()
            .await?
            .into_iter()
            .find(|c| c.command == command)
        else {
            return Ok(None);
        };
        let (link, _ready) = Link::over(session, session.adopt_channel(open.id)?);
        let (tx, rx) = oneshot::channel();
        lock(&link.routes).listing = Some(tx);
        link.send(&Op::List).await?;
        match tokio::time::timeout(READY_LIMIT, rx).await {
            Ok(Ok(listed)) => Ok(Some((link, listed))),
            _ => Err(KernelError::Unavailable {
                reason: format!(
                    "the running kernel relay did not list its contexts: {}",
                    link.why()
                ),
            }
            .into()),
        }
    }

    /// Whether the relay is still running.
    pub(crate) fn alive(&self) -> bool {
        lock(&self.routes).alive
    }

    /// Why the relay stopped (its last stderr).
    pub(crate) fn why(&self) -> String {
        let why = lock(&self.routes).why.trim().to_string();
        if why.is_empty() {
            "the relay or its container stopped".into()
        } else {
            format!("the relay stopped: {why}")
        }
    }

    /// The error for a run that found the relay gone: a typed
    /// [`Error::ProcessLimit`](crate::Error::ProcessLimit) when code used up
    /// the pids (the kernels are ended with it; the next run starts afresh).
    pub(crate) fn gone_error(&self, pids_limit: i64) -> crate::Error {
        if lock(&self.routes).pids_exhausted {
            return crate::Error::ProcessLimit {
                limit: pids_limit,
                stdout: String::new(),
                stderr: "the kernel's code used up the container's process limit; its kernels were ended and the next run starts a new one".into(),
            };
        }
        KernelError::Unavailable { reason: self.why() }.into()
    }

    /// A fresh event queue for context `name` (the old one, if any, ends).
    pub(crate) fn route(&self, name: &str) -> Option<mpsc::UnboundedReceiver<Event>> {
        let mut routes = lock(&self.routes);
        if !routes.alive {
            return None;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        routes
            .contexts
            .insert(name.to_string(), Route { tx, current: None });
        Some(rx)
    }

    /// Forgets context `name`.
    pub(crate) fn unroute(&self, name: &str) {
        lock(&self.routes).contexts.remove(name);
    }

    /// Lets through only the messages answering request `id` (none: only
    /// lifecycle events). Output of earlier runs, of threads the code left
    /// behind and forged replies all name other parents, and are dropped.
    pub(crate) fn expect(&self, name: &str, id: Option<&str>) {
        if let Some(route) = lock(&self.routes).contexts.get_mut(name) {
            route.current = id.map(str::to_string);
        }
    }

    /// Sends one operation to the relay.
    pub(crate) async fn send(&self, op: &Op<'_>) -> Result<()> {
        if !self.alive() {
            return Err(KernelError::Unavailable { reason: self.why() }.into());
        }
        self.session.channel_input(self.channel, &op.encode()).await
    }
}

/// How the agent runs the relay (and how a later host finds it running).
fn relay_command() -> String {
    format!(
        "exec python3 -I -B -u {}/{RELAY_FILE}",
        crate::session::HELPERS_DIR
    )
}

/// Routes the relay's events until its output ends.
async fn read_events(
    mut replies: mpsc::UnboundedReceiver<Reply>,
    routes: Arc<Mutex<Routes>>,
    ready: oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    let mut pids_exhausted = false;
    let mut lines = Lines::new(LINE_LIMIT);
    let mut stderr = String::new();
    while let Some(reply) = replies.recv().await {
        let (stream, data) = match reply {
            Reply::Chunk { stream, data, .. } => (stream, data),
            Reply::Exit {
                code,
                pids_exhausted: exhausted,
                ..
            } => {
                stderr.push_str(&format!(" (exit code {code})"));
                pids_exhausted = exhausted;
                break;
            }
            Reply::Error { message, .. } => {
                stderr.push_str(&message);
                break;
            }
            _ => continue,
        };
        let bytes = unb64(&data).unwrap_or_default();
        if stream == "stderr" {
            push_tail(&mut stderr, &bytes, 2000);
            continue;
        }
        for line in lines.push(&bytes) {
            let event: Event = match serde_json::from_slice(&line) {
                Ok(event) => event,
                Err(e) => {
                    tracing::warn!(error = %e, "unreadable line from the kernel relay");
                    continue;
                }
            };
            if matches!(event, Event::Ready) {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(());
                }
                continue;
            }
            let mut routes = lock(&routes);
            if let Event::Contexts { list } = event {
                if let Some(listing) = routes.listing.take() {
                    let _ = listing.send(list);
                }
                continue;
            }
            let Some(route) = event.context().and_then(|c| routes.contexts.get(c)) else {
                continue;
            };
            if let Some(parent) = event.parent() {
                if parent.is_none() || parent != route.current.as_deref() {
                    continue;
                }
            }
            let _ = route.tx.send(event);
        }
    }
    let mut routes = lock(&routes);
    routes.alive = false;
    routes.why = stderr;
    routes.pids_exhausted = pids_exhausted;
    // Dropping the senders tells every waiting run that the relay is gone.
    routes.contexts.clear();
}
