//! An E2B template build request (`TemplateBuildStartV2`: a base, steps,
//! start and ready commands) read as a dockhand [`ImageSpec`]. Pure but for
//! hashing the uploaded archives a `COPY` names.

use std::path::PathBuf;

use dockhand::image::ArchiveCopy;
use dockhand::ImageSpec;
use serde::Deserialize;
use serde_json::Value;

use super::config::{BASE, CODE_INTERPRETER};

/// The body of `POST /v2/templates/{id}/builds/{build}`.
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct BuildRequest {
    pub from_image: Option<String>,
    pub from_template: Option<String>,
    pub from_image_registry: Option<Value>,
    pub force: bool,
    pub steps: Vec<Step>,
    pub start_cmd: Option<String>,
    pub ready_cmd: Option<String>,
}

/// One instruction of the SDK's builder.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct Step {
    #[serde(rename = "type")]
    pub kind: String,
    pub args: Vec<String>,
    pub files_hash: Option<String>,
}

/// What a build starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Base {
    /// A template by name: the server's, or one the key built.
    Template(String),
    /// An image on the daemon (pulled if a registry answers).
    Image(String),
}

/// A refusal, with the step it is about as the SDKs name steps (`base`,
/// or the 1-based index of the instruction) so they point at its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub step: Option<String>,
    pub message: String,
}

impl Refusal {
    fn at(step: impl Into<String>, message: impl Into<String>) -> Refusal {
        Refusal {
            step: Some(step.into()),
            message: message.into(),
        }
    }
}

/// The E2B images whose part here is played by the server's templates.
const E2B_BASE_IMAGE: &str = "e2bdev/base";
const E2B_INTERPRETER_IMAGE: &str = "e2bdev/code-interpreter";

/// The base a request names.
pub fn base_of(request: &BuildRequest) -> Result<Base, Refusal> {
    if request.from_image_registry.is_some() {
        return Err(Refusal::at(
            "base",
            "dockhand serve does not sign in to registries: load the image into the daemon (docker load) and name it in from_image",
        ));
    }
    let is = |image: &str, name: &str| image == name || image.starts_with(&format!("{name}:"));
    match (&request.from_template, &request.from_image) {
        (Some(template), _) => Ok(Base::Template(template.clone())),
        (None, Some(image)) if is(image, E2B_BASE_IMAGE) => Ok(Base::Template(BASE.into())),
        (None, Some(image)) if is(image, E2B_INTERPRETER_IMAGE) => {
            Ok(Base::Template(CODE_INTERPRETER.into()))
        }
        (None, Some(image)) => Ok(Base::Image(image.clone())),
        (None, None) => Ok(Base::Template(BASE.into())),
    }
}

/// The steps added to `spec`, in order. `archive` gives the uploaded file
/// of a files hash (none if it was never uploaded). Hashes each archive:
/// call it off the async threads.
pub fn with_steps(
    mut spec: ImageSpec,
    steps: &[Step],
    archive: impl Fn(&str) -> Option<PathBuf>,
) -> Result<ImageSpec, Refusal> {
    for (index, step) in steps.iter().enumerate() {
        let at = (index + 1).to_string();
        let arg = |n: usize| step.args.get(n).map(String::as_str).unwrap_or_default();
        spec = match step.kind.as_str() {
            "RUN" if arg(1).is_empty() => spec.run(arg(0)),
            "RUN" => spec.run_as(arg(1), arg(0)),
            "ENV" => {
                if step.args.len() % 2 != 0 {
                    return Err(Refusal::at(at, "ENV takes name and value pairs"));
                }
                step.args
                    .chunks(2)
                    .fold(spec, |spec, pair| spec.env(&pair[0], &pair[1]))
            }
            "WORKDIR" => spec.workdir(arg(0)),
            "USER" => spec.user(arg(0)),
            "COPY" => {
                let hash = step.files_hash.as_deref().unwrap_or_default();
                let Some(path) = archive(hash) else {
                    return Err(Refusal::at(
                        at,
                        format!("the files of COPY {} were not uploaded", arg(0)),
                    ));
                };
                let mut copy = ArchiveCopy::new(path, arg(0), arg(1))
                    .map_err(|e| Refusal::at(at.clone(), e.to_string()))?;
                if !arg(2).is_empty() {
                    copy = copy.owner(arg(2));
                }
                if !arg(3).is_empty() {
                    let mode = u32::from_str_radix(arg(3), 8).map_err(|_| {
                        Refusal::at(at.clone(), format!("mode `{}` is not octal", arg(3)))
                    })?;
                    copy = copy.mode(mode);
                }
                spec.copy_archive(copy)
            }
            other => {
                return Err(Refusal::at(
                    at,
                    format!("a `{other}` step is not one dockhand serve builds"),
                ))
            }
        };
        // Checked step by step, so a refusal names its step.
        spec.validate()
            .map_err(|e| Refusal::at(at.clone(), e.to_string()))?;
    }
    Ok(spec)
}

/// The account E2B's templates build and run as: a step may name it
/// (`set_user("user")`), so a base without one gets it first.
pub const E2B_USER_SETUP: &str =
    "id -u user >/dev/null 2>&1 || useradd --create-home --uid 1000 --shell /bin/bash user";

/// Checked last where the template's sandboxes run Python of dockhand's:
/// a code interpreter's kernel relay. (The session agent is a static
/// program: other templates need no interpreter.)
pub const NEEDS_PYTHON: &str = "command -v python3 >/dev/null || { echo 'this template needs python3 in the image (a code interpreter runs Jupyter kernels)' >&2; exit 1; }";

/// Whether sandboxes of a template of `kind` need python3 in the image.
pub fn needs_python(kind: Option<&super::config::TemplateKind>) -> bool {
    matches!(kind, Some(super::config::TemplateKind::Kernel(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(json: &str) -> BuildRequest {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn bases_map_to_the_servers_templates_or_images() {
        let base = |json: &str| base_of(&request(json));
        assert_eq!(base("{}"), Ok(Base::Template(BASE.into())));
        assert_eq!(
            base(r#"{"fromImage": "e2bdev/base:latest"}"#),
            Ok(Base::Template(BASE.into()))
        );
        assert_eq!(
            base(r#"{"fromImage": "e2bdev/code-interpreter"}"#),
            Ok(Base::Template(CODE_INTERPRETER.into()))
        );
        assert_eq!(
            base(r#"{"fromTemplate": "mine"}"#),
            Ok(Base::Template("mine".into()))
        );
        assert_eq!(
            base(r#"{"fromImage": "debian:bookworm"}"#),
            Ok(Base::Image("debian:bookworm".into()))
        );
        let refused = base(r#"{"fromImageRegistry": {"type": "registry"}}"#).unwrap_err();
        assert_eq!(refused.step.as_deref(), Some("base"));
    }

    #[test]
    fn steps_become_the_specs_steps_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let tar = dir.path().join("h.tar");
        std::fs::write(&tar, b"not checked here").unwrap();
        let steps: Vec<Step> = serde_json::from_str(
            r#"[
              {"type": "ENV", "args": ["A", "1", "B", "two words"]},
              {"type": "RUN", "args": ["pip install six", "root"]},
              {"type": "WORKDIR", "args": ["/app"]},
              {"type": "COPY", "args": ["app.py", "/app/", "user", "0755"], "filesHash": "h"},
              {"type": "RUN", "args": ["python3 app.py"]}
            ]"#,
        )
        .unwrap();
        let spec = with_steps(ImageSpec::default(), &steps, |h| {
            (h == "h").then(|| tar.clone())
        })
        .unwrap();
        let text = spec.render_dockerfile();
        let order = [
            "ENV A=\"1\"",
            "ENV B=\"two words\"",
            "USER root",
            "pip install six",
            "WORKDIR /app",
            "--chown=user [\"/app.py\", \"/app/\"]",
            "chmod 755 /app/app.py",
            "python3 app.py",
        ];
        let at: Vec<usize> = order
            .iter()
            .map(|s| text.find(s).unwrap_or_else(|| panic!("{s} in {text}")))
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{text}");
    }

    #[test]
    fn bad_steps_name_their_step() {
        let refused = |json: &str| {
            let steps: Vec<Step> = serde_json::from_str(json).unwrap();
            with_steps(ImageSpec::default(), &steps, |_| None).unwrap_err()
        };
        let r = refused(r#"[{"type": "RUN", "args": ["true"]}, {"type": "ENV", "args": ["A"]}]"#);
        assert_eq!(r.step.as_deref(), Some("2"));
        let r = refused(r#"[{"type": "COPY", "args": ["a", "/a"], "filesHash": "x"}]"#);
        assert!(r.message.contains("not uploaded"), "{r:?}");
        let r = refused(r#"[{"type": "ENV", "args": ["BAD NAME", "x"]}]"#);
        assert!(r.message.contains("variable name"), "{r:?}");
        let r = refused(r#"[{"type": "HEALTHCHECK", "args": []}]"#);
        assert!(r.message.contains("HEALTHCHECK"), "{r:?}");
    }
}
