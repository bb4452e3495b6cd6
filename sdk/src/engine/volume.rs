//! Named volumes: created, listed and removed by name, labelled as
//! dockhand's so they are found (and never confused with a user's own).

use std::collections::HashMap;

use bollard::models::VolumeCreateRequest;
use bollard::query_parameters::{ListVolumesOptionsBuilder, RemoveVolumeOptionsBuilder};

use super::{labels, Engine};
use crate::error::{Error, Result};

/// A named volume as the daemon reports it.
#[derive(Debug, Clone)]
pub(crate) struct VolumeRecord {
    /// Docker's name of it.
    pub name: String,
    /// Its labels.
    pub labels: HashMap<String, String>,
    /// When it was made (RFC 3339), as the daemon says.
    pub created: Option<String>,
}

impl Engine {
    /// Creates the named volume `name` with dockhand's durable labels and
    /// `extra` ones; one that exists already is an error.
    pub(crate) async fn create_volume(
        &self,
        name: &str,
        extra: HashMap<String, String>,
    ) -> Result<VolumeRecord> {
        if self.volume(name).await?.is_some() {
            return Err(Error::spec(
                "volume",
                format!("a volume named `{name}` exists already"),
            ));
        }
        let mut all = labels::durable("volume");
        all.extend(extra);
        let request = VolumeCreateRequest {
            name: Some(name.to_string()),
            driver: Some("local".into()),
            labels: Some(all),
            ..Default::default()
        };
        let made = self
            .docker
            .create_volume(request)
            .await
            .map_err(|e| self.docker_err("create volume", e))?;
        Ok(VolumeRecord {
            name: made.name,
            labels: made.labels,
            created: made.created_at,
        })
    }

    /// The volume named `name`, if it exists.
    pub(crate) async fn volume(&self, name: &str) -> Result<Option<VolumeRecord>> {
        match self.docker.inspect_volume(name).await {
            Ok(v) => Ok(Some(VolumeRecord {
                name: v.name,
                labels: v.labels,
                created: v.created_at,
            })),
            Err(e) if super::is_not_found(&e) => Ok(None),
            Err(e) => Err(self.docker_err("inspect volume", e)),
        }
    }

    /// Volumes carrying the label `label` (`key` or `key=value`).
    pub(crate) async fn volumes_labelled(&self, label: &str) -> Result<Vec<VolumeRecord>> {
        let filters = HashMap::from([("label", vec![label])]);
        let options = ListVolumesOptionsBuilder::default()
            .filters(&filters)
            .build();
        let listed = self
            .docker
            .list_volumes(Some(options))
            .await
            .map_err(|e| self.docker_err("list volumes", e))?;
        Ok(listed
            .volumes
            .unwrap_or_default()
            .into_iter()
            .map(|v| VolumeRecord {
                name: v.name,
                labels: v.labels,
                created: v.created_at,
            })
            .collect())
    }

    /// Removes a named volume; `Ok(false)` when a container still uses it.
    pub(crate) async fn remove_volume(&self, name: &str) -> Result<bool> {
        let options = RemoveVolumeOptionsBuilder::default().force(false).build();
        match self.docker.remove_volume(name, Some(options)).await {
            Ok(()) => Ok(true),
            Err(e) if super::is_not_found(&e) => Ok(true),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => Ok(false),
            Err(e) => Err(self.docker_err("remove volume", e)),
        }
    }
}
