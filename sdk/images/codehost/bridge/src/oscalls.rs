//! Monty's OS calls other than sleeps (which `execution` waits out): the
//! environment from the host's map, and files through the mounts the host
//! configured (monty-fs: paths are resolved inside the mounted directory by
//! the OS, through cap-std, so `..` and links cannot leave it).

use monty_pool::ResumeValue;
use monty_pool::{MountSpec, MountSpecMode};
use monty_types::MontyObject;
use serde_json::{Map, Value};

/// The mounts the host configured (`[{"virtual", "path", "mode"}]`), opened
/// once: each feed gets clones of the same open directories.
pub fn mounts(config: &Value) -> Result<Vec<MountSpec>, String> {
    let Some(list) = config.get("mounts").and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    list.iter()
        .map(|m| {
            let field = |name: &str| {
                m.get(name)
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("a mount has no `{name}`"))
            };
            let mode = match field("mode")? {
                "read-only" => MountSpecMode::ReadOnly,
                "overlay" => MountSpecMode::Overlay,
                "read-write" => MountSpecMode::ReadWrite,
                other => return Err(format!("unknown mount mode `{other}`")),
            };
            let (virtual_path, path) = (field("virtual")?, field("path")?);
            MountSpec::new(virtual_path, path, mode)
                .map_err(|e| format!("mounting {path} at {virtual_path}: {e}"))
        })
        .collect()
}

/// The answer to an OS call other than a sleep: `os.getenv` and
/// `os.environ` from the host's map; everything else (files, `os.urandom`
/// under a host-answered policy) raises Monty's own default, a
/// `PermissionError` naming the path for a file.
pub fn os_call(name: &str, args: &monty_types::CallArgs, env: &Map<String, Value>) -> ResumeValue {
    let text = |value: &Value| MontyObject::string(value.as_str().unwrap_or_default());
    match name {
        "os.getenv" => {
            let mut args = args.args();
            let key = args.next().and_then(|k| k.as_str().map(String::from));
            let default = args.next().map_or_else(MontyObject::none, |d| d.to_owned());
            match key.and_then(|k| env.get(&k)) {
                Some(value) => ResumeValue::Return(text(value)),
                None => ResumeValue::Return(default),
            }
        }
        "os.environ" => ResumeValue::Return(MontyObject::dict(
            env.iter()
                .map(|(k, v)| (MontyObject::string(k.as_str()), text(v))),
        )),
        _ => ResumeValue::NotHandled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mounts_are_opened_once_and_bad_ones_named() {
        let dir = std::env::temp_dir();
        let path = dir.to_string_lossy();
        let ok = mounts(&json!({"mounts": [
            {"virtual": "/data", "path": path, "mode": "read-only"},
            {"virtual": "/scratch", "path": path, "mode": "overlay"},
        ]}))
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[0].virtual_path(), "/data");
        assert!(mounts(&json!({})).unwrap().is_empty());
        let bad_mode = json!({"mounts": [{"virtual": "/d", "path": path, "mode": "rw"}]});
        assert!(mounts(&bad_mode).unwrap_err().contains("rw"));
        let missing =
            json!({"mounts": [{"virtual": "/d", "path": "/no/such/dir", "mode": "read-only"}]});
        assert!(mounts(&missing).unwrap_err().contains("/no/such/dir"));
    }
}
