//! Checking tool arguments against the JSON Schema subset tools use.

use serde_json::Value;

/// Checks a value against the subset of JSON Schema tools use: `type` (one
/// or several), `enum`, `properties`/`required` of objects, `items` of arrays.
pub fn check(schema: &Value, value: &Value) -> Result<(), String> {
    let type_ok = |t: &str| match t {
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        _ => true,
    };
    match &schema["type"] {
        Value::String(t) if !type_ok(t) => {
            return Err(format!("should be {t}, got {}", kind(value)))
        }
        Value::Array(ts) if !ts.iter().filter_map(Value::as_str).any(type_ok) => {
            let names: Vec<&str> = ts.iter().filter_map(Value::as_str).collect();
            return Err(format!(
                "should be {}, got {}",
                names.join(" or "),
                kind(value)
            ));
        }
        _ => {}
    }
    if let Some(options) = schema["enum"].as_array() {
        if !options.contains(value) {
            return Err(format!(
                "should be one of {}",
                Value::Array(options.clone())
            ));
        }
    }
    if let (Some(obj), Some(props)) = (value.as_object(), schema["properties"].as_object()) {
        for (k, sub) in props {
            if let Some(v) = obj.get(k) {
                check(sub, v).map_err(|why| format!("field `{k}` {why}"))?;
            }
        }
    }
    if let (Some(obj), Some(required)) = (value.as_object(), schema["required"].as_array()) {
        if let Some(missing) = required
            .iter()
            .filter_map(Value::as_str)
            .find(|k| !obj.contains_key(*k))
        {
            return Err(format!("is missing field `{missing}`"));
        }
    }
    if let (Some(items), Some(item_schema)) = (value.as_array(), schema.get("items")) {
        for (i, v) in items.iter().enumerate() {
            check(item_schema, v).map_err(|why| format!("item {i} {why}"))?;
        }
    }
    Ok(())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "None",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schema_checks_nested_values() {
        let schema = json!({"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "integer"}}}, "required": ["xs"]});
        assert!(check(&schema, &json!({"xs": [1, 2]})).is_ok());
        assert!(check(&schema, &json!({"xs": [1, "2"]}))
            .unwrap_err()
            .contains("item 1"));
        assert!(check(&schema, &json!({}))
            .unwrap_err()
            .contains("missing field `xs`"));
        assert!(check(&json!({"type": ["string", "null"]}), &Value::Null).is_ok());
        assert!(check(&json!({"enum": ["a", "b"]}), &json!("c")).is_err());
        assert!(check(&json!({"type": "number"}), &json!(3)).is_ok());
    }
}
