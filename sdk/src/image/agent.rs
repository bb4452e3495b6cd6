//! The session agent's image: dockhand's static agent (`sdk/images/agent`)
//! alone in an image `FROM scratch`, its entrypoint the agent. It is how the
//! agent reaches a daemon of another platform than the SDK's (compiled
//! there once per machine, then read out) and a cluster's session pods (an
//! init container runs it as `--install-to PATH`). The tag is a hash of the
//! recipe, so each version is made once per machine.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use futures::StreamExt;

use super::crate_build::CrateBuild;
use super::prebuilt::{Prebuilt, AGENT as PREBUILT};
use super::program::ProgramImage;
use super::program::Recipes;
use crate::engine::{ContainerSpec, Engine};
use crate::error::{Error, Result};
use crate::progress::Reporter;

/// Set (to anything) to take the agent from its image even where the SDK
/// carries it, as on a daemon of another platform: how that path is tested
/// here, and a check that the image serves.
pub const FROM_IMAGE_ENV: &str = "DOCKHAND_AGENT_FROM_IMAGE";

/// The agent crate's files, by path inside the crate.
const SOURCES: [(&str, &str); 12] = [
    (
        "Cargo.toml",
        include_str!("../../images/agent/Cargo.toml.in"),
    ),
    ("Cargo.lock", include_str!("../../images/agent/Cargo.lock")),
    (
        "src/main.rs",
        include_str!("../../images/agent/src/main.rs"),
    ),
    (
        "src/commands.rs",
        include_str!("../../images/agent/src/commands.rs"),
    ),
    (
        "src/files.rs",
        include_str!("../../images/agent/src/files.rs"),
    ),
    (
        "src/paths.rs",
        include_str!("../../images/agent/src/paths.rs"),
    ),
    (
        "src/pids.rs",
        include_str!("../../images/agent/src/pids.rs"),
    ),
    (
        "src/ports.rs",
        include_str!("../../images/agent/src/ports.rs"),
    ),
    (
        "src/reply.rs",
        include_str!("../../images/agent/src/reply.rs"),
    ),
    ("src/sys.rs", include_str!("../../images/agent/src/sys.rs")),
    (
        "src/testing.rs",
        include_str!("../../images/agent/src/testing.rs"),
    ),
    (
        "src/watch.rs",
        include_str!("../../images/agent/src/watch.rs"),
    ),
];

/// Where the program lives in the image that compiles it.
const COMPILED_AT: &str = "/opt/dockhand/agent/dockhand-agent";
/// Where it lives in the agent's image (its only file).
const PROGRAM: &str = "/dockhand-agent";
/// Repository of the agent's images; the tag is the recipe's hash.
const REPOSITORY: &str = "dockhand/agent";

fn build() -> CrateBuild<'static> {
    CrateBuild {
        sources: &SOURCES,
        binary: "dockhand-agent",
        install_to: COMPILED_AT,
        static_link: true,
    }
}

/// The agent alone in an image: the SDK's binary copied in, or the program
/// compiled on dockhand's base.
fn recipe(prebuilt: Option<&Prebuilt>) -> ProgramImage {
    ProgramImage::alone(REPOSITORY, "agent-image", &build(), PROGRAM, prebuilt)
}

static RECIPES: Recipes = Recipes::new(PREBUILT, recipe);

/// The agent image's reference as this SDK makes it for its own platform:
/// what a cluster's pods pull unless told another.
#[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
pub(crate) fn default_image() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| RECIPES.default_recipe().tag())
}

/// Finds the agent's image for `engine`'s daemon, or makes it (once per
/// machine); returns its reference.
pub(crate) async fn ensure(engine: &Engine, reporter: &Reporter) -> Result<String> {
    RECIPES
        .for_engine(engine)
        .await?
        .ensure(engine, reporter)
        .await
}

/// The agent binary for containers of `engine`'s daemon: the SDK's own
/// where it runs there, else read from the agent's image (once per
/// platform and process).
pub(crate) async fn binary(engine: &Engine) -> Result<&'static [u8]> {
    let platform = engine.platform().await?;
    let from_image = std::env::var_os(FROM_IMAGE_ENV).is_some();
    if let Some(binary) = PREBUILT
        .filter(|p| p.platform == platform && !from_image)
        .and_then(unpacked)
    {
        return Ok(binary);
    }
    // Two sessions starting together may both read it; the first is kept.
    static READ: Mutex<BTreeMap<String, &'static [u8]>> = Mutex::new(BTreeMap::new());
    let known = READ
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&platform)
        .copied();
    if let Some(binary) = known {
        return Ok(binary);
    }
    let image = ensure(engine, &Reporter::default()).await?;
    let binary = read_program(engine, &image).await?;
    let mut read = READ.lock().unwrap_or_else(|e| e.into_inner());
    // Leaked once per platform, as the prebuilt one lives for the process.
    Ok(*read
        .entry(platform)
        .or_insert_with(|| Box::leak(binary.into_boxed_slice())))
}

/// The prebuilt binary, unpacked once; `None` if it cannot be (then it is
/// compiled in an image, as for another platform).
fn unpacked(prebuilt: Prebuilt) -> Option<&'static [u8]> {
    static BINARY: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    BINARY
        .get_or_init(|| match prebuilt.unpack() {
            Ok(binary) => Some(binary),
            Err(e) => {
                tracing::warn!(error = %e, "the static session agent could not be unpacked");
                None
            }
        })
        .as_deref()
}

/// The program file of the agent's image `image`, read from a container
/// made of it and never started.
async fn read_program(engine: &Engine, image: &str) -> Result<Vec<u8>> {
    let spec = ContainerSpec {
        image: image.to_string(),
        cmd: vec![PROGRAM.to_string()],
        kind: "agent-read",
        ..Default::default()
    };
    let container = engine.create_container(&spec).await?;
    let read = async {
        let Some(mut stream) = engine.download_stream(container.id(), PROGRAM).await? else {
            return Err(missing(image));
        };
        let mut tar = Vec::new();
        while let Some(chunk) = stream.next().await {
            tar.extend_from_slice(&chunk?);
        }
        let mut archive = tar::Archive::new(tar.as_slice());
        let entries = archive
            .entries()
            .map_err(|e| Error::io("reading the agent's archive", e))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| Error::io("reading the agent's archive", e))?;
            if entry.header().entry_type().is_file() {
                let mut binary = Vec::new();
                std::io::Read::read_to_end(&mut entry, &mut binary)
                    .map_err(|e| Error::io("reading the agent's archive", e))?;
                return Ok(binary);
            }
        }
        Err(missing(image))
    }
    .await;
    if let Err(e) = container.remove().await {
        tracing::warn!(error = %e, "removing the container the agent was read from");
    }
    read
}

fn missing(image: &str) -> Error {
    Error::Docker {
        operation: "read the session agent",
        message: format!("the image {image} holds no {PROGRAM}"),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CI builds the static agent: sessions there take it from the SDK.
    #[test]
    fn ci_builds_carry_the_static_agent() {
        if std::env::var_os("CI").is_none() {
            return;
        }
        let binary = PREBUILT
            .and_then(unpacked)
            .expect("the static agent is embedded");
        assert_eq!(&binary[..4], b"\x7fELF");
    }

    #[test]
    fn the_agent_image_holds_the_program_alone() {
        let text = RECIPES.compiled().dockerfile("dockhand/image:abc");
        assert!(
            text.contains(&format!(
                "COPY --from=dockhand/image:abc {COMPILED_AT} {PROGRAM}"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!("ENTRYPOINT [\"{PROGRAM}\"]")),
            "{text}"
        );
        let file = build().context_file();
        assert!(build().command(&file.name).contains("+crt-static"));
        let found = super::super::crate_build::unpack_sources(&file.bytes);
        for (path, text) in SOURCES {
            assert_eq!(found.get(path).map(String::as_str), Some(text), "{path}");
        }
        assert!(default_image().starts_with("dockhand/agent:"));
    }
}
