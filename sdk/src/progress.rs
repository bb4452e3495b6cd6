//! Progress reporting for slow work (pulls, base bootstraps, image builds).

use std::fmt;
use std::sync::Arc;

/// What stage a slow operation is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stage {
    /// Pulling an image from a registry.
    Pull,
    /// Making a base image from Debian packages (no registry).
    Bootstrap,
    /// Building an image from a spec.
    Build,
    /// The image is ready.
    Ready,
    /// A warm pool could not make a container (it retries with backoff;
    /// runs start cold meanwhile). `image` names the pool.
    PoolRefill,
}

/// One progress report.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// The image concerned.
    pub image: String,
    /// The stage.
    pub stage: Stage,
    /// A human-readable line (a log line, or a summary).
    pub message: String,
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{:?} {}] {}", self.stage, self.image, self.message)
    }
}

/// A callback that receives progress reports. Set it with
/// [`ClientBuilder::on_progress`](crate::ClientBuilder::on_progress).
pub type ProgressHandler = Arc<dyn Fn(&Progress) + Send + Sync>;

/// Sends progress to the handler (if any) and to `tracing`.
#[derive(Clone, Default)]
pub(crate) struct Reporter {
    handler: Option<ProgressHandler>,
}

impl Reporter {
    pub(crate) fn new(handler: Option<ProgressHandler>) -> Self {
        Reporter { handler }
    }

    /// A reporter that sends to this one's handler and to `extra`.
    pub(crate) fn and(&self, extra: ProgressHandler) -> Reporter {
        let first = self.handler.clone();
        Reporter {
            handler: Some(Arc::new(move |p: &Progress| {
                if let Some(first) = &first {
                    first(p);
                }
                extra(p);
            })),
        }
    }

    pub(crate) fn report(&self, image: &str, stage: Stage, message: impl Into<String>) {
        let progress = Progress {
            image: image.to_string(),
            stage,
            message: message.into(),
        };
        match stage {
            Stage::Ready => tracing::info!(image, "{}", progress.message),
            Stage::PoolRefill => tracing::warn!(pool = image, "{}", progress.message),
            _ => tracing::debug!(image, stage = ?stage, "{}", progress.message),
        }
        if let Some(handler) = &self.handler {
            handler(&progress);
        }
    }
}
