//! The code interpreter's API (`/execute`, `/contexts`) on a [`Kernel`]:
//! results stream as JSON lines, in the shapes the `e2b-code-interpreter`
//! SDK reads.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use dockhand::kernel::{
    ContextOptions, Kernel, KernelEvent, Language, RichResult, RunOptions, CHART_MIME,
    DATAFRAME_MIME, DEFAULT_CONTEXT,
};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use super::config::HOME;
use super::errors::api_error;
use super::registry::Sandbox;

fn context_json(id: &str, cwd: &str, language: Language) -> Value {
    json!({"id": id, "language": language.as_str(), "cwd": cwd})
}

/// The context a run without a context id goes to: each language has a
/// default one, as E2B's interpreter has (Python's is the kernel's own;
/// the others' are made on first use).
async fn default_context(
    sandbox: &Sandbox,
    kernel: &Kernel,
    language: Language,
) -> Result<String, Response> {
    if language == Language::Python {
        return Ok(DEFAULT_CONTEXT.to_string());
    }
    let name = format!("default-{language}");
    if !sandbox.contexts.lock().contains_key(&name) {
        let options = ContextOptions::new().language(language).cwd(HOME);
        kernel
            .create_context_with(&name, options)
            .await
            .map_err(|e| kernel_error(&e))?;
        sandbox
            .contexts
            .lock()
            .insert(name.clone(), (HOME.to_string(), language));
    }
    Ok(name)
}

fn kernel_of(sandbox: &Sandbox) -> Result<&Kernel, Response> {
    sandbox.kernel.as_ref().ok_or_else(|| {
        api_error(
            StatusCode::BAD_GATEWAY,
            format!(
                "The sandbox {} is running but port 49999 is not open: its template `{}` has no code interpreter",
                sandbox.id, sandbox.template
            ),
        )
    })
}

/// The language asked for, which the sandbox's kernel must carry.
fn language_of(kernel: &Kernel, language: Option<&str>) -> Result<Language, Response> {
    let language = match language.unwrap_or("python").parse::<Language>() {
        Ok(l) => l,
        Err(e) => return Err(api_error(StatusCode::BAD_REQUEST, e.to_string())),
    };
    if !kernel.languages().contains(&language) {
        let carried: Vec<&str> = kernel.languages().iter().map(|l| l.as_str()).collect();
        return Err(api_error(
            StatusCode::BAD_REQUEST,
            format!(
                "language `{language}` is not in this sandbox's template (it runs {}): start serve with `--languages {language}` (the code interpreter), or give a kernel template `\"languages\"` in the templates file",
                carried.join(", ")
            ),
        ));
    }
    Ok(language)
}

fn kernel_error(e: &dockhand::Error) -> Response {
    api_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ContextRequest {
    language: Option<String>,
    cwd: Option<String>,
}

/// `POST /contexts`.
pub async fn create_context(sandbox: &Sandbox, body: &[u8]) -> Response {
    let kernel = match kernel_of(sandbox) {
        Ok(k) => k,
        Err(r) => return r,
    };
    let request: ContextRequest = match super::json_or_default(body) {
        Ok(r) => r,
        Err(e) => return api_error(StatusCode::BAD_REQUEST, e),
    };
    let language = match language_of(kernel, request.language.as_deref()) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let id = uuid::Uuid::new_v4().simple().to_string();
    let cwd = request.cwd.unwrap_or_else(|| HOME.to_string());
    let options = ContextOptions::new().language(language).cwd(cwd.clone());
    if let Err(e) = kernel.create_context_with(&id, options).await {
        return match &e {
            dockhand::Error::SessionFile { .. } => {
                api_error(StatusCode::BAD_REQUEST, e.to_string())
            }
            _ => kernel_error(&e),
        };
    }
    sandbox
        .contexts
        .lock()
        .insert(id.clone(), (cwd.clone(), language));
    axum::Json(context_json(&id, &cwd, language)).into_response()
}

/// `GET /contexts`.
pub fn list_contexts(sandbox: &Sandbox) -> Response {
    if let Err(r) = kernel_of(sandbox) {
        return r;
    }
    let mut list = vec![context_json(DEFAULT_CONTEXT, HOME, Language::Python)];
    list.extend(
        sandbox
            .contexts
            .lock()
            .iter()
            .map(|(id, (cwd, language))| context_json(id, cwd, *language)),
    );
    axum::Json(Value::Array(list)).into_response()
}

fn known_context(sandbox: &Sandbox, id: &str) -> Result<(), Response> {
    if id == DEFAULT_CONTEXT || sandbox.contexts.lock().contains_key(id) {
        return Ok(());
    }
    Err(api_error(
        StatusCode::NOT_FOUND,
        format!("context {id} not found"),
    ))
}

/// `POST /contexts/{id}/restart`.
pub async fn restart_context(sandbox: &Sandbox, id: &str) -> Response {
    let kernel = match kernel_of(sandbox).and_then(|k| known_context(sandbox, id).map(|_| k)) {
        Ok(k) => k,
        Err(r) => return r,
    };
    match kernel.restart_context(id).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => kernel_error(&e),
    }
}

/// `DELETE /contexts/{id}`.
pub async fn remove_context(sandbox: &Sandbox, id: &str) -> Response {
    let kernel = match kernel_of(sandbox).and_then(|k| known_context(sandbox, id).map(|_| k)) {
        Ok(k) => k,
        Err(r) => return r,
    };
    if id == DEFAULT_CONTEXT {
        return api_error(
            StatusCode::BAD_REQUEST,
            "the default context cannot be removed",
        );
    }
    match kernel.remove_context(id).await {
        Ok(()) => {
            sandbox.contexts.lock().remove(id);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => kernel_error(&e),
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ExecuteRequest {
    code: String,
    context_id: Option<String>,
    language: Option<String>,
    env_vars: Option<BTreeMap<String, String>>,
}

/// Aborts a run whose response nobody reads any more: dropping the run
/// interrupts the kernel, so a client that hung up frees its context.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `POST /execute`: runs code, streaming its output and results.
pub async fn execute(sandbox: Arc<Sandbox>, body: &[u8], run_timeout: Duration) -> Response {
    let kernel = match kernel_of(&sandbox) {
        Ok(k) => k.clone(),
        Err(r) => return r,
    };
    let request: ExecuteRequest = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return api_error(StatusCode::BAD_REQUEST, format!("bad request body: {e}")),
    };
    if let Some(bad) = request
        .env_vars
        .iter()
        .flatten()
        .map(|(k, _)| k)
        .find(|k| !env_name(k))
    {
        return api_error(
            StatusCode::BAD_REQUEST,
            format!("bad environment variable name `{bad}`: use letters, digits and `_`, not starting with a digit"),
        );
    }
    let (context, language) = match &request.context_id {
        Some(id) => {
            if let Err(r) = known_context(&sandbox, id) {
                return r;
            }
            let language = match sandbox.contexts.lock().get(id) {
                Some((_, language)) => *language,
                None => Language::Python,
            };
            (id.clone(), language)
        }
        None => {
            let language = match language_of(&kernel, request.language.as_deref()) {
                Ok(l) => l,
                Err(r) => return r,
            };
            match default_context(&sandbox, &kernel, language).await {
                Ok(name) => (name, language),
                Err(r) => return r,
            }
        }
    };
    let (tx, rx) = mpsc::unbounded_channel::<Value>();
    let run = {
        let tx = tx.clone();
        async move {
            if let Some(envs) = request.env_vars.filter(|e| !e.is_empty()) {
                let options = RunOptions::new().context(context.clone());
                if let Err(e) = kernel
                    .run_with(&env_update_code(&envs, language), options)
                    .await
                {
                    let _ = tx.send(error_line("KernelError", &e.to_string()));
                    return;
                }
            }
            let listener = tx.clone();
            let options = RunOptions::new()
                .context(context)
                .timeout(run_timeout)
                .on_event(move |event| {
                    if let Some(line) = event_line(event) {
                        let _ = listener.send(line);
                    }
                });
            match kernel.run_with(&request.code, options).await {
                Ok(execution) => {
                    if let Some(count) = execution.execution_count {
                        let _ = tx.send(
                            json!({"type": "number_of_executions", "execution_count": count}),
                        );
                    }
                }
                Err(e) => {
                    let _ = tx.send(error_line("TimeoutError", &e.to_string()));
                }
            }
        }
    };
    drop(tx);
    let guard = AbortOnDrop(tokio::spawn(run).abort_handle());
    let lines = futures::stream::unfold((rx, guard), |(mut rx, guard)| async move {
        let line = rx.recv().await?;
        let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
        bytes.push(b'\n');
        Some((Ok::<_, std::convert::Infallible>(bytes), (rx, guard)))
    });
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(lines),
    )
        .into_response()
}

/// A POSIX environment variable name.
fn env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Code that sets environment variables in a kernel of `language`, leaving
/// no name behind. Values travel as JSON strings, which are string literals
/// in Python, JavaScript and R alike; Bash gets them single-quoted.
pub fn env_update_code(envs: &BTreeMap<String, String>, language: Language) -> String {
    let json = serde_json::to_string(envs).unwrap_or_else(|_| "{}".into());
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
    match language {
        Language::Python => format!(
            "import os as _dockhand_os\n_dockhand_os.environ.update({json})\ndel _dockhand_os"
        ),
        Language::JavaScript | Language::TypeScript => {
            format!("for (const [k, v] of Object.entries({json})) Deno.env.set(k, v);")
        }
        Language::Bash => envs
            .iter()
            .map(|(k, v)| format!("export {k}='{}'", v.replace('\'', "'\\''")))
            .collect::<Vec<_>>()
            .join("\n"),
        Language::R => {
            let names: Vec<String> = envs.keys().map(|k| quote(k)).collect();
            let values: Vec<String> = envs.values().map(|v| quote(v)).collect();
            format!(
                "invisible(do.call(Sys.setenv, as.list(setNames(c({}), c({})))))",
                values.join(", "),
                names.join(", ")
            )
        }
        _ => String::new(),
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn error_line(name: &str, value: &str) -> Value {
    json!({"type": "error", "name": name, "value": value, "traceback": value})
}

fn event_line(event: &KernelEvent) -> Option<Value> {
    Some(match event {
        KernelEvent::Stdout(text) => json!({"type": "stdout", "text": text, "timestamp": now()}),
        KernelEvent::Stderr(text) => json!({"type": "stderr", "text": text, "timestamp": now()}),
        KernelEvent::Error(e) => json!({
            "type": "error", "name": e.name, "value": e.value, "traceback": e.traceback,
        }),
        KernelEvent::Result(result) => result_line(result),
        _ => return None,
    })
}

/// A rich result in E2B's shape: one field per known MIME type, the
/// DataFrame as `data`, the chart as `chart`, the rest under `extra`.
fn result_line(result: &RichResult) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), json!("result"));
    out.insert("is_main_result".into(), json!(result.is_main));
    let mut extra = Map::new();
    for (mime, value) in &result.data {
        let field = match mime.as_str() {
            "text/plain" => "text",
            "text/html" => "html",
            "text/markdown" => "markdown",
            "image/svg+xml" => "svg",
            "image/png" => "png",
            "image/jpeg" => "jpeg",
            "application/pdf" => "pdf",
            "text/latex" => "latex",
            "application/json" => "json",
            "application/javascript" => "javascript",
            DATAFRAME_MIME => "data",
            CHART_MIME => {
                out.insert("chart".into(), e2b_chart(value));
                continue;
            }
            _ => {
                extra.insert(mime.clone(), value.clone());
                continue;
            }
        };
        let value = match (field, value) {
            // Base64 as the kernel sent it may be wrapped in lines.
            ("png" | "jpeg" | "pdf", Value::String(s)) => {
                json!(s.split_whitespace().collect::<String>())
            }
            _ => value.clone(),
        };
        out.insert(field.into(), value);
    }
    if !extra.is_empty() {
        out.insert("extra".into(), Value::Object(extra));
    }
    Value::Object(out)
}

/// dockhand's chart data in E2B's chart shapes (`points` pairs, units,
/// ticks, `superchart` for several axes).
fn e2b_chart(chart: &Value) -> Value {
    let kind = chart
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    let text = |key: &str| chart.get(key).cloned().unwrap_or(json!(""));
    let elements = chart
        .get("elements")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let axes = |mut v: Value| {
        for key in ["x_unit", "y_unit"] {
            v[key] = Value::Null;
        }
        for key in ["x_ticks", "x_tick_labels", "y_ticks", "y_tick_labels"] {
            v[key] = json!([]);
        }
        v
    };
    match kind {
        "line" | "scatter" => {
            let elements: Vec<Value> = elements
                .iter()
                .map(|e| {
                    let points = match (
                        e.get("x").and_then(Value::as_array),
                        e.get("y").and_then(Value::as_array),
                    ) {
                        (Some(x), Some(y)) => x.iter().zip(y).map(|(x, y)| json!([x, y])).collect(),
                        _ => e
                            .get("points")
                            .cloned()
                            .unwrap_or(json!([]))
                            .as_array()
                            .cloned()
                            .unwrap_or_default(),
                    };
                    json!({"label": e.get("label").cloned().unwrap_or(json!("")), "points": points})
                })
                .collect();
            axes(json!({
                "type": kind, "title": text("title"), "x_label": text("x_label"),
                "y_label": text("y_label"), "elements": elements,
            }))
        }
        "bar" => axes(json!({
            "type": "bar", "title": text("title"), "x_label": text("x_label"),
            "y_label": text("y_label"), "elements": elements,
        })),
        "pie" => {
            let elements: Vec<Value> = elements
                .into_iter()
                .map(|mut e| {
                    e["radius"] = json!(1.0);
                    e
                })
                .collect();
            json!({"type": "pie", "title": text("title"), "elements": elements})
        }
        "composite" => json!({
            "type": "superchart", "title": text("title"),
            "elements": elements.iter().map(e2b_chart).collect::<Vec<_>>(),
        }),
        _ => json!({"type": "unknown", "title": text("title"), "elements": []}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_charts_become_point_pairs() {
        let chart = json!({"type": "line", "title": "t", "x_label": "x", "y_label": "y",
            "elements": [{"label": "a", "x": [1, 2], "y": [3, 4]}]});
        let e2b = e2b_chart(&chart);
        assert_eq!(e2b["elements"][0]["points"], json!([[1, 3], [2, 4]]));
        assert_eq!(e2b["x_ticks"], json!([]));
        assert!(e2b["x_unit"].is_null());
        let composite = json!({"type": "composite", "title": "", "elements": [chart]});
        assert_eq!(e2b_chart(&composite)["type"], "superchart");
        assert_eq!(e2b_chart(&composite)["elements"][0]["type"], "line");
    }

    #[test]
    fn results_take_e2b_field_names() {
        let mut data = BTreeMap::new();
        data.insert("text/plain".to_string(), json!("2"));
        data.insert("image/png".to_string(), json!("aGVs\nbG8="));
        data.insert(DATAFRAME_MIME.to_string(), json!({"columns": ["a"]}));
        data.insert("application/x-odd".to_string(), json!("?"));
        let result: RichResult = serde_json::from_value(json!({
            "data": data, "metadata": {}, "is_main": true, "cut": []
        }))
        .unwrap();
        let line = result_line(&result);
        assert_eq!(line["text"], "2");
        assert_eq!(line["png"], "aGVsbG8=");
        assert_eq!(line["data"]["columns"][0], "a");
        assert_eq!(line["extra"]["application/x-odd"], "?");
        assert_eq!(line["is_main_result"], true);
    }
}
