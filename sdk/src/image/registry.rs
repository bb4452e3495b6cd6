//! Pushing images dockhand made to a registry, for the daemons and clusters
//! that pull instead of build (the Kubernetes backend, remote daemons).

use std::time::Duration;

use super::ResolvedImage;
use crate::engine::{split_reference, Engine};
use crate::error::{Error, Result};

/// How long one push may take before it counts as failed.
const DEFAULT_PUSH_TIMEOUT: Duration = Duration::from_secs(600);

/// A registry repository that images are pushed under, with the login if
/// it asks for one. An image `dockhand/image:<hash>` is pushed as
/// `<repository>/image:<hash>`: the tag still says what the image holds, so
/// a spec is pushed once and found again by every machine.
///
/// ```no_run
/// # async fn demo() -> dockhand::Result<()> {
/// use dockhand::image::Registry;
/// let docker = dockhand::Client::connect().await?;
/// let image = docker.resolve_image(&dockhand::ImageSpec::default().pip(["numpy"])).await?;
/// let registry = Registry::new("registry.example.com/team/sandboxes")
///     .login("robot", std::env::var("REGISTRY_TOKEN").unwrap_or_default());
/// let pushed = docker.push_image(&image, &registry).await?;
/// println!("{}", pushed.pinned());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Registry {
    repository: String,
    login: Option<(String, String)>,
    timeout: Duration,
}

/// The password never shows.
impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("repository", &self.repository)
            .field("user", &self.login.as_ref().map(|(user, _)| user))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Registry {
    /// Images go under `repository` (`host[:port]/path`, no tag), e.g.
    /// `registry.example.com/team/sandboxes` or `127.0.0.1:5000/dockhand`.
    pub fn new(repository: impl Into<String>) -> Self {
        Registry {
            repository: repository.into().trim_end_matches('/').to_string(),
            login: None,
            timeout: DEFAULT_PUSH_TIMEOUT,
        }
    }

    /// Signs in as `user` with `password` (or a token) for each push.
    pub fn login(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.login = Some((user.into(), password.into()));
        self
    }

    /// How long one push may take (10 minutes unless set).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The repository images go under.
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// Where the local image `local` (`repo:tag`) goes: the last part of its
    /// repository and its tag, under this registry's repository.
    pub(crate) fn reference_for(&self, local: &str) -> Result<String> {
        self.check()?;
        let (repo, tag) = split_reference(local);
        let name = repo.rsplit('/').next().unwrap_or(repo);
        Ok(format!("{}/{name}:{tag}", self.repository))
    }

    /// A repository the daemon can push to: `host/path`, lower case, no tag.
    fn check(&self) -> Result<()> {
        let bad = |why: &str| {
            Err(Error::spec(
                "registry",
                format!("{:?} {why}; give `host[:port]/path`, e.g. `registry.example.com/team/sandboxes`", self.repository),
            ))
        };
        let mut parts = self.repository.split('/');
        let host = parts.next().unwrap_or_default();
        let path: Vec<&str> = parts.collect();
        if host.is_empty() || path.is_empty() || path.iter().any(|p| p.is_empty()) {
            return bad("is not a registry host followed by a path");
        }
        let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c);
        if !path.iter().all(|p| p.chars().all(valid)) {
            return bad("has a path that is not lower-case letters, digits, `.`, `_` and `-` (a tag or digest does not belong here)");
        }
        if !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:".contains(c))
        {
            return bad("has a host that is not a name or address with an optional port");
        }
        Ok(())
    }
}

/// An image in a registry, as [`Client::push_image`](crate::Client::push_image) left it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PushedImage {
    /// `<repository>/<name>:<tag>`.
    pub reference: String,
    /// The manifest's digest (`sha256:...`), when the daemon reported it.
    pub digest: Option<String>,
}

impl PushedImage {
    /// The reference pinned to its digest (`<repository>/<name>@sha256:...`)
    /// where known, so a node pulls exactly what was pushed; else the tag.
    pub fn pinned(&self) -> String {
        match &self.digest {
            Some(digest) => {
                let (repo, _) = split_reference(&self.reference);
                format!("{repo}@{digest}")
            }
            None => self.reference.clone(),
        }
    }
}

impl Registry {
    /// Pushes a local image to this registry through `engine`, tagged as
    /// [`Registry::reference_for`] says. The registry's tag is removed from
    /// the daemon afterwards; the image stays.
    pub(crate) async fn push(&self, engine: &Engine, image: &ResolvedImage) -> Result<PushedImage> {
        let target = self.reference_for(&image.reference)?;
        engine.tag_image(&image.id, &target).await?;
        let login = self
            .login
            .as_ref()
            .map(|(user, password)| (user.as_str(), password.as_str()));
        let pushed = engine.push_image(&target, login, self.timeout).await;
        // The tag was only the push's; the image keeps its own.
        if let Err(e) = engine.untag_image(&target).await {
            tracing::debug!(error = %e, tag = %target, "a pushed tag stays on this daemon");
        }
        Ok(PushedImage {
            reference: target,
            digest: pushed?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_keep_their_tag_under_the_registry() {
        let registry = Registry::new("127.0.0.1:5000/team/sandboxes/");
        assert_eq!(
            registry.reference_for("dockhand/image:abc123").unwrap(),
            "127.0.0.1:5000/team/sandboxes/image:abc123"
        );
        assert_eq!(
            registry.reference_for("dockhand/image").unwrap(),
            "127.0.0.1:5000/team/sandboxes/image:latest"
        );
    }

    #[test]
    fn a_repository_that_cannot_be_pushed_to_is_refused() {
        for bad in [
            "",
            "registry.example.com",
            "registry.example.com/Team",
            "registry.example.com/team:tag",
            "registry.example.com//team",
            "reg istry/team",
        ] {
            let err = Registry::new(bad)
                .reference_for("dockhand/image:a")
                .unwrap_err();
            assert!(matches!(err, Error::InvalidSpec { .. }), "{bad:?}: {err:?}");
            assert!(err.to_string().contains("host[:port]/path"), "{err}");
        }
    }

    #[test]
    fn the_password_never_shows() {
        let registry = Registry::new("r.example/x").login("robot", "hunter2-token");
        let shown = format!("{registry:?}");
        assert!(
            shown.contains("robot") && !shown.contains("hunter2"),
            "{shown}"
        );
    }

    #[test]
    fn a_pushed_image_pins_its_digest() {
        let digest = format!("sha256:{}", "b".repeat(64));
        let pushed = PushedImage {
            reference: "127.0.0.1:5000/t/image:abc".into(),
            digest: Some(digest.clone()),
        };
        assert_eq!(pushed.pinned(), format!("127.0.0.1:5000/t/image@{digest}"));
        let unknown = PushedImage {
            digest: None,
            ..pushed
        };
        assert_eq!(unknown.pinned(), "127.0.0.1:5000/t/image:abc");
    }
}
