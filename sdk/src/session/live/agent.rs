//! The session agent a container runs: dockhand's static program
//! (`sdk/images/agent`), so the image needs no interpreter and no C library.
//! The SDK carries it built for its own platform; for a daemon of another
//! platform (or an SDK built without it) it is compiled once per machine in
//! an image of its own (`crate::image::agent`) and read from there. A
//! cluster's pods take it from that image through an init container.

use super::HELPERS_DIR;
use crate::archive::TarFile;
use crate::engine::Engine;
use crate::error::Result;

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
        Ok(AgentProgram {
            binary: crate::image::agent::binary(engine).await?,
        })
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
        crate::image::agent::ensure(self.engine()?, self.images()?.reporter()).await
    }
}

/// The agent's path in a Docker container's helpers' directory.
pub(crate) fn static_path() -> String {
    format!("{HELPERS_DIR}/{STATIC_NAME}")
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
        assert_eq!(
            install_args(&pod_agent_path()),
            ["--install-to", "/.dockhand-agent/session-agent"]
        );
    }
}
