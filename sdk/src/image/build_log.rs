//! Reading build logs: turning a failed build into the error that explains it.

use crate::error::{Error, IndexProblem, PackageManager};

/// How many log lines an [`Error::ImageBuild`] carries.
pub const LOG_TAIL_LINES: usize = 30;
/// How much of one line an error shows: a `RUN` line can carry tens of
/// kilobytes (packed sources), which would bury the reason.
pub const SHOWN_LINE_CHARS: usize = 400;

/// `line` cut to [`SHOWN_LINE_CHARS`], saying how much was left out.
pub fn clip_line(line: &str) -> String {
    match line.char_indices().nth(SHOWN_LINE_CHARS) {
        None => line.to_string(),
        Some((at, _)) => {
            let left_out = line[at..].chars().count();
            format!("{}… ({left_out} more characters)", &line[..at])
        }
    }
}

/// Every line of `text` clipped (see [`clip_line`]).
fn clip_lines(text: &str) -> String {
    text.lines().map(clip_line).collect::<Vec<_>>().join("\n")
}

/// Removes terminal colour codes (the classic builder wraps stderr in them).
pub fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            // Parameters and intermediates, then one final byte in @..~.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Finds a package the package manager said does not exist.
pub fn invalid_package(log: &[String]) -> Option<(PackageManager, String)> {
    for line in log {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("E: Unable to locate package ") {
            return Some((PackageManager::Apt, rest.trim().to_string()));
        }
        if let Some(rest) = line.strip_prefix("E: Package '") {
            if let Some(name) = rest.split('\'').next() {
                return Some((PackageManager::Apt, name.to_string()));
            }
        }
        if let Some(rest) = line.strip_prefix("E: Version '") {
            // E: Version '1.0' for 'jq' was not found
            let name = rest
                .split("' for '")
                .nth(1)
                .and_then(|r| r.split('\'').next());
            if let Some(name) = name {
                return Some((PackageManager::Apt, name.to_string()));
            }
        }
        if let Some(rest) = line.strip_prefix("ERROR: No matching distribution found for ") {
            return Some((PackageManager::Pip, rest.trim().to_string()));
        }
    }
    None
}

/// Log lines that show a package index's certificate was refused.
const TLS_SIGNS: &[&str] = &[
    "CERTIFICATE_VERIFY_FAILED",
    "certificate verify failed",
    "Certificate verification failed",
    "server certificate verification failed",
    "SSLCertVerificationError",
    "self signed certificate in certificate chain",
    "self-signed certificate in certificate chain",
    "unable to get local issuer certificate",
];

/// Log lines that show a package index could not be reached.
const NETWORK_SIGNS: &[&str] = &[
    "Temporary failure in name resolution",
    "Temporary failure resolving",
    "Name or service not known",
    "Could not resolve host",
    "Could not resolve '",
    "Network is unreachable",
    "No route to host",
    "Connection refused",
    "Connection timed out",
    "ProxyError",
    "Failed to establish a new connection",
    "Could not connect to",
    "Unable to connect to",
];

/// The index problem the log shows, with the line that shows it. Checked
/// before package names: after a failed download, pip says "No matching
/// distribution" and apt "Unable to locate package" whatever the name.
pub fn index_problem(log: &[String]) -> Option<(IndexProblem, String)> {
    for (problem, signs) in [
        (IndexProblem::UntrustedCertificate, TLS_SIGNS),
        (IndexProblem::Unreachable, NETWORK_SIGNS),
    ] {
        if let Some(line) = log.iter().find(|l| signs.iter().any(|s| l.contains(s))) {
            let line = line.trim();
            return Some((problem, clip_line(line)));
        }
    }
    None
}

/// The error for a build that failed with `message` after logging `log`.
pub fn classify_failure(tag: &str, message: &str, log: &[String]) -> Error {
    if let Some((problem, evidence)) = index_problem(log) {
        return Error::PackageIndex {
            problem,
            tag: tag.to_string(),
            evidence,
            log_tail: tail(log, LOG_TAIL_LINES),
        };
    }
    if let Some((manager, package)) = invalid_package(log) {
        return Error::InvalidPackage { manager, package };
    }
    Error::ImageBuild {
        tag: tag.to_string(),
        message: clip_lines(message.trim()),
        log_tail: tail(log, LOG_TAIL_LINES),
    }
}

/// The last `n` lines, each clipped, joined.
pub fn tail(log: &[String], n: usize) -> String {
    log[log.len().saturating_sub(n)..]
        .iter()
        .map(|line| clip_line(line))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(String::from).collect()
    }

    #[test]
    fn apt_unknown_package_is_named() {
        let log = lines("Reading package lists...\nBuilding dependency tree...\nE: Unable to locate package no-such-pkg\n");
        assert_eq!(
            invalid_package(&log),
            Some((PackageManager::Apt, "no-such-pkg".into()))
        );
        let log = lines("E: Package 'python' has no installation candidate");
        assert_eq!(
            invalid_package(&log),
            Some((PackageManager::Apt, "python".into()))
        );
        let log = lines("E: Version '9.9' for 'jq' was not found");
        assert_eq!(
            invalid_package(&log),
            Some((PackageManager::Apt, "jq".into()))
        );
    }

    #[test]
    fn long_lines_are_clipped_in_build_errors() {
        let run_line = format!("Step 5/9 : RUN echo {}", "A".repeat(40_000));
        let log = vec![run_line.clone(), "cargo: error[E0425]".into()];
        let message = format!(
            "The command '/bin/sh -c echo {}' returned a non-zero code: 101",
            "B".repeat(40_000)
        );
        let shown = classify_failure("t", &message, &log).to_string();
        assert!(shown.len() < 2_000, "{} characters", shown.len());
        assert!(shown.contains("cargo: error[E0425]"), "{shown}");
        assert!(shown.contains("more characters)"), "{shown}");
        assert_eq!(clip_line("short"), "short");
        let cut = clip_line(&"é".repeat(SHOWN_LINE_CHARS + 5));
        assert!(cut.ends_with("… (5 more characters)"), "{cut}");
    }

    #[test]
    fn colour_codes_are_stripped() {
        assert_eq!(
            strip_ansi("\u{1b}[91mE: Unable to locate package x\u{1b}[0m"),
            "E: Unable to locate package x"
        );
        assert_eq!(strip_ansi("plain"), "plain");
    }

    #[test]
    fn pip_unknown_package_is_named() {
        let log = lines(
            "ERROR: Could not find a version that satisfies the requirement nopkg-xyz (from versions: none)\n\
             ERROR: No matching distribution found for nopkg-xyz==1.0",
        );
        assert_eq!(
            invalid_package(&log),
            Some((PackageManager::Pip, "nopkg-xyz==1.0".into()))
        );
    }

    #[test]
    fn an_untrusted_certificate_is_not_a_bad_package_name() {
        let log = lines(
            "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:1006)'))': /simple/pyyaml/\n\
             ERROR: Could not find a version that satisfies the requirement pyyaml (from versions: none)\n\
             ERROR: No matching distribution found for pyyaml",
        );
        match classify_failure("t", "non-zero code: 1", &log) {
            Error::PackageIndex {
                problem, evidence, ..
            } => {
                assert_eq!(problem, IndexProblem::UntrustedCertificate);
                assert!(evidence.contains("CERTIFICATE_VERIFY_FAILED"), "{evidence}");
            }
            other => panic!("expected PackageIndex, got {other:?}"),
        }
        let shown = classify_failure("t", "x", &log).to_string();
        assert!(shown.contains("trust_host_certificates()"), "{shown}");
    }

    #[test]
    fn an_unreachable_index_is_not_a_bad_package_name() {
        for log in [
            "WARNING: Retrying ... NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')\nERROR: No matching distribution found for requests",
            "W: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  Temporary failure resolving 'deb.debian.org'\nE: Unable to locate package jq",
        ] {
            match classify_failure("t", "x", &lines(log)) {
                Error::PackageIndex { problem, .. } => {
                    assert_eq!(problem, IndexProblem::Unreachable, "{log}")
                }
                other => panic!("expected PackageIndex, got {other:?}"),
            }
        }
    }

    #[test]
    fn other_failures_carry_the_log_tail() {
        let log: Vec<String> = (0..100).map(|i| format!("line {i}")).collect();
        match classify_failure("t", "The command returned a non-zero code: 1", &log) {
            Error::ImageBuild {
                log_tail, message, ..
            } => {
                assert!(message.contains("non-zero code"));
                assert!(log_tail.starts_with("line 70"));
                assert!(log_tail.ends_with("line 99"));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
