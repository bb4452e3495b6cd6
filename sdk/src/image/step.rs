//! Ordered build steps of an [`ImageSpec`](super::ImageSpec) beyond packages
//! and commands: variables, a working directory, a user, commands run as a
//! user, and files copied out of a tar archive on the host. They render to
//! Dockerfile instructions after the spec's packages and commands, in the
//! order they were added.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// One ordered step of an image's recipe. Make them with
/// [`ImageSpec::env`](super::ImageSpec::env),
/// [`workdir`](super::ImageSpec::workdir), [`user`](super::ImageSpec::user),
/// [`run_as`](super::ImageSpec::run_as) and
/// [`copy_archive`](super::ImageSpec::copy_archive).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum BuildStep {
    /// A shell command, as `user` if one is given (else as the current user).
    Run {
        /// The command, run by `/bin/sh -c`.
        command: String,
        /// Who runs it; the user before it is restored afterwards.
        user: Option<String>,
    },
    /// An environment variable of later steps and of containers
    /// (`$NAME` in the value expands as in a Dockerfile).
    Env {
        /// The variable's name.
        name: String,
        /// Its value.
        value: String,
    },
    /// The working directory of later steps and of containers.
    Workdir(String),
    /// The user later steps run as (the image itself ends as root).
    User(String),
    /// Files copied out of a tar archive.
    Copy(ArchiveCopy),
}

/// Files copied into an image out of a tar archive on the host (plain or
/// gzip-compressed): `source` names paths inside the archive (a glob as
/// Docker's `COPY` takes it), `target` where they go, as `COPY` places them.
/// The archive is read when the copy is made: its content hash goes into the
/// image's tag, and a build refuses an archive changed since.
///
/// ```
/// # fn demo() -> dockhand::Result<()> {
/// use dockhand::image::ArchiveCopy;
/// use dockhand::ImageSpec;
///
/// let dir = tempfile::tempdir().unwrap();
/// let archive = dir.path().join("app.tar");
/// let mut tar = tar::Builder::new(std::fs::File::create(&archive).unwrap());
/// let mut header = tar::Header::new_gnu();
/// header.set_size(5);
/// header.set_mode(0o644);
/// header.set_cksum();
/// tar.append_data(&mut header, "app.py", &b"print"[..]).unwrap();
/// tar.finish().unwrap();
///
/// let copy = ArchiveCopy::new(&archive, "app.py", "/app/")?.mode(0o755);
/// let spec = ImageSpec::default().copy_archive(copy);
/// assert!(spec.render_dockerfile().contains("\"/app.py\", \"/app/\""));
/// # Ok(()) }
/// # demo().unwrap();
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ArchiveCopy {
    archive: PathBuf,
    digest: String,
    source: String,
    target: String,
    owner: Option<String>,
    mode: Option<u32>,
}

impl std::fmt::Debug for ArchiveCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveCopy")
            .field("archive", &self.archive)
            .field("digest", &&self.digest[..self.digest.len().min(16)])
            .field("source", &self.source)
            .field("target", &self.target)
            .field("owner", &self.owner)
            .field("mode", &self.mode.map(|m| format!("{m:o}")))
            .finish()
    }
}

impl ArchiveCopy {
    /// Copies `source` (a path or glob inside `archive`) to `target`. Reads
    /// the whole archive once, to hash it.
    pub fn new(
        archive: impl Into<PathBuf>,
        source: impl Into<String>,
        target: impl Into<String>,
    ) -> Result<Self> {
        let archive = archive.into();
        let digest = file_digest(&archive)?;
        Ok(ArchiveCopy {
            archive,
            digest,
            source: source.into(),
            target: target.into(),
            owner: None,
            mode: None,
        })
    }

    /// Owned by `owner` (`user`, `user:group` or numeric ids).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// With these permission bits (the copied path itself, not a
    /// directory's contents).
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = Some(mode);
        self
    }

    /// The archive on the host.
    pub fn archive(&self) -> &Path {
        &self.archive
    }

    /// The SHA-256 of the archive's bytes (hex), as read when made.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Its name in a build context: its content's, so equal archives are
    /// sent once and an image's tag follows what it copies.
    pub(crate) fn context_name(&self) -> String {
        format!("archive-{}.tar", &self.digest[..32.min(self.digest.len())])
    }

    fn stage(&self) -> String {
        format!(
            "dockhand-archive-{}",
            &self.digest[..12.min(self.digest.len())]
        )
    }

    /// The path the copy makes, where it is one path: the target itself,
    /// or the source's last part inside a target directory.
    fn copied_path(&self) -> String {
        if !self.target.ends_with('/') {
            return self.target.clone();
        }
        let name = self
            .source
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or_default();
        format!("{}{name}", self.target)
    }
}

/// The SHA-256 of a file, read in chunks.
pub(crate) fn file_digest(path: &Path) -> Result<String> {
    use std::io::Read as _;
    let wrap = |e| Error::io(format!("reading the archive {}", path.display()), e);
    let mut file = std::fs::File::open(path).map_err(wrap)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(wrap)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

fn is_name(text: &str) -> bool {
    let mut chars = text.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `user`, `user:group`, or numeric ids.
fn is_user(text: &str) -> bool {
    let part = |p: &str| {
        !p.is_empty()
            && !p.starts_with('-')
            && p.len() <= 64
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    };
    match text.split_once(':') {
        Some((user, group)) => part(user) && part(group),
        None => part(text),
    }
}

fn has_control(text: &str) -> bool {
    text.chars().any(char::is_control)
}

impl BuildStep {
    /// Checks the step without touching Docker.
    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::spec("image spec", msg));
        match self {
            BuildStep::Run { command, user } => {
                if command.trim().is_empty() {
                    return bad(format!("command `{command}` is empty"));
                }
                if let Some(user) = user.as_deref().filter(|u| !is_user(u)) {
                    return bad(format!("`{user}` is not a user name or uid[:gid]"));
                }
            }
            BuildStep::Env { name, value } => {
                if !is_name(name) {
                    return bad(format!(
                        "`{name}` is not a variable name (letters, digits and `_`, not starting with a digit)"
                    ));
                }
                if has_control(value) {
                    return bad(format!("the value of {name} holds a control character"));
                }
            }
            BuildStep::Workdir(path) => {
                if !path.starts_with('/') || has_control(path) {
                    return bad(format!(
                        "working directory `{path}` is not an absolute path"
                    ));
                }
            }
            BuildStep::User(user) => {
                if !is_user(user) {
                    return bad(format!("`{user}` is not a user name or uid[:gid]"));
                }
            }
            BuildStep::Copy(copy) => {
                let source = &copy.source;
                let climbs = source.split('/').any(|part| part == "..");
                if source.is_empty() || source.starts_with('/') || climbs || has_control(source) {
                    return bad(format!(
                        "copy source `{source}` is not a relative path inside its archive"
                    ));
                }
                if copy.target.is_empty() || has_control(&copy.target) {
                    return bad(format!("copy target `{}` is not a path", copy.target));
                }
                if let Some(owner) = copy.owner.as_deref().filter(|o| !is_user(o)) {
                    return bad(format!("`{owner}` is not a user name or uid[:gid]"));
                }
                if copy.mode.is_some_and(|m| m > 0o7777) {
                    return bad(format!(
                        "mode {:o} is more than permission bits",
                        copy.mode.unwrap_or_default()
                    ));
                }
                if copy.mode.is_some() && copy.copied_path().contains(['*', '?', '[']) {
                    return bad(format!(
                        "a mode needs one copied path; `{source}` is a pattern"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The stages that unpack each distinct archive, before the image's own
/// `FROM` (Docker unpacks a local tar that `ADD` names).
pub(crate) fn render_stages(steps: &[BuildStep]) -> String {
    let mut out = String::new();
    let mut seen = Vec::new();
    for step in steps {
        if let BuildStep::Copy(copy) = step {
            if !seen.contains(&copy.digest) {
                seen.push(copy.digest.clone());
                out.push_str(&format!(
                    "FROM scratch AS {}\nADD {} /\n",
                    copy.stage(),
                    copy.context_name()
                ));
            }
        }
    }
    out
}

/// The steps' instructions, in order.
pub(crate) fn render_steps(steps: &[BuildStep]) -> String {
    let json = |text: &str| serde_json::to_string(text).unwrap_or_default();
    let mut out = String::new();
    // The user steps run as, to restore after a step run as another.
    let mut current: Option<&str> = None;
    let run = |out: &mut String, command: &str, user: Option<&str>, current: Option<&str>| {
        let switch = user.filter(|u| Some(*u) != current);
        if let Some(user) = switch {
            out.push_str(&format!("USER {user}\n"));
        }
        out.push_str(&format!("RUN [\"/bin/sh\", \"-c\", {}]\n", json(command)));
        if switch.is_some() {
            out.push_str(&format!("USER {}\n", current.unwrap_or("root")));
        }
    };
    for step in steps {
        match step {
            BuildStep::Run { command, user } => run(&mut out, command, user.as_deref(), current),
            BuildStep::Env { name, value } => {
                let quoted = value.replace('\\', "\\\\").replace('"', "\\\"");
                out.push_str(&format!("ENV {name}=\"{quoted}\"\n"));
            }
            BuildStep::Workdir(path) => out.push_str(&format!("WORKDIR {path}\n")),
            BuildStep::User(user) => {
                out.push_str(&format!("USER {user}\n"));
                current = Some(user);
            }
            BuildStep::Copy(copy) => {
                let chown = copy
                    .owner
                    .as_deref()
                    .map(|o| format!(" --chown={o}"))
                    .unwrap_or_default();
                out.push_str(&format!(
                    "COPY --from={}{chown} [{}, {}]\n",
                    copy.stage(),
                    json(&format!("/{}", copy.source)),
                    json(&copy.target)
                ));
                if let Some(mode) = copy.mode {
                    let path = shlex::try_quote(&copy.copied_path())
                        .map(|q| q.into_owned())
                        .unwrap_or_default();
                    run(
                        &mut out,
                        &format!("chmod {mode:o} {path}"),
                        Some("root"),
                        current,
                    );
                }
            }
        }
    }
    // The image ends as root: an image built on it runs dockhand's own
    // setup first, which needs root, and containers run as the user their
    // hardening names anyway.
    if current.is_some_and(|u| u != "root" && u != "0") {
        out.push_str("USER root\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(source: &str, target: &str) -> ArchiveCopy {
        ArchiveCopy {
            archive: PathBuf::from("/nonexistent.tar"),
            digest: "ab".repeat(32),
            source: source.into(),
            target: target.into(),
            owner: None,
            mode: None,
        }
    }

    #[test]
    fn steps_render_in_order_and_a_run_as_restores_the_user() {
        let steps = vec![
            BuildStep::Env {
                name: "GREETING".into(),
                value: "say \"hi\" \\ $HOME".into(),
            },
            BuildStep::User("user".into()),
            BuildStep::Run {
                command: "pip install x".into(),
                user: Some("root".into()),
            },
            BuildStep::Workdir("/app".into()),
            BuildStep::Copy(copy("src/app.py", "/app/").owner("user").mode(0o755)),
            BuildStep::Copy(copy("data", "/data")),
        ];
        let text = render_steps(&steps);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                r#"ENV GREETING="say \"hi\" \\ $HOME""#,
                "USER user",
                "USER root",
                r#"RUN ["/bin/sh", "-c", "pip install x"]"#,
                "USER user",
                "WORKDIR /app",
                r#"COPY --from=dockhand-archive-abababababab --chown=user ["/src/app.py", "/app/"]"#,
                "USER root",
                r#"RUN ["/bin/sh", "-c", "chmod 755 /app/app.py"]"#,
                "USER user",
                r#"COPY --from=dockhand-archive-abababababab ["/data", "/data"]"#,
                "USER root",
            ]
        );
        // One stage per distinct archive.
        assert_eq!(render_stages(&steps).matches("FROM scratch").count(), 1);
    }

    #[test]
    fn bad_steps_are_refused_with_the_reason() {
        let refused = |step: BuildStep| step.validate().unwrap_err().to_string();
        let env = |name: &str, value: &str| BuildStep::Env {
            name: name.into(),
            value: value.into(),
        };
        assert!(refused(env("1X", "a")).contains("variable name"));
        assert!(refused(env("X", "a\nRUN evil")).contains("control character"));
        assert!(refused(BuildStep::Workdir("app".into())).contains("absolute"));
        assert!(refused(BuildStep::User("-u root".into())).contains("user name"));
        assert!(refused(BuildStep::Copy(copy("../etc/passwd", "/x"))).contains("relative"));
        assert!(refused(BuildStep::Copy(copy("/etc", "/x"))).contains("relative"));
        assert!(refused(BuildStep::Copy(copy("*.py", "/app/").mode(0o600))).contains("pattern"));
        assert!(refused(BuildStep::Copy(copy("a", "/a").mode(0o17777))).contains("permission"));
        assert!(BuildStep::Copy(copy("*.py", "/app/")).validate().is_ok());
        assert!(env("PATH", "/opt/bin:$PATH").validate().is_ok());
    }

    #[test]
    fn an_archive_is_named_by_its_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.tar");
        std::fs::write(&path, b"bytes").unwrap();
        let copy = ArchiveCopy::new(&path, "a", "/a").unwrap();
        assert_eq!(copy.digest(), hex::encode(Sha256::digest(b"bytes")));
        assert!(copy.context_name().starts_with("archive-"));
        let missing = ArchiveCopy::new(dir.path().join("none"), "a", "/a").unwrap_err();
        assert!(missing.to_string().contains("none"), "{missing}");
    }
}
