//! Checking tool arguments against the JSON Schema subset tools use.

use serde_json::Value;

/// Checks a value against the subset of JSON Schema tools use: `type` (one
/// or several), `enum`, `properties`/`required`/`additionalProperties` of
/// objects, `items`/`minItems`/`maxItems` of arrays, `minimum`/`maximum`
/// (and their exclusive forms) of numbers, `minLength`/`maxLength` of
/// strings.
///
/// ```
/// use serde_json::json;
/// let schema = json!({"type": "object", "properties": {
///     "timeout": {"type": "number", "exclusiveMinimum": 0}
/// }, "additionalProperties": false});
/// assert!(dockhand::codemode::check_schema(&schema, &json!({"timeout": 2})).is_ok());
/// assert!(dockhand::codemode::check_schema(&schema, &json!({"timeout": -5})).is_err());
/// assert!(dockhand::codemode::check_schema(&schema, &json!({"timeout_s": 2})).is_err());
/// ```
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
    check_range(schema, value)?;
    if let Some(obj) = value.as_object() {
        let props = schema["properties"].as_object();
        for (k, v) in obj {
            match (
                props.and_then(|p| p.get(k)),
                &schema["additionalProperties"],
            ) {
                (Some(sub), _) => check(sub, v).map_err(|why| format!("field `{k}` {why}"))?,
                (None, Value::Bool(false)) => {
                    let known: Vec<String> = props
                        .map(|p| p.keys().map(|k| format!("`{k}`")).collect())
                        .unwrap_or_default();
                    return Err(format!(
                        "has an unknown field `{k}` (known: {})",
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ));
                }
                (None, extra @ Value::Object(_)) => {
                    check(extra, v).map_err(|why| format!("field `{k}` {why}"))?
                }
                (None, _) => {}
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

/// Bounds on numbers, string lengths and array lengths.
fn check_range(schema: &Value, value: &Value) -> Result<(), String> {
    if let Some(n) = value.as_f64() {
        let bound = |key: &str| schema.get(key).and_then(Value::as_f64);
        if let Some(min) = bound("minimum").filter(|m| n < *m) {
            return Err(format!("should be at least {min}, got {n}"));
        }
        if let Some(min) = bound("exclusiveMinimum").filter(|m| n <= *m) {
            return Err(format!("should be more than {min}, got {n}"));
        }
        if let Some(max) = bound("maximum").filter(|m| n > *m) {
            return Err(format!("should be at most {max}, got {n}"));
        }
        if let Some(max) = bound("exclusiveMaximum").filter(|m| n >= *m) {
            return Err(format!("should be less than {max}, got {n}"));
        }
    }
    let length = match value {
        Value::String(s) => Some((s.chars().count(), "minLength", "maxLength", "characters")),
        Value::Array(a) => Some((a.len(), "minItems", "maxItems", "items")),
        _ => None,
    };
    if let Some((len, min_key, max_key, unit)) = length {
        let bound = |key: &str| schema.get(key).and_then(Value::as_u64);
        if let Some(min) = bound(min_key).filter(|m| (len as u64) < *m) {
            return Err(format!("should have at least {min} {unit}, has {len}"));
        }
        if let Some(max) = bound(max_key).filter(|m| (len as u64) > *m) {
            return Err(format!("should have at most {max} {unit}, has {len}"));
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

    #[test]
    fn unknown_fields_and_ranges_are_refused() {
        let schema = json!({"type": "object", "properties": {
            "n": {"type": "integer", "minimum": 1, "maximum": 10},
            "t": {"type": "number", "exclusiveMinimum": 0},
            "s": {"type": "string", "minLength": 1},
            "xs": {"type": "array", "maxItems": 2}
        }, "additionalProperties": false});
        assert!(check(&schema, &json!({"n": 1, "t": 0.5, "s": "a", "xs": [1, 2]})).is_ok());
        let unknown = check(&schema, &json!({"timeout_s": 1})).unwrap_err();
        assert!(
            unknown.contains("`timeout_s`") && unknown.contains("`t`"),
            "{unknown}"
        );
        for bad in [
            json!({"n": 0}),
            json!({"n": 11}),
            json!({"t": 0}),
            json!({"t": -5}),
            json!({"s": ""}),
            json!({"xs": [1, 2, 3]}),
        ] {
            assert!(check(&schema, &bad).is_err(), "{bad}");
        }
        // Extra fields are allowed unless the schema says otherwise.
        let open = json!({"type": "object", "properties": {}});
        assert!(check(&open, &json!({"x": 1})).is_ok());
        let typed = json!({"type": "object", "additionalProperties": {"type": "integer"}});
        assert!(check(&typed, &json!({"x": "1"})).is_err());
    }
}
