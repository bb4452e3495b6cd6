//! From schemas and sandbox types to tool parameters and Python type hints
//! (for prompts and the type checker's stubs).

use serde_json::{json, Value};

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
