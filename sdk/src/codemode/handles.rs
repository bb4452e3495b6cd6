//! Sandboxes as tools: JSON arguments become typed inputs, outputs come back
//! as JSON, and File and Dir outputs stay on the host behind opaque handles.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value};

use super::kept::{handles_in, KeepLimits, KeptResults, ResultFile};
use crate::client::Client;
use crate::sandbox::{Outputs, Sandbox, Type, Value as SbValue};
use crate::util::lock;

/// File and Dir values returned by sandbox tools, kept on the host while the
/// code passes opaque handles around. Each belongs to a scope (the execution,
/// or the REPL session, that made it) and goes when its scope ends, so a
/// long-lived host holds only what running code can still refer to, and
/// what the code returned ([`KeptResults`]).
#[derive(Default)]
pub(crate) struct Handles {
    next: AtomicU64,
    values: Mutex<HashMap<String, (String, SbValue)>>,
    owners: Mutex<Vec<(String, Arc<Outputs>)>>,
    pub(crate) kept: KeptResults,
}

impl Handles {
    /// Drops what `scope` made: its handles and the files behind them.
    pub(crate) fn release(&self, scope: &str) {
        lock(&self.values).retain(|_, (owner, _)| owner != scope);
        lock(&self.owners).retain(|(owner, _)| owner != scope);
    }

    /// Drops everything.
    pub(crate) fn clear(&self) {
        lock(&self.values).clear();
        lock(&self.owners).clear();
        self.kept.clear();
    }

    /// Keeps for the application the File and Dir results of `scope` that
    /// `value` (what the code returned) names.
    pub(crate) async fn keep_returned(
        &self,
        scope: &str,
        value: &Value,
        limits: KeepLimits,
    ) -> Vec<ResultFile> {
        let mut named = Vec::new();
        handles_in(value, &mut named);
        let mut candidates = Vec::new();
        for id in named {
            let held = lock(&self.values).get(&id).cloned();
            let Some((owner, value)) = held.filter(|(owner, _)| owner == scope) else {
                continue;
            };
            let path = match &value {
                SbValue::File(p) | SbValue::Dir(p) => p.clone(),
                _ => continue,
            };
            let outputs = lock(&self.owners)
                .iter()
                .find(|(o, out)| *o == owner && out.dir().is_some_and(|d| path.starts_with(d)))
                .map(|(_, out)| out.clone());
            if let Some(outputs) = outputs {
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                candidates.push((id, name, value, outputs));
            }
        }
        self.kept.keep(candidates, limits).await
    }

    /// How many sandbox results are held.
    pub(crate) fn held(&self) -> usize {
        lock(&self.owners).len()
    }

    fn register(&self, scope: &str, name: &str, value: SbValue) -> Value {
        let id = format!("h{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let kind = if matches!(value, SbValue::Dir(_)) {
            "Dir"
        } else {
            "File"
        };
        lock(&self.values).insert(id.clone(), (scope.to_string(), value));
        serde_json::json!({"$handle": id, "kind": kind, "name": name})
    }

    /// The value behind a handle; an error naming it when it is not held.
    fn resolve(&self, handle: &Value) -> std::result::Result<SbValue, String> {
        let Some(id) = handle.get("$handle").and_then(Value::as_str) else {
            return Err("is not a File or Dir handle".into());
        };
        lock(&self.values)
            .get(id)
            .map(|(_, v)| v.clone())
            .or_else(|| self.kept.value(id))
            .ok_or_else(|| {
                format!("is handle `{id}`, which is no longer held (File and Dir results live as long as the execution, or session, that made them, unless the code returned them)")
            })
    }
}

/// Runs a sandbox tool: JSON arguments to typed inputs, outputs back to JSON
/// (File and Dir outputs become handles).
pub(crate) async fn run_sandbox_tool(
    client: &Client,
    handles: &Handles,
    scope: &str,
    sandbox: &Sandbox,
    args: Map<String, Value>,
) -> std::result::Result<Value, String> {
    let mut inputs = Vec::new();
    for p in sandbox.inputs() {
        let v = args.get(&p.name).cloned().unwrap_or(Value::Null);
        let value = match p.ty {
            Type::Int => v.as_i64().map(SbValue::Int),
            Type::Float => v.as_f64().map(SbValue::Float),
            Type::Str => v.as_str().map(|s| SbValue::Str(s.to_string())),
            Type::Bool => v.as_bool().map(SbValue::Bool),
            Type::Datetime => v
                .as_str()
                .and_then(|s| SbValue::parse(Type::Datetime, s).ok()),
            Type::Timedelta => v
                .as_f64()
                .filter(|s| *s >= 0.0)
                .map(|s| SbValue::Timedelta(Duration::from_secs_f64(s))),
            Type::Json => Some(SbValue::Json(v.clone())),
            Type::File | Type::Dir => match handles.resolve(&v) {
                Ok(held) => Some(held).filter(|h| h.type_of() == p.ty),
                Err(why) => return Err(format!("argument `{}` {why}", p.name)),
            },
        };
        let value =
            value.ok_or_else(|| format!("argument `{}` is not a valid {}", p.name, p.ty))?;
        inputs.push((p.name.clone(), value));
    }
    let out = client
        .run(sandbox, inputs)
        .await
        .map_err(|e| e.to_string())?;
    let mut result = Map::new();
    for (name, value) in out.outputs.iter() {
        let json = match value {
            SbValue::Int(i) => Value::from(*i),
            SbValue::Float(f) => Value::from(*f),
            SbValue::Str(s) => Value::from(s.clone()),
            SbValue::Bool(b) => Value::from(*b),
            SbValue::Datetime(d) => Value::from(d.format("%Y-%m-%dT%H:%M:%S%.f").to_string()),
            SbValue::Timedelta(d) => Value::from(d.as_secs_f64()),
            SbValue::Json(j) => j.clone(),
            SbValue::File(_) | SbValue::Dir(_) => handles.register(scope, name, value.clone()),
        };
        result.insert(name.to_string(), json);
    }
    // Keep File/Dir outputs on disk while handles to them may be used.
    if out.outputs.dir().is_some() {
        lock(&handles.owners).push((scope.to_string(), Arc::new(out.outputs)));
    }
    Ok(match result.len() {
        1 => result
            .into_iter()
            .next()
            .map(|(_, v)| v)
            .unwrap_or(Value::Null),
        _ => Value::Object(result),
    })
}
