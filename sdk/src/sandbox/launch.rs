//! Making the container of an attempt: the spec every container of a
//! sandbox shares, a cold one's extras, and handing a job to a warm one.

use super::attempt::{JobDelivery, Prepared};
use super::inputs::INLINE_JOB_ENV;
use super::preamble::{INPUTS_DIR, OUTPUTS_DIR};
use super::spec::Sandbox;
use crate::engine::{Attached, ContainerGuard, ContainerSpec, Engine, LogChunk};
use crate::error::{Error, Result};
use crate::settings::confine;
use crate::settings::SecretMount;
use crate::settings::SECRETS_DIR;

/// The container of a cold attempt: the command itself, the attempt number
/// and secrets in its environment.
pub(super) fn cold_spec(
    sandbox: &Sandbox,
    prepared: &Prepared,
    lease: Option<&crate::gateway::Lease>,
    number: u32,
) -> ContainerSpec {
    let rt = &sandbox.runtime;
    let (JobDelivery::Inline { command, .. } | JobDelivery::Upload { command, .. }) = &prepared.job;
    let mut spec = container_spec(sandbox, &prepared.image.reference, command.clone());
    spec.env.push(format!("DOCKHAND_ATTEMPT={number}"));
    if let JobDelivery::Inline { job, .. } = &prepared.job {
        spec.env.push(format!("{INLINE_JOB_ENV}={job}"));
    }
    for (s, (name, value)) in rt.secrets.iter().zip(&prepared.secrets) {
        if s.mount == SecretMount::Env {
            spec.env.push(format!("{name}={value}"));
        }
    }
    if prepared.secrets_tar.is_some() {
        spec.scratch_volumes.push(SECRETS_DIR.to_string());
    }
    if let Some(lease) = lease {
        lease.apply(&mut spec);
    }
    spec
}

/// What every container of `sandbox` is made with, cold or warm.
pub(crate) fn container_spec(sandbox: &Sandbox, image: &str, cmd: Vec<String>) -> ContainerSpec {
    let rt = &sandbox.runtime;
    let mut env = vec!["HOME=/tmp".to_string(), "PYTHONUNBUFFERED=1".to_string()];
    env.extend(rt.env.iter().map(|(k, v)| format!("{k}={v}")));
    let mut spec = ContainerSpec {
        image: image.to_string(),
        cmd,
        entrypoint: Some(Vec::new()),
        env,
        working_dir: Some("/tmp".into()),
        kind: "sandbox",
        extra_labels: [("dev.dockhand.sandbox".to_string(), sandbox.name.clone())].into(),
        scratch_volumes: vec![INPUTS_DIR.to_string(), OUTPUTS_DIR.to_string()],
        init: true,
        // Output is read raw through attach; a log would only cost disk.
        no_log: true,
        ..Default::default()
    };
    confine(&mut spec, &rt.resources, &rt.hardening, &rt.network);
    spec.runtime = rt.isolation.runtime_name().map(String::from);
    // No single file can outgrow what would be refused at collection
    // anyway, so a runaway writer stops inside instead of filling the disk.
    spec.max_file_bytes = Some(i64::try_from(rt.outputs_limit).unwrap_or(i64::MAX));
    spec
}

type OutputStream = std::pin::Pin<Box<dyn futures::Stream<Item = Result<LogChunk>> + Send>>;
type Stdin = std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>;

/// Gives a warm container its job: the attempt number on its stdin, which
/// starts it, with the inline job on the same line, or after uploading the
/// inputs (with the command to run). The stdin is kept open until the run
/// ends (the program itself reads an empty one).
pub(super) async fn hand_over(
    engine: &Engine,
    container: &ContainerGuard,
    attached: Attached,
    prepared: &Prepared,
    number: u32,
) -> Result<(OutputStream, Stdin)> {
    use tokio::io::AsyncWriteExt;
    // An inline job goes on the handover line itself; anything else is
    // uploaded first (see `inputs::inline_job`).
    let line = match &prepared.job {
        JobDelivery::Inline { job, .. } => format!("{number} {job}\n"),
        JobDelivery::Upload { tar, .. } => {
            tar.upload(engine, container.id(), INPUTS_DIR).await?;
            format!("{number}\n")
        }
    };
    let mut stdin = attached.input;
    let go = async {
        stdin.write_all(line.as_bytes()).await?;
        stdin.flush().await
    };
    go.await.map_err(|e| Error::Docker {
        operation: "hand a job to a warm container",
        message: e.to_string(),
        status: None,
    })?;
    Ok((attached.output, stdin))
}
