//! [`Language`]: the languages a kernel's contexts can run, and what each
//! needs in the image.

use super::Language;

impl Language {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::KernelError;

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
