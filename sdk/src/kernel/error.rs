//! What can go wrong with a kernel itself. A run whose code raises is not
//! one of these: its error is part of its [`Execution`](super::Execution).

use std::time::Duration;

/// A kernel, context or relay failure.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// A run outlived its timeout. The kernel was interrupted; `state_lost`
    /// says whether the interrupt failed to take within the grace period, so
    /// the context was restarted and its variables are gone.
    #[error("the run in context `{context}` did not finish within {timeout:?}; {}", if *state_lost {
        "the interrupt did not take, so the context was restarted and its state is lost"
    } else {
        "it was interrupted and the context's state is kept"
    })]
    Timeout {
        /// The context.
        context: String,
        /// The limit.
        timeout: Duration,
        /// Whether the context was restarted.
        state_lost: bool,
    },
    /// The kernel process of a context died during a run (killed, crashed or
    /// out of memory). The context was restarted; its state is lost.
    #[error("the kernel of context `{context}` died{}: {reason}; the context was restarted and its state is lost", if *out_of_memory { " (out of memory)" } else { "" })]
    Died {
        /// The context.
        context: String,
        /// Exit status and the kernel's last stderr.
        reason: String,
        /// Whether the memory limit killed it.
        out_of_memory: bool,
    },
    /// The kernel's container or relay is gone or not answering; the next
    /// call starts a new one (every context's state is lost).
    #[error("the kernel is not available: {reason}")]
    Unavailable {
        /// Why.
        reason: String,
    },
    /// No context of that name.
    #[error("no kernel context named `{0}`; create it with `create_context`")]
    NoSuchContext(String),
    /// A context could not be started (a broken image or startup code).
    #[error("kernel context `{context}` did not start: {reason}")]
    StartFailed {
        /// The context.
        context: String,
        /// What the kernel said.
        reason: String,
    },
    /// A context name other than 1–64 letters, digits, `-` and `_`.
    #[error("bad kernel context name `{0}`: use 1-64 letters, digits, `-` and `_`")]
    BadContextName(String),
    /// A language dockhand has no kernel for.
    #[error("no kernel for language `{0}`: dockhand's kernels run python, javascript, typescript, bash and r")]
    UnknownLanguage(String),
    /// [`KernelConfig::bind_module`](super::KernelConfig::bind_module) was
    /// given a name or module that is not a Python identifier.
    #[error("cannot bind `{name}` to module `{module}`: a name is a Python identifier (letters, digits, `_`) and a module one or more joined by `.`")]
    BadModuleBinding {
        /// The name.
        name: String,
        /// The module.
        module: String,
    },
    /// A context asked for a language its kernel's image does not carry.
    #[error("this kernel's image does not carry {language}: add it with `KernelConfig::languages` (it carries {carried})")]
    LanguageNotInImage {
        /// The language asked for.
        language: super::Language,
        /// The languages the image carries, comma-separated.
        carried: String,
    },
}
