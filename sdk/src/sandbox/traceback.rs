//! Finding the Python exception in a program's standard error.

use crate::error::PythonError;

/// The last traceback of a script run as `script`, with the script named by
/// its file name alone, as auto-IO tracebacks name it.
pub fn parse_script(stderr: &str, script: &str) -> Option<PythonError> {
    let mut error = parse(stderr)?;
    let short = script.rsplit('/').next().unwrap_or(script);
    error.traceback = error
        .traceback
        .replace(&format!("File \"{script}\""), &format!("File \"{short}\""));
    Some(error)
}

/// The last traceback in `stderr`, if any: its exception type and message.
pub fn parse(stderr: &str) -> Option<PythonError> {
    let start = stderr.rfind("Traceback (most recent call last):")?;
    let traceback = stderr[start..].trim_end();
    // The exception line is the last one that is not indented.
    let last = traceback
        .lines()
        .rev()
        .find(|l| !l.is_empty() && !l.starts_with(' ') && !l.starts_with('\t'))?;
    let (kind, message) = match last.split_once(": ") {
        Some((k, m)) => (k, m),
        None => (last.trim_end_matches(':'), ""),
    };
    let looks_like_type = !kind.is_empty()
        && kind
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.');
    if !looks_like_type {
        return None;
    }
    Some(PythonError {
        exception_type: kind.rsplit('.').next().unwrap_or(kind).to_string(),
        message: message.to_string(),
        traceback: traceback.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_s_frames_name_its_file_alone() {
        let err = "Traceback (most recent call last):\n  File \"/var/inputs/.dockhand/main.py\", line 4, in <module>\n    f()\n  File \"/usr/lib/python3.11/json/__init__.py\", line 1, in f\nValueError: bad\n";
        let e = parse_script(err, "/var/inputs/.dockhand/main.py").unwrap();
        assert!(
            e.traceback.contains("File \"main.py\", line 4"),
            "{}",
            e.traceback
        );
        assert!(
            e.traceback.contains("/usr/lib/python3.11/json"),
            "other files keep their paths"
        );
    }

    #[test]
    fn finds_type_message_and_traceback() {
        let err = "noise\nTraceback (most recent call last):\n  File \"main.py\", line 2, in <module>\n    1/0\nZeroDivisionError: division by zero\n";
        let e = parse(err).unwrap();
        assert_eq!(e.exception_type, "ZeroDivisionError");
        assert_eq!(e.message, "division by zero");
        assert!(e.traceback.starts_with("Traceback"));
        assert!(e.traceback.contains("line 2"));
    }

    #[test]
    fn qualified_and_bare_exceptions() {
        let e = parse("Traceback (most recent call last):\n  File \"x\", line 1\njson.decoder.JSONDecodeError: Expecting value: line 1\n").unwrap();
        assert_eq!(e.exception_type, "JSONDecodeError");
        assert_eq!(e.message, "Expecting value: line 1");
        let e =
            parse("Traceback (most recent call last):\n  File \"x\", line 1\nKeyboardInterrupt\n")
                .unwrap();
        assert_eq!(
            (e.exception_type.as_str(), e.message.as_str()),
            ("KeyboardInterrupt", "")
        );
        assert!(parse("just an error\n").is_none());
    }
}
