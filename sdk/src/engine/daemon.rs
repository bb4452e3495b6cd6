//! What the daemon says about itself, and the images the SDK made on it.

use std::collections::HashMap;

use bollard::query_parameters::ListImagesOptionsBuilder;

use super::{labels, Engine};
use crate::error::Result;

/// The daemon's version and setup, from `docker version` and `docker info`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct DaemonInfo {
    /// The engine's version (`20.10.24`).
    pub version: String,
    /// The Engine API version it speaks (`1.41`).
    pub api_version: String,
    /// Its operating system and architecture (`linux/amd64`).
    pub platform: String,
    /// Where it keeps images and containers (on the daemon's host).
    pub root_dir: String,
    /// The storage driver (`overlay2`, `fuse-overlayfs`, ...).
    pub storage_driver: String,
    /// Whether its `experimental` features are on (checkpoints need them).
    pub experimental: bool,
    /// OCI runtimes it has registered (`runc`, `runsc`, ...).
    pub runtimes: Vec<String>,
    /// Each registered runtime's extra arguments (`runsc`: `--network=none`).
    pub runtime_args: std::collections::BTreeMap<String, Vec<String>>,
}

/// An image the SDK made (a built image, a base, a snapshot).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ManagedImage {
    /// The image id.
    pub id: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// What made it: `image` (built from a spec), `base-image`, `snapshot`, ...
    pub kind: String,
    /// Size in bytes.
    pub size: i64,
    /// When it was made (seconds since the epoch).
    pub created: i64,
    /// Its labels (an image made for one process's use names its owner).
    #[serde(skip)]
    pub(crate) labels: HashMap<String, String>,
}

impl Engine {
    /// Fails at once, with how to fix it, when the daemon lacks `runtime`
    /// (its runtimes are read once per engine).
    pub(crate) async fn check_runtime(&self, runtime: &str, networked: bool) -> Result<()> {
        let registered = self
            .runtimes
            .get_or_try_init(|| async {
                Ok::<_, crate::Error>(self.daemon_info().await?.runtime_args)
            })
            .await?;
        if let Some(args) = registered.get(runtime) {
            // gVisor registered offline gives a networked run no network at all: say so.
            if networked && args.iter().any(|a| a == "--network=none") {
                return Err(crate::Error::spec(
                    "isolation",
                    format!(
                        "the daemon registers `{runtime}` with --network=none, so a run under it \
                         has no network; use network off, or register a second runtime without \
                         that flag (gVisor's own network stack then needs a host that allows it)"
                    ),
                ));
            }
            return Ok(());
        }
        let available: Vec<String> = registered.keys().cloned().collect();
        let hint = if runtime == "runsc" {
            "install gVisor (`apt-get install runsc`, or gvisor.dev/docs/user_guide/install), \
             register it in /etc/docker/daemon.json as \
             {\"runtimes\": {\"runsc\": {\"path\": \"/usr/bin/runsc\", \"runtimeArgs\": [\"--network=none\"]}}} \
             and restart dockerd"
                .to_string()
        } else {
            format!("register `{runtime}` under \"runtimes\" in the daemon's daemon.json and restart it")
        };
        Err(crate::Error::RuntimeUnavailable {
            runtime: runtime.to_string(),
            available,
            hint,
        })
    }

    /// The daemon's operating system and architecture (`linux/amd64`), as
    /// Docker names platforms (read once per engine).
    pub(crate) async fn platform(&self) -> Result<String> {
        let platform = self
            .platform
            .get_or_try_init(|| async {
                let version = self
                    .docker
                    .version()
                    .await
                    .map_err(|e| self.docker_err("version", e))?;
                Ok::<_, crate::Error>(platform_of(&version))
            })
            .await?;
        Ok(platform.clone())
    }

    pub(crate) async fn daemon_info(&self) -> Result<DaemonInfo> {
        let (version, info) = tokio::try_join!(
            async {
                self.docker
                    .version()
                    .await
                    .map_err(|e| self.docker_err("version", e))
            },
            async {
                self.docker
                    .info()
                    .await
                    .map_err(|e| self.docker_err("info", e))
            },
        )?;
        let registered = info.runtimes.unwrap_or_default();
        let runtime_args: std::collections::BTreeMap<String, Vec<String>> = registered
            .iter()
            .map(|(name, r)| (name.clone(), r.runtime_args.clone().unwrap_or_default()))
            .collect();
        let runtimes: Vec<String> = runtime_args.keys().cloned().collect();
        let platform = platform_of(&version);
        Ok(DaemonInfo {
            version: version.version.unwrap_or_default(),
            api_version: version.api_version.unwrap_or_default(),
            platform,
            root_dir: info.docker_root_dir.unwrap_or_default(),
            storage_driver: info.driver.unwrap_or_default(),
            experimental: info.experimental_build.unwrap_or(false),
            runtimes,
            runtime_args,
        })
    }

    pub(crate) async fn managed_images(&self) -> Result<Vec<ManagedImage>> {
        let filters = HashMap::from([("label", vec![labels::MANAGED.to_string()])]);
        let options = ListImagesOptionsBuilder::default()
            .filters(&filters)
            .build();
        let list = self
            .docker
            .list_images(Some(options))
            .await
            .map_err(|e| self.docker_err("list images", e))?;
        Ok(list
            .into_iter()
            .map(|i| ManagedImage {
                kind: i.labels.get(labels::KIND).cloned().unwrap_or_default(),
                id: i.id,
                tags: i.repo_tags,
                size: i.size,
                created: i.created,
                labels: i.labels,
            })
            .collect())
    }
}

/// Docker's name of the daemon's platform (`linux/amd64`).
fn platform_of(version: &bollard::models::SystemVersion) -> String {
    format!(
        "{}/{}",
        version.os.as_deref().unwrap_or_default(),
        version.arch.as_deref().unwrap_or_default()
    )
}
