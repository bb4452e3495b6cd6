//! The one error type of the SDK.
//!
//! Every variant says what went wrong and, where there is something to do about
//! it, what to do. Secret values never appear in any variant: they are redacted
//! before an error is built (see [`crate::sandbox`]).

use std::fmt;
use std::time::Duration;

mod cluster;
mod code;
mod describe;
pub(crate) mod edit;
mod helpers;
mod kernel;
#[cfg(test)]
mod tests;
pub use cluster::{ClusterError, ForbiddenBy};
pub use code::{CodeError, CodeFailure, ToolCallRecord};
pub(crate) use describe::offline_hint;
use describe::{
    describe_exit, describe_index, hint_suffix, list_names, signal_name, stderr_suffix, suggest,
};
pub use edit::EditError;
pub use kernel::{KernelError, Language};

/// Shorthand for `Result<T, dockhand::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which package manager rejected a package.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PackageManager {
    /// Debian's `apt-get`.
    Apt,
    /// Python's `pip`.
    Pip,
}

impl fmt::Display for PackageManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PackageManager::Apt => "apt",
            PackageManager::Pip => "pip",
        })
    }
}

/// Why a package index could not be used while building an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IndexProblem {
    /// Its TLS certificate was not trusted: usually a proxy that intercepts
    /// TLS with a certificate of its own.
    UntrustedCertificate,
    /// It could not be reached: no network, no DNS, or a proxy in the way.
    Unreachable,
}

/// Why a file operation in a session failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FileErrorKind {
    /// No such file or directory.
    NotFound,
    /// A directory was expected.
    NotADirectory,
    /// A file was expected, but it is a directory.
    IsADirectory,
    /// The path is outside what the session allows (workspace, mounts, /tmp).
    OutsideSession,
    /// Not permitted (the session's user may not do it).
    PermissionDenied,
    /// The file system is read-only there (a read-only mount).
    ReadOnly,
    /// A directory is not empty.
    NotEmpty,
    /// Not a regular file (a FIFO, socket or device): only regular files are read.
    NotAFile,
    /// The file is larger than the session's read limit.
    TooLarge,
    /// Anything else.
    Other,
}

impl FileErrorKind {
    pub(crate) fn from_agent(kind: &str) -> Self {
        match kind {
            "not_found" => FileErrorKind::NotFound,
            "not_a_directory" => FileErrorKind::NotADirectory,
            "is_a_directory" => FileErrorKind::IsADirectory,
            "outside" => FileErrorKind::OutsideSession,
            "permission" => FileErrorKind::PermissionDenied,
            "read_only" => FileErrorKind::ReadOnly,
            "not_empty" => FileErrorKind::NotEmpty,
            "not_a_file" => FileErrorKind::NotAFile,
            "too_large" => FileErrorKind::TooLarge,
            _ => FileErrorKind::Other,
        }
    }
}

/// A Python exception raised by sandboxed code, parsed from its traceback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonError {
    /// Exception class name, e.g. `ZeroDivisionError`.
    pub exception_type: String,
    /// The exception message (may be empty).
    pub message: String,
    /// The full traceback text as Python printed it.
    pub traceback: String,
}

impl fmt::Display for PythonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.exception_type)
        } else {
            write!(f, "{}: {}", self.exception_type, self.message)
        }
    }
}

/// Everything that can go wrong in dockhand.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A container asked for an OCI runtime the daemon has not registered
    /// (gVisor's `runsc`, say). Nothing was created.
    #[error("the Docker daemon has no `{runtime}` runtime (it has {}); {hint}", available.join(", "))]
    RuntimeUnavailable {
        /// The runtime asked for.
        runtime: String,
        /// The runtimes the daemon has.
        available: Vec<String>,
        /// How to register it.
        hint: String,
    },

    /// The Docker daemon did not answer.
    #[error("cannot reach the Docker daemon at {endpoint}: {reason}\nhint: {hint}")]
    DaemonUnreachable {
        /// Where the SDK looked (from `DOCKER_HOST`, or the default socket).
        endpoint: String,
        /// What the connection attempt reported.
        reason: String,
        /// How to fix it.
        hint: String,
    },

    /// The TLS connection to the daemon could not be set up: a certificate
    /// file is missing or unreadable, the daemon's certificate is not signed
    /// by the CA given, or the daemon refused the client certificate.
    #[error("TLS to the Docker daemon at {endpoint} failed: {reason}\nhint: {hint}")]
    DaemonTls {
        /// The daemon's endpoint.
        endpoint: String,
        /// What failed.
        reason: String,
        /// How to fix it.
        hint: String,
    },

    /// A feature that needs the daemon to see this machine's files (a bind
    /// mount of a host path) was asked of a daemon on another machine.
    /// Nothing was created.
    #[error(
        "{feature} needs a Docker daemon on this machine, but {endpoint} is remote\nhint: {hint}"
    )]
    NeedsLocalDaemon {
        /// What was asked, e.g. `session mount /data -> /data`.
        feature: String,
        /// The daemon's endpoint.
        endpoint: String,
        /// What to do instead.
        hint: String,
    },

    /// A Docker Engine API call failed.
    #[error("docker {operation} failed: {message}")]
    Docker {
        /// The operation, e.g. `create container`.
        operation: &'static str,
        /// The daemon's message.
        message: String,
        /// The daemon's HTTP status, when it answered with one (404: no such
        /// object, 409: conflict, ...).
        status: Option<u16>,
    },

    /// A package named in an [`ImageSpec`](crate::ImageSpec) does not exist.
    #[error("{manager} package `{package}` was not found; check its name (and version) in the image spec")]
    InvalidPackage {
        /// apt or pip.
        manager: PackageManager,
        /// The package as the package manager named it.
        package: String,
    },

    /// A package index could not be used while building an image, so
    /// packages could not be installed (whatever their names).
    #[error("{}\n--- last lines of the build log ---\n{log_tail}", describe_index(*problem, tag, evidence))]
    PackageIndex {
        /// What went wrong.
        problem: IndexProblem,
        /// The tag being built.
        tag: String,
        /// The log line that shows it.
        evidence: String,
        /// The last lines of the build log.
        log_tail: String,
    },

    /// An image build failed for another reason.
    #[error(
        "building image {tag} failed: {message}\n--- last lines of the build log ---\n{log_tail}"
    )]
    ImageBuild {
        /// The tag being built.
        tag: String,
        /// The builder's error message.
        message: String,
        /// The last lines of the build log.
        log_tail: String,
    },

    /// The base image could not be bootstrapped from Debian packages.
    #[error("bootstrapping base image {tag} failed: {message}")]
    BaseBootstrap {
        /// The base image tag being made.
        tag: String,
        /// What failed, with the last lines of the bootstrap log.
        message: String,
    },

    /// A host tool needed to bootstrap a base image is not installed.
    #[error("`{tool}` is needed to make base image {tag} without a registry, but it is not installed\nhint: {hint}")]
    BootstrapToolMissing {
        /// The missing program.
        tool: &'static str,
        /// The base image tag being made.
        tag: String,
        /// How to install it, or how to avoid needing it.
        hint: String,
    },

    /// The requested Python version cannot be provided on this machine.
    #[error("python {requested} is not available: no registry answered for python:{requested}-slim and the Debian bootstrap offers {offered}\nhint: use one of the offered versions, or set `ImageSpec::base_image` to a local image with that python")]
    UnsupportedPython {
        /// The version asked for.
        requested: String,
        /// The versions the Debian bootstrap offers, comma-separated.
        offered: String,
    },

    /// A spec or option was invalid when built.
    #[error("invalid {what}: {message}")]
    InvalidSpec {
        /// What was being built (`image spec`, `sandbox`, ...).
        what: &'static str,
        /// What is wrong with it.
        message: String,
    },

    /// An input named by the spec was not given.
    #[error("input `{name}` is declared but was not given")]
    MissingInput {
        /// The input's name.
        name: String,
    },

    /// An input was given that the spec does not declare.
    #[error("input `{name}` is not declared by this sandbox (declared: {declared})")]
    UnknownInput {
        /// The input's name.
        name: String,
        /// The declared inputs, comma-separated.
        declared: String,
    },

    /// An input's value does not match its declared type.
    #[error("input `{name}` expects {expected}, got {got}")]
    InputType {
        /// The input's name.
        name: String,
        /// The declared type.
        expected: String,
        /// What was given.
        got: String,
    },

    /// The code or command exited with a non-zero status.
    #[error("{}{}", describe_exit(*exit_code, python.as_deref(), stderr_tail), hint_suffix(hint.as_deref()))]
    NonZeroExit {
        /// The exit status.
        exit_code: i64,
        /// The last part of standard error.
        stderr_tail: String,
        /// The last part of standard output.
        stdout_tail: String,
        /// For Python code: the exception that ended it.
        python: Option<Box<PythonError>>,
        /// What probably went wrong, when dockhand can tell (the program
        /// tried the network in a sandbox that has none, say).
        hint: Option<String>,
    },

    /// A session's setup step failed; the session was not started.
    #[error("session setup step `{step}` failed (exit code {exit_code}): {stderr_tail}{}", hint_suffix(hint.as_deref()))]
    SetupFailed {
        /// The setup command.
        step: String,
        /// Its exit code.
        exit_code: i64,
        /// The last part of its standard error.
        stderr_tail: String,
        /// What probably went wrong, when dockhand can tell.
        hint: Option<String>,
    },

    /// The program was killed by a signal (it did not exit by itself): sent
    /// by the code itself, by another process in the container, or from
    /// outside. Out of memory and removal are reported as their own variants.
    #[error("the program was killed by signal {signal} ({}){}", signal_name(*signal), stderr_suffix(stderr_tail))]
    Killed {
        /// The signal number.
        signal: i64,
        /// The last part of standard error.
        stderr_tail: String,
        /// The last part of standard output.
        stdout_tail: String,
    },

    /// The container was removed from outside while it ran (`docker rm -f`,
    /// a cleanup job): nothing of the run could be collected.
    #[error("container {id} was removed from outside while it ran; run again")]
    ContainerGone {
        /// The container's id.
        id: String,
    },

    /// `/var/outputs` held more than the sandbox's outputs limit.
    #[error("output `{name}` takes /var/outputs past its limit of {limit_bytes} bytes; write less, or raise it with `.outputs_limit(bytes)`")]
    OutputTooLarge {
        /// The output (or other file in /var/outputs) that crossed the limit.
        name: String,
        /// The limit in bytes.
        limit_bytes: u64,
    },

    /// A file the program wrote reached the outputs limit while it ran: no
    /// single file may grow past it (writes past it fail with `EFBIG`, and a
    /// program that does not handle `SIGXFSZ` dies of it).
    #[error("a file the program wrote reached the limit of {limit_bytes} bytes per file; write less, or raise it with `.outputs_limit(bytes)`{}", stderr_suffix(stderr_tail))]
    FileTooLarge {
        /// The limit in bytes (the sandbox's outputs limit).
        limit_bytes: u64,
        /// The last part of standard error.
        stderr_tail: String,
        /// The last part of standard output.
        stdout_tail: String,
    },

    /// Auto-IO code never assigned a declared output variable.
    #[error("output `{name}` was never assigned by the code (assign a variable named `{name}`)")]
    OutputNotAssigned {
        /// The output's name.
        name: String,
    },

    /// A declared output was not written to `/var/outputs/<name>`.
    #[error("declared output `{name}` was not written to /var/outputs/{name}")]
    MissingOutput {
        /// The output's name.
        name: String,
    },

    /// [`Outputs::get`](crate::Outputs::get) was asked for a name the sandbox
    /// does not declare (a typo, usually).
    #[error("no output named `{name}`; the sandbox declares {}{}", list_names(declared), suggest(suggestion.as_deref()))]
    UnknownOutput {
        /// The name asked for.
        name: String,
        /// The declared output names.
        declared: Vec<String>,
        /// The declared name closest to it, if one is.
        suggestion: Option<String>,
    },

    /// An output was asked for as a Rust type its value cannot become: a
    /// mistake in the calling code, not in the container (never retried).
    #[error("output `{name}` is {stored}; it cannot be read as {requested} (ask for {hint})")]
    OutputType {
        /// The output's name.
        name: String,
        /// What the output holds (its type).
        stored: String,
        /// The Rust type asked for.
        requested: String,
        /// A Rust type that reads it.
        hint: String,
    },

    /// An output could not be parsed as its declared type.
    #[error("output `{name}` should be {expected} but was {got:?}")]
    BadOutput {
        /// The output's name.
        name: String,
        /// The declared type.
        expected: String,
        /// (The start of) what was found.
        got: String,
    },

    /// An output archive held a path that would escape its destination.
    #[error("refused unsafe path `{path}` in output archive: {reason}")]
    UnsafeArchivePath {
        /// The offending entry.
        path: String,
        /// Why it is unsafe.
        reason: &'static str,
    },

    /// The run took longer than its timeout; the container was killed.
    #[error("timed out after {timeout:?}; the container was killed")]
    Timeout {
        /// The configured timeout.
        timeout: Duration,
        /// Standard output seen before the kill.
        stdout: String,
        /// Standard error seen before the kill.
        stderr: String,
    },

    /// A session command ran past its time limit: its process group was
    /// killed; the session lives on.
    #[error("the command ran longer than {timeout:?}; it was killed with its process group, and the session is still usable")]
    CommandTimeout {
        /// The command's time limit.
        timeout: Duration,
        /// Standard output seen before the kill.
        stdout: String,
        /// Standard error seen before the kill.
        stderr: String,
    },

    /// A session's processes used up its pids limit (a fork bomb, say): the
    /// command that did was killed with its process group, and the session
    /// answers again as soon as those processes have ended (at once, as a
    /// rule). Also the error of a request that found no process left to
    /// serve it.
    #[error("the session's processes reached its pids limit of {limit}: the command that used them up was killed with its process group, and the session answers again as soon as they have ended (a higher limit: `.pids(n)` on the session)")]
    ProcessLimit {
        /// The session's pids limit (threads count too).
        limit: i64,
        /// Standard output of the command, before the kill.
        stdout: String,
        /// Standard error of the command, before the kill.
        stderr: String,
    },

    /// The container was killed for using more memory than its limit.
    #[error("out of memory: killed after exceeding its memory limit of {limit_bytes} bytes; raise it with `.memory(\"2Gi\")`{}", stderr_suffix(stderr_tail))]
    OutOfMemory {
        /// The memory limit in bytes.
        limit_bytes: i64,
        /// The last part of standard output.
        stdout_tail: String,
        /// The last part of standard error.
        stderr_tail: String,
    },

    /// All attempts of a retried run failed.
    #[error("all {} attempts failed; last: {}", attempts.len(), attempts.last().map(|a| a.as_str()).unwrap_or("?"))]
    RetriesExhausted {
        /// Why each attempt failed, in order.
        attempts: Vec<String>,
        /// The last attempt's error (its text ends this error's message, so
        /// it is not also this error's `source()`).
        last: Box<Error>,
    },

    /// A lifecycle transition that is not allowed (e.g. executing on a closed host).
    #[error("cannot go from state `{from}` to `{to}`")]
    InvalidTransition {
        /// The current state.
        from: String,
        /// The state asked for.
        to: String,
    },

    /// Code-mode code failed: rejected, raised, timed out, ran out of a limit,
    /// or a tool failed. [`CodeFailure::feedback`](crate::codemode::CodeFailure::feedback)
    /// is a short text meant to be given back to the model.
    #[error("{0}")]
    Code(Box<CodeFailure>),

    /// A file operation inside a session failed.
    #[error("{path}: {message}")]
    SessionFile {
        /// The path as given.
        path: String,
        /// What kind of failure.
        kind: FileErrorKind,
        /// The details.
        message: String,
    },

    /// An edit could not be applied; nothing was changed.
    #[error("edit failed, file unchanged: {0}")]
    Edit(EditError),

    /// The session's container or agent is gone; `start` it again.
    #[error("the session is not available: {reason}")]
    SessionUnavailable {
        /// Why.
        reason: String,
    },

    /// The code host's container or bridge died, or stopped answering; the
    /// next `start` or `execute` brings up a new one.
    #[error("the code host is not available: {reason}")]
    CodeHostUnavailable {
        /// Why.
        reason: String,
    },

    /// dockhand's egress gateway did not start, died, or stopped answering;
    /// the sandboxes it served reach nothing (it fails closed), and the next
    /// sandbox with a policy starts a new one.
    #[error("the egress gateway is not available: {reason}")]
    EgressGateway {
        /// Why.
        reason: String,
    },

    /// A File or Dir handle that the code host does not keep: it was
    /// released, its time passed, newer results pushed it out, or the code
    /// never returned it.
    #[error("the code host keeps no result `{handle}`: it was released, expired, or pushed out by newer results (see CodeHostConfig::keep_results)")]
    UnknownHandle {
        /// The handle (`h1`).
        handle: String,
    },

    /// A suspended code-mode execution that will not be resumed: its sealed
    /// form was altered, was sealed by another installation's key, was made
    /// by another version, has expired, is over the size limit, or was
    /// resumed already (each suspension resumes once). Nothing of it ran.
    #[error("the suspended execution cannot be resumed: {reason}")]
    SuspensionRefused {
        /// Why.
        reason: String,
    },

    /// An MCP server given to code mode could not be started, reached,
    /// initialized or listed.
    #[error("the MCP server `{server}` is not usable: {reason}")]
    McpServer {
        /// The server's name.
        server: String,
        /// Why.
        reason: String,
    },

    /// A kernel, context or relay failure (see [`KernelError`]).
    #[error(transparent)]
    Kernel(#[from] KernelError),

    /// The Kubernetes backend failed: the API server refused or could not
    /// be reached, or a pod ended for a reason of the cluster's (see
    /// [`ClusterError`]).
    #[error(transparent)]
    Cluster(#[from] ClusterError),

    /// A pause that keeps memory was asked of a daemon or sandbox that
    /// cannot save memory. Nothing was changed: the sandbox runs on.
    #[error("this sandbox's memory cannot be saved: {reason}\nhint: pause in filesystem mode (files only), or run it under gVisor on a daemon with \"experimental\": true and a `runsc` runtime in its daemon.json")]
    PauseUnsupported {
        /// What is missing.
        reason: String,
    },

    /// Saving or restoring a sandbox (a pause, resume or fork) failed: the
    /// checkpoint could not be written (a full disk, say), or was refused
    /// when restored (altered, or not this sandbox's). `state` says what
    /// became of the sandbox.
    #[error("{operation} failed: {reason} ({state})")]
    Checkpoint {
        /// `pause`, `resume` or `fork`.
        operation: &'static str,
        /// What the daemon or runtime said.
        reason: String,
        /// What became of the sandbox: still running, still paused, or removed.
        state: String,
    },

    /// Nothing in the session accepted a connection to this port (no server
    /// listens on it yet, or the session's agent cannot carry connections).
    #[error("port {port} in the session cannot be reached: {message}")]
    PortUnreachable {
        /// The port inside the session.
        port: u16,
        /// Why.
        message: String,
    },

    /// The backend the client was connected to cannot do what was asked.
    /// Refused before anything was created.
    #[error("{feature} is not available on the {backend} backend\nhint: {hint}")]
    Unsupported {
        /// `kubernetes` or `docker`.
        backend: &'static str,
        /// What was asked.
        feature: String,
        /// What to do instead.
        hint: String,
    },

    /// A local file operation failed.
    #[error("{context}: {error}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error (its text ends this error's message, so it
        /// is not also this error's `source()`).
        error: std::io::Error,
    },
}

impl From<EditError> for Error {
    fn from(e: EditError) -> Self {
        Error::Edit(e)
    }
}
