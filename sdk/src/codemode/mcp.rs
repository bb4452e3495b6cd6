//! MCP servers as code-mode tools (feature `mcp`): dockhand connects to
//! each server with rmcp, the official Rust MCP SDK, as a client (a stdio
//! command, or a streamable HTTP URL), lists its tools, and makes each a
//! [`Tool`] whose parameters and stub come from the tool's JSON Schema.
//! Calls go through the same bridge, limits, fan-out and approvals as
//! native tools; each has a deadline and a cap on its result's size, so a
//! server that hangs, dies or floods gives the code a `ToolError` and
//! nothing else.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, RawContent};
use rmcp::service::{RunningService, ServiceExt};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::RoleClient;
use serde_json::{json, Map, Value};

use super::tools::Tool;
use crate::error::{Error, Result};
use crate::util::is_identifier;

/// How to reach an MCP server, and the limits its calls run under.
///
/// ```
/// use std::time::Duration;
/// use dockhand::codemode::McpServer;
/// let time = McpServer::stdio("time", "python3", ["-m", "mcp_server_time"])
///     .env("TZ", "UTC")
///     .call_timeout(Duration::from_secs(10))
///     .requires_approval(["convert_time"]);
/// assert_eq!(time.name(), "time");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct McpServer {
    name: String,
    transport: Transport,
    prefix: Option<String>,
    connect_timeout: Duration,
    call_timeout: Duration,
    max_result_bytes: usize,
    approval: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Transport {
    Stdio {
        program: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<std::path::PathBuf>,
    },
    Http {
        url: String,
    },
}

impl McpServer {
    /// A server dockhand starts as a child process and speaks to over its
    /// stdin and stdout. It runs on the host, as the application's user:
    /// name servers you trust. It is stopped (with its process group) when
    /// the last of its tools is dropped.
    pub fn stdio<I, S>(name: impl Into<String>, program: impl Into<String>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with(
            name,
            Transport::Stdio {
                program: program.into(),
                args: args.into_iter().map(Into::into).collect(),
                env: BTreeMap::new(),
                cwd: None,
            },
        )
    }

    /// A server reached over MCP's streamable HTTP at `url` (`http://`).
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self::with(name, Transport::Http { url: url.into() })
    }

    fn with(name: impl Into<String>, transport: Transport) -> Self {
        McpServer {
            name: name.into(),
            transport,
            prefix: None,
            connect_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(60),
            max_result_bytes: 1 << 20,
            approval: Vec::new(),
        }
    }

    /// The server's name, as errors and records say it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets an environment variable of a stdio server.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let Transport::Stdio { env, .. } = &mut self.transport {
            env.insert(key.into(), value.into());
        }
        self
    }

    /// The working directory of a stdio server.
    pub fn cwd(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        if let Transport::Stdio { cwd, .. } = &mut self.transport {
            *cwd = Some(dir.into());
        }
        self
    }

    /// Names its tools `<prefix>_<tool>` in the code (to keep two servers'
    /// tools apart).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// How long starting and initializing may take (default 30 s).
    pub fn connect_timeout(mut self, limit: Duration) -> Self {
        self.connect_timeout = limit;
        self
    }

    /// How long one call may take (default 60 s); past it the code gets a
    /// `ToolError`.
    pub fn call_timeout(mut self, limit: Duration) -> Self {
        self.call_timeout = limit;
        self
    }

    /// Bytes of JSON one result may take (default 1 MiB); a larger one is
    /// a `ToolError`.
    pub fn max_result_bytes(mut self, bytes: usize) -> Self {
        self.max_result_bytes = bytes;
        self
    }

    /// These of its tools (by the server's names; `"*"` for all) need
    /// approval (see [`Tool::requires_approval`]).
    pub fn requires_approval<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.approval.extend(tools.into_iter().map(Into::into));
        self
    }

    /// The servers of an MCP configuration in the shape MCP clients share:
    /// `{"mcpServers": {"<name>": {"command", "args", "env", "cwd"} | {"url"}}}`,
    /// each with optional `"requiresApproval"` (a list of tool names, or
    /// `true` for all), `"prefix"` and `"timeoutSeconds"` (per call).
    ///
    /// ```
    /// use dockhand::codemode::McpServer;
    /// let config = serde_json::json!({"mcpServers": {
    ///     "time": {"command": "python3", "args": ["-m", "mcp_server_time"], "requiresApproval": true},
    ///     "docs": {"url": "http://127.0.0.1:8000/mcp"}
    /// }});
    /// let servers = McpServer::from_config(&config).unwrap();
    /// assert_eq!(servers.len(), 2);
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSpec`] naming the server and the field that is wrong.
    pub fn from_config(config: &Value) -> Result<Vec<McpServer>> {
        let bad = |message: String| Error::spec("MCP configuration", message);
        let servers = config
            .get("mcpServers")
            .and_then(Value::as_object)
            .ok_or_else(|| bad("it has no \"mcpServers\" object".into()))?;
        let strings = |v: Option<&Value>, what: &str, name: &str| -> Result<Vec<String>> {
            match v {
                None => Ok(Vec::new()),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|i| {
                        i.as_str().map(String::from).ok_or_else(|| {
                            bad(format!(
                                "server `{name}`: \"{what}\" must be a list of strings"
                            ))
                        })
                    })
                    .collect(),
                Some(_) => Err(bad(format!(
                    "server `{name}`: \"{what}\" must be a list of strings"
                ))),
            }
        };
        let mut out = Vec::with_capacity(servers.len());
        for (name, entry) in servers {
            let mut server = match (entry.get("command"), entry.get("url")) {
                (Some(Value::String(command)), None) => {
                    let args = strings(entry.get("args"), "args", name)?;
                    let mut server = McpServer::stdio(name, command, args);
                    for (k, v) in entry
                        .get("env")
                        .and_then(Value::as_object)
                        .into_iter()
                        .flatten()
                    {
                        let v = v.as_str().ok_or_else(|| {
                            bad(format!("server `{name}`: env `{k}` must be a string"))
                        })?;
                        server = server.env(k, v);
                    }
                    if let Some(cwd) = entry.get("cwd").and_then(Value::as_str) {
                        server = server.cwd(cwd);
                    }
                    server
                }
                (None, Some(Value::String(url))) => McpServer::http(name, url),
                _ => {
                    return Err(bad(format!(
                        "server `{name}` needs either \"command\" (a string) or \"url\" (a string)"
                    )))
                }
            };
            match entry.get("requiresApproval") {
                Some(Value::Bool(true)) => server = server.requires_approval(["*"]),
                Some(Value::Bool(false)) | None => {}
                list => server = server.requires_approval(strings(list, "requiresApproval", name)?),
            }
            if let Some(prefix) = entry.get("prefix").and_then(Value::as_str) {
                server = server.prefix(prefix);
            }
            if let Some(seconds) = entry.get("timeoutSeconds") {
                let seconds = seconds
                    .as_f64()
                    .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e6)
                    .ok_or_else(|| {
                        bad(format!(
                            "server `{name}`: \"timeoutSeconds\" must be a positive number"
                        ))
                    })?;
                server = server.call_timeout(Duration::from_secs_f64(seconds));
            }
            out.push(server);
        }
        Ok(out)
    }

    /// [`McpServer::from_config`] of a JSON file.
    pub fn from_config_file(path: impl AsRef<std::path::Path>) -> Result<Vec<McpServer>> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        let config: Value = serde_json::from_str(&text).map_err(|e| {
            Error::spec(
                "MCP configuration",
                format!("{} is not JSON: {e}", path.display()),
            )
        })?;
        Self::from_config(&config)
    }

    fn failed(&self, reason: impl Into<String>) -> Error {
        Error::McpServer {
            server: self.name.clone(),
            reason: reason.into(),
        }
    }

    /// Starts or reaches the server, initializes the session, and turns its
    /// tools into code-mode tools.
    ///
    /// # Errors
    ///
    /// [`Error::McpServer`] if it cannot be started or reached, does not
    /// initialize or list its tools within the connect timeout, or names a
    /// tool that is not a Python identifier (after `-` and `.` become `_`).
    pub async fn connect(&self) -> Result<Vec<Tool>> {
        let connecting = async {
            let service = self.start().await?;
            let listed = service
                .list_all_tools()
                .await
                .map_err(|e| self.failed(format!("listing its tools failed: {e}")))?;
            Ok::<_, Error>((service, listed))
        };
        let (service, listed) = tokio::time::timeout(self.connect_timeout, connecting)
            .await
            .map_err(|_| {
                self.failed(format!(
                    "it did not start and list its tools within {:?}",
                    self.connect_timeout
                ))
            })??;
        let service = Arc::new(service);
        let mut tools = Vec::with_capacity(listed.len());
        for listed in listed {
            let remote = listed.name.to_string();
            let local = match &self.prefix {
                Some(prefix) => format!("{prefix}_{remote}"),
                None => remote.clone(),
            }
            .replace(['-', '.'], "_");
            if !is_identifier(&local) {
                return Err(self.failed(format!("its tool `{remote}` has no name code can call")));
            }
            let description = listed.description.as_deref().unwrap_or_default();
            let schema = Value::Object(listed.input_schema.as_ref().clone());
            // MCP's Python SDK wraps a result that is not an object as
            // `{"result": value}` and says so in the output schema.
            let wrapped = listed.output_schema.as_deref().is_some_and(|out| {
                out.get("properties")
                    .and_then(Value::as_object)
                    .is_some_and(|p| p.len() == 1 && p.contains_key("result"))
            });
            let call = Call {
                wrapped,
                service: service.clone(),
                server: self.name.clone(),
                tool: remote.clone(),
                timeout: self.call_timeout,
                max_bytes: self.max_result_bytes,
            };
            // What the stub says it returns, from the output schema if any.
            let returns = match listed.output_schema.as_deref() {
                Some(out) if wrapped => super::hints::python_hint(&out["properties"]["result"]),
                Some(_) => "dict[str, Any]".to_string(),
                None => "Any".to_string(),
            };
            let mut tool = Tool::from_json_schema(local.clone(), description, &schema)
                .returns(returns)
                .handler(move |args| call.clone().run(args));
            // `tools.<server>`, where the tool has the server's own name.
            let module = self.name.replace(['-', '.'], "_");
            let attr = remote.replace(['-', '.'], "_");
            if is_identifier(&module) && is_identifier(&attr) {
                tool = tool.in_module_as(module, attr);
            }
            if self.approval.iter().any(|a| a == "*" || *a == remote) {
                tool = tool.requires_approval();
            }
            tools.push(tool);
        }
        Ok(tools)
    }

    async fn start(&self) -> Result<RunningService<RoleClient, ()>> {
        match &self.transport {
            Transport::Stdio {
                program,
                args,
                env,
                cwd,
            } => {
                let mut command = tokio::process::Command::new(program);
                command.args(args).envs(env);
                if let Some(dir) = cwd {
                    command.current_dir(dir);
                }
                let mut wrapped = process_wrap::tokio::CommandWrap::from(command);
                // Its children go with it.
                wrapped.wrap(process_wrap::tokio::ProcessGroup::leader());
                let (transport, stderr) = TokioChildProcess::builder(wrapped)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|e| self.failed(format!("`{program}` could not be started: {e}")))?;
                if let Some(stderr) = stderr {
                    tokio::spawn(log_stderr(self.name.clone(), stderr));
                }
                ().serve(transport)
                    .await
                    .map_err(|e| self.failed(format!("it did not initialize: {e}")))
            }
            Transport::Http { url } => {
                let transport = StreamableHttpClientTransport::from_uri(url.as_str());
                ().serve(transport)
                    .await
                    .map_err(|e| self.failed(format!("{url} did not initialize: {e}")))
            }
        }
    }
}

/// A stdio server's stderr goes to `tracing` (debug), not to the
/// application's own stderr; it is drained so the server never blocks on it.
async fn log_stderr(server: String, mut stderr: tokio::process::ChildStderr) {
    use tokio::io::AsyncReadExt;
    let mut buffer = vec![0u8; 4096];
    while let Ok(n) = stderr.read(&mut buffer).await {
        if n == 0 {
            return;
        }
        let text = String::from_utf8_lossy(&buffer[..n]);
        tracing::debug!(server = %server, "MCP server stderr: {}", text.trim_end());
    }
}

/// One tool of a connected server.
#[derive(Clone)]
struct Call {
    /// The value is the structured result's `result`.
    wrapped: bool,
    service: Arc<RunningService<RoleClient, ()>>,
    server: String,
    tool: String,
    timeout: Duration,
    max_bytes: usize,
}

impl Call {
    async fn run(self, args: Map<String, Value>) -> std::result::Result<Value, String> {
        let request = CallToolRequestParams::new(self.tool.clone()).with_arguments(args);
        let answered = tokio::time::timeout(self.timeout, self.service.call_tool(request)).await;
        let result = match answered {
            Err(_) => {
                return Err(format!(
                    "the MCP server `{}` did not answer {}() within {:?}",
                    self.server, self.tool, self.timeout
                ))
            }
            Ok(Err(e)) => {
                return Err(format!(
                    "the MCP server `{}` failed on {}(): {e}",
                    self.server, self.tool
                ))
            }
            Ok(Ok(result)) => result,
        };
        let size = serde_json::to_vec(&result).map_or(usize::MAX, |b| b.len());
        if size > self.max_bytes {
            return Err(format!(
                "{}() of the MCP server `{}` returned {size} bytes; the limit is {}",
                self.tool, self.server, self.max_bytes
            ));
        }
        let mut value = value_of(result)?;
        if self.wrapped {
            if let Some(inner) = value.as_object_mut().and_then(|o| o.remove("result")) {
                value = inner;
            }
        }
        Ok(value)
    }
}

/// A call's result as the code sees it: its structured content if it has
/// one, else its text (parsed when it is JSON); several contents become a
/// list. A result flagged as an error is the tool's error.
fn value_of(result: CallToolResult) -> std::result::Result<Value, String> {
    let mut parts: Vec<Value> = result
        .content
        .iter()
        .map(|c| match &c.raw {
            RawContent::Text(t) => {
                serde_json::from_str(&t.text).unwrap_or_else(|_| Value::String(t.text.clone()))
            }
            RawContent::Image(i) => {
                json!({"type": "image", "mimeType": i.mime_type, "data": i.data})
            }
            other => serde_json::to_value(other).unwrap_or(Value::Null),
        })
        .collect();
    if result.is_error == Some(true) {
        let text: Vec<String> = parts
            .iter()
            .map(|p| match p {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        return Err(text.join("\n"));
    }
    if let Some(structured) = result.structured_content {
        return Ok(structured);
    }
    Ok(match parts.len() {
        0 => Value::Null,
        1 => parts.remove(0),
        _ => Value::Array(parts),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::Content;

    #[test]
    fn configurations_name_what_is_wrong() {
        let ok = json!({"mcpServers": {"a": {"command": "x", "args": ["1"], "env": {"K": "v"},
            "requiresApproval": ["t"], "prefix": "p", "timeoutSeconds": 5}}});
        let servers = McpServer::from_config(&ok).unwrap();
        assert_eq!(servers[0].approval, ["t"]);
        assert_eq!(servers[0].call_timeout, Duration::from_secs(5));
        for (config, says) in [
            (json!({}), "mcpServers"),
            (json!({"mcpServers": {"b": {}}}), "server `b` needs"),
            (
                json!({"mcpServers": {"c": {"command": "x", "args": [1]}}}),
                "\"args\"",
            ),
            (
                json!({"mcpServers": {"d": {"url": "u", "timeoutSeconds": -1}}}),
                "timeoutSeconds",
            ),
        ] {
            let err = McpServer::from_config(&config).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
    }

    #[test]
    fn results_become_values_and_errors() {
        let text = CallToolResult::success(vec![Content::text(r#"{"a": 1}"#)]);
        assert_eq!(value_of(text).unwrap(), json!({"a": 1}));
        let plain = CallToolResult::success(vec![Content::text("hi"), Content::text("there")]);
        assert_eq!(value_of(plain).unwrap(), json!(["hi", "there"]));
        let failed = CallToolResult::error(vec![Content::text("no such city")]);
        assert_eq!(value_of(failed).unwrap_err(), "no such city");
        let structured = CallToolResult::structured(json!({"t": 3}));
        assert_eq!(value_of(structured).unwrap(), json!({"t": 3}));
    }
}
