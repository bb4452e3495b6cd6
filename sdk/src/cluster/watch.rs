//! Watching one object until a state is reached, through the watch's ends
//! and expiries.

use futures::TryStreamExt;
use kube::api::{WatchEvent, WatchParams};
use kube::Api;
use serde::de::DeserializeOwned;

use super::api::{is_not_found, Call};
use crate::error::{Error, Result};

/// Watches `name` (of `resource`, a plural) until `decide` answers. A watch
/// the server ends (its timeout) or expires (410 Gone) starts again from a
/// fresh read; a deleted object is [`Error::ContainerGone`].
pub(super) async fn watch_until<K, T>(
    api: &Api<K>,
    resource: &'static str,
    namespace: &str,
    name: &str,
    mut decide: impl FnMut(&K) -> Option<Result<T>>,
) -> Result<T>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let gone = || Error::ContainerGone {
        id: name.to_string(),
    };
    let call = Call::new("watch", resource, namespace, name);
    loop {
        let object = match api.get(name).await {
            Ok(object) => object,
            Err(e) if is_not_found(&e) => return Err(gone()),
            Err(e) => return Err(Call::new("get", resource, namespace, name).error(e)),
        };
        if let Some(done) = decide(&object) {
            return done;
        }
        let version = object.meta().resource_version.clone().unwrap_or_default();
        let params = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(290);
        let events = api
            .watch(&params, &version)
            .await
            .map_err(|e| call.error(e))?;
        let mut events = std::pin::pin!(events);
        loop {
            match events.try_next().await.map_err(|e| call.error(e))? {
                Some(WatchEvent::Added(object) | WatchEvent::Modified(object)) => {
                    if let Some(done) = decide(&object) {
                        return done;
                    }
                }
                Some(WatchEvent::Deleted(_)) => return Err(gone()),
                Some(WatchEvent::Bookmark(_)) => {}
                // The version is too old: read the object again and go on from there.
                Some(WatchEvent::Error(status)) if status.code == 410 => {
                    tracing::debug!(object = %name, resource, "watch expired (410); reading it again");
                    break;
                }
                Some(WatchEvent::Error(status)) => {
                    return Err(call.status(status.code, &status.reason, &status.message));
                }
                // The server ended the watch: read again.
                None => break,
            }
        }
    }
}
