//! The retries of a run: attempts in fresh containers until one succeeds
//! or the retries are spent, with the cache written on success.

use std::time::Instant;

use super::attempt::{Attempt, Prepared, RunOptions, RunOutput};
use super::cache;
use super::spec::Sandbox;
use crate::backend::{Pooled, Warm};
use crate::client::Client;
use crate::error::{Error, Result};

impl Client {
    /// Runs attempts until one succeeds or the retries are spent.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn attempts(
        &self,
        sandbox: &Sandbox,
        prepared: &mut Prepared,
        options: &RunOptions,
        pool: Option<&Pooled<Warm>>,
        key: Option<String>,
        store: std::sync::Arc<cache::Store>,
        started: Instant,
    ) -> Result<RunOutput> {
        let rt = &sandbox.runtime;
        let mut attempts = Vec::new();
        let mut reresolved = false;
        // A remade image costs an attempt but not a retry.
        let mut tries_left = rt.retries + 1;
        let mut number = 0;
        loop {
            number += 1;
            tries_left -= 1;
            let attempt_started = Instant::now();
            match super::launch::attempt(self, sandbox, prepared, number, options, pool).await {
                Ok(mut out) => {
                    attempts.push(Attempt {
                        number,
                        duration: attempt_started.elapsed(),
                        error: None,
                    });
                    out.attempts = attempts;
                    out.duration = started.elapsed();
                    let Some(key) = key else {
                        return Ok(out);
                    };
                    let writer = store.clone();
                    let (out, put) = crate::util::blocking("writing the output cache", move || {
                        let put = writer.put(&key, &out);
                        Ok((out, put))
                    })
                    .await?;
                    // A cache that cannot be written costs speed later, not this result.
                    if let Err(e) = put {
                        tracing::warn!(error = %e, "could not store outputs in the cache");
                    }
                    return Ok(out);
                }
                // The image was removed since this process resolved it: make it again, once.
                // (A create answers 404 only when its image is missing.)
                Err(Error::Docker {
                    operation: "create container",
                    message,
                    status: Some(404),
                }) if !reresolved => {
                    reresolved = true;
                    tries_left += 1;
                    self.images()?.forget(&sandbox.image);
                    prepared.image = self.images()?.resolve(&sandbox.image).await?;
                    attempts.push(Attempt {
                        number,
                        duration: attempt_started.elapsed(),
                        error: Some(message),
                    });
                }
                Err(e) => {
                    let last_try = tries_left == 0 || !e.is_retryable();
                    attempts.push(Attempt {
                        number,
                        duration: attempt_started.elapsed(),
                        error: Some(e.to_string()),
                    });
                    if last_try {
                        if rt.retries == 0 {
                            return Err(e);
                        }
                        return Err(Error::RetriesExhausted {
                            attempts: attempts.into_iter().filter_map(|a| a.error).collect(),
                            last: Box::new(e),
                        });
                    }
                    tracing::info!(sandbox = %sandbox.name, attempt = number, error = %e, "attempt failed; retrying in a fresh container");
                }
            }
        }
    }
}
