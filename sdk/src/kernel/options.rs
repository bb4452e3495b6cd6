//! Options of a run ([`RunOptions`]) and of a new context
//! ([`ContextOptions`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{KernelEvent, Language};

/// A live output listener.
type Listener = Arc<dyn Fn(&KernelEvent) + Send + Sync>;

/// Options of one run.
#[derive(Clone, Default)]
pub struct RunOptions {
    pub(crate) context: Option<String>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) listener: Option<Listener>,
}

impl fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunOptions")
            .field("context", &self.context)
            .field("timeout", &self.timeout)
            .field("listener", &self.listener.is_some())
            .finish()
    }
}

impl RunOptions {
    /// Default options: the default context and the kernel's run timeout.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs in this context (created with
    /// [`Kernel::create_context`](super::Kernel::create_context)).
    pub fn context(mut self, name: impl Into<String>) -> Self {
        self.context = Some(name.into());
        self
    }

    /// The run's limit: past it the kernel is interrupted (state kept), and
    /// restarted if the interrupt does not take.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Called with each output as it comes (stdout, stderr, results, error).
    pub fn on_event(mut self, listener: impl Fn(&KernelEvent) + Send + Sync + 'static) -> Self {
        self.listener = Some(Arc::new(listener));
        self
    }
}

/// How a new context is made: its language and working directory.
///
/// ```
/// use dockhand::kernel::{ContextOptions, Language};
/// let options = ContextOptions::new().language(Language::R).cwd("/tmp/analysis");
/// assert_eq!(options.language_name(), Language::R);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ContextOptions {
    pub(crate) language: Language,
    pub(crate) cwd: Option<String>,
}

impl ContextOptions {
    /// Python, in the workspace.
    pub fn new() -> Self {
        Self::default()
    }

    /// The language its kernel runs (one the image carries; see
    /// [`KernelConfig::languages`](super::KernelConfig::languages)).
    pub fn language(mut self, language: Language) -> Self {
        self.language = language;
        self
    }

    /// Its working directory (under the workspace or `/tmp`; made if
    /// missing).
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// The language chosen.
    pub fn language_name(&self) -> Language {
        self.language
    }
}
