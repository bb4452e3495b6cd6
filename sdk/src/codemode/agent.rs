//! An agent loop: generate code, execute it, feed errors back, try again.

use std::future::Future;

use serde_json::Value;

use super::config::Execution;
use super::host::CodeHost;
use super::toolset::Toolset;
use crate::error::{Error, Result};

/// Writes code for a task; any LLM client can implement it.
pub trait CodeGenerator {
    /// Returns Python code for `task`. `feedback` holds the error of the
    /// previous attempt (already phrased for a model), if there was one.
    fn generate(
        &mut self,
        task: &str,
        feedback: Option<&str>,
    ) -> impl Future<Output = Result<String>> + Send;
}

/// One round of the loop.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AgentTurn {
    /// The code the generator wrote.
    pub code: String,
    /// The feedback it produced, for a failed round.
    pub error: Option<String>,
}

/// What the loop ended with.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AgentOutcome {
    /// The successful execution.
    pub execution: Execution,
    /// Every round, the successful one last.
    pub turns: Vec<AgentTurn>,
}

/// Generates code, runs it, and on a code error (validation, exception, tool,
/// timeout, limits) gives the error back to the generator, up to
/// `max_retries` times after the first attempt. Other errors (Docker, I/O)
/// end the loop at once.
pub async fn run_agent<G: CodeGenerator>(
    host: &CodeHost,
    generator: &mut G,
    task: &str,
    inputs: Value,
    tools: &Toolset,
    max_retries: u32,
) -> Result<AgentOutcome> {
    let mut turns: Vec<AgentTurn> = Vec::new();
    let mut feedback: Option<String> = None;
    for _ in 0..=max_retries {
        let code = generator.generate(task, feedback.as_deref()).await?;
        match host.execute(&code, &inputs, tools).await {
            Ok(execution) => {
                turns.push(AgentTurn { code, error: None });
                return Ok(AgentOutcome { execution, turns });
            }
            Err(Error::Code(failure)) => {
                let text = failure.feedback();
                turns.push(AgentTurn {
                    code,
                    error: Some(text.clone()),
                });
                feedback = Some(text);
                if turns.len() as u32 > max_retries {
                    return Err(Error::Code(failure));
                }
            }
            Err(other) => return Err(other),
        }
    }
    Err(Error::spec("agent", "no attempt was made"))
}
