//! The cluster's types as the rest of the SDK names them, when it is built
//! without the `kubernetes` feature: uninhabited, so no value of them can
//! exist. Code that holds or matches them (a `Held::Pod`, a pool's claims,
//! `Backend::Kubernetes`) then needs no `cfg`, and what handles them is
//! never reached. Each method mirrors the real one's signature.

use std::time::Duration;

use crate::error::Result;
use crate::image::{ImageSpec, ResolvedImage};
use crate::warm::PoolStats;

/// A Kubernetes cluster (never, without the feature).
pub(crate) enum Cluster {}

impl Cluster {
    pub(crate) fn server(&self) -> &str {
        match *self {}
    }

    pub(crate) async fn resolve_image(&self, _spec: &ImageSpec) -> Result<ResolvedImage> {
        match *self {}
    }

    pub(crate) async fn reap(&self) -> Result<Vec<String>> {
        match *self {}
    }

    pub(crate) async fn release(&self) -> Result<()> {
        match *self {}
    }

    pub(crate) async fn live_pods(&self) -> Result<Vec<String>> {
        match *self {}
    }

    pub(crate) async fn uses_agent_sandbox(&self) -> Result<bool> {
        match *self {}
    }
}

/// An agent-sandbox warm pool (never, without the feature).
pub(crate) enum AgentPool {}

impl AgentPool {
    pub(crate) fn stats(&self) -> PoolStats {
        match *self {}
    }

    pub(crate) async fn wait_ready(&self, _timeout: Duration) -> bool {
        match *self {}
    }

    pub(crate) async fn shutdown(&self) {
        match *self {}
    }
}

/// A pod's guard (never, without the feature).
pub(crate) enum PodGuard {}

impl PodGuard {
    pub(crate) fn name(&self) -> &str {
        match *self {}
    }

    pub(crate) async fn remove(self) -> Result<()> {
        match self {}
    }
}

/// A claim's guard (never, without the feature).
pub(crate) enum ClaimGuard {}

impl ClaimGuard {
    pub(crate) fn pod(&self) -> &str {
        match *self {}
    }

    pub(crate) async fn remove(self) -> Result<()> {
        match self {}
    }
}
