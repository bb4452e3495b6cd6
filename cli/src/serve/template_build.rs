//! Running one template build: the base it names resolved to an image, its
//! steps added to an [`ImageSpec`] on that image, the image built by the
//! daemon with each log line put in the build's log (which the SDKs poll
//! and print as they print E2B's), under a deadline.

use std::sync::Arc;
use std::time::Duration;

use dockhand::ImageSpec;

use super::config::TemplateKind;
use super::template_spec::{self, Base, BuildRequest, Refusal};
use super::templates::{Built, Job, Status};
use super::Server;

/// The longest a build may take, waiting for a turn included.
const BUILD_DEADLINE: Duration = Duration::from_secs(3600);

/// Runs `job` (a build of `built`) to its end; its status says how it went.
pub async fn run(server: Arc<Server>, job: Arc<Job>, request: BuildRequest, built: Built) {
    let outcome =
        tokio::time::timeout(BUILD_DEADLINE, build(&server, &job, &request, &built)).await;
    let outcome = outcome.unwrap_or_else(|_| {
        Err(Refusal {
            step: None,
            message: format!(
                "the build took longer than {} minutes and was stopped",
                BUILD_DEADLINE.as_secs() / 60
            ),
        })
    });
    match outcome {
        Ok((base, image)) => {
            job.log(
                "info",
                format!("Template {} is ready ({image})", built.name),
            );
            // The template may have been deleted meanwhile: then the image goes.
            if server.built.owned(built.tenant, &built.id).is_none() {
                super::templates::remove_image(&server, &image).await;
                job.fail(Refusal {
                    step: None,
                    message: "the template was deleted while it was built".into(),
                });
                return forget_uploads(&server, &built, &job);
            }
            let done = Built {
                base,
                image: Some(image),
                start_cmd: request.start_cmd.clone(),
                ready_cmd: request.ready_cmd.clone(),
                updated: chrono::Utc::now(),
                build_id: job.id.clone(),
                ..built.clone()
            };
            if let Some(old) = server.built.finished(&server, done) {
                super::templates::remove_image(&server, &old).await;
            }
            job.set(Status::Ready);
        }
        Err(refusal) => job.fail(refusal),
    }
    forget_uploads(&server, &built, &job);
}

/// A build's uploads go when it ends, unless another build of the same
/// template still needs them.
fn forget_uploads(server: &Server, built: &Built, job: &Job) {
    if !server.built.building(&built.id, &job.id) {
        server.built.uploads.forget(&built.id);
    }
}

/// Builds; gives the server template sandboxes start as and the image.
async fn build(
    server: &Server,
    job: &Arc<Job>,
    request: &BuildRequest,
    built: &Built,
) -> Result<(String, String), Refusal> {
    let refuse = |step: Option<&str>, message: String| Refusal {
        step: step.map(str::to_string),
        message,
    };
    let _turn = server
        .built
        .slots
        .acquire()
        .await
        .map_err(|_| refuse(None, "the server is shutting down".into()))?;
    job.set(Status::Building);
    let (kind, base_image) = base(server, job, built, &template_spec::base_of(request)?).await?;
    let spec = ImageSpec::default()
        .base_image(base_image)
        .trust_host_certificates()
        .run(template_spec::E2B_USER_SETUP);
    let uploaded: std::collections::HashMap<String, std::path::PathBuf> = request
        .steps
        .iter()
        .filter_map(|s| s.files_hash.as_deref())
        .filter_map(|h| Some((h.to_string(), server.built.uploads.path(&built.id, h)?)))
        .collect();
    let steps = request.steps.clone();
    // Archives are hashed as they are added: not on the async threads.
    let spec = tokio::task::spawn_blocking(move || {
        template_spec::with_steps(spec, &steps, |hash| uploaded.get(hash).cloned())
    })
    .await
    .map_err(|e| refuse(None, format!("reading the uploaded files: {e}")))??;
    let spec = if template_spec::needs_python(server.templates.get(&kind).map(|t| &t.kind)) {
        spec.run(template_spec::NEEDS_PYTHON)
    } else {
        spec
    };
    job.log("info", format!("Building on {}", base_label(request)));
    let image = resolve_logged(server, job, &spec)
        .await
        .map_err(|e| refuse(None, format!("the build failed: {e}")))?;
    Ok((kind, image))
}

fn base_label(request: &BuildRequest) -> String {
    match (&request.from_template, &request.from_image) {
        (Some(t), _) => format!("template {t}"),
        (None, Some(i)) => format!("image {i}"),
        (None, None) => "the base template".into(),
    }
}

/// The server template sandboxes start as, and the image the build starts
/// from: a template's (the server's, or one the key built), or an image.
async fn base(
    server: &Server,
    job: &Arc<Job>,
    built: &Built,
    base: &Base,
) -> Result<(String, String), Refusal> {
    let at_base = |message: String| Refusal {
        step: Some("base".into()),
        message,
    };
    match base {
        Base::Image(image) => Ok((super::config::BASE.to_string(), image.clone())),
        Base::Template(name) => {
            if let Some(own) = server.built.owned(built.tenant, name) {
                let image = own.image.ok_or_else(|| {
                    at_base(format!(
                        "template {name} has no finished build to start from"
                    ))
                })?;
                return Ok((own.base, image));
            }
            let Some(template) = server.templates.get(name) else {
                return Err(at_base(format!(
                    "template {name} is neither one of the server's nor one this key built"
                )));
            };
            let spec = match &template.kind {
                TemplateKind::Kernel(config) => config.container_image(),
                TemplateKind::Session(config) => config.image_spec().clone(),
            };
            job.log("info", format!("Preparing the image of template {name}"));
            let image = resolve_logged(server, job, &spec)
                .await
                .map_err(|e| at_base(format!("preparing template {name}: {e}")))?;
            Ok((name.clone(), image))
        }
    }
}

/// Builds (or finds) `spec`'s image, its build log going to the job's.
async fn resolve_logged(
    server: &Server,
    job: &Arc<Job>,
    spec: &ImageSpec,
) -> dockhand::Result<String> {
    let log = job.clone();
    let image = server
        .client
        .resolve_image_with_progress(spec, move |p| log.log("info", p.message.clone()))
        .await?;
    Ok(image.reference)
}
