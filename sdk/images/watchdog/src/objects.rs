//! The owner's objects on the daemon: finding them by label and removing them.

use std::collections::HashSet;

use serde_json::{json, Value};

use crate::http;

const SESSION_LABEL: &str = "dev.dockhand.session";
const SCRATCH_LABEL: &str = "dev.dockhand.scratch";
const KIND_LABEL: &str = "dev.dockhand.kind";
const WATCHDOG_KIND: &str = "watchdog";

/// Whether `value` looks like the ids dockhand puts in labels (hex UUIDs):
/// nothing else is spliced into a filter.
pub fn is_token(value: &str) -> bool {
    !value.is_empty() && value.len() <= 64 && value.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Which of the owner's volumes to remove.
pub enum Filter<'a> {
    /// Those of one container (its scratch token).
    Scratch(&'a str),
    /// All of them.
    All,
}

/// One owning process, by its session id.
#[derive(Clone)]
pub struct Owner {
    session: String,
}

impl Owner {
    pub fn new(session: String) -> Self {
        Owner { session }
    }

    fn session_label(&self) -> String {
        format!("{SESSION_LABEL}={}", self.session)
    }

    /// The `/events` filter for the removal of the owner's containers.
    pub fn destroy_filter(&self) -> String {
        json!({
            "type": ["container"],
            "event": ["destroy"],
            "label": [self.session_label()],
        })
        .to_string()
    }

    fn volume_filter(&self, which: &Filter) -> String {
        let mut labels = vec![self.session_label()];
        if let Filter::Scratch(token) = which {
            labels.push(format!("{SCRATCH_LABEL}={token}"));
        }
        json!({ "label": labels }).to_string()
    }

    /// Removes every container, volume and network of the owner but watchdogs.
    pub fn sweep(&self) {
        for container in self.containers() {
            let kind = container["Labels"][KIND_LABEL].as_str();
            if kind == Some(WATCHDOG_KIND) {
                continue;
            }
            if let Some(id) = container["Id"].as_str().filter(|id| is_token(id)) {
                let _ = http::request("DELETE", &format!("/containers/{id}?force=1&v=1"));
            }
        }
        self.remove_volumes(Filter::All);
        self.remove_networks();
        self.remove_images();
    }

    /// Removes the images made for the owner's own use (a fork's, a
    /// resume's), never forced: the daemon refuses one a container still
    /// uses (a kept session's), which a later `reap` removes once unused.
    /// Snapshots and built images carry no owner and are never listed.
    fn remove_images(&self) {
        let filter = http::encode(&json!({ "label": [self.session_label()] }).to_string());
        let listed = list(&format!("/images/json?filters={filter}"));
        for id in image_ids(&listed) {
            let _ = http::request("DELETE", &format!("/images/{id}"));
        }
    }

    /// Removes the owner's networks (its sandboxes' egress networks). The
    /// daemon refuses one a container still uses; the containers went first.
    fn remove_networks(&self) {
        let filter = http::encode(&json!({ "label": [self.session_label()] }).to_string());
        let listed = list(&format!("/networks?filters={filter}"));
        for id in network_ids(&listed) {
            let _ = http::request("DELETE", &format!("/networks/{id}"));
        }
    }

    /// Removes the owner's volumes that `which` selects. The daemon refuses
    /// to remove a volume a container still uses, so this never takes one
    /// from under a live container.
    pub fn remove_volumes(&self, which: Filter) {
        let filter = http::encode(&self.volume_filter(&which));
        let listed = list(&format!("/volumes?filters={filter}"));
        for name in volume_names(&listed) {
            let _ = http::request("DELETE", &format!("/volumes/{}", http::encode(&name)));
        }
    }

    /// Removes the owner's scratch volumes whose container is gone.
    pub fn remove_orphaned_volumes(&self) {
        let live: HashSet<String> = self
            .containers()
            .iter()
            .filter_map(|c| c["Labels"][SCRATCH_LABEL].as_str().map(str::to_string))
            .collect();
        let filter = http::encode(&self.volume_filter(&Filter::All));
        let listed = list(&format!("/volumes?filters={filter}"));
        for volume in listed["Volumes"].as_array().into_iter().flatten() {
            let token = volume["Labels"][SCRATCH_LABEL].as_str();
            if token.is_some_and(|t| !live.contains(t)) {
                if let Some(name) = volume["Name"].as_str() {
                    let _ = http::request("DELETE", &format!("/volumes/{}", http::encode(name)));
                }
            }
        }
    }

    fn containers(&self) -> Vec<Value> {
        let filter = http::encode(&json!({ "label": [self.session_label()] }).to_string());
        match list(&format!("/containers/json?all=1&filters={filter}")) {
            Value::Array(items) => items,
            _ => Vec::new(),
        }
    }
}

/// A listing's JSON, or `null` when the daemon did not answer with one.
fn list(path: &str) -> Value {
    match http::request("GET", path) {
        Ok(answer) if answer.status == 200 => {
            serde_json::from_slice(&answer.body).unwrap_or(Value::Null)
        }
        _ => Value::Null,
    }
}

fn volume_names(listed: &Value) -> Vec<String> {
    listed["Volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["Name"].as_str().map(str::to_string))
        .collect()
}

/// The ids of a network listing (only plain ids: nothing else is put in a path).
fn network_ids(listed: &Value) -> Vec<String> {
    listed
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| {
            n["Id"]
                .as_str()
                .filter(|id| is_token(id))
                .map(str::to_string)
        })
        .collect()
}

/// The ids of an image listing (`sha256:<hex>`, as a plain id: nothing
/// else is put in a path).
fn image_ids(listed: &Value) -> Vec<String> {
    listed
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| {
            let id = i["Id"].as_str()?;
            let hex = id.strip_prefix("sha256:").unwrap_or(id);
            is_token(hex).then(|| hex.to_string())
        })
        .collect()
}

/// The scratch token of the container a `destroy` event is about.
pub fn scratch_token_of_event(line: &str) -> Option<String> {
    let event: Value = serde_json::from_str(line).ok()?;
    let token = event["Actor"]["Attributes"][SCRATCH_LABEL].as_str()?;
    is_token(token).then(|| token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_name_the_owner_and_nothing_else() {
        let owner = Owner::new("abc123".into());
        let filter: Value = serde_json::from_str(&owner.destroy_filter()).unwrap();
        assert_eq!(filter["label"], json!(["dev.dockhand.session=abc123"]));
        assert_eq!(filter["event"], json!(["destroy"]));
        let scratch: Value =
            serde_json::from_str(&owner.volume_filter(&Filter::Scratch("t1"))).unwrap();
        assert_eq!(
            scratch["label"],
            json!(["dev.dockhand.session=abc123", "dev.dockhand.scratch=t1"])
        );
    }

    #[test]
    fn a_destroy_event_gives_its_containers_scratch_token() {
        let line = r#"{"status":"destroy","id":"c1","Type":"container","Action":"destroy","Actor":{"ID":"c1","Attributes":{"dev.dockhand.scratch":"0af3","dev.dockhand.session":"s"}}}"#;
        assert_eq!(scratch_token_of_event(line).as_deref(), Some("0af3"));
        let spliced = line.replace("0af3", "a,b=c");
        assert_eq!(scratch_token_of_event(&spliced), None);
        assert_eq!(scratch_token_of_event("not json"), None);
    }

    #[test]
    fn tokens_are_plain_ids() {
        assert!(is_token("0123abcdef"));
        assert!(!is_token(""));
        assert!(!is_token("a/../b"));
        assert!(!is_token(&"a".repeat(65)));
    }

    #[test]
    fn network_ids_come_from_the_listing_and_are_plain() {
        let listed = json!([{"Id": "abc123", "Name": "n1"}, {"Id": "../x"}, {"Name": "n3"}]);
        assert_eq!(network_ids(&listed), vec!["abc123"]);
        assert!(network_ids(&Value::Null).is_empty());
    }

    #[test]
    fn image_ids_come_from_the_listing_and_are_plain() {
        let listed = json!([
            {"Id": "sha256:0abc", "RepoTags": ["dockhand/fork:x"]},
            {"Id": "sha256:../../containers/x"},
            {"RepoTags": []}
        ]);
        assert_eq!(image_ids(&listed), vec!["0abc"]);
        assert!(image_ids(&Value::Null).is_empty());
    }

    #[test]
    fn volume_names_come_from_the_listing() {
        let listed = json!({"Volumes": [{"Name": "v1"}, {"Name": "v2"}, {}], "Warnings": null});
        assert_eq!(volume_names(&listed), vec!["v1", "v2"]);
        assert!(volume_names(&Value::Null).is_empty());
    }
}
