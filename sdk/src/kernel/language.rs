//! [`Language`]: the languages a kernel's contexts can run, and what each
//! needs in the image.

use std::fmt;
use std::str::FromStr;

use super::KernelError;

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

    /// The pip packages the language's kernel needs on top of ipykernel.
    pub(crate) fn pip_packages(self) -> &'static [&'static str] {
        match self {
            Language::Python | Language::R => &[],
            // The PyPI package ships Deno's binary (`deno jupyter`).
            Language::JavaScript | Language::TypeScript => &["deno"],
            Language::Bash => &["bash_kernel"],
        }
    }

    /// The Debian packages it needs.
    pub(crate) fn apt_packages(self) -> &'static [&'static str] {
        match self {
            Language::R => &["r-base-core", "r-cran-irkernel"],
            _ => &[],
        }
    }

    /// The file extension of its code (a notebook's `language_info`).
    pub(crate) fn file_extension(self) -> &'static str {
        match self {
            Language::Python => ".py",
            Language::JavaScript => ".js",
            Language::TypeScript => ".ts",
            Language::Bash => ".sh",
            Language::R => ".r",
        }
    }
}

impl Language {
    /// A notebook's `kernelspec` for it (the names Jupyter installs).
    pub(crate) fn kernelspec(self) -> serde_json::Value {
        let (name, display) = match self {
            Language::Python => ("python3", "Python 3"),
            Language::JavaScript | Language::TypeScript => ("deno", "Deno"),
            Language::Bash => ("bash", "Bash"),
            Language::R => ("ir", "R"),
        };
        serde_json::json!({"name": name, "display_name": display, "language": self.as_str()})
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_aliases_parse() {
        for language in Language::ALL {
            assert_eq!(language.as_str().parse::<Language>().unwrap(), language);
        }
        assert_eq!("JS".parse::<Language>().unwrap(), Language::JavaScript);
        assert_eq!("python3".parse::<Language>().unwrap(), Language::Python);
        assert_eq!("sh".parse::<Language>().unwrap(), Language::Bash);
        assert!(matches!(
            "java".parse::<Language>(),
            Err(KernelError::UnknownLanguage(name)) if name == "java"
        ));
    }
}
