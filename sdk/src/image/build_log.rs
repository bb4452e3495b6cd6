//! Reading build logs: turning a failed build into the error that explains it.

use crate::error::{Error, PackageManager};

/// How many log lines an [`Error::ImageBuild`] carries.
pub const LOG_TAIL_LINES: usize = 30;

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

/// The error for a build that failed with `message` after logging `log`.
pub fn classify_failure(tag: &str, message: &str, log: &[String]) -> Error {
    if let Some((manager, package)) = invalid_package(log) {
        return Error::InvalidPackage { manager, package };
    }
    Error::ImageBuild {
        tag: tag.to_string(),
        message: message.trim().to_string(),
        log_tail: tail(log, LOG_TAIL_LINES),
    }
}

/// The last `n` lines, joined.
pub fn tail(log: &[String], n: usize) -> String {
    log[log.len().saturating_sub(n)..].join("\n")
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
