//! The Python base image: pulled where a registry answers, otherwise made from
//! Debian packages with the recipe in `images/base/`.
//!
//! The tag says which: `dockhand/base:python<X.Y>-slim` for the pulled
//! `python:<X.Y>-slim`, `dockhand/base:python<X.Y>-debian-<release>-<recipe
//! hash>` for one made from Debian packages. So one tag always means one
//! content, and so does every image built on it (its tag hashes the
//! Dockerfile, whose `FROM` names the base). A base is made once per machine:
//! concurrent processes wait on a lock file for the first.
//!
//! The Debian path offers the python of a Debian release: 3.11 (bookworm) and
//! 3.13 (trixie). Any other version needs a registry (or a local
//! `python:X.Y-slim`, or an explicit `base_image`), and fails with
//! [`Error::UnsupportedPython`] otherwise.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::archive;
use crate::engine::{label_instruction, Engine};
use crate::error::{Error, Result};
use crate::progress::{Reporter, Stage};

/// The bootstrap script (runs on the host, needs root and debootstrap).
pub const BOOTSTRAP_RECIPE: &str = include_str!("../../images/base/bootstrap.sh");
/// The Dockerfile that imports the bootstrapped root filesystem.
pub const BASE_DOCKERFILE: &str = include_str!("../../images/base/Dockerfile");

/// Python versions the Debian bootstrap offers, with their Debian release.
pub const DEBIAN_PYTHONS: &[(&str, &str)] = &[("3.11", "bookworm"), ("3.13", "trixie")];

/// Environment variable naming the Debian mirror for the bootstrap.
pub const MIRROR_ENV: &str = "DOCKHAND_DEBIAN_MIRROR";
/// Plain http: works behind TLS-intercepting proxies, and apt verifies signatures anyway.
pub const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";
/// Set to `1` to skip trying the registry for `python:X.Y-slim`.
pub const NO_PULL_ENV: &str = "DOCKHAND_NO_PULL";

/// How long a pull of `python:X.Y-slim` may take before falling back.
const PULL_TIMEOUT: Duration = Duration::from_secs(600);

/// Where a Python base image comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaseSource {
    /// `python:<X.Y>-slim`, pulled from a registry.
    Slim,
    /// Debian's python, bootstrapped from Debian packages with the recipe.
    Debian,
}

/// The local tag of the base image for a Python version from `source`.
pub fn base_tag(python_version: &str, source: BaseSource) -> String {
    static RECIPE_HASH: OnceLock<String> = OnceLock::new();
    match source {
        BaseSource::Slim => format!("dockhand/base:python{python_version}-slim"),
        BaseSource::Debian => {
            let hash = RECIPE_HASH.get_or_init(|| {
                let mut h = Sha256::new();
                h.update(BOOTSTRAP_RECIPE);
                h.update(base_dockerfile());
                hex::encode(h.finalize())[..12].to_string()
            });
            let release = debian_suite(python_version).unwrap_or("none");
            format!("dockhand/base:python{python_version}-debian-{release}-{hash}")
        }
    }
}

/// The Debian release whose python is `python_version`.
pub fn debian_suite(python_version: &str) -> Option<&'static str> {
    DEBIAN_PYTHONS
        .iter()
        .find(|(v, _)| *v == python_version)
        .map(|(_, suite)| *suite)
}

/// The base of `python_version` present locally, if any: the pulled one
/// first, then one made from Debian packages.
async fn present_base(engine: &Engine, python_version: &str) -> Result<Option<String>> {
    for source in [BaseSource::Slim, BaseSource::Debian] {
        let tag = base_tag(python_version, source);
        if engine.inspect_image(&tag).await?.is_some() {
            return Ok(Some(tag));
        }
    }
    Ok(None)
}

/// Makes sure a base image for `python_version` exists locally; returns its tag.
pub(crate) async fn ensure_base(
    engine: &Engine,
    python_version: &str,
    reporter: &Reporter,
) -> Result<String> {
    if let Some(tag) = present_base(engine, python_version).await? {
        return Ok(tag);
    }
    // Other processes (test binaries, parallel jobs) may be making it too.
    // The lock lives in the machine's temp dir, not the (per-user, per-client)
    // cache dir: every process that talks to this daemon must see it.
    let lock_name = format!("dockhand-base-python{python_version}");
    let _lock = lock_file(&std::env::temp_dir().join("dockhand-locks"), &lock_name).await?;
    if let Some(tag) = present_base(engine, python_version).await? {
        return Ok(tag);
    }
    let started = Instant::now();
    let upstream = format!("python:{python_version}-slim");
    let pull_allowed = std::env::var(NO_PULL_ENV).map_or(true, |v| v != "1");
    if pull_allowed {
        let tag = base_tag(python_version, BaseSource::Slim);
        reporter.report(&tag, Stage::Pull, format!("pulling {upstream}"));
        match engine.pull_image(&upstream, PULL_TIMEOUT).await {
            Ok(()) => {
                engine.tag_image(&upstream, &tag).await?;
                reporter.report(&tag, Stage::Ready, format!("base image from {upstream}"));
                return Ok(tag);
            }
            Err(e) => reporter.report(
                &tag,
                Stage::Pull,
                format!("cannot pull {upstream} ({e}); making the base from Debian packages"),
            ),
        }
    }
    let suite = debian_suite(python_version).ok_or_else(|| Error::UnsupportedPython {
        requested: python_version.to_string(),
        offered: DEBIAN_PYTHONS
            .iter()
            .map(|(v, s)| format!("{v} ({s})"))
            .collect::<Vec<_>>()
            .join(", "),
    })?;
    let tag = base_tag(python_version, BaseSource::Debian);
    bootstrap(engine, &tag, suite, reporter).await?;
    reporter.report(
        &tag,
        Stage::Ready,
        format!(
            "base image made from Debian {suite} in {:.1}s",
            started.elapsed().as_secs_f64()
        ),
    );
    Ok(tag)
}

/// Runs the recipe and imports its root filesystem as `tag`.
async fn bootstrap(engine: &Engine, tag: &str, suite: &str, reporter: &Reporter) -> Result<()> {
    let debootstrap = find_program("debootstrap").ok_or_else(|| Error::BootstrapToolMissing {
        tool: "debootstrap",
        tag: tag.to_string(),
        hint: "install it (`sudo apt-get install debootstrap` on Debian/Ubuntu; it needs root), \
               or load python:X.Y-slim into the daemon (`docker load`), \
               or set ImageSpec::base_image to a local image with python3"
            .to_string(),
    })?;
    let mirror = std::env::var(MIRROR_ENV).unwrap_or_else(|_| DEFAULT_MIRROR.to_string());
    let work = tempfile::Builder::new()
        .prefix("dockhand-bootstrap-")
        .tempdir()
        .map_err(|e| Error::io("creating bootstrap directory", e))?;
    let script = work.path().join("bootstrap.sh");
    tokio::fs::write(&script, BOOTSTRAP_RECIPE)
        .await
        .map_err(|e| Error::io("writing bootstrap recipe", e))?;
    reporter.report(
        tag,
        Stage::Bootstrap,
        format!("debootstrap {suite} from {mirror} (about a minute)"),
    );

    let path_with_sbin = format!(
        "{}:/usr/sbin:/sbin",
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
    );
    let mut child = tokio::process::Command::new("sh")
        .arg(&script)
        .arg(suite)
        .arg(&mirror)
        .arg(work.path())
        .env("PATH", path_with_sbin)
        .env("DEBOOTSTRAP", &debootstrap)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Error::io("starting the bootstrap recipe", e))?;

    // Both pipes feed one log; keep its tail for the error message.
    let mut log: Vec<String> = Vec::new();
    if let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) {
        let mut merged = std::pin::pin!(futures::stream::select(lines_of(out), lines_of(err)));
        while let Some(line) = merged.next().await {
            reporter.report(tag, Stage::Bootstrap, line.clone());
            log.push(line);
        }
    }
    let status = child
        .wait()
        .await
        .map_err(|e| Error::io("waiting for the bootstrap recipe", e))?;
    if !status.success() {
        return Err(Error::BaseBootstrap {
            tag: tag.to_string(),
            message: format!(
                "the recipe exited with {status}; last lines:\n{}",
                super::build_log::tail(&log, 20)
            ),
        });
    }

    reporter.report(tag, Stage::Bootstrap, "importing the root filesystem");
    let rootfs = work.path().join("rootfs.tar");
    let dockerfile = format!(
        "{}{}",
        base_dockerfile(),
        label_instruction(BASE_KIND, &Default::default())
    );
    let context = archive::context_with_file(&dockerfile, "rootfs.tar", &rootfs).await?;
    super::build::run_build(engine, tag, context, reporter).await
}

/// The base's Dockerfile: the root filesystem, then dockhand's setup that
/// every image on it would otherwise repeat.
fn base_dockerfile() -> String {
    format!("{BASE_DOCKERFILE}{}", base_setup())
}

/// The `kind` label of base images.
const BASE_KIND: &str = "base-image";

fn lines_of<R>(reader: R) -> impl futures::Stream<Item = String>
where
    R: tokio::io::AsyncRead + Unpin,
{
    futures::stream::unfold(BufReader::new(reader).lines(), |mut lines| async move {
        match lines.next_line().await {
            Ok(Some(line)) => Some((line, lines)),
            _ => None,
        }
    })
}

/// Looks a program up in PATH and the sbin directories (debootstrap lives in
/// /usr/sbin, which a non-root PATH often lacks).
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// An exclusive lock held while a base image is made, shared by processes.
pub(crate) async fn lock_file(dir: &Path, tag: &str) -> Result<std::fs::File> {
    let dir = dir.to_path_buf();
    let name: String = tag
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let path = dir.join(format!("{name}.lock"));
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        file.lock()
            .map_err(|e| Error::io(format!("locking {}", path.display()), e))?;
        Ok(file)
    })
    .await
    .map_err(|e| Error::io("lock task", std::io::Error::other(e.to_string())))?
}

/// Variables every image gets: pip installs system-wide (Debian's python
/// refuses that, PEP 668, unless told; a sandbox image is single-purpose, so
/// it is right), unbuffered Python, UTF-8.
pub(super) const SETUP_ENV: &str =
    "PIP_BREAK_SYSTEM_PACKAGES=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
     PIP_ROOT_USER_ACTION=ignore DEBIAN_FRONTEND=noninteractive \
     PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 LANG=C.UTF-8";

/// Points the clients that carry their own bundle (pip from python.org
/// images, requests, curl, Python's ssl) at the system bundle, where extra
/// certificates are appended.
pub(super) const CA_ENV: &str = "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
     PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
     REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
     CURL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt";

/// Where sandboxes exchange inputs and outputs: inputs are read-only to the
/// unprivileged user, outputs writable.
pub(super) const IO_DIRS: &str =
    "mkdir -p /var/inputs /var/outputs && chmod 0755 /var/inputs && chmod 0777 /var/outputs";

/// dockhand's own setup, as the base it makes from Debian packages carries
/// it: an image on that base starts with the spec's own steps. Each step of
/// a build costs a container and a layer commit, seconds on some storage
/// drivers (fuse-overlayfs diffs the whole tree), so steps every image
/// would repeat are paid once per machine.
pub(crate) fn base_setup() -> String {
    format!("ENV {SETUP_ENV} {CA_ENV}\nRUN {IO_DIRS}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_tag_names_the_version_and_what_it_is_made_of() {
        let debian = base_tag("3.11", BaseSource::Debian);
        assert!(debian.starts_with("dockhand/base:python3.11-debian-bookworm-"));
        assert_eq!(debian, base_tag("3.11", BaseSource::Debian));
        assert_ne!(debian, base_tag("3.13", BaseSource::Debian));
        assert_eq!(
            base_tag("3.11", BaseSource::Slim),
            "dockhand/base:python3.11-slim"
        );
    }

    #[test]
    fn suites_map_to_debian_pythons() {
        assert_eq!(debian_suite("3.11"), Some("bookworm"));
        assert_eq!(debian_suite("3.13"), Some("trixie"));
        assert_eq!(debian_suite("3.9"), None);
    }
}
