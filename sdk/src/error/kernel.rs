//! What can go wrong with a kernel itself ([`Error::Kernel`](super::Error::Kernel)),
//! and the languages those errors name; re-exported by
//! [`kernel`](crate::kernel). A run whose code raises is not one of these:
//! its error is part of its [`Execution`](crate::kernel::Execution).

use std::fmt;
use std::str::FromStr;
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
    /// [`KernelConfig::bind_module`](crate::kernel::KernelConfig::bind_module) was
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
        language: Language,
        /// The languages the image carries, comma-separated.
        carried: String,
    },
}

/// A language a context runs. Python is ipykernel; the others are the
/// Jupyter kernels their communities keep: Deno's for JavaScript and
/// TypeScript, `bash_kernel` for Bash, IRkernel for R. Each gives the same
/// results model (stdout and stderr, MIME results, errors with name, value
/// and traceback).
///
/// ```
/// use dockhand::kernel::Language;
/// assert_eq!("ts".parse::<Language>().unwrap(), Language::TypeScript);
/// assert_eq!(Language::JavaScript.as_str(), "javascript");
/// assert!("cobol".parse::<Language>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Language {
    /// ipykernel (the default).
    #[default]
    Python,
    /// Deno's kernel.
    JavaScript,
    /// Deno's kernel, TypeScript checked as Deno runs it.
    TypeScript,
    /// `bash_kernel`.
    Bash,
    /// IRkernel.
    R,
}

impl Language {
    /// Every language, Python first.
    pub const ALL: [Language; 5] = [
        Language::Python,
        Language::JavaScript,
        Language::TypeScript,
        Language::Bash,
        Language::R,
    ];

    /// The name the relay and E2B's API use.
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::JavaScript => "javascript",
            Language::TypeScript => "typescript",
            Language::Bash => "bash",
            Language::R => "r",
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Language {
    type Err = KernelError;

    /// The names E2B's SDKs and Jupyter use, in any case: `python`
    /// (`python3`, `py`), `javascript` (`js`, `node`, `deno`), `typescript`
    /// (`ts`), `bash` (`sh`, `shell`), `r`.
    fn from_str(name: &str) -> Result<Self, KernelError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "" | "python" | "python3" | "py" | "ipython" => Ok(Language::Python),
            "javascript" | "js" | "node" | "deno" => Ok(Language::JavaScript),
            "typescript" | "ts" => Ok(Language::TypeScript),
            "bash" | "sh" | "shell" => Ok(Language::Bash),
            "r" => Ok(Language::R),
            _ => Err(KernelError::UnknownLanguage(name.to_string())),
        }
    }
}
