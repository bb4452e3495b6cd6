//! Which session agent a container runs: dockhand's static program
//! (`sdk/images/agent`) where the SDK carries one built for the daemon's
//! platform, so the image needs no interpreter; otherwise the Python agent
//! (`sdk/images/session`), which needs `python3` in the image.

use std::sync::OnceLock;

use super::HELPERS_DIR;
use crate::archive::TarFile;
use crate::engine::{ContainerSpec, Engine};
use crate::error::Result;
use crate::image::prebuilt::{Prebuilt, AGENT as PREBUILT};

/// Set to `python` to run the Python agent even where the static one would
/// serve (to compare them, or to fall back if the static one misbehaves).
pub const AGENT_ENV: &str = "DOCKHAND_SESSION_AGENT";

/// The static agent's file name in the helpers' directory.
const STATIC_NAME: &str = "session-agent";
/// The Python agent's file name in the helpers' directory.
const PYTHON_NAME: &str = "session-agent.py";

/// The program a session's container runs as its first process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AgentProgram {
    /// The static binary, unpacked once per process.
    Static(&'static [u8]),
    /// The Python agent, run by the image's `python3`.
    Python,
}

impl AgentProgram {
    /// The agent for containers of `engine`'s daemon; `DOCKHAND_SESSION_AGENT=python`
    /// ([`AGENT_ENV`]) chooses the Python agent wherever it runs.
    pub(crate) async fn for_engine(engine: &Engine) -> Result<AgentProgram> {
        if std::env::var(AGENT_ENV).is_ok_and(|v| v == "python") {
            return Ok(AgentProgram::Python);
        }
        let Some(prebuilt) = PREBUILT else {
            return Ok(AgentProgram::Python);
        };
        if engine.platform().await? != prebuilt.platform {
            return Ok(AgentProgram::Python);
        }
        Ok(unpacked(prebuilt).map_or(AgentProgram::Python, AgentProgram::Static))
    }

    /// The agent a container made with `spec` runs (a restored or forked
    /// container runs the one its checkpoint holds).
    pub(crate) fn of_spec(spec: &ContainerSpec) -> AgentProgram {
        match spec.cmd.first().map(String::as_str) {
            Some(first) if first == static_path() => PREBUILT
                .and_then(unpacked)
                .map_or(AgentProgram::Python, AgentProgram::Static),
            _ => AgentProgram::Python,
        }
    }

    /// The container's command.
    pub(crate) fn command(&self) -> Vec<String> {
        match self {
            AgentProgram::Static(_) => vec![static_path()],
            // Isolated (`-I`): a restarted or snapshotted session's agent
            // loads nothing its code wrote (no user site, no `PYTHON*`
            // variables).
            AgentProgram::Python => vec![
                "python3".into(),
                "-I".into(),
                "-u".into(),
                format!("{HELPERS_DIR}/{PYTHON_NAME}"),
            ],
        }
    }

    /// The agent as a file of the helpers' directory `dir` in an archive:
    /// root's, the session's user may run it and change nothing.
    pub(crate) fn file(&self, dir: &str) -> TarFile {
        match self {
            AgentProgram::Static(binary) => {
                let mut file = TarFile::new(format!("{dir}/{STATIC_NAME}"), binary.to_vec());
                file.mode = 0o755;
                file
            }
            AgentProgram::Python => {
                TarFile::new(format!("{dir}/{PYTHON_NAME}"), super::AGENT.as_bytes())
            }
        }
    }

    /// What the image must have for this agent, said when it does not start.
    pub(crate) fn needs(&self) -> &'static str {
        match self {
            AgentProgram::Static(_) => "is /bin/sh in the image?",
            AgentProgram::Python => "is python3 in the image?",
        }
    }
}

fn static_path() -> String {
    format!("{HELPERS_DIR}/{STATIC_NAME}")
}

/// The prebuilt binary, unpacked once; `None` if it cannot be (then the
/// Python agent serves).
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

/// Why a request only the static agent answers was refused: `what` it
/// cannot do, said by the Python agent (cluster pods, other platforms).
pub(crate) fn static_agent_only(what: &str) -> String {
    format!(
        "this session's agent {what} (it needs dockhand's static agent, which runs on Docker hosts of the SDK's platform)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_agent_is_run_from_the_helpers_directory() {
        let python = AgentProgram::Python;
        assert_eq!(python.command()[0], "python3");
        assert_eq!(python.file(".dockhand").path, ".dockhand/session-agent.py");
        let fake = AgentProgram::Static(b"\x7fELF");
        assert_eq!(fake.command(), vec![static_path()]);
        let file = fake.file(".dockhand");
        assert_eq!(
            (file.path.as_str(), file.mode),
            (".dockhand/session-agent", 0o755)
        );
        let spec = ContainerSpec {
            cmd: python.command(),
            ..Default::default()
        };
        assert_eq!(AgentProgram::of_spec(&spec), AgentProgram::Python);
    }

    /// CI builds the static agent: sessions there run it.
    #[test]
    fn ci_builds_carry_the_static_agent() {
        if std::env::var_os("CI").is_none() {
            return;
        }
        let binary = PREBUILT
            .and_then(unpacked)
            .expect("the static agent is embedded");
        assert_eq!(&binary[..4], b"\x7fELF");
        let spec = ContainerSpec {
            cmd: vec![static_path()],
            ..Default::default()
        };
        assert!(matches!(
            AgentProgram::of_spec(&spec),
            AgentProgram::Static(_)
        ));
    }
}
