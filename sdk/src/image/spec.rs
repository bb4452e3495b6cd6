//! [`ImageSpec`]: what goes into the image a sandbox, code host or session runs in.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::step::{ArchiveCopy, BuildStep};
use crate::error::{Error, Result};

/// The Python version used when a spec does not name one: the python of the
/// Debian release the registry-less bootstrap uses (bookworm).
pub const DEFAULT_PYTHON: &str = "3.11";

/// Where a host's CA bundle usually lives, by distribution family.
const HOST_CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Alpine, Arch
    "/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL, CentOS
    "/etc/ssl/ca-bundle.pem",             // openSUSE
    "/etc/ssl/cert.pem",                  // macOS, BSDs
];

/// A declarative description of a container image.
///
/// Specs are plain data: equal specs render the same Dockerfile and get the
/// same content-addressed tag on every machine, so an image is built once and
/// reused. It is set with chained builder methods and validated when the
/// image is resolved (or when a sandbox using it is built).
///
/// ```
/// use dockhand::ImageSpec;
///
/// let spec = ImageSpec::default()
///     .pip(["numpy==2.1.3"])
///     .apt(["jq"])
///     .run("python3 -c 'import numpy'");
/// assert!(spec.validate().is_ok());
/// assert!(spec.render_dockerfile().contains("jq"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ImageSpec {
    pub(crate) python_version: String,
    pub(crate) pip_packages: Vec<String>,
    pub(crate) apt_packages: Vec<String>,
    pub(crate) commands: Vec<String>,
    pub(crate) base_image: Option<String>,
    pub(crate) prebuilt: Option<String>,
    pub(crate) ca_files: Vec<PathBuf>,
    pub(crate) ca_from_env: bool,
    /// Files copied from another image after everything else (dockhand's
    /// own programs, from their [`ProgramImage`](super::program::ProgramImage)s).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) copies: Vec<CopyFrom>,
    /// Files the build context carries, copied to `/tmp/dockhand-context/`
    /// before the commands run (the sources dockhand compiles its own
    /// programs from: too large for a command line).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) context_files: Vec<ContextFile>,
    /// Ordered steps after the commands (variables, a user, a working
    /// directory, archives); commands added after the first step join them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) steps: Vec<BuildStep>,
}

/// One file of a build context (see [`ImageSpec::context_files`]). Its name
/// should carry a hash of its bytes: the image tag follows the Dockerfile's
/// text, which names the file.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) struct ContextFile {
    pub name: String,
    pub bytes: Vec<u8>,
}

impl std::fmt::Debug for ContextFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextFile")
            .field("name", &self.name)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// Where builds find the context files.
pub(crate) const CONTEXT_DIR: &str = "/tmp/dockhand-context";

/// One `COPY --from=<image> <source> <target>` step.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) struct CopyFrom {
    pub image: String,
    pub source: String,
    pub target: String,
}

impl Default for ImageSpec {
    fn default() -> Self {
        ImageSpec {
            python_version: DEFAULT_PYTHON.to_string(),
            pip_packages: Vec::new(),
            apt_packages: Vec::new(),
            commands: Vec::new(),
            base_image: None,
            prebuilt: None,
            ca_files: Vec::new(),
            ca_from_env: true,
            copies: Vec::new(),
            context_files: Vec::new(),
            steps: Vec::new(),
        }
    }
}

/// Environment variable with extra CA files (separated by `:`) trusted by every
/// build whose spec keeps `ca_from_env` on.
pub const CA_CERTS_ENV: &str = "DOCKHAND_CA_CERTS";

impl ImageSpec {
    /// A spec for the given Python version (`"3.11"`), otherwise default.
    pub fn python(version: impl Into<String>) -> Self {
        ImageSpec {
            python_version: version.into(),
            ..Default::default()
        }
    }

    /// An already built image, used as is (pulled if missing and a registry answers).
    pub fn prebuilt(reference: impl Into<String>) -> Self {
        ImageSpec {
            prebuilt: Some(reference.into()),
            ..Default::default()
        }
    }

    /// Adds pip packages.
    pub fn pip<I, S>(mut self, packages: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.pip_packages
            .extend(packages.into_iter().map(Into::into));
        self
    }

    /// Adds Debian (apt) packages.
    pub fn apt<I, S>(mut self, packages: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.apt_packages
            .extend(packages.into_iter().map(Into::into));
        self
    }

    /// Adds a shell command run as its own build step, after the packages
    /// and after the steps added before it.
    pub fn run(mut self, command: impl Into<String>) -> Self {
        // Commands render before the ordered steps: one added after a step
        // is a step too, so the order given is the order run.
        if self.steps.is_empty() {
            self.commands.push(command.into());
        } else {
            self.steps.push(BuildStep::Run {
                command: command.into(),
                user: None,
            });
        }
        self
    }

    /// Adds a shell command run as `user` (a name of the image or
    /// `uid[:gid]`); later steps run as the user before it.
    pub fn run_as(mut self, user: impl Into<String>, command: impl Into<String>) -> Self {
        self.steps.push(BuildStep::Run {
            command: command.into(),
            user: Some(user.into()),
        });
        self
    }

    /// Sets an environment variable for later steps and for containers
    /// (`$NAME` in the value expands as in a Dockerfile).
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.steps.push(BuildStep::Env {
            name: name.into(),
            value: value.into(),
        });
        self
    }

    /// Sets the working directory (absolute) of later steps and containers.
    pub fn workdir(mut self, path: impl Into<String>) -> Self {
        self.steps.push(BuildStep::Workdir(path.into()));
        self
    }

    /// Runs later steps as `user` (a name of the image or `uid[:gid]`).
    /// The image ends as root (images built on it start there); sessions
    /// and sandboxes run as the user their hardening names.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.steps.push(BuildStep::User(user.into()));
        self
    }

    /// Copies files out of a tar archive on the host (see [`ArchiveCopy`]).
    pub fn copy_archive(mut self, copy: ArchiveCopy) -> Self {
        self.steps.push(BuildStep::Copy(copy));
        self
    }

    /// Builds from `image` instead of the default Python base. The image needs
    /// `python3` (for code) and, for packages, `apt-get` and `pip`.
    pub fn base_image(mut self, image: impl Into<String>) -> Self {
        self.base_image = Some(image.into());
        self
    }

    /// Trusts the certificates in a PEM file during builds (apt, pip, curl) and in
    /// containers (Python's `ssl`, `requests`). Needed behind TLS-intercepting proxies.
    pub fn trust_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        // Once: a file named twice would be trusted twice, and the bundle
        // (and so the image's tag) would change with it.
        if !self.ca_files.contains(&path) {
            self.ca_files.push(path);
        }
        self
    }

    /// Trusts whatever the host trusts: its system CA bundle, when one is found
    /// at a usual place. On a machine behind a corporate proxy whose CA is
    /// installed on the host, this is the one switch that makes pip work.
    pub fn trust_host_certificates(self) -> Self {
        match host_ca_bundle() {
            Some(path) => self.trust_ca_file(path),
            None => self,
        }
    }

    /// Ignores the `DOCKHAND_CA_CERTS` environment variable for this spec.
    pub fn without_env_ca(mut self) -> Self {
        self.ca_from_env = false;
        self
    }

    /// The Python version (`major.minor`).
    pub fn python_version(&self) -> &str {
        &self.python_version
    }

    /// The pip packages, as pip spells them.
    pub fn pip_packages(&self) -> &[String] {
        &self.pip_packages
    }

    /// The Debian packages.
    pub fn apt_packages(&self) -> &[String] {
        &self.apt_packages
    }

    /// The extra build commands added before any ordered step, in order.
    pub fn commands(&self) -> &[String] {
        &self.commands
    }

    /// The ordered steps (and the commands added after the first of them).
    pub fn steps(&self) -> &[BuildStep] {
        &self.steps
    }

    /// The prebuilt image used as is, if this spec names one.
    pub fn prebuilt_reference(&self) -> Option<&str> {
        self.prebuilt.as_deref()
    }

    /// Whether this spec names a prebuilt image (nothing to build).
    pub fn is_prebuilt(&self) -> bool {
        self.prebuilt.is_some()
    }

    /// Checks the spec without touching Docker: package names that would be
    /// read as options or break the shell, an unparsable Python version, empty commands.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::spec("image spec", msg));
        if self.prebuilt.is_some() {
            let has_build_steps = !self.pip_packages.is_empty()
                || !self.apt_packages.is_empty()
                || !self.commands.is_empty()
                || !self.steps.is_empty()
                || self.base_image.is_some();
            if has_build_steps {
                return bad("a prebuilt image is used as is: it cannot take packages, commands or a base image (use base_image to build on top of it)".into());
            }
            return Ok(());
        }
        let version_ok = {
            let parts: Vec<&str> = self.python_version.split('.').collect();
            parts.len() == 2
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        };
        if !version_ok {
            return bad(format!(
                "python version `{}` is not of the form MAJOR.MINOR (e.g. 3.11)",
                self.python_version
            ));
        }
        for p in &self.apt_packages {
            let valid = !p.is_empty()
                && !p.starts_with('-')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.:=~_".contains(c));
            if !valid {
                return bad(format!(
                    "apt package `{p}` is not a valid Debian package name"
                ));
            }
        }
        for p in &self.pip_packages {
            let valid =
                !p.trim().is_empty() && !p.starts_with('-') && !p.chars().any(|c| c.is_control());
            if !valid {
                return bad(format!("pip package `{p}` is not a valid requirement"));
            }
        }
        if let Some(c) = self.commands.iter().find(|c| c.trim().is_empty()) {
            return bad(format!("command `{c}` is empty"));
        }
        for step in &self.steps {
            step.validate()?;
        }
        Ok(())
    }
}

/// The host's system CA bundle, if one is at a usual place.
pub fn host_ca_bundle() -> Option<PathBuf> {
    HOST_CA_BUNDLES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}
