//! [`Kernel`]: contexts, runs, timeouts and restarts over one relay.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jupyter_protocol::JupyterMessage;
use tokio::sync::mpsc;

use super::execution::{Collector, Execution, KernelEvent};
use super::link::Link;
use super::notebook::Cell;
use super::wire::{execute_request, Event, Op};
use super::{ContextOptions, KernelConfig, KernelError, Language, RunOptions};
use crate::client::Client;
use crate::error::Result;
use crate::sandbox::redact;
use crate::session::{DirEntry, ExecOptions, ExecResult, Session, SessionApi};
use crate::util::lock;

/// The context `run` uses.
pub const DEFAULT_CONTEXT: &str = "default";
/// How long a context's kernel may take to start (imports included).
const CONTEXT_START_LIMIT: Duration = Duration::from_secs(120);
/// How long a JavaScript or TypeScript run that is done without a value
/// waits for one that trails its reply (see `Collector::value_may_trail`).
const TRAILING_VALUE: Duration = Duration::from_millis(20);

/// One context: its kernel's events and its history.
pub(super) struct Context {
    pub(super) name: String,
    pub(super) cwd: String,
    pub(super) language: Language,
    pub(super) events: Option<mpsc::UnboundedReceiver<Event>>,
    /// The relay its kernel runs under (a new relay means a new kernel).
    pub(super) link: Option<Arc<Link>>,
    pub(super) history: Vec<Cell>,
    /// When a run of this context was dropped unfinished (its interrupt
    /// sent): the next run gives it the interrupt's grace, then restarts.
    pub(super) abandoned: Arc<Mutex<Option<Instant>>>,
    /// The request id of the run under way: its events alone are taken.
    /// Events queue here between runs (a thread the last run left running
    /// prints while the next is being sent), so each is checked again as
    /// it is read, not only as it is routed.
    pub(super) run: Option<String>,
}

pub(super) struct Inner {
    pub(super) config: KernelConfig,
    pub(super) session: Session,
    pub(super) link: tokio::sync::Mutex<Option<Arc<Link>>>,
    pub(super) contexts: Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<Context>>>>,
}

/// A container running Jupyter kernels, one per context. Cheap to clone;
/// the container goes with [`Kernel::close`] or the last clone.
#[derive(Clone)]
pub struct Kernel {
    pub(super) inner: Arc<Inner>,
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("state", &self.inner.session.state())
            .field("contexts", &self.contexts())
            .finish()
    }
}

impl Client {
    /// A kernel with this configuration; call [`Kernel::start`].
    pub fn kernel(&self, config: KernelConfig) -> Kernel {
        self.kernel_from(config, None)
    }

    /// A kernel whose session, on a cluster with `claims`, starts in a pod
    /// claimed from that agent-sandbox pool.
    pub(crate) fn kernel_from(
        &self,
        config: KernelConfig,
        claims: crate::backend::Claims,
    ) -> Kernel {
        let session = self.session_from(config.session_config(), claims);
        Kernel {
            inner: Arc::new(Inner {
                config,
                session,
                link: tokio::sync::Mutex::new(None),
                contexts: Mutex::new(BTreeMap::new()),
            }),
        }
    }
}

impl Client {
    /// The kept kernel whose container is `id` (its session made with
    /// `keep(true)`), paused in this process until [`Kernel::resume`]. One
    /// that runs (or is restored from memory) goes on: resume takes over
    /// the relay its kernels run under, so every context keeps its
    /// variables. One stopped on its files starts its contexts afresh.
    pub async fn kept_kernel(&self, id: &str, config: KernelConfig) -> Result<Kernel> {
        let session = self.kept_session(id, config.session_config()).await?;
        Ok(Kernel {
            inner: Arc::new(Inner {
                config,
                session,
                link: tokio::sync::Mutex::new(None),
                contexts: Mutex::new(BTreeMap::new()),
            }),
        })
    }
}

impl Kernel {
    /// Builds the image if needed, starts the container and the default
    /// context.
    pub async fn start(&self) -> Result<()> {
        self.inner.config.check_bindings()?;
        self.inner.session.start().await?;
        let cwd = self.inner.config.session.workspace_dir().to_string();
        self.create_context_in(DEFAULT_CONTEXT, &cwd).await
    }

    /// The session underneath: files, shell commands, snapshots.
    pub fn session(&self) -> &Session {
        &self.inner.session
    }

    /// The configuration.
    pub fn config(&self) -> &KernelConfig {
        &self.inner.config
    }

    /// Runs code in the default context.
    pub async fn run(&self, code: &str) -> Result<Execution> {
        self.run_with(code, RunOptions::default()).await
    }

    /// Runs code with options. `Ok` whether or not the code raised; `Err`
    /// only when the kernel itself failed ([`KernelError`]).
    pub async fn run_with(&self, code: &str, options: RunOptions) -> Result<Execution> {
        let name = options.context.as_deref().unwrap_or(DEFAULT_CONTEXT);
        let context = self.context(name)?;
        let mut context = context.lock().await;
        let mut link = self.ready(&mut context).await?;
        let timeout = options.timeout.unwrap_or(self.inner.config.run_timeout);
        let started = Instant::now();
        let abandoned = lock(&context.abandoned).take();
        let mut guard = Interrupter {
            link: link.clone(),
            context: name.to_string(),
            armed: true,
            abandoned: context.abandoned.clone(),
        };
        context.run = Some(submit(&link, name, code).await?);
        let mut collector = Collector::new(self.inner.config.text_limit);
        let mut outcome = None;
        if let Some(at) = abandoned {
            // A dropped run was interrupted; this one queues behind it until
            // it ends. Past the interrupt's grace it is the code ignoring the
            // interrupt: the context restarts, as after a timeout.
            let begin_by = (at + self.inner.config.interrupt_grace).min(started + timeout);
            match self
                .collect(&mut context, &mut collector, begin_by, &options)
                .await
            {
                Collected::Timeout if !collector.heard() => {
                    tracing::warn!(
                        context = name,
                        "a dropped run ignored its interrupt: restarting the context"
                    );
                    self.restart_locked(&mut context).await?;
                    link = self.ready(&mut context).await?;
                    guard.link = link.clone();
                    context.run = Some(submit(&link, name, code).await?);
                    collector = Collector::new(self.inner.config.text_limit);
                }
                Collected::Timeout => {}
                other => outcome = Some(other),
            }
        }
        let outcome = match outcome {
            Some(outcome) => outcome,
            None => {
                self.collect(&mut context, &mut collector, started + timeout, &options)
                    .await
            }
        };
        let outcome = match outcome {
            Collected::Timeout => {
                link.send(&Op::Interrupt { ctx: name }).await?;
                let grace = Instant::now() + self.inner.config.interrupt_grace;
                match self
                    .collect(&mut context, &mut collector, grace, &options)
                    .await
                {
                    Collected::Done => Err(KernelError::Timeout {
                        context: name.into(),
                        timeout,
                        state_lost: false,
                    }
                    .into()),
                    Collected::Err(e) => Err(e),
                    Collected::Timeout => {
                        self.restart_locked(&mut context).await?;
                        Err(KernelError::Timeout {
                            context: name.into(),
                            timeout,
                            state_lost: true,
                        }
                        .into())
                    }
                }
            }
            Collected::Err(e) => Err(e),
            Collected::Done => Ok(()),
        };
        guard.armed = false;
        link.expect(name, None);
        outcome?;
        let mut execution = collector.execution;
        execution.duration = started.elapsed();
        self.redact(&mut execution);
        context.history.push(Cell::Run {
            code: code.to_string(),
            execution: Box::new(execution.clone()),
        });
        Ok(execution)
    }

    /// Folds one of a run's messages into `collector`, telling the run's
    /// listener; a message that is not Jupyter's is skipped.
    fn fold(&self, collector: &mut Collector, msg: serde_json::Value, options: &RunOptions) {
        let Ok(message) = serde_json::from_value::<JupyterMessage>(msg) else {
            return;
        };
        if let (Some(event), Some(listener)) = (collector.take(message), &options.listener) {
            listener(&self.redact_event(event));
        }
    }

    /// A done run's value that came after its reply and `idle` (Deno's),
    /// if it comes by `until`.
    async fn trailing(
        &self,
        context: &mut Context,
        collector: &mut Collector,
        until: Instant,
        options: &RunOptions,
    ) -> Collected {
        while let Some(events) = context.events.as_mut() {
            let Ok(Some(event)) = tokio::time::timeout_at(until.into(), events.recv()).await else {
                break;
            };
            let own = event.parent().flatten() == context.run.as_deref();
            if let (Event::Msg { msg, .. }, true) = (event, own) {
                self.fold(collector, msg, options);
                if !collector.value_may_trail() {
                    break;
                }
            }
        }
        Collected::Done
    }

    /// Reads a run's events until it is done, the deadline passes or the
    /// kernel fails.
    async fn collect(
        &self,
        context: &mut Context,
        collector: &mut Collector,
        deadline: Instant,
        options: &RunOptions,
    ) -> Collected {
        let trails = matches!(
            context.language,
            Language::JavaScript | Language::TypeScript
        );
        loop {
            let Some(events) = context.events.as_mut() else {
                return Collected::Err(self.gone(context));
            };
            let event = match tokio::time::timeout_at(deadline.into(), events.recv()).await {
                Err(_) => return Collected::Timeout,
                Ok(None) => return Collected::Err(self.gone(context)),
                Ok(Some(event)) => event,
            };
            // Routed while an earlier run was still the one expected.
            if event
                .parent()
                .is_some_and(|parent| parent.is_none() || parent != context.run.as_deref())
            {
                continue;
            }
            match event {
                Event::Msg { msg, .. } => {
                    self.fold(collector, msg, options);
                    if collector.done() {
                        if trails && collector.value_may_trail() {
                            // What follows at once is the run's value.
                            let until = (Instant::now() + TRAILING_VALUE).min(deadline);
                            return self.trailing(context, collector, until, options).await;
                        }
                        return Collected::Done;
                    }
                }
                Event::Cut { stream, .. } => collector.cut(&stream),
                Event::Died {
                    code, oom, stderr, ..
                } => {
                    let reason = format!(
                        "exit status {code}{}",
                        if stderr.trim().is_empty() {
                            String::new()
                        } else {
                            format!("; its stderr ends:\n{}", tail(&stderr, 1000))
                        }
                    );
                    context.link = None;
                    if let Err(e) = self.ready(context).await {
                        return Collected::Err(e);
                    }
                    return Collected::Err(
                        KernelError::Died {
                            context: context.name.clone(),
                            reason,
                            out_of_memory: oom,
                        }
                        .into(),
                    );
                }
                _ => {}
            }
        }
    }

    /// The relay is gone: the context must start again.
    fn gone(&self, context: &mut Context) -> crate::Error {
        context.events = None;
        match context.link.take() {
            Some(link) => link.gone_error(self.inner.config.session.resources.pids),
            None => KernelError::Unavailable {
                reason: "the relay stopped".into(),
            }
            .into(),
        }
    }

    /// A running relay, starting one if there is none (or it died).
    async fn link(&self) -> Result<Arc<Link>> {
        let mut link = self.inner.link.lock().await;
        if let Some(l) = link.as_ref() {
            if l.alive() {
                return Ok(l.clone());
            }
        }
        let fresh = Link::open(&self.inner.session, &self.inner.config.startup_code()).await?;
        *link = Some(fresh.clone());
        Ok(fresh)
    }

    /// The context's kernel, started under the current relay.
    async fn ready(&self, context: &mut Context) -> Result<Arc<Link>> {
        let link = self.link().await?;
        if let Some(current) = &context.link {
            if Arc::ptr_eq(current, &link) && context.events.is_some() {
                return Ok(link);
            }
        }
        // The history goes on, with the restart recorded where it was.
        if matches!(context.history.last(), Some(Cell::Run { .. })) {
            context.history.push(Cell::Restart);
        }
        let events = link
            .route(&context.name)
            .ok_or_else(|| KernelError::Unavailable { reason: link.why() })?;
        context.events = Some(events);
        context.link = Some(link.clone());
        let c = &self.inner.config;
        link.send(&Op::Start {
            ctx: &context.name,
            language: context.language.as_str(),
            cwd: &context.cwd,
            text_limit: c.text_limit,
            payload_limit: c.payload_limit,
            startup: &c.startup_code(),
            modules: c.deferred_modules(),
            formats: &c.figure_formats,
        })
        .await?;
        self.await_lifecycle(context, |e| matches!(e, Event::Started { .. }))
            .await?;
        Ok(link)
    }

    /// Waits for the context's `started` (or `stopped`) event.
    async fn await_lifecycle(
        &self,
        context: &mut Context,
        wanted: impl Fn(&Event) -> bool,
    ) -> Result<()> {
        let deadline = Instant::now() + CONTEXT_START_LIMIT;
        loop {
            let Some(events) = context.events.as_mut() else {
                return Err(self.gone(context));
            };
            match tokio::time::timeout_at(deadline.into(), events.recv()).await {
                Err(_) => {
                    return Err(KernelError::StartFailed {
                        context: context.name.clone(),
                        reason: format!("no answer within {CONTEXT_START_LIMIT:?}"),
                    }
                    .into())
                }
                Ok(None) => return Err(self.gone(context)),
                Ok(Some(Event::Failed { reason, .. })) => {
                    context.link = None;
                    return Err(KernelError::StartFailed {
                        context: context.name.clone(),
                        reason,
                    }
                    .into());
                }
                Ok(Some(event)) if wanted(&event) => return Ok(()),
                Ok(Some(_)) => {}
            }
        }
    }

    fn context(&self, name: &str) -> Result<Arc<tokio::sync::Mutex<Context>>> {
        lock(&self.inner.contexts)
            .get(name)
            .cloned()
            .ok_or_else(|| KernelError::NoSuchContext(name.to_string()).into())
    }

    /// Creates a context working in the workspace and starts its kernel.
    pub async fn create_context(&self, name: &str) -> Result<()> {
        let cwd = self.inner.config.session.workspace_dir().to_string();
        self.create_context_in(name, &cwd).await
    }

    /// Creates a context working in `cwd` (created if missing) and starts
    /// its kernel. A context of that name already there is left as it is.
    pub async fn create_context_in(&self, name: &str, cwd: &str) -> Result<()> {
        self.create_context_with(name, ContextOptions::new().cwd(cwd))
            .await
    }

    /// Creates a context with these options (its language, its working
    /// directory) and starts its kernel. A context of that name already
    /// there is left as it is.
    ///
    /// ```no_run
    /// # async fn demo(client: dockhand::Client) -> dockhand::Result<()> {
    /// use dockhand::kernel::{ContextOptions, KernelConfig, Language};
    /// let kernel = client.kernel(KernelConfig::new().languages([Language::TypeScript]));
    /// kernel.start().await?;
    /// kernel
    ///     .create_context_with("ts", ContextOptions::new().language(Language::TypeScript))
    ///     .await?;
    /// let options = dockhand::kernel::RunOptions::new().context("ts");
    /// let ex = kernel.run_with("const n: number = 6; n * 7", options).await?;
    /// assert_eq!(ex.text(), Some("42"));
    /// # Ok(()) }
    /// ```
    pub async fn create_context_with(&self, name: &str, options: ContextOptions) -> Result<()> {
        let language = options.language;
        self.inner.config.check_language(language)?;
        let session = &self.inner.config.session;
        let cwd = options
            .cwd
            .unwrap_or_else(|| session.workspace_dir().to_string());
        let cwd = cwd.as_str();
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            return Err(KernelError::BadContextName(name.to_string()).into());
        }
        let cwd = crate::session::paths::resolve(cwd, session.workspace_dir(), &session.roots())
            .ok_or_else(|| crate::Error::SessionFile {
                path: cwd.to_string(),
                kind: crate::FileErrorKind::OutsideSession,
                message: "a context's working directory must be under the workspace or /tmp".into(),
            })?;
        let context = {
            let mut contexts = lock(&self.inner.contexts);
            if contexts.contains_key(name) {
                return Ok(());
            }
            let context = Arc::new(tokio::sync::Mutex::new(Context {
                run: None,
                name: name.to_string(),
                cwd,
                language,
                events: None,
                link: None,
                history: Vec::new(),
                abandoned: Arc::default(),
            }));
            contexts.insert(name.to_string(), context.clone());
            context
        };
        let mut context = context.lock().await;
        if let Err(e) = self.ready(&mut context).await {
            lock(&self.inner.contexts).remove(name);
            return Err(e);
        }
        Ok(())
    }

    /// The contexts' names.
    pub fn contexts(&self) -> Vec<String> {
        lock(&self.inner.contexts).keys().cloned().collect()
    }

    /// The languages its image carries (contexts can run any of them).
    pub fn languages(&self) -> &[Language] {
        self.inner.config.language_list()
    }

    /// The language context `name` runs.
    pub async fn context_language(&self, name: &str) -> Result<Language> {
        Ok(self.context(name)?.lock().await.language)
    }

    /// Restarts a context's kernel: its variables are gone; its notebook
    /// keeps the runs before, with the restart recorded.
    pub async fn restart_context(&self, name: &str) -> Result<()> {
        let context = self.context(name)?;
        let mut context = context.lock().await;
        self.restart_locked(&mut context).await
    }

    async fn restart_locked(&self, context: &mut Context) -> Result<()> {
        if let Some(link) = context.link.take() {
            let _ = link.send(&Op::Stop { ctx: &context.name }).await;
        }
        self.ready(context).await.map(|_| ())
    }

    /// Ends a context's kernel and everything it started.
    pub async fn remove_context(&self, name: &str) -> Result<()> {
        let context = self.context(name)?;
        let mut context = context.lock().await;
        if let Some(link) = context.link.clone() {
            if link.alive() {
                link.send(&Op::Stop { ctx: name }).await?;
                self.await_lifecycle(&mut context, |e| matches!(e, Event::Stopped { .. }))
                    .await?;
            }
            link.unroute(name);
        }
        lock(&self.inner.contexts).remove(name);
        Ok(())
    }

    /// A context's runs, as a Jupyter notebook (nbformat 4) with every
    /// output; a markdown cell marks each restart of its kernel.
    pub async fn notebook(&self, context: &str) -> Result<serde_json::Value> {
        let context = self.context(context)?;
        let context = context.lock().await;
        Ok(super::notebook::render(&context.history, context.language))
    }

    /// Changes the egress policy of the running kernel (see
    /// [`Session::set_network`]).
    pub async fn set_network(&self, policy: crate::Egress) -> Result<()> {
        self.inner.session.set_network(policy).await
    }

    /// Pauses the kernel's container (see [`Session::pause`]): in
    /// [`PauseMode::Memory`](crate::session::PauseMode::Memory) every
    /// context keeps its variables, imports and background work across
    /// [`resume`](Self::resume); in filesystem mode only files stay, and
    /// each context's kernel starts afresh at its next run.
    pub async fn pause(&self, mode: crate::session::PauseMode) -> Result<crate::session::Paused> {
        // No run may start while the container stops.
        let mut link = self.inner.link.lock().await;
        let paused = self.inner.session.pause(mode).await?;
        if mode == crate::session::PauseMode::Filesystem {
            *link = None;
        }
        Ok(paused)
    }

    /// Resumes a paused kernel (see [`Session::resume`]). One adopted
    /// from another process ([`Client::kept_kernel`]) that still runs
    /// takes over its relay: its contexts go on, variables, imports and
    /// all. Otherwise (its container was stopped, or held no kernel) it
    /// gets its default context here.
    pub async fn resume(&self) -> Result<()> {
        {
            let mut link = self.inner.link.lock().await;
            self.inner.session.resume().await?;
            if link.is_none() && self.contexts().is_empty() {
                *link = self.take_over_relay().await;
            }
        }
        if self.contexts().is_empty() {
            let cwd = self.inner.config.session.workspace_dir().to_string();
            self.create_context_in(DEFAULT_CONTEXT, &cwd).await?;
        }
        Ok(())
    }

    /// Removes the container and every context.
    pub async fn close(&self) -> Result<()> {
        *self.inner.link.lock().await = None;
        self.inner.session.close().await.map(|_| ())
    }

    fn redact(&self, execution: &mut Execution) {
        let secrets = self.inner.session.secret_values();
        if secrets.is_empty() {
            return;
        }
        execution.stdout = redact(&execution.stdout, &secrets);
        execution.stderr = redact(&execution.stderr, &secrets);
        if let Some(e) = execution.error.as_mut() {
            e.value = redact(&e.value, &secrets);
            e.traceback = redact(&e.traceback, &secrets);
        }
        for result in &mut execution.results {
            for value in result.data.values_mut() {
                if let Some(text) = value.as_str() {
                    *value = serde_json::Value::String(redact(text, &secrets));
                }
            }
        }
    }

    fn redact_event(&self, event: KernelEvent) -> KernelEvent {
        let secrets = self.inner.session.secret_values();
        if secrets.is_empty() {
            return event;
        }
        match event {
            KernelEvent::Stdout(t) => KernelEvent::Stdout(redact(&t, &secrets)),
            KernelEvent::Stderr(t) => KernelEvent::Stderr(redact(&t, &secrets)),
            other => other,
        }
    }
}

enum Collected {
    Done,
    Timeout,
    Err(crate::Error),
}

/// Interrupts the kernel if a run is dropped before it ends, so the next
/// run does not queue behind code nobody waits for.
struct Interrupter {
    link: Arc<Link>,
    context: String,
    armed: bool,
    abandoned: Arc<Mutex<Option<Instant>>>,
}

impl Drop for Interrupter {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.link.expect(&self.context, None);
        *lock(&self.abandoned) = Some(Instant::now());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (link, context) = (self.link.clone(), std::mem::take(&mut self.context));
            runtime.spawn(async move {
                let _ = link.send(&Op::Interrupt { ctx: &context }).await;
            });
        }
    }
}

/// Sends `code` to the context's kernel as a new run, which from now on is
/// the only one whose messages the context takes; its request id.
async fn submit(link: &Link, context: &str, code: &str) -> Result<String> {
    let (id, msg) = execute_request(code);
    link.expect(context, Some(&id));
    link.send(&Op::Send {
        ctx: context,
        channel: "shell",
        msg,
    })
    .await?;
    Ok(id)
}

fn tail(text: &str, keep: usize) -> &str {
    let mut from = text.len().saturating_sub(keep);
    while !text.is_char_boundary(from) {
        from += 1;
    }
    &text[from..]
}

/// Files and shell commands in the kernel's container (the workspace is the
/// default context's working directory).
impl SessionApi for Kernel {
    async fn exec_with(&self, command: &str, options: ExecOptions) -> Result<ExecResult> {
        self.inner.session.exec_with(command, options).await
    }
    async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        self.inner.session.read_file(path).await
    }
    async fn write_file(&self, path: &str, data: &[u8]) -> Result<()> {
        self.inner.session.write_file(path, data).await
    }
    async fn list_dir(&self, path: &str) -> Result<Vec<DirEntry>> {
        self.inner.session.list_dir(path).await
    }
    async fn remove(&self, path: &str) -> Result<()> {
        self.inner.session.remove(path).await
    }
}
