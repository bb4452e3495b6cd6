//! Resolving an [`ImageSpec`] to a local image: reuse, pull or build, once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{base, build::run_build, ImageSpec};
use crate::archive::{self, TarFile};
use crate::engine::{label_instruction, labels, Engine};
use crate::error::{Error, Result};
use crate::progress::{Reporter, Stage};
use crate::util::lock;

/// How long pulling a prebuilt or base override image may take.
const PULL_TIMEOUT: Duration = Duration::from_secs(600);

/// Where a resolved image came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageSource {
    /// It already existed locally (a cache hit): nothing was built or pulled.
    Cached,
    /// It was built now.
    Built,
    /// It was pulled now.
    Pulled,
    /// A reference the cluster's nodes pull (the Kubernetes backend):
    /// nothing was checked or fetched on this machine.
    Remote,
}

/// A local image ready to run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResolvedImage {
    /// The reference to create containers from (the content-addressed tag for specs).
    pub reference: String,
    /// The image id.
    pub id: String,
    /// Where it came from.
    pub source: ImageSource,
    /// How long resolving took.
    pub elapsed: Duration,
}

/// One lock per daemon and tag, for the whole process: the first caller
/// builds, the others (of any client on that daemon) wait and then reuse.
/// Two clients building the same image at once would each pay for it.
type Flights = Mutex<HashMap<(String, String), Arc<tokio::sync::Mutex<()>>>>;
static FLIGHTS: std::sync::LazyLock<Flights> = std::sync::LazyLock::new(Flights::default);

/// Resolves specs to images; one per client. Concurrent requests for the same
/// spec, from any client on the same daemon, share one build (single flight).
pub(crate) struct ImageResolver {
    engine: Engine,
    reporter: Reporter,
    /// Specs already resolved in this process (saves an inspect per run).
    resolved: Mutex<HashMap<ImageSpec, ResolvedImage>>,
}

impl ImageResolver {
    pub(crate) fn new(engine: Engine, reporter: Reporter) -> Self {
        ImageResolver {
            engine,
            reporter,
            resolved: Mutex::default(),
        }
    }

    /// Whether the image `spec` builds is present already (its base is
    /// found, or made, to know its tag). Prebuilt images: whether present.
    pub(crate) async fn is_present(&self, spec: &ImageSpec) -> Result<bool> {
        if let Some(reference) = &spec.prebuilt {
            return Ok(self.engine.inspect_image(reference).await?.is_some());
        }
        let base = match &spec.base_image {
            None => base::ensure_base(&self.engine, &spec.python_version, &self.reporter).await?,
            Some(reference) => reference.clone(),
        };
        let plan = spec.plan_on(&base)?;
        Ok(self.engine.inspect_image(&plan.tag).await?.is_some())
    }

    /// Where this resolver reports progress.
    pub(crate) fn reporter(&self) -> &Reporter {
        &self.reporter
    }

    /// Forgets what this process resolved (after images were removed behind its back).
    pub(crate) fn forget(&self, spec: &ImageSpec) {
        lock(&self.resolved).remove(spec);
    }

    pub(crate) async fn resolve(&self, spec: &ImageSpec) -> Result<ResolvedImage> {
        self.resolve_reporting(spec, &self.reporter).await
    }

    /// [`ImageResolver::resolve`], reporting the build's progress to
    /// `reporter` (a caller's own log) instead of the client's.
    pub(crate) async fn resolve_reporting(
        &self,
        spec: &ImageSpec,
        reporter: &Reporter,
    ) -> Result<ResolvedImage> {
        let started = Instant::now();
        if let Some(hit) = lock(&self.resolved).get(spec) {
            return Ok(ResolvedImage {
                source: ImageSource::Cached,
                elapsed: started.elapsed(),
                ..hit.clone()
            });
        }
        spec.validate()?;
        let (reference, id, source) = match &spec.prebuilt {
            Some(reference) => {
                let (id, source) = self.ensure_present(reference, reporter).await?;
                (reference.clone(), id, source)
            }
            None => self.build_spec(spec, reporter).await?,
        };
        let resolved = ResolvedImage {
            reference,
            id,
            source,
            elapsed: started.elapsed(),
        };
        lock(&self.resolved).insert(spec.clone(), resolved.clone());
        Ok(resolved)
    }

    async fn build_spec(
        &self,
        spec: &ImageSpec,
        reporter: &Reporter,
    ) -> Result<(String, String, ImageSource)> {
        // The base first: its tag says what it is made of, and the image's
        // tag follows from it.
        let base = match &spec.base_image {
            None => base::ensure_base(&self.engine, &spec.python_version, reporter).await?,
            Some(reference) => reference.clone(),
        };
        let plan = spec.plan_on(&base)?;
        if let Some(info) = self.engine.inspect_image(&plan.tag).await? {
            return Ok((plan.tag, info.id, ImageSource::Cached));
        }
        let flight = {
            let key = (self.engine.endpoint().to_string(), plan.tag.clone());
            lock(&FLIGHTS).entry(key).or_default().clone()
        };
        let _turn = flight.lock().await;
        // Whoever held the lock before us may have built it.
        if let Some(info) = self.engine.inspect_image(&plan.tag).await? {
            return Ok((plan.tag, info.id, ImageSource::Cached));
        }
        if let Some(reference) = &spec.base_image {
            self.ensure_present(reference, reporter).await?;
        }
        let extra = HashMap::from([(labels::SPEC_HASH.to_string(), plan.hash.clone())]);
        let dockerfile = format!("{}{}", plan.dockerfile, label_instruction("image", &extra));
        let mut files = vec![TarFile::new("Dockerfile", dockerfile)];
        if let Some(ca) = &plan.ca_bundle {
            files.push(TarFile::new("dockhand-ca.pem", ca.clone()));
        }
        for file in &spec.context_files {
            files.push(TarFile::new(file.name.clone(), file.bytes.clone()));
        }
        let archives = checked_archives(spec).await?;
        let context = archive::context_with_files(&files, &archives).await?;
        reporter.report(
            &plan.tag,
            Stage::Build,
            format!("building from {}", plan.base),
        );
        let started = Instant::now();
        run_build(&self.engine, &plan.tag, context, reporter).await?;
        let info =
            self.engine
                .inspect_image(&plan.tag)
                .await?
                .ok_or_else(|| Error::ImageBuild {
                    tag: plan.tag.clone(),
                    message: "the build reported success but the image is missing".into(),
                    log_tail: String::new(),
                })?;
        reporter.report(
            &plan.tag,
            Stage::Ready,
            format!("built in {:.1}s", started.elapsed().as_secs_f64()),
        );
        Ok((plan.tag, info.id, ImageSource::Built))
    }

    /// A named image: local, or pulled.
    async fn ensure_present(
        &self,
        reference: &str,
        reporter: &Reporter,
    ) -> Result<(String, ImageSource)> {
        if let Some(info) = self.engine.inspect_image(reference).await? {
            return Ok((info.id, ImageSource::Cached));
        }
        reporter.report(reference, Stage::Pull, format!("pulling {reference}"));
        self.engine
            .pull_image(reference, PULL_TIMEOUT)
            .await
            .map_err(|e| Error::Docker {
                operation: "pull image",
                message: format!(
                    "image {reference} is not present locally and could not be pulled: {e}"
                ),
                status: match e {
                    Error::Docker { status, .. } => status,
                    _ => None,
                },
            })?;
        let info = self
            .engine
            .inspect_image(reference)
            .await?
            .ok_or_else(|| Error::Docker {
                operation: "pull image",
                message: format!("{reference} was pulled but is not listed"),
                status: None,
            })?;
        Ok((info.id, ImageSource::Pulled))
    }
}

/// The archives a spec copies from, each once, as `(context name, path)`,
/// after checking each still holds what the spec's tag names: a file
/// changed since would give an image its tag does not describe.
async fn checked_archives(spec: &ImageSpec) -> Result<Vec<(String, std::path::PathBuf)>> {
    let mut out: Vec<(String, std::path::PathBuf)> = Vec::new();
    for step in &spec.steps {
        let super::BuildStep::Copy(copy) = step else {
            continue;
        };
        let name = copy.context_name();
        if out.iter().any(|(n, _)| *n == name) {
            continue;
        }
        let path = copy.archive().to_path_buf();
        let read = path.clone();
        let digest = tokio::task::spawn_blocking(move || super::step::file_digest(&read))
            .await
            .map_err(|e| Error::io("hashing an archive", std::io::Error::other(e)))??;
        if digest != copy.digest() {
            return Err(Error::spec(
                "image spec",
                format!(
                    "the archive {} changed after it was added to the spec",
                    path.display()
                ),
            ));
        }
        out.push((name, path));
    }
    Ok(out)
}
