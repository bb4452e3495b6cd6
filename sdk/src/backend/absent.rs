//! The cluster's types as the rest of the SDK names them, when it is built
//! without the `kubernetes` feature: uninhabited, so no value of them can
//! exist. Code that holds or matches them (a `Held::Pod`, a pool's claims,
//! `Backend::Kubernetes`) then needs no `cfg`, and what handles them is
//! never reached. Each method mirrors the real one's signature.

use std::time::Duration;

use super::one_shot::{Launched, OneShot, Warm, WarmOneShot};
use crate::error::Result;
use crate::image::{ImageSpec, ResolvedImage};
use crate::warm::PoolStats;

/// A recipe's pod (nothing to give, without the feature).
pub(crate) trait PodRecipe {}

impl<T: ?Sized> PodRecipe for T {}

/// A pool's pods (nothing to give, without the feature).
pub(crate) trait PoolTemplate {}

impl<T: ?Sized> PoolTemplate for T {}

pub(super) async fn agent_pool<T>(
    cluster: &Cluster,
    _template: &T,
    _size: usize,
) -> Result<super::Claims> {
    match *cluster {}
}

// The cluster's side of a launch (`cluster_one_shot`, `cluster_program`),
// never reached.

pub(super) async fn start<R, T, Fut>(
    cluster: &Cluster,
    _recipe: &R,
    _limit: Duration,
    _handshake: impl FnOnce(super::Started) -> Fut + Send,
    _too_slow: impl FnOnce(&str) -> crate::Error,
) -> Result<T> {
    match *cluster {}
}

pub(super) async fn wait_ended(cluster: &Cluster, _name: &str, _container: &str) {
    match *cluster {}
}

pub(super) fn refuse_network(
    _network: &crate::settings::Network,
    _secrets: &[crate::settings::Secret],
) -> Result<()> {
    Ok(())
}

pub(super) async fn launch<'a>(cluster: &'a Cluster, _plan: &OneShot<'_>) -> Result<Launched<'a>> {
    match *cluster {}
}

pub(super) async fn outputs(cluster: &Cluster, _name: &str) -> Result<Option<super::ByteStream>> {
    match *cluster {}
}

pub(super) async fn warm(cluster: &Cluster, _plan: &WarmOneShot<'_>) -> Result<Warm> {
    match *cluster {}
}

// The cluster's storage (`cluster_storage`), never reached.

pub(super) async fn create_volume(
    cluster: &Cluster,
    _name: &str,
    _labels: std::collections::HashMap<String, String>,
) -> Result<crate::engine::VolumeRecord> {
    match *cluster {}
}

pub(super) async fn volume(
    cluster: &Cluster,
    _name: &str,
) -> Result<Option<crate::engine::VolumeRecord>> {
    match *cluster {}
}

pub(super) async fn volumes(cluster: &Cluster) -> Result<Vec<crate::engine::VolumeRecord>> {
    match *cluster {}
}

pub(super) async fn remove_volume(cluster: &Cluster, _name: &str) -> Result<bool> {
    match *cluster {}
}

pub(super) async fn check_writers(cluster: &Cluster, _writes: &[(&str, String)]) -> Result<()> {
    match *cluster {}
}

pub(super) async fn files_claim(
    cluster: &Cluster,
    _about: &super::FilesOf<'_>,
) -> Result<FilesClaim> {
    match *cluster {}
}

pub(super) async fn hold_kept(
    cluster: &Cluster,
    _id: &str,
) -> Result<Option<(super::KeptFiles, FilesClaim)>> {
    match *cluster {}
}

pub(super) async fn kept_list(cluster: &Cluster) -> Result<Vec<super::KeptFiles>> {
    match *cluster {}
}

pub(super) async fn in_use(cluster: &Cluster, _id: &str) -> Result<bool> {
    match *cluster {}
}

pub(super) async fn remove_kept(cluster: &Cluster, _id: &str) -> Result<()> {
    match *cluster {}
}

pub(super) async fn snapshot_list(cluster: &Cluster) -> Result<Vec<super::KeptFiles>> {
    match *cluster {}
}

pub(super) async fn remove_snapshot(cluster: &Cluster, _name: &str) -> Result<()> {
    match *cluster {}
}

/// A claim of a session's files (never, without the feature).
pub(crate) enum FilesClaim {}

impl FilesClaim {
    pub(crate) fn name(&self) -> &str {
        match *self {}
    }

    pub(crate) fn release(self) {
        match self {}
    }

    pub(crate) async fn remove(self) -> Result<()> {
        match self {}
    }
}

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

    pub(crate) async fn code_host_image(&self, _spec: &ImageSpec) -> Result<ResolvedImage> {
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
