//! The inputs an execution's code starts with: a JSON object whose keys
//! become variables.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::util::is_identifier;

pub(super) fn code_inputs(inputs: impl Serialize) -> Result<Map<String, Value>> {
    let inputs = match serde_json::to_value(inputs) {
        Ok(Value::Object(map)) => map,
        Ok(Value::Null) => Map::new(),
        Ok(other) => {
            return Err(Error::spec(
                "code inputs",
                format!("inputs must be a JSON object of variables, got {other}"),
            ))
        }
        Err(e) => return Err(Error::spec("code inputs", e.to_string())),
    };
    if let Some(bad) = inputs.keys().find(|k| !is_variable_name(k)) {
        return Err(Error::spec(
            "code inputs",
            format!("`{bad}` is not a usable variable name"),
        ));
    }
    Ok(inputs)
}

fn is_variable_name(name: &str) -> bool {
    is_identifier(name) && !name.starts_with("__") && !name.starts_with("_dh")
}
