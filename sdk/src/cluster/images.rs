//! The images a cluster runs: a prebuilt reference as it is (the nodes
//! pull it), or a spec built by a Docker client and pushed to the registry
//! the nodes pull from ([`KubeConfig::push_images`](super::KubeConfig::push_images)).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::engine::Engine;
use crate::error::Result;
use crate::image::{ImageResolver, ImageSource, ImageSpec, Registry, ResolvedImage};
use crate::util::lock;

/// A Docker daemon that builds (with its resolver) and the registry it
/// pushes to.
#[derive(Clone)]
pub(crate) struct Builder {
    pub engine: Engine,
    pub images: std::sync::Arc<ImageResolver>,
    pub registry: Registry,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("docker", &self.engine.endpoint())
            .field("registry", &self.registry)
            .finish()
    }
}

/// What the nodes pull for each spec, pushed once per process: by whether
/// it was asked for a code host (which adds the bridge), and the spec.
#[derive(Debug, Default)]
pub(crate) struct ClusterImages {
    builder: Option<std::result::Result<Builder, String>>,
    pushed: Mutex<HashMap<(bool, ImageSpec), ResolvedImage>>,
    /// The session agent's image as the nodes pull it, once known.
    agent: tokio::sync::OnceCell<String>,
}

impl ClusterImages {
    pub(crate) fn new(builder: Option<std::result::Result<Builder, String>>) -> Self {
        ClusterImages {
            builder,
            pushed: Mutex::default(),
            agent: tokio::sync::OnceCell::new(),
        }
    }

    /// The image of a one-shot, session or kernel.
    pub(crate) async fn resolve(&self, spec: &ImageSpec) -> Result<ResolvedImage> {
        if let Some(reference) = spec.prebuilt_reference() {
            return Ok(remote(reference));
        }
        let builder = self.builder(
            "building an image from a spec",
            "`client.resolve_image(&spec)`",
        )?;
        self.push(builder, (false, spec.clone()), spec).await
    }

    /// The image of a code host: a prebuilt reference is a code host image
    /// already; a spec gets the bridge first, as on Docker.
    pub(crate) async fn code_host(&self, spec: &ImageSpec) -> Result<ResolvedImage> {
        if let Some(reference) = spec.prebuilt_reference() {
            return Ok(remote(reference));
        }
        let builder = self.builder(
            "building a code host image",
            "`client.code_host_image(&config)`",
        )?;
        let asked = (true, spec.clone());
        if let Some(hit) = lock(&self.pushed).get(&asked) {
            return Ok(hit.clone());
        }
        let local =
            crate::image::bridge::code_host_image(&builder.engine, &builder.images, spec).await?;
        self.push(builder, asked, &local).await
    }

    /// The image sessions' pods take dockhand's session agent from: with a
    /// builder, the agent's image made there and pushed; else the one this
    /// SDK makes, by its own name (loaded onto the nodes, or pushed under it).
    pub(crate) async fn agent(&self) -> Result<String> {
        let builder = match &self.builder {
            None => return Ok(crate::image::agent::default_image().to_string()),
            Some(Err(why)) => {
                return Err(super::unsupported(
                    "building the session agent's image",
                    why.clone(),
                ))
            }
            Some(Ok(builder)) => builder,
        };
        self.agent
            .get_or_try_init(|| async {
                let local = ImageSpec::prebuilt(
                    crate::image::agent::ensure(&builder.engine, builder.images.reporter()).await?,
                );
                Ok(self
                    .push(builder, (false, local.clone()), &local)
                    .await?
                    .reference)
            })
            .await
            .cloned()
    }

    fn builder(&self, feature: &str, made_by: &str) -> Result<&Builder> {
        match &self.builder {
            Some(Ok(builder)) => Ok(builder),
            Some(Err(why)) => Err(super::unsupported(feature, why.clone())),
            None => Err(super::unsupported(
                feature,
                format!("name a Docker client to build with and a registry the nodes pull from (`KubeConfig::push_images`), or make it with a Docker client ({made_by}), push it, and use `ImageSpec::prebuilt(\"registry/name:tag\")`"),
            )),
        }
    }

    /// Builds `local` with the builder's daemon and pushes it; the nodes
    /// pull it by digest. Remembered under `asked`.
    async fn push(
        &self,
        builder: &Builder,
        asked: (bool, ImageSpec),
        local: &ImageSpec,
    ) -> Result<ResolvedImage> {
        let started = Instant::now();
        if let Some(hit) = lock(&self.pushed).get(&asked) {
            return Ok(hit.clone());
        }
        // The builder is a Docker client: its own resolver, never a cluster.
        let built = builder.images.resolve(local).await?;
        let pushed = builder.registry.push(&builder.engine, &built).await?;
        let resolved = ResolvedImage {
            reference: pushed.pinned(),
            id: built.id,
            source: ImageSource::Remote,
            elapsed: started.elapsed(),
        };
        lock(&self.pushed).insert(asked, resolved.clone());
        Ok(resolved)
    }
}

fn remote(reference: &str) -> ResolvedImage {
    ResolvedImage {
        reference: reference.to_string(),
        id: reference.to_string(),
        source: ImageSource::Remote,
        elapsed: Duration::ZERO,
    }
}
