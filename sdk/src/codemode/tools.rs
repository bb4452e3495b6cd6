//! Tools the code can call: definitions, argument checking and the prompt.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::hints::{python_hint, python_hint_for, sandbox_type_schema};
use super::schema::check;
use crate::sandbox::Sandbox;

#[cfg(test)]
use crate::sandbox::Type;

/// What a tool handler returns: a JSON value, or an error message that
/// becomes a `ToolError` in the code.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<Value, String>> + Send>>;

type Handler = Arc<dyn Fn(Map<String, Value>) -> ToolFuture + Send + Sync>;

/// The type of a tool parameter (its JSON Schema and Python hint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    /// `str`
    Str,
    /// `int`
    Int,
    /// `float` (ints accepted)
    Float,
    /// `bool`
    Bool,
    /// `list`
    List,
    /// `dict`
    Dict,
    /// anything JSON
    Any,
}

impl ParamType {
    fn schema(self) -> Value {
        match self {
            ParamType::Str => json!({"type": "string"}),
            ParamType::Int => json!({"type": "integer"}),
            ParamType::Float => json!({"type": "number"}),
            ParamType::Bool => json!({"type": "boolean"}),
            ParamType::List => json!({"type": "array"}),
            ParamType::Dict => json!({"type": "object"}),
            ParamType::Any => json!({}),
        }
    }
}

/// One parameter of a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolParam {
    /// Name (also its position for positional calls).
    pub name: String,
    /// JSON Schema of its values.
    pub schema: Value,
    /// Whether it must be given.
    pub required: bool,
    /// What it is for.
    pub description: String,
}

#[derive(Clone)]
pub(crate) enum ToolKind {
    Handler(Handler),
    Sandbox(Box<Sandbox>),
}

/// A function the code can call; it runs on the host (or, for sandbox tools,
/// in its own container).
///
/// ```
/// use dockhand::codemode::{ParamType, Tool};
/// let add = Tool::new("add", "Adds two numbers.")
///     .param("a", ParamType::Float, "first")
///     .param("b", ParamType::Float, "second")
///     .returns("float")
///     .handler(|args| async move {
///         let a = args["a"].as_f64().unwrap_or(0.0);
///         let b = args["b"].as_f64().unwrap_or(0.0);
///         Ok(serde_json::json!(a + b))
///     });
/// assert_eq!(add.name(), "add");
/// ```
#[derive(Clone)]
pub struct Tool {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) params: Vec<ToolParam>,
    pub(crate) returns: String,
    pub(crate) kind: ToolKind,
    pub(crate) approval: bool,
    /// Where the code imports it from: the module below `tools` and the
    /// name in it (see [`Tool::in_module`]).
    pub(crate) module: Option<(String, String)>,
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name)
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

impl Tool {
    /// A tool with a name (a Python identifier) and a description (its docstring).
    /// Add parameters, then a [`handler`](Tool::handler).
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Tool {
            name: name.into(),
            description: description.into(),
            params: Vec::new(),
            returns: "Any".into(),
            approval: false,
            module: None,
            kind: ToolKind::Handler(Arc::new(|_| {
                Box::pin(async { Err("this tool has no handler".to_string()) })
            })),
        }
    }

    /// A tool whose parameters are the fields of `A` (JSON Schema derived with
    /// `schemars`), handled by an async function of `A`.
    ///
    /// ```
    /// use dockhand::codemode::Tool;
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Args { city: String, days: Option<u32> }
    /// let forecast = Tool::typed("forecast", "Weather forecast.", |a: Args| async move {
    ///     Ok::<_, String>(format!("{} for {} days", a.city, a.days.unwrap_or(1)))
    /// });
    /// assert_eq!(forecast.params()[0].name, "city");
    /// assert!(forecast.params()[0].required && !forecast.params()[1].required);
    /// ```
    pub fn typed<A, R, E, F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        f: F,
    ) -> Self
    where
        A: DeserializeOwned + schemars::JsonSchema + Send + 'static,
        R: Serialize + 'static,
        E: std::fmt::Display + 'static,
        F: Fn(A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, E>> + Send + 'static,
    {
        let schema = schemars::SchemaGenerator::default().into_root_schema_for::<A>();
        let params = params_of(schema.as_value());
        let f = Arc::new(f);
        Tool {
            name: name.into(),
            description: description.into(),
            params,
            returns: "Any".into(),
            approval: false,
            module: None,
            kind: ToolKind::Handler(Arc::new(move |args| {
                let f = f.clone();
                Box::pin(async move {
                    let parsed: A = serde_json::from_value(Value::Object(args))
                        .map_err(|e| format!("bad arguments: {e}"))?;
                    let out = f(parsed).await.map_err(|e| e.to_string())?;
                    serde_json::to_value(out).map_err(|e| format!("result is not JSON: {e}"))
                })
            })),
        }
    }

    /// A tool whose parameters are the properties of a JSON Schema object
    /// (as MCP servers and OpenAPI operations describe their inputs):
    /// required ones first, each with its schema and description. Add a
    /// [`handler`](Tool::handler).
    ///
    /// ```
    /// use dockhand::codemode::Tool;
    /// let schema = serde_json::json!({"type": "object", "properties": {
    ///     "unit": {"type": "string", "description": "C or F"},
    ///     "city": {"type": "string"}
    /// }, "required": ["city"]});
    /// let t = Tool::from_json_schema("weather", "The weather.", &schema);
    /// assert!(t.python_signature().starts_with("def weather(city: str, unit: str | None = None)"));
    /// ```
    pub fn from_json_schema(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: &Value,
    ) -> Self {
        let mut tool = Tool::new(name, description);
        tool.params = params_of(input_schema);
        tool
    }

    /// A one-shot sandbox as a tool: its inputs are the parameters; its outputs
    /// the result (the single value, or a dict). Each call runs in its own
    /// container. File and Dir values are opaque handles in the code.
    pub fn sandbox(sandbox: Sandbox) -> Self {
        let params = sandbox
            .inputs()
            .iter()
            .map(|p| ToolParam {
                name: p.name.clone(),
                schema: sandbox_type_schema(p.ty),
                required: true,
                description: String::new(),
            })
            .collect();
        let returns = match sandbox.outputs() {
            [single] => python_hint_for(single.ty).to_string(),
            [] => "None".into(),
            _ => "dict".into(),
        };
        let outputs: Vec<String> = sandbox
            .outputs()
            .iter()
            .map(|p| format!("{}: {}", p.name, python_hint_for(p.ty)))
            .collect();
        let description = format!(
            "Runs the `{}` sandbox in its own container. Returns {}.",
            sandbox.name(),
            if outputs.is_empty() {
                "nothing".to_string()
            } else {
                outputs.join(", ")
            }
        );
        Tool {
            name: sandbox.name().replace(['-', '.'], "_"),
            description,
            params,
            returns,
            approval: false,
            module: None,
            kind: ToolKind::Sandbox(Box::new(sandbox)),
        }
    }

    /// Adds a required parameter.
    pub fn param(
        self,
        name: impl Into<String>,
        ty: ParamType,
        description: impl Into<String>,
    ) -> Self {
        self.push_param(name.into(), ty, true, description.into())
    }

    /// Adds an optional parameter.
    pub fn optional_param(
        self,
        name: impl Into<String>,
        ty: ParamType,
        description: impl Into<String>,
    ) -> Self {
        self.push_param(name.into(), ty, false, description.into())
    }

    fn push_param(
        mut self,
        name: String,
        ty: ParamType,
        required: bool,
        description: String,
    ) -> Self {
        self.params.push(ToolParam {
            name,
            schema: ty.schema(),
            required,
            description,
        });
        self
    }

    /// The Python type hint of the result, for the prompt (default `Any`).
    pub fn returns(mut self, hint: impl Into<String>) -> Self {
        self.returns = hint.into();
        self
    }

    /// Sets the async handler: it receives the arguments by name (checked
    /// against the parameters' schemas) and returns JSON or an error message.
    pub fn handler<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Map<String, Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, String>> + Send + 'static,
    {
        self.kind = ToolKind::Handler(Arc::new(move |args| Box::pin(f(args))));
        self
    }

    /// Calls of this tool need the application's approval: the execution
    /// stops at the call, with the tool's name and arguments, and comes back
    /// with [`Execution::suspended`](super::Execution::suspended) set. The
    /// application approves, rejects or answers it with
    /// [`CodeHost::resume`](super::CodeHost::resume), at once or after
    /// keeping it (it is durable).
    ///
    /// ```
    /// use dockhand::codemode::{ParamType, Tool};
    /// let refund = Tool::new("refund", "Refunds an order.")
    ///     .param("order", ParamType::Str, "order id")
    ///     .requires_approval();
    /// assert!(refund.needs_approval());
    /// ```
    pub fn requires_approval(mut self) -> Self {
        self.approval = true;
        self
    }

    /// Puts the tool in the module `tools.<path>` (dotted for deeper
    /// modules: `"github.issues"`), where the code imports it from:
    /// `from tools.github import search_issues`. A tool with no module is in
    /// `tools` itself. Either way the code may also call it by its name.
    /// Each part of the path must be a Python identifier;
    /// [`CodeHost::execute`](super::CodeHost::execute) refuses one that is
    /// not. Tools from an [`McpServer`](super::McpServer) are in a module named
    /// after their server.
    ///
    /// ```
    /// use dockhand::codemode::{Tool, Toolset};
    /// let tools = Toolset::new().tool(Tool::new("search_issues", "Finds issues.").in_module("github"));
    /// assert!(tools.module_source("tools.github").unwrap().contains("def search_issues()"));
    /// ```
    pub fn in_module(mut self, path: impl Into<String>) -> Self {
        let attr = self.name.clone();
        self.module = Some((path.into(), attr));
        self
    }

    /// Puts the tool in `tools.<path>` under the name `attr` (a server's own
    /// name for a tool whose name in the code has a prefix).
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn in_module_as(mut self, path: impl Into<String>, attr: impl Into<String>) -> Self {
        self.module = Some((path.into(), attr.into()));
        self
    }

    /// The module below `tools` the tool is in, if any (see [`Tool::in_module`]).
    pub fn module(&self) -> Option<&str> {
        self.module.as_ref().map(|(path, _)| path.as_str())
    }

    /// Whether calls need approval (see [`Tool::requires_approval`]).
    pub fn needs_approval(&self) -> bool {
        self.approval
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The parameters, in positional order.
    pub fn params(&self) -> &[ToolParam] {
        &self.params
    }

    /// The JSON Schema of the arguments object.
    pub fn schema(&self) -> Value {
        let properties: Map<String, Value> = self
            .params
            .iter()
            .map(|p| (p.name.clone(), p.schema.clone()))
            .collect();
        let required: Vec<&str> = self
            .params
            .iter()
            .filter(|p| p.required)
            .map(|p| p.name.as_str())
            .collect();
        json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
    }

    /// Maps a call's positional and keyword arguments to named arguments and
    /// checks them against the schema.
    pub fn bind(
        &self,
        args: &[Value],
        kwargs: &Map<String, Value>,
    ) -> Result<Map<String, Value>, String> {
        if args.len() > self.params.len() {
            return Err(format!(
                "{}() takes {} arguments but {} were given",
                self.name,
                self.params.len(),
                args.len()
            ));
        }
        let mut bound = Map::new();
        for (p, v) in self.params.iter().zip(args) {
            bound.insert(p.name.clone(), v.clone());
        }
        for (k, v) in kwargs {
            if !self.params.iter().any(|p| p.name == *k) {
                return Err(format!("{}() got an unexpected argument `{k}`", self.name));
            }
            if bound.insert(k.clone(), v.clone()).is_some() {
                return Err(format!("{}() got two values for `{k}`", self.name));
            }
        }
        for p in &self.params {
            match bound.get(&p.name) {
                None if p.required => {
                    return Err(format!("{}() is missing argument `{}`", self.name, p.name))
                }
                None => {}
                Some(v) => check(&p.schema, v)
                    .map_err(|why| format!("{}(): argument `{}` {why}", self.name, p.name))?,
            }
        }
        Ok(bound)
    }

    /// The Python signature with hints and docstring, for prompts.
    pub fn python_signature(&self) -> String {
        self.python_signature_as(&self.name)
    }

    /// [`Tool::python_signature`] under another name (its name in a module).
    pub(crate) fn python_signature_as(&self, name: &str) -> String {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|p| {
                let hint = python_hint(&p.schema);
                if p.required {
                    format!("{}: {hint}", p.name)
                } else {
                    format!("{}: {hint} | None = None", p.name)
                }
            })
            .collect();
        let mut doc = self.description.trim().to_string();
        let described: Vec<String> = self
            .params
            .iter()
            .filter(|p| !p.description.is_empty())
            .map(|p| format!("    {}: {}", p.name, p.description))
            .collect();
        if !described.is_empty() {
            doc.push_str("\n\nArgs:\n");
            doc.push_str(&described.join("\n"));
        }
        let doc = doc.replace("\"\"\"", "'''");
        let body: Vec<String> = doc
            .lines()
            .map(|l| {
                if l.trim().is_empty() {
                    String::new()
                } else {
                    format!("    {l}")
                }
            })
            .collect();
        format!(
            "def {}({}) -> {}:\n    \"\"\"{}\n    \"\"\"",
            name,
            params.join(", "),
            self.returns,
            body.join("\n").trim_start()
        )
    }
}

/// The properties of an object schema as parameters, required ones first.
fn params_of(schema: &Value) -> Vec<ToolParam> {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut params: Vec<ToolParam> = schema["properties"]
        .as_object()
        .map(|props| {
            props
                .iter()
                .map(|(name, s)| ToolParam {
                    name: name.clone(),
                    schema: s.clone(),
                    required: required.contains(&name.as_str()),
                    description: s["description"].as_str().unwrap_or_default().to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    // Python puts parameters without defaults first.
    params.sort_by_key(|p| !p.required);
    params
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::codemode) fn filter_tool() -> Tool {
        Tool::new("filter_data", "Keeps rows matching a condition.")
            .param("data", ParamType::List, "rows")
            .param("column", ParamType::Str, "column name")
            .param("operator", ParamType::Str, "one of == != > < >= <= in")
            .optional_param("value", ParamType::Any, "value to compare with")
            .returns("list[dict]")
    }

    #[test]
    fn positional_and_keyword_arguments_bind_by_name() {
        let t = filter_tool();
        let bound = t
            .bind(
                &[json!([]), json!("month")],
                &Map::from_iter([("operator".to_string(), json!("in"))]),
            )
            .unwrap();
        assert_eq!(
            Value::Object(bound),
            json!({"data": [], "column": "month", "operator": "in"})
        );
    }

    #[test]
    fn bad_arguments_are_explained() {
        let t = filter_tool();
        let err = t
            .bind(&[json!("not a list"), json!("m"), json!("==")], &Map::new())
            .unwrap_err();
        assert!(
            err.contains("argument `data` should be array, got str"),
            "{err}"
        );
        assert!(t
            .bind(&[json!([])], &Map::new())
            .unwrap_err()
            .contains("missing argument `column`"));
        let extra = Map::from_iter([("colour".to_string(), json!(1))]);
        assert!(t
            .bind(&[json!([]), json!("m"), json!("==")], &extra)
            .unwrap_err()
            .contains("unexpected argument `colour`"));
        let twice = Map::from_iter([("data".to_string(), json!([]))]);
        assert!(t
            .bind(&[json!([])], &twice)
            .unwrap_err()
            .contains("two values"));
        assert!(t
            .bind(
                &[json!(1), json!(2), json!(3), json!(4), json!(5)],
                &Map::new()
            )
            .is_err());
    }

    #[test]
    fn typed_tools_derive_their_schema() {
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Args {
            /// The dataset to read.
            dataset: String,
            limit: Option<u32>,
        }
        let t = Tool::typed("fetch", "Fetch.", |_: Args| async { Ok::<_, String>(1) });
        assert_eq!(t.params().len(), 2);
        assert_eq!(t.params()[0].description, "The dataset to read.");
        assert!(t
            .bind(&[json!(5)], &Map::new())
            .unwrap_err()
            .contains("should be string"));
        assert!(t
            .python_signature()
            .starts_with("def fetch(dataset: str, limit: "));
        // Ranges are checked as declared: a u32 is not negative.
        let negative = Map::from_iter([("limit".to_string(), json!(-1))]);
        let err = t.bind(&[json!("sales")], &negative).unwrap_err();
        assert!(
            err.contains("argument `limit` should be at least 0"),
            "{err}"
        );
    }

    #[test]
    fn sandboxes_become_tools_with_their_inputs_as_parameters() {
        let sb = Sandbox::code("double-it", "result = x * 2")
            .input("x", Type::Int)
            .output("result", Type::Int)
            .build()
            .unwrap();
        let t = Tool::sandbox(sb);
        assert_eq!(t.name(), "double_it");
        assert_eq!(t.returns, "int");
        assert!(t.bind(&[json!("x")], &Map::new()).is_err());
        assert!(t.bind(&[json!(4)], &Map::new()).is_ok());
    }
}
