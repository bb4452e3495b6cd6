//! From schemas and sandbox types to tool parameters and Python type hints
//! (for prompts and the type checker's stubs).

use serde_json::{json, Value};

use super::tools::ToolParam;
use crate::sandbox::Type;

pub(crate) fn sandbox_type_schema(ty: Type) -> Value {
    match ty {
        Type::Int => json!({"type": "integer"}),
        Type::Float | Type::Timedelta => json!({"type": "number"}),
        Type::Str | Type::Datetime => json!({"type": "string"}),
        Type::Bool => json!({"type": "boolean"}),
        Type::Json => json!({}),
        Type::File | Type::Dir => json!({"type": "object", "required": ["$handle"]}),
    }
}

pub(crate) fn python_hint_for(ty: Type) -> &'static str {
    match ty {
        Type::Int => "int",
        Type::Float => "float",
        Type::Str => "str",
        Type::Bool => "bool",
        // Hints stay plain names: they go into stubs the type checker parses.
        Type::Datetime => "str",
        Type::Timedelta => "float",
        Type::Json => "Any",
        Type::File => "FileHandle",
        Type::Dir => "DirHandle",
    }
}

/// The properties of an object schema as parameters, required ones first.
pub(crate) fn params_of(schema: &Value) -> Vec<ToolParam> {
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

pub(crate) fn python_hint(schema: &Value) -> String {
    match schema["type"].as_str() {
        Some("string") => "str".into(),
        Some("integer") => "int".into(),
        Some("number") => "float".into(),
        Some("boolean") => "bool".into(),
        Some("array") => "list".into(),
        Some("object")
            if schema["required"]
                .as_array()
                .is_some_and(|r| r.iter().any(|v| v == "$handle")) =>
        {
            "Handle".into()
        }
        Some("object") => "dict".into(),
        _ => "Any".into(),
    }
}
