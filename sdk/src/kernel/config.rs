//! [`KernelConfig`]: the image, limits and startup of a kernel.

use std::time::Duration;

use super::{KernelError, Language};
use crate::image::ImageSpec;
use crate::session::SessionConfig;

/// How a kernel is made. The container underneath is a session's (same
/// hardening, resources, network, secrets and file API); see
/// [`KernelConfig::session`].
///
/// ```
/// use dockhand::kernel::KernelConfig;
/// use std::time::Duration;
/// let config = KernelConfig::data_science()
///     .run_timeout(Duration::from_secs(30))
///     .figure_formats(["png", "svg"]);
/// assert_eq!(config.figure_formats_list(), ["png", "svg"]);
/// ```
#[derive(Debug, Clone)]
pub struct KernelConfig {
    pub(crate) session: SessionConfig,
    pub(crate) image: ImageSpec,
    pub(crate) run_timeout: Duration,
    pub(crate) interrupt_grace: Duration,
    pub(crate) text_limit: usize,
    pub(crate) payload_limit: usize,
    pub(crate) figure_formats: Vec<String>,
    pub(crate) startup: Vec<String>,
    /// Names bound in every Python context to modules (`pd` to `pandas`).
    pub(crate) modules: Vec<(String, String)>,
    /// Whether those modules are imported as each kernel starts, rather
    /// than when the code first uses them.
    pub(crate) preload_modules: bool,
    /// Python first, then the others the image carries.
    pub(crate) languages: Vec<Language>,
}

/// What every kernel image needs on top of the caller's packages.
const KERNEL_PACKAGES: [&str; 1] = ["ipykernel"];
/// Where the data-science image keeps matplotlib's caches.
const MATPLOTLIB_DIR: &str = "/opt/dockhand/matplotlib";
/// The data-science spec's packages.
const DATA_SCIENCE_PACKAGES: [&str; 3] = ["pandas", "numpy", "matplotlib"];

impl Default for KernelConfig {
    fn default() -> Self {
        KernelConfig {
            session: SessionConfig::new().no_timeout(),
            // A kernel's image always installs packages (ipykernel at
            // least): behind a TLS-intercepting proxy that works only with
            // the host's CA trusted, so dockhand's presets trust it.
            image: ImageSpec::default().trust_host_certificates(),
            run_timeout: Duration::from_secs(60),
            interrupt_grace: Duration::from_secs(3),
            text_limit: 1 << 20,
            payload_limit: 8 << 20,
            figure_formats: vec!["png".into()],
            startup: Vec::new(),
            modules: Vec::new(),
            preload_modules: false,
            languages: vec![Language::Python],
        }
    }
}

impl KernelConfig {
    /// Python with ipykernel, on the default base image, network off. Its
    /// image trusts the host's CA bundle (builds work behind a
    /// TLS-intercepting proxy).
    pub fn new() -> Self {
        Self::default()
    }

    /// Python with ipykernel, pandas, numpy and matplotlib, bound in every
    /// context as `pd`, `np` and `plt` ([`bind_module`](Self::bind_module)):
    /// each is imported the first time the code uses it, so a kernel starts
    /// at the cost of a plain one. [`preload_modules`](Self::preload_modules)
    /// imports them as the kernel starts instead.
    pub fn data_science() -> Self {
        Self::new()
            .image(
                ImageSpec::default()
                    .pip(DATA_SCIENCE_PACKAGES)
                    // matplotlib's font list, made once in the image rather
                    // than by every kernel's first import (0.4 s of CPU);
                    // the directory stays writable, as matplotlib wants.
                    .env("MPLCONFIGDIR", MATPLOTLIB_DIR)
                    .run(format!(
                        "python3 -c 'import matplotlib.pyplot' && chmod -R a+rwX {MATPLOTLIB_DIR}"
                    ))
                    .trust_host_certificates(),
            )
            .bind_module("pd", "pandas")
            .bind_module("np", "numpy")
            .bind_module("plt", "matplotlib.pyplot")
    }

    /// Adds languages to the image, beside Python: each context then runs
    /// the language it is created with
    /// ([`Kernel::create_context_with`](super::Kernel::create_context_with)).
    /// JavaScript and TypeScript add Deno (PyPI's `deno`), Bash adds
    /// `bash_kernel`, R adds Debian's `r-base-core` and `r-cran-irkernel`.
    /// A prebuilt image must carry them already.
    ///
    /// ```
    /// use dockhand::kernel::{KernelConfig, Language};
    /// let config = KernelConfig::new().languages([Language::TypeScript, Language::Bash]);
    /// assert_eq!(config.language_list(), [Language::Python, Language::TypeScript, Language::Bash]);
    /// ```
    pub fn languages(mut self, languages: impl IntoIterator<Item = Language>) -> Self {
        for language in languages {
            if !self.languages.contains(&language) {
                self.languages.push(language);
            }
        }
        self
    }

    /// The languages the image carries, Python first.
    pub fn language_list(&self) -> &[Language] {
        &self.languages
    }

    /// `Ok` where the image carries `language`.
    pub(crate) fn check_language(&self, language: Language) -> Result<(), KernelError> {
        if self.languages.contains(&language) {
            return Ok(());
        }
        Err(KernelError::LanguageNotInImage {
            language,
            carried: self
                .languages
                .iter()
                .map(|l| l.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// The image; `ipykernel` is added to its pip packages (a prebuilt image
    /// must have ipykernel already).
    pub fn image(mut self, image: ImageSpec) -> Self {
        self.image = image;
        self
    }

    /// The image as configured (without the added `ipykernel`).
    pub fn image_spec(&self) -> &ImageSpec {
        &self.image
    }

    /// Changes the container's settings (resources, env, secrets, network,
    /// hardening, workspace) through the session configuration underneath.
    pub fn session(mut self, change: impl FnOnce(SessionConfig) -> SessionConfig) -> Self {
        self.session = change(self.session);
        self
    }

    /// The default limit of each run (60 s); see [`RunOptions::timeout`](super::RunOptions::timeout).
    pub fn run_timeout(mut self, timeout: Duration) -> Self {
        self.run_timeout = timeout;
        self
    }

    /// How long an interrupted run may take to stop before its context is
    /// restarted (3 s).
    pub fn interrupt_grace(mut self, grace: Duration) -> Self {
        self.interrupt_grace = grace;
        self
    }

    /// Bytes of stdout and of stderr kept per run (1 MiB); more is dropped
    /// inside the container and the run says it was cut.
    pub fn text_limit(mut self, bytes: usize) -> Self {
        self.text_limit = bytes.max(1);
        self
    }

    /// The largest MIME value passed on (8 MiB); a larger text is cut, a
    /// larger image dropped, and the result names it in `cut`.
    pub fn payload_limit(mut self, bytes: usize) -> Self {
        self.payload_limit = bytes.max(1);
        self
    }

    /// The formats matplotlib figures are displayed in: `png` (default),
    /// `svg`, `jpeg`, `pdf`, `retina`.
    pub fn figure_formats<I, S>(mut self, formats: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.figure_formats = formats.into_iter().map(Into::into).collect();
        self
    }

    /// The figure formats.
    pub fn figure_formats_list(&self) -> &[String] {
        &self.figure_formats
    }

    /// Python every Python context runs when it starts (imports, say); a
    /// failure shows in the kernel's log, not in a run. The modules it
    /// imports at its top level are imported once by the fork server the
    /// contexts are forked from, before IPython starts.
    pub fn startup(mut self, code: impl Into<String>) -> Self {
        self.startup.push(code.into());
        self
    }

    /// Binds `name` to `module` in every Python context, as
    /// `import module as name` would, except that the module is imported
    /// the first time the code uses the name (an attribute, a call, `dir`):
    /// a kernel whose code never uses it never pays for its import. The
    /// name is then the module itself (`import module` elsewhere gets the
    /// same one). Once some context's code has used it, the fork server
    /// imports it too, so contexts created after that start with it
    /// imported. Names and modules are Python identifiers (dotted for a
    /// module); others fail the kernel's start with
    /// [`KernelError::BadModuleBinding`].
    ///
    /// ```
    /// use dockhand::kernel::KernelConfig;
    /// let config = KernelConfig::new().bind_module("pl", "polars");
    /// assert_eq!(config.module_bindings(), [("pl".to_string(), "polars".to_string())]);
    /// ```
    pub fn bind_module(mut self, name: impl Into<String>, module: impl Into<String>) -> Self {
        let name = name.into();
        self.modules.retain(|(bound, _)| *bound != name);
        self.modules.push((name, module.into()));
        self
    }

    /// The names bound to modules, in the order bound.
    pub fn module_bindings(&self) -> &[(String, String)] {
        &self.modules
    }

    /// Imports the bound modules as each kernel starts (once, in the fork
    /// server its contexts are forked from) instead of at first use: every
    /// context starts with them imported and a pool hands kernels over with
    /// them done, for the CPU of those imports in every kernel, used or not
    /// (pandas, numpy and matplotlib: about 1.8 s of a 2-core machine's CPU
    /// per kernel, so fewer kernel starts a second).
    ///
    /// ```
    /// use dockhand::kernel::KernelConfig;
    /// let config = KernelConfig::data_science().preload_modules(true);
    /// assert!(config.preloads_modules());
    /// ```
    pub fn preload_modules(mut self, preload: bool) -> Self {
        self.preload_modules = preload;
        self
    }

    /// Whether bound modules are imported as each kernel starts.
    pub fn preloads_modules(&self) -> bool {
        self.preload_modules
    }

    /// The startup code a Python context runs: preloaded bindings as
    /// imports (which the fork server then imports once), then
    /// [`startup`](Self::startup)'s code.
    pub(crate) fn startup_code(&self) -> Vec<String> {
        let mut code = Vec::with_capacity(self.startup.len() + 1);
        if self.preload_modules && !self.modules.is_empty() {
            code.push(
                self.modules
                    .iter()
                    .map(|(name, module)| format!("import {module} as {name}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
            );
        }
        code.extend(self.startup.iter().cloned());
        code
    }

    /// The bindings a context makes for imports at first use (none when
    /// they are preloaded).
    pub(crate) fn deferred_modules(&self) -> std::collections::BTreeMap<&str, &str> {
        if self.preload_modules {
            return Default::default();
        }
        self.modules
            .iter()
            .map(|(name, module)| (name.as_str(), module.as_str()))
            .collect()
    }

    /// `Ok` where every binding names a Python identifier and a module.
    pub(crate) fn check_bindings(&self) -> Result<(), KernelError> {
        let identifier = |s: &str| {
            let mut chars = s.chars();
            chars
                .next()
                .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
                && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        };
        match self
            .modules
            .iter()
            .find(|(name, module)| !identifier(name) || !module.split('.').all(identifier))
        {
            Some((name, module)) => Err(KernelError::BadModuleBinding {
                name: name.clone(),
                module: module.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The image the container is made from: [`image_spec`](Self::image_spec)
    /// with `ipykernel` and the languages' kernels added (to build it ahead,
    /// or load it elsewhere).
    pub fn container_image(&self) -> ImageSpec {
        if self.image.is_prebuilt() {
            return self.image.clone();
        }
        let mut image = self.image.clone().pip(KERNEL_PACKAGES);
        for language in &self.languages {
            image = image
                .pip(language.pip_packages().iter().copied())
                .apt(language.apt_packages().iter().copied());
        }
        image
    }

    /// The session configuration with the kernel's image, and its relay
    /// installed where the kernel's code cannot change it.
    pub(crate) fn session_config(&self) -> SessionConfig {
        self.session
            .clone()
            .image(self.container_image())
            .helper(super::link::RELAY_FILE, super::link::RELAY)
            .helper(super::link::STARTUP_FILE, super::link::KERNEL_STARTUP)
            .helper(super::link::ZYGOTE_FILE, super::link::KERNEL_ZYGOTE)
    }
}
