//! The session agent a container runs: dockhand's static program
//! (`sdk/images/agent`), so the image needs no interpreter and no C library.
//! The SDK carries it built for its own platform; for a daemon of another
//! platform (or an SDK built without it) it is compiled once per machine in
//! an image of its own (`dockhand/agent`) and read from there. A cluster's
//! pods take it from that image through an init container.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use futures::StreamExt;

use super::HELPERS_DIR;
use crate::archive::TarFile;
use crate::engine::{ContainerSpec, Engine};
use crate::error::{Error, Result};
use crate::image::crate_build::CrateBuild;
use crate::image::prebuilt::{Prebuilt, Recipes, AGENT as PREBUILT};
use crate::image::program::ProgramImage;
use crate::progress::Reporter;

/// Set (to anything) to take the agent from its image even where the SDK
/// carries it, as on a daemon of another platform: how that path is tested
/// here, and a check that the image serves.
pub const FROM_IMAGE_ENV: &str = "DOCKHAND_AGENT_FROM_IMAGE";

/// The agent's file name in the helpers' directory.
const STATIC_NAME: &str = "session-agent";

/// The program a session's container runs as its first process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AgentProgram {
    /// The static binary, read once per process.
    binary: &'static [u8],
}

impl AgentProgram {
    /// The agent for containers of `engine`'s daemon.
    pub(crate) async fn for_engine(engine: &Engine) -> Result<AgentProgram> {
        let platform = engine.platform().await?;
        let from_image = std::env::var_os(FROM_IMAGE_ENV).is_some();
        let binary = match PREBUILT
            .filter(|p| p.platform == platform && !from_image)
            .and_then(unpacked)
        {
            Some(binary) => binary,
            None => compiled_for(engine, &platform).await?,
        };
        Ok(AgentProgram { binary })
    }

    /// The container's command.
    pub(crate) fn command(&self) -> Vec<String> {
        vec![static_path()]
    }

    /// The agent as a file of the helpers' directory `dir` in an archive:
    /// root's, the session's user may run it and change nothing.
    pub(crate) fn file(&self, dir: &str) -> TarFile {
        let mut file = TarFile::new(format!("{dir}/{STATIC_NAME}"), self.binary.to_vec());
        file.mode = 0o755;
        file
    }

    /// An agent of `binary`'s bytes, for tests of what carries it.
    #[cfg(test)]
    pub(crate) fn fake(binary: &'static [u8]) -> AgentProgram {
        AgentProgram { binary }
    }

    /// What the image must have, said when the agent does not start.
    pub(crate) fn needs(&self) -> &'static str {
        "is /bin/sh in the image?"
    }
}

/// The agent crate's files, by path inside the crate.
const SOURCES: [(&str, &str); 12] = [
    (
        "Cargo.toml",
        include_str!("../../../images/agent/Cargo.toml.in"),
    ),
    (
        "Cargo.lock",
        include_str!("../../../images/agent/Cargo.lock"),
    ),
    (
        "src/main.rs",
        include_str!("../../../images/agent/src/main.rs"),
    ),
    (
        "src/commands.rs",
        include_str!("../../../images/agent/src/commands.rs"),
    ),
    (
        "src/files.rs",
        include_str!("../../../images/agent/src/files.rs"),
    ),
    (
        "src/paths.rs",
        include_str!("../../../images/agent/src/paths.rs"),
    ),
    (
        "src/pids.rs",
        include_str!("../../../images/agent/src/pids.rs"),
    ),
    (
        "src/ports.rs",
        include_str!("../../../images/agent/src/ports.rs"),
    ),
    (
        "src/reply.rs",
        include_str!("../../../images/agent/src/reply.rs"),
    ),
    (
        "src/sys.rs",
        include_str!("../../../images/agent/src/sys.rs"),
    ),
    (
        "src/testing.rs",
        include_str!("../../../images/agent/src/testing.rs"),
    ),
    (
        "src/watch.rs",
        include_str!("../../../images/agent/src/watch.rs"),
    ),
];

/// Where the program lives in the image that compiles it.
const COMPILED_AT: &str = "/opt/dockhand/agent/dockhand-agent";
/// Where it lives in the agent's image (its only file).
const PROGRAM: &str = "/dockhand-agent";
/// Repository of the agent's images; the tag is the recipe's hash.
pub(crate) const REPOSITORY: &str = "dockhand/agent";

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

/// The agent image's reference as this SDK makes it for its own platform
/// (or, built without the agent, from the sources): what a cluster's pods
/// pull unless told another ([`crate::k8s::KubeOptions::agent_image`]).
#[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
pub(crate) fn default_image() -> String {
    RECIPES.default_recipe().tag()
}

/// Where a cluster's pod keeps the agent: a volume its init container
/// fills from the agent's image.
#[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
pub(crate) const POD_AGENT_DIR: &str = "/.dockhand-agent";
/// The agent's path in [`POD_AGENT_DIR`].
#[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
pub(crate) fn pod_agent_path() -> String {
    format!("{POD_AGENT_DIR}/{STATIC_NAME}")
}

/// The arguments that make the agent's image copy the agent to `path`
/// and exit (its entrypoint is the agent).
#[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
pub(crate) fn install_args(path: &str) -> Vec<String> {
    vec!["--install-to".into(), path.into()]
}

impl crate::Client {
    /// The session agent's image on this Docker daemon, made if missing
    /// (from the SDK's own binary, or compiled once per machine): push it
    /// where a cluster's nodes pull from, and name it with
    /// [`KubeConfig::agent_image`](crate::KubeConfig) if not under its own name.
    ///
    /// ```no_run
    /// # async fn demo() -> dockhand::Result<()> {
    /// let docker = dockhand::Client::connect().await?;
    /// let image = docker.session_agent_image().await?;
    /// println!("docker tag {image} registry.example/dockhand/agent:1");
    /// # Ok(()) }
    /// ```
    pub async fn session_agent_image(&self) -> Result<String> {
        let engine = self.engine()?;
        RECIPES
            .for_engine(engine)
            .await?
            .ensure(engine, self.images()?.reporter())
            .await
    }
}

/// The agent for `platform`, from its image (compiled there once per
/// machine; read out once per process).
async fn compiled_for(engine: &Engine, platform: &str) -> Result<&'static [u8]> {
    static READ: Mutex<Option<HashMap<String, &'static [u8]>>> = Mutex::new(None);
    // One process reads each platform's binary once; two sessions starting
    // together may both read it, and keep the first.
    let known = |platform: &str| {
        READ.lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|m| m.get(platform).copied())
    };
    if let Some(binary) = known(platform) {
        return Ok(binary);
    }
    let image = RECIPES
        .for_engine(engine)
        .await?
        .ensure(engine, &Reporter::default())
        .await?;
    let binary = read_program(engine, &image).await?;
    let mut read = READ.lock().unwrap_or_else(|e| e.into_inner());
    // Leaked once per platform, as the prebuilt one lives for the process.
    let kept = *read
        .get_or_insert_with(HashMap::new)
        .entry(platform.to_string())
        .or_insert_with(|| Box::leak(binary.into_boxed_slice()));
    Ok(kept)
}

/// The program file of the agent's image `image`, read from a container
/// made of it and never started.
pub(crate) async fn read_program(engine: &Engine, image: &str) -> Result<Vec<u8>> {
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

/// The agent's path in a Docker container's helpers' directory.
pub(crate) fn static_path() -> String {
    format!("{HELPERS_DIR}/{STATIC_NAME}")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_is_run_from_the_helpers_directory() {
        let fake = AgentProgram::fake(b"\x7fELF");
        assert_eq!(fake.command(), vec![static_path()]);
        let file = fake.file(".dockhand");
        assert_eq!(
            (file.path.as_str(), file.mode),
            (".dockhand/session-agent", 0o755)
        );
    }

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
    fn the_agent_image_holds_the_program_alone_and_installs_it() {
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
        let found = crate::image::crate_build::unpack_sources(&file.bytes);
        for (path, text) in SOURCES {
            assert_eq!(found.get(path).map(String::as_str), Some(text), "{path}");
        }
        assert!(default_image().starts_with("dockhand/agent:"));
        assert_eq!(
            install_args(&pod_agent_path()),
            ["--install-to", "/.dockhand-agent/session-agent"]
        );
    }
}
