//! Image operations: inspect, build, pull, tag, commit, list and remove.

use std::collections::HashMap;
use std::time::Duration;

use bollard::query_parameters::{
    BuildImageOptionsBuilder, CommitContainerOptionsBuilder, CreateImageOptionsBuilder,
    PushImageOptionsBuilder, RemoveImageOptionsBuilder, TagImageOptionsBuilder,
};
use futures::{Stream, StreamExt};

use super::{is_not_found, labels, Engine};
use crate::error::{Error, Result};

/// What the daemon knows about a local image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    /// Image id (`sha256:...`).
    pub id: String,
    /// The image's labels.
    pub labels: HashMap<String, String>,
    /// Size in bytes.
    pub size: i64,
    /// How many filesystem layers it stacks (Docker refuses to make an
    /// image of more than 125).
    pub layers: usize,
}

/// Build output, or the builder's final error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildLine {
    /// A piece of the build log: not always a whole line (messages may split
    /// a line anywhere).
    Log(String),
    /// The builder failed with this message.
    Failed(String),
}

impl Engine {
    /// Looks an image up locally; `None` when absent.
    pub async fn inspect_image(&self, reference: &str) -> Result<Option<ImageInfo>> {
        match self.docker.inspect_image(reference).await {
            Ok(img) => Ok(Some(ImageInfo {
                id: img.id.unwrap_or_default(),
                labels: img.config.and_then(|c| c.labels).unwrap_or_default(),
                size: img.size.unwrap_or_default(),
                layers: img
                    .root_fs
                    .and_then(|r| r.layers)
                    .map_or(0, |layers| layers.len()),
            })),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(self.docker_err("inspect image", e)),
        }
    }

    /// Builds `tag` from a tar build context holding a `Dockerfile`, with the
    /// classic builder (no BuildKit session needed). The Dockerfile should end with
    /// [`label_instruction`] so the image can be found by label. Yields the log line by line;
    /// a failure arrives as [`BuildLine::Failed`] and ends the stream.
    pub fn build_image<'a>(
        &'a self,
        tag: &str,
        context: impl Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static,
    ) -> impl Stream<Item = Result<BuildLine>> + Send + 'a {
        // Labels go in through the Dockerfile (see `label_instruction`): the
        // classic builder turns each `labels` query entry into its own step.
        let options = BuildImageOptionsBuilder::default()
            .dockerfile("Dockerfile")
            .t(tag)
            .rm(true)
            .forcerm(true)
            .build();
        let body = bollard::body_try_stream(context);
        self.docker
            .build_image(options, None, Some(body))
            .flat_map(|item| {
                let lines: Vec<Result<BuildLine>> = match item {
                    Ok(info) => {
                        let mut out: Vec<Result<BuildLine>> = info
                            .stream
                            .map(|t| Ok(BuildLine::Log(t)))
                            .into_iter()
                            .collect();
                        if let Some(msg) = info.error_detail.and_then(|d| d.message) {
                            out.push(Ok(BuildLine::Failed(msg)));
                        }
                        out
                    }
                    Err(bollard::errors::Error::DockerStreamError { error }) => {
                        vec![Ok(BuildLine::Failed(error))]
                    }
                    Err(e) => vec![Err(self.docker_err("build image", e))],
                };
                futures::stream::iter(lines)
            })
    }

    /// Pulls `reference`; gives up after `timeout` (registries that hang).
    pub async fn pull_image(&self, reference: &str, timeout: Duration) -> Result<()> {
        let (repo, tag) = split_reference(reference);
        let options = CreateImageOptionsBuilder::default()
            .from_image(repo)
            .tag(tag)
            .build();
        let pull = async {
            let mut stream = self.docker.create_image(Some(options), None, None);
            while let Some(item) = stream.next().await {
                item.map_err(|e| self.docker_err("pull image", e))?;
            }
            Ok(())
        };
        registry_call("pull image", timeout, pull).await
    }

    /// Pushes the local image `reference` to the registry its name says,
    /// signed in as `login` (user, password) if given; gives up after
    /// `timeout`. Returns the manifest's digest when the daemon reports it.
    pub async fn push_image(
        &self,
        reference: &str,
        login: Option<(&str, &str)>,
        timeout: Duration,
    ) -> Result<Option<String>> {
        let (repo, tag) = split_reference(reference);
        let options = PushImageOptionsBuilder::default().tag(tag).build();
        let credentials = login.map(|(user, password)| bollard::auth::DockerCredentials {
            username: Some(user.to_string()),
            password: Some(password.to_string()),
            serveraddress: Some(repo.split('/').next().unwrap_or_default().to_string()),
            ..Default::default()
        });
        let push = async {
            let mut stream = self.docker.push_image(repo, Some(options), credentials);
            let mut digest = None;
            while let Some(item) = stream.next().await {
                let info = item.map_err(|e| self.docker_err("push image", e))?;
                // The last status line: "<tag>: digest: sha256:... size: N".
                if let Some(found) = info.status.as_deref().and_then(digest_in) {
                    digest = Some(found.to_string());
                }
            }
            Ok(digest)
        };
        registry_call("push image", timeout, push).await
    }

    /// Adds the tag `target` to image `source`.
    pub async fn tag_image(&self, source: &str, target: &str) -> Result<()> {
        let (repo, tag) = split_reference(target);
        let options = TagImageOptionsBuilder::default()
            .repo(repo)
            .tag(tag)
            .build();
        self.docker
            .tag_image(source, Some(options))
            .await
            .map_err(|e| self.docker_err("tag image", e))
    }

    /// Commits a container's filesystem as image `target`, labelled as `kind`.
    ///
    /// Docker copies the container's configuration, its environment
    /// included, into the image (as its `Config` and `ContainerConfig`):
    /// nothing secret may be in a container's configuration that is ever
    /// committed.
    pub async fn commit_container(
        &self,
        id: &str,
        target: &str,
        kind: &str,
        extra_labels: HashMap<String, String>,
    ) -> Result<String> {
        let (repo, tag) = split_reference(target);
        let options = CommitContainerOptionsBuilder::default()
            .container(id)
            .repo(repo)
            .tag(tag)
            .pause(true)
            .build();
        let config = bollard::models::ContainerConfig {
            labels: Some(image_labels(kind, extra_labels)),
            ..Default::default()
        };
        let created = self
            .docker
            .commit_container(options, config)
            .await
            .map_err(|e| self.docker_err("commit container", e))?;
        Ok(created.id)
    }

    /// Makes image `target` of one layer from a (stopped) container's whole
    /// filesystem, with the container's configuration (variables, user,
    /// working directory, command) and labels as `commit_container` gives
    /// them; its id. Where each commit of a container made from the last
    /// one's image adds a layer, this starts the stack again.
    pub async fn flatten_container(
        &self,
        id: &str,
        target: &str,
        kind: &str,
        extra_labels: HashMap<String, String>,
    ) -> Result<String> {
        let inspected = self
            .docker
            .inspect_container(id, None)
            .await
            .map_err(|e| self.docker_err("inspect container", e))?;
        let config = inspected.config.unwrap_or_default();
        let changes = config_changes(&config, &image_labels(kind, extra_labels));
        let (repo, tag) = split_reference(target);
        let options = CreateImageOptionsBuilder::default()
            .from_src("-")
            .repo(repo)
            .tag(tag)
            .changes(changes)
            .build();
        let filesystem = self.docker.export_container(id).map(|chunk| {
            chunk.map_err(|e| std::io::Error::other(format!("exporting the container: {e}")))
        });
        let mut imported = self.docker.create_image(
            Some(options),
            Some(bollard::body_try_stream(filesystem)),
            None,
        );
        while let Some(step) = imported.next().await {
            let step = step.map_err(|e| self.docker_err("import image", e))?;
            if let Some(e) = step.error_detail.and_then(|d| d.message) {
                return Err(Error::Docker {
                    operation: "import image",
                    message: e,
                    status: None,
                });
            }
        }
        match self.inspect_image(target).await? {
            Some(image) => Ok(image.id),
            None => Err(Error::Docker {
                operation: "import image",
                message: format!("the daemon made no image {target}"),
                status: None,
            }),
        }
    }

    /// Images carrying the SDK's labels and the given `kind`: `(id, tags)`.
    pub async fn list_managed_images(&self, kind: &str) -> Result<Vec<(String, Vec<String>)>> {
        Ok(self
            .managed_images()
            .await?
            .into_iter()
            .filter(|i| i.kind == kind)
            .map(|i| (i.id, i.tags))
            .collect())
    }

    /// Removes images of `kind` that no container uses and that either have
    /// no tag left (a snapshot removed while a sandbox from it still ran)
    /// or were made for a process that is gone (a fork's or a resume's
    /// image whose owner was killed while making it); their ids.
    pub(crate) async fn prune_untagged(&self, kind: &str) -> Result<Vec<String>> {
        let mut removed = Vec::new();
        for image in self.managed_images().await? {
            if image.kind != kind {
                continue;
            }
            let untagged = image.tags.iter().all(|t| t == "<none>:<none>");
            let orphaned = labels::owner_is_gone(&image.labels);
            if !untagged && !orphaned {
                continue;
            }
            // By each name, then by id: an image with several names is
            // removed by id only once it has none left.
            let mut unused = true;
            for tag in image.tags.iter().filter(|t| *t != "<none>:<none>") {
                unused &= self.remove_image_if_unused(tag).await?;
            }
            if unused && self.remove_image_if_unused(&image.id).await? {
                removed.push(image.id);
            }
        }
        Ok(removed)
    }

    /// Removes an image unless a container uses it (`false` then); a
    /// missing one counts as removed.
    pub async fn remove_image_if_unused(&self, reference: &str) -> Result<bool> {
        let options = RemoveImageOptionsBuilder::default().build();
        match self
            .docker
            .remove_image(reference, Some(options), None)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(true),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => Ok(false),
            Err(e) => Err(self.docker_err("remove image", e)),
        }
    }

    /// Removes image `reference` in the background, on the process's
    /// remover: an image still being committed (its request went out, the
    /// caller went away) is waited for, and one a container still uses
    /// (the containers of dropped forks, being removed meanwhile) is tried
    /// again, for at most `within`. What is left then carries its owner's
    /// labels, so the owner's watchdog or a later `reap` removes it.
    pub(crate) fn remove_image_later(&self, reference: String, within: Duration) {
        let engine = self.clone();
        let what = format!("image {reference}");
        super::submit_job(
            what,
            Box::pin(async move {
                let deadline = tokio::time::Instant::now() + within;
                let mut seen = false;
                loop {
                    match engine.inspect_image(&reference).await {
                        Ok(Some(_)) => {
                            seen = true;
                            if let Ok(true) = engine.remove_image_if_unused(&reference).await {
                                return;
                            }
                        }
                        // Gone after it was seen, or never made.
                        Ok(None) if seen => return,
                        Ok(None) => {}
                        Err(e) => {
                            tracing::warn!(image = %reference, error = %e, "removing an image left by a dropped call");
                        }
                    }
                    if tokio::time::Instant::now() >= deadline {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }),
        );
    }

    /// Removes the tag `reference` alone: the image stays under its other
    /// names, and so do its parents. A missing tag is fine.
    pub async fn untag_image(&self, reference: &str) -> Result<()> {
        let options = RemoveImageOptionsBuilder::default()
            .force(false)
            .noprune(true)
            .build();
        self.remove_image_as(reference, options, "untag image")
            .await
    }

    /// Removes an image; a missing one is fine.
    pub async fn remove_image(&self, reference: &str) -> Result<()> {
        let options = RemoveImageOptionsBuilder::default().force(true).build();
        self.remove_image_as(reference, options, "remove image")
            .await
    }

    async fn remove_image_as(
        &self,
        reference: &str,
        options: bollard::query_parameters::RemoveImageOptions,
        operation: &'static str,
    ) -> Result<()> {
        match self
            .docker
            .remove_image(reference, Some(options), None)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(self.docker_err(operation, e)),
        }
    }
}

/// One `LABEL` line with the SDK's labels for an image of `kind` plus `extra`,
/// in a stable order so identical builds stay identical.
pub fn label_instruction(kind: &str, extra: &HashMap<String, String>) -> String {
    let mut all: Vec<(String, String)> = labels::durable(kind)
        .into_iter()
        .chain(extra.clone())
        .collect();
    all.sort();
    let pairs: Vec<String> = all
        .iter()
        .map(|(k, v)| format!("{k}={}", serde_json::to_string(v).unwrap_or_default()))
        .collect();
    format!("LABEL {}\n", pairs.join(" "))
}

/// `call`, which talks to a registry through the daemon, given up after
/// `timeout` (registries that hang).
async fn registry_call<T>(
    operation: &'static str,
    timeout: Duration,
    call: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result,
        Err(_) => Err(Error::Docker {
            operation,
            message: format!("no answer from the registry within {timeout:?}"),
            status: None,
        }),
    }
}

/// The `sha256:<hex>` a push's status line names, if any.
fn digest_in(status: &str) -> Option<&str> {
    let start = status.find("digest: sha256:")? + "digest: ".len();
    let digest = status[start..].split_whitespace().next()?;
    (digest.len() == "sha256:".len() + 64).then_some(digest)
}

/// The labels of an image made from a container (committed or flattened).
/// Docker copies every label of the container a commit does not set: the
/// owner's among them, which would make a snapshot meant to outlive its
/// process look like that process's own (its watchdog and `reap` remove
/// those). They are set, blank unless `extra` names an owner.
fn image_labels(kind: &str, extra: HashMap<String, String>) -> HashMap<String, String> {
    let mut all = labels::durable(kind);
    for owner in [labels::SESSION, labels::OWNER_HOST, labels::OWNER_PID] {
        all.insert(owner.to_string(), String::new());
    }
    all.extend(extra);
    all
}

/// The Dockerfile instructions that give an imported image a container's
/// configuration and `labels`, as `docker import --change` takes them:
/// every value double-quoted with `"`, `\` and `$` escaped, so no text in
/// it is read as syntax or expanded as a variable.
fn config_changes(
    config: &bollard::models::ContainerConfig,
    labels: &HashMap<String, String>,
) -> Vec<String> {
    let quoted = |text: &str| {
        let mut out = String::with_capacity(text.len() + 2);
        out.push('"');
        for c in text.chars() {
            if matches!(c, '"' | '\\' | '$') {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
        out
    };
    let mut changes = Vec::new();
    for entry in config.env.iter().flatten() {
        if let Some((name, value)) = entry.split_once('=') {
            changes.push(format!("ENV {name}={}", quoted(value)));
        }
    }
    if let Some(dir) = config.working_dir.as_deref().filter(|d| !d.is_empty()) {
        changes.push(format!("WORKDIR {}", quoted(dir)));
    }
    if let Some(user) = config.user.as_deref().filter(|u| !u.is_empty()) {
        changes.push(format!("USER {}", quoted(user)));
    }
    let exec_form = |args: &Vec<String>| serde_json::to_string(args).unwrap_or_default();
    if let Some(entrypoint) = config.entrypoint.as_ref().filter(|e| !e.is_empty()) {
        changes.push(format!("ENTRYPOINT {}", exec_form(entrypoint)));
    }
    if let Some(cmd) = config.cmd.as_ref().filter(|c| !c.is_empty()) {
        changes.push(format!("CMD {}", exec_form(cmd)));
    }
    let mut labels: Vec<_> = labels.iter().collect();
    labels.sort();
    for (name, value) in labels {
        changes.push(format!("LABEL {}={}", quoted(name), quoted(value)));
    }
    changes
}

/// Splits `repo[:tag]` (a registry port is not a tag) into repository and tag.
pub(crate) fn split_reference(reference: &str) -> (&str, &str) {
    match reference.rfind(':') {
        Some(i) if !reference[i + 1..].contains('/') => (&reference[..i], &reference[i + 1..]),
        _ => (reference, "latest"),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::split_reference;

    #[test]
    fn a_push_reports_its_digest() {
        let hex = "a".repeat(64);
        let line = format!("7f3e: digest: sha256:{hex} size: 1234");
        assert_eq!(
            super::digest_in(&line),
            Some(format!("sha256:{hex}").as_str())
        );
        assert_eq!(super::digest_in("Pushed"), None);
        assert_eq!(super::digest_in("digest: sha256:short size: 1"), None);
    }

    #[test]
    fn an_imported_image_gets_the_containers_configuration() {
        let config = bollard::models::ContainerConfig {
            env: Some(vec![
                "PATH=/usr/bin:/bin".into(),
                "QUOTED=a \"b\" $c \\d".into(),
                "EMPTY=".into(),
            ]),
            working_dir: Some("/home/user".into()),
            user: Some("1000:1000".into()),
            cmd: Some(vec!["/var/inputs/.dockhand/agent".into(), "--x".into()]),
            ..Default::default()
        };
        let labels = HashMap::from([("dev.dockhand.kind".to_string(), "snapshot".to_string())]);
        assert_eq!(
            super::config_changes(&config, &labels),
            [
                "ENV PATH=\"/usr/bin:/bin\"",
                "ENV QUOTED=\"a \\\"b\\\" \\$c \\\\d\"",
                "ENV EMPTY=\"\"",
                "WORKDIR \"/home/user\"",
                "USER \"1000:1000\"",
                "CMD [\"/var/inputs/.dockhand/agent\",\"--x\"]",
                "LABEL \"dev.dockhand.kind\"=\"snapshot\"",
            ]
        );
    }

    #[test]
    fn references_split_into_repo_and_tag() {
        assert_eq!(split_reference("python:3.11-slim"), ("python", "3.11-slim"));
        assert_eq!(
            split_reference("dockhand/image"),
            ("dockhand/image", "latest")
        );
        assert_eq!(
            split_reference("localhost:5000/team/img"),
            ("localhost:5000/team/img", "latest")
        );
        assert_eq!(
            split_reference("localhost:5000/team/img:v2"),
            ("localhost:5000/team/img", "v2")
        );
    }
}
