//! How error messages are worded: exits, signals, names, package indexes,
//! hints. Kept apart from the variants so each file reads as one thing.

use super::{IndexProblem, PythonError};

pub(super) fn signal_name(signal: i64) -> &'static str {
    match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => "a signal",
    }
}

pub(super) fn stderr_suffix(stderr_tail: &str) -> String {
    if stderr_tail.trim().is_empty() {
        String::new()
    } else {
        format!("; stderr:\n{stderr_tail}")
    }
}

pub(super) fn describe_exit(
    exit_code: i64,
    python: Option<&PythonError>,
    stderr_tail: &str,
) -> String {
    match python {
        Some(py) => format!("code raised {py} (exit code {exit_code})\n{}", py.traceback),
        None if stderr_tail.trim().is_empty() => format!("exited with code {exit_code}"),
        None => format!("exited with code {exit_code}; stderr:\n{stderr_tail}"),
    }
}

pub(super) fn list_names(names: &[String]) -> String {
    if names.is_empty() {
        return "no outputs".into();
    }
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn suggest(name: Option<&str>) -> String {
    name.map(|n| format!("; did you mean `{n}`?"))
        .unwrap_or_default()
}

pub(super) fn describe_index(problem: IndexProblem, tag: &str, evidence: &str) -> String {
    match problem {
        IndexProblem::UntrustedCertificate => format!(
            "building image {tag}: the package index's TLS certificate was not trusted \
             (`{evidence}`); behind a proxy that intercepts TLS, trust the host's CA bundle \
             with `ImageSpec::trust_host_certificates()`, or name the proxy's CA file in \
             DOCKHAND_CA_CERTS"
        ),
        IndexProblem::Unreachable => format!(
            "building image {tag}: the package index could not be reached (`{evidence}`); \
             image builds need network access from the Docker daemon: check its DNS and \
             proxy settings (HTTP_PROXY/HTTPS_PROXY for the daemon)"
        ),
    }
}

pub(super) fn hint_suffix(hint: Option<&str>) -> String {
    hint.map(|h| format!("\nhint: {h}")).unwrap_or_default()
}

/// Output that shows a program tried to reach the network and could not.
const OFFLINE_SIGNS: &[&str] = &[
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "Could not resolve host",
    "getaddrinfo failed",
    "No address associated with hostname",
    "Failed to establish a new connection",
];

/// The hint for a failure in a container without network that looks like
/// the program wanted one: names the setting that allows it.
pub(crate) fn offline_hint(output: &str, setting: &str) -> Option<String> {
    OFFLINE_SIGNS.iter().any(|s| output.contains(s)).then(|| {
        format!("it looks like the program tried to reach the network, and this container has none (the default); allow it with {setting}")
    })
}
