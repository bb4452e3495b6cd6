//! How an attempt ends, on either backend: the outputs archive read as it
//! streams, and the verdict from how the program ended.

use std::time::Instant;

use bytes::Bytes;
use futures::StreamExt;

use super::attempt::{Prepared, RunOutput};
use super::capture::CapturedText;
use super::outputs;
use super::spec::Sandbox;
use super::verdict::{verdict, Ended};
use crate::engine::ExitStatus;
use crate::error::{Error, Result};

/// An attempt's result from how its program ended, what it printed and
/// what it left in /var/outputs: on any backend, the same verdict.
pub(super) fn conclude(
    sandbox: &Sandbox,
    prepared: &Prepared,
    status: &ExitStatus,
    collected: outputs::Collected,
    (stdout, stderr): (CapturedText, CapturedText),
    started: Instant,
) -> Result<RunOutput> {
    verdict(&Ended {
        status,
        report: collected.status.as_ref(),
        stdout: &stdout.text,
        stderr: &stderr.text,
        runtime: &sandbox.runtime,
        program: &sandbox.program,
        secrets: &prepared.redactions,
    })?;
    let mut outputs = outputs::parse(collected, &sandbox.outputs)?;
    // A secret the program was given (or that a bound host echoed back)
    // leaves in its typed outputs no more than in its printed text.
    for value in outputs.values_mut() {
        super::value::redact_value(value, &prepared.redactions);
    }
    Ok(RunOutput {
        outputs,
        exit_code: status.code,
        stdout,
        stderr,
        duration: started.elapsed(),
        image: prepared.image.reference.clone(),
        cached: false,
        attempts: Vec::new(),
    })
}

/// Reads the outputs archive as it arrives, on a blocking thread: File and
/// Dir outputs are written to disk as they stream, never held in memory.
pub(super) async fn collect_streamed(
    stream: impl futures::Stream<Item = Result<Bytes>> + Send + Unpin + 'static,
    declared: &[super::spec::Param],
    limit: u64,
) -> Result<outputs::Collected> {
    let reader =
        tokio_util::io::StreamReader::new(stream.map(|chunk| chunk.map_err(std::io::Error::other)));
    let bridge = tokio_util::io::SyncIoBridge::new(reader);
    let declared = declared.to_vec();
    tokio::task::spawn_blocking(move || outputs::collect(bridge, &declared, limit))
        .await
        .map_err(|e| Error::Docker {
            operation: "collect outputs",
            message: e.to_string(),
            status: None,
        })?
}
