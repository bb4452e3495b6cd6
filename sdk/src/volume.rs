//! [`Volume`]: named storage that outlives the sessions that mount it.
//!
//! A volume is mounted read-write in one session and read-only in as many
//! as like ([`SessionConfig::volume`](crate::session::SessionConfig::volume),
//! [`volume_read_only`](crate::session::SessionConfig::volume_read_only)).
//! It is a Docker named volume under a prefix of dockhand's, labelled, so
//! a session can mount only volumes made through dockhand; on a cluster, a
//! PersistentVolumeClaim of that name (its class, size and access as
//! [`KubeConfig::storage`](crate::KubeConfig::storage) says), mounted by the
//! session's pod.

use std::collections::HashMap;

use crate::client::Client;
use crate::engine::labels;
use crate::error::{Error, Result};

/// A named volume mounted into a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeMount {
    /// The volume's name (as given to [`Volume::create`](Volume::create)).
    pub name: String,
    /// Where it appears in the container.
    pub path: String,
    /// Mounted read-only.
    pub read_only: bool,
}

/// The prefix of every volume's Docker name.
const PREFIX: &str = "dockhand-volume-";
/// The longest volume name.
const MAX_NAME: usize = 63;

/// A named volume.
///
/// ```no_run
/// # async fn demo() -> dockhand::Result<()> {
/// use dockhand::session::{SessionApi, SessionConfig};
/// use dockhand::Volume;
/// let client = dockhand::Client::connect().await?;
/// let data = Volume::create(&client, "datasets").await?;
/// let writer = client.session(SessionConfig::new().volume("datasets", "/data"));
/// writer.start().await?;
/// writer.write_file("/data/a.csv", b"x\n1\n").await?;
/// writer.close().await?;
/// let reader = client.session(SessionConfig::new().volume_read_only("datasets", "/data"));
/// reader.start().await?;
/// assert_eq!(reader.read_file("/data/a.csv").await?, b"x\n1\n");
/// reader.close().await?;
/// data.remove(&client).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// Its name.
    pub name: String,
    /// When it was made (RFC 3339), as the daemon reports it.
    pub created: Option<String>,
    /// The labels given at creation ([`Volume::create_labelled`]).
    pub labels: HashMap<String, String>,
}

/// Labels of dockhand's own, not reported among a volume's labels.
fn is_own_label(key: &str) -> bool {
    key.starts_with("dev.dockhand.")
}

impl Volume {
    /// Makes the volume `name` (letters, digits, `_`, `.`, `-`; at most 63).
    pub async fn create(client: &Client, name: &str) -> Result<Volume> {
        Self::create_labelled(client, name, HashMap::new()).await
    }

    /// Makes the volume `name` with labels of the caller's (an owner, say).
    pub async fn create_labelled(
        client: &Client,
        name: &str,
        extra: HashMap<String, String>,
    ) -> Result<Volume> {
        check_name(name).map_err(|m| Error::spec("volume", m))?;
        if let Some(key) = extra.keys().find(|k| is_own_label(k)) {
            return Err(Error::spec(
                "volume",
                format!("label `{key}` is reserved for dockhand"),
            ));
        }
        let mut all = extra;
        all.insert(labels::VOLUME.into(), name.into());
        let made = client
            .runs_on()
            .create_volume(&docker_name(name), all)
            .await?;
        Ok(Self::from_record(made.labels, made.created, name))
    }

    /// The volume `name`, if it exists.
    pub async fn get(client: &Client, name: &str) -> Result<Option<Volume>> {
        check_name(name).map_err(|m| Error::spec("volume", m))?;
        Ok(client
            .runs_on()
            .volume(&docker_name(name))
            .await?
            .filter(|v| v.labels.get(labels::VOLUME).map(String::as_str) == Some(name))
            .map(|v| Self::from_record(v.labels, v.created, name)))
    }

    /// Every volume made through dockhand on this daemon.
    pub async fn list(client: &Client) -> Result<Vec<Volume>> {
        let mut all: Vec<Volume> = client
            .runs_on()
            .volumes()
            .await?
            .into_iter()
            .filter_map(|v| {
                let name = v.labels.get(labels::VOLUME)?.clone();
                (v.name == docker_name(&name))
                    .then(|| Self::from_record(v.labels, v.created, &name))
            })
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    /// Removes the volume and its files. Refused (a typed error) while a
    /// session mounts it; a volume that is gone already is fine.
    pub async fn remove(&self, client: &Client) -> Result<()> {
        Self::remove_named(client, &self.name).await
    }

    /// Removes the volume `name` (see [`Volume::remove`]).
    pub async fn remove_named(client: &Client, name: &str) -> Result<()> {
        check_name(name).map_err(|m| Error::spec("volume", m))?;
        if client.runs_on().remove_volume(&docker_name(name)).await? {
            Ok(())
        } else {
            Err(Error::spec(
                "volume",
                format!(
                    "volume `{name}` is mounted by a container or pod; close the sessions using it first"
                ),
            ))
        }
    }

    fn from_record(labels: HashMap<String, String>, created: Option<String>, name: &str) -> Volume {
        Volume {
            name: name.to_string(),
            created,
            labels: labels
                .into_iter()
                .filter(|(k, _)| !is_own_label(k))
                .collect(),
        }
    }
}

/// The backend's name of the volume `name` (Docker's volume, a cluster's claim).
pub(crate) fn docker_name(name: &str) -> String {
    format!("{PREFIX}{name}")
}

/// Why `name` is not a volume name, if it is not.
///
/// ```
/// assert!(dockhand::volume::check_name("datasets-2").is_ok());
/// assert!(dockhand::volume::check_name("../etc").is_err());
/// ```
pub fn check_name(name: &str) -> std::result::Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a volume name: 1 to {MAX_NAME} letters, digits, `_`, `.` or `-`, starting with a letter or digit"
        ))
    }
}

/// Checks that each mounted volume exists (Docker would make a missing one
/// silently, empty, which is never what a caller means; a pod would wait
/// for it forever), and that no volume gets a second writer where it takes
/// one.
pub(crate) async fn check_mounted(client: &Client, volumes: &[VolumeMount]) -> Result<()> {
    for v in volumes {
        if Volume::get(client, &v.name).await?.is_none() {
            return Err(Error::spec(
                "session",
                format!(
                    "volume `{}` does not exist; make it first with Volume::create",
                    v.name
                ),
            ));
        }
    }
    let writes: Vec<(&str, String)> = volumes
        .iter()
        .filter(|v| !v.read_only)
        .map(|v| (v.name.as_str(), docker_name(&v.name)))
        .collect();
    client.runs_on().check_volume_writers(&writes).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_names_are_checked() {
        for good in ["a", "data-1", "x.y_z", &"a".repeat(63)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "-a", "a/b", "../x", "a b", &"a".repeat(64), "é"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert_eq!(docker_name("data"), "dockhand-volume-data");
    }
}
