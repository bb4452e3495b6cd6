//! Types and values that cross the container boundary.
//!
//! Each value has a text form, written to `/var/inputs/<name>` and read back
//! from `/var/outputs/<name>`: ints in decimal, floats as Rust prints them
//! (Python's `float()` reads every one, `inf` and `NaN` included), bools as
//! `true`/`false`, datetimes in ISO 8601, timedeltas as whole microseconds,
//! JSON as JSON text. Files and directories are copied as they are.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::error::{Error, Result};

/// The declared type of an input or output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Type {
    /// A 64-bit integer (Python `int`).
    Int,
    /// A 64-bit float (Python `float`).
    Float,
    /// UTF-8 text (Python `str`).
    Str,
    /// Python `bool`.
    Bool,
    /// A date and time without time zone (Python `datetime.datetime`).
    Datetime,
    /// A non-negative duration (Python `datetime.timedelta`).
    Timedelta,
    /// A file; in Python, its path (a `str`).
    File,
    /// A directory tree; in Python, its path (a `str`).
    Dir,
    /// Any JSON value: lists and dicts included (Python `json.loads` result).
    Json,
}

impl Type {
    /// The name used in errors and in the Python type hints of prompts.
    pub fn name(self) -> &'static str {
        match self {
            Type::Int => "int",
            Type::Float => "float",
            Type::Str => "str",
            Type::Bool => "bool",
            Type::Datetime => "datetime",
            Type::Timedelta => "timedelta",
            Type::File => "File",
            Type::Dir => "Dir",
            Type::Json => "json",
        }
    }

    /// Whether values of this type are files or trees rather than text.
    pub fn is_path(self) -> bool {
        matches!(self, Type::File | Type::Dir)
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A value crossing the container boundary.
///
/// ```
/// use dockhand::Value;
/// let v: Value = 21.into();
/// assert_eq!(v.to_text().unwrap(), "21");
/// assert_eq!(Value::parse(dockhand::Type::Int, "42").unwrap(), Value::Int(42));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "lowercase")]
pub enum Value {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// Text.
    Str(String),
    /// A boolean.
    Bool(bool),
    /// A date and time (no time zone; UTC by convention).
    Datetime(NaiveDateTime),
    /// A duration.
    Timedelta(Duration),
    /// A file on the host.
    File(PathBuf),
    /// A directory on the host.
    Dir(PathBuf),
    /// A JSON value.
    Json(serde_json::Value),
}

impl Value {
    /// The type of this value.
    pub fn type_of(&self) -> Type {
        match self {
            Value::Int(_) => Type::Int,
            Value::Float(_) => Type::Float,
            Value::Str(_) => Type::Str,
            Value::Bool(_) => Type::Bool,
            Value::Datetime(_) => Type::Datetime,
            Value::Timedelta(_) => Type::Timedelta,
            Value::File(_) => Type::File,
            Value::Dir(_) => Type::Dir,
            Value::Json(_) => Type::Json,
        }
    }

    /// The Rust type [`Outputs::get`](crate::Outputs::get) reads this value as.
    pub fn rust_type(&self) -> &'static str {
        match self {
            Value::Int(_) => "i64",
            Value::Float(_) => "f64",
            Value::Str(_) => "String",
            Value::Bool(_) => "bool",
            Value::Datetime(_) => "NaiveDateTime or DateTime<Utc>",
            Value::Timedelta(_) => "Duration",
            Value::File(_) | Value::Dir(_) => "PathBuf",
            Value::Json(_) => "serde_json::Value, or a serde type with `.json::<T>()`",
        }
    }

    /// A file input.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Value::File(path.into())
    }

    /// A directory input.
    pub fn dir(path: impl Into<PathBuf>) -> Self {
        Value::Dir(path.into())
    }

    /// Any serialisable value, as JSON.
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<Self> {
        serde_json::to_value(value)
            .map(Value::Json)
            .map_err(|e| Error::spec("value", format!("cannot serialise as JSON: {e}")))
    }

    /// Converts this value to `expected` where that loses nothing (an int for a
    /// float, anything for JSON), or says why it cannot.
    pub fn coerce(self, expected: Type) -> std::result::Result<Value, Value> {
        match (self, expected) {
            (v, t) if v.type_of() == t => Ok(v),
            (Value::Int(i), Type::Float) => Ok(Value::Float(i as f64)),
            (Value::Int(i), Type::Json) => Ok(Value::Json(i.into())),
            (Value::Float(f), Type::Json) => serde_json::Number::from_f64(f)
                .map(|n| Value::Json(n.into()))
                .ok_or(Value::Float(f)),
            (Value::Str(s), Type::Json) => Ok(Value::Json(s.into())),
            (Value::Bool(b), Type::Json) => Ok(Value::Json(b.into())),
            (v, _) => Err(v),
        }
    }

    /// The text written to `/var/inputs/<name>`; `None` for files and directories.
    pub fn to_text(&self) -> Option<String> {
        Some(match self {
            Value::Int(i) => i.to_string(),
            Value::Float(f) => format!("{f:?}"),
            Value::Str(s) => s.clone(),
            Value::Bool(b) => b.to_string(),
            Value::Datetime(d) => d.format("%Y-%m-%dT%H:%M:%S%.f").to_string(),
            Value::Timedelta(d) => d.as_micros().to_string(),
            Value::Json(j) => j.to_string(),
            Value::File(_) | Value::Dir(_) => return None,
        })
    }

    /// Parses the text form of a value of type `ty` (not for File/Dir).
    pub fn parse(ty: Type, text: &str) -> std::result::Result<Value, String> {
        let t = text.trim();
        let bad = || format!("not a valid {ty}");
        Ok(match ty {
            Type::Int => Value::Int(t.parse().map_err(|_| bad())?),
            Type::Float => Value::Float(parse_float(t).ok_or_else(bad)?),
            Type::Str => Value::Str(text.to_string()),
            Type::Bool => Value::Bool(match t {
                "true" | "True" | "1" => true,
                "false" | "False" | "0" => false,
                _ => return Err(bad()),
            }),
            Type::Datetime => Value::Datetime(parse_datetime(t).ok_or_else(bad)?),
            Type::Timedelta => {
                let micros: u64 = t.parse().map_err(|_| bad())?;
                Value::Timedelta(Duration::from_micros(micros))
            }
            Type::Json => {
                Value::Json(serde_json::from_str(t).map_err(|e| format!("invalid JSON: {e}"))?)
            }
            Type::File | Type::Dir => return Err(format!("{ty} values have no text form")),
        })
    }
}

fn parse_float(t: &str) -> Option<f64> {
    match t {
        "inf" | "Infinity" => Some(f64::INFINITY),
        "-inf" | "-Infinity" => Some(f64::NEG_INFINITY),
        "nan" | "NaN" => Some(f64::NAN),
        _ => t.parse().ok(),
    }
}

/// ISO 8601 with or without fraction and offset (an offset is converted to UTC).
fn parse_datetime(t: &str) -> Option<NaiveDateTime> {
    if let Ok(d) = DateTime::parse_from_rfc3339(t) {
        return Some(d.naive_utc());
    }
    NaiveDateTime::parse_from_str(t, "%Y-%m-%dT%H:%M:%S%.f")
        .or_else(|_| NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S%.f"))
        .ok()
        .or_else(|| {
            chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
        })
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Self { Value::Int(v as i64) }
        }
    )*};
}
from_int!(i8, i16, i32, i64, u8, u16, u32);

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}
impl From<f32> for Value {
    fn from(v: f32) -> Self {
        Value::Float(v as f64)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Str(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Str(v.to_string())
    }
}
impl From<NaiveDateTime> for Value {
    fn from(v: NaiveDateTime) -> Self {
        Value::Datetime(v)
    }
}
impl From<DateTime<Utc>> for Value {
    fn from(v: DateTime<Utc>) -> Self {
        Value::Datetime(v.naive_utc())
    }
}
impl From<Duration> for Value {
    fn from(v: Duration) -> Self {
        Value::Timedelta(v)
    }
}
impl From<serde_json::Value> for Value {
    fn from(v: serde_json::Value) -> Self {
        Value::Json(v)
    }
}

/// Rust types an output can be read as (see [`Outputs::get`](crate::Outputs::get)).
pub trait FromValue: Sized {
    /// Converts, or returns the name of the type that was expected.
    fn from_value(value: &Value) -> std::result::Result<Self, &'static str>;
}

macro_rules! from_value {
    ($t:ty, $name:literal, $($pat:pat => $e:expr),+) => {
        impl FromValue for $t {
            fn from_value(value: &Value) -> std::result::Result<Self, &'static str> {
                match value { $($pat => Ok($e),)+ _ => Err($name) }
            }
        }
    };
}
from_value!(i64, "int", Value::Int(i) => *i);
from_value!(f64, "float", Value::Float(f) => *f, Value::Int(i) => *i as f64);
from_value!(bool, "bool", Value::Bool(b) => *b);
from_value!(String, "str", Value::Str(s) => s.clone());
from_value!(NaiveDateTime, "datetime", Value::Datetime(d) => *d);
from_value!(DateTime<Utc>, "datetime", Value::Datetime(d) => d.and_utc());
from_value!(Duration, "timedelta", Value::Timedelta(d) => *d);
from_value!(PathBuf, "File or Dir", Value::File(p) => p.clone(), Value::Dir(p) => p.clone());
from_value!(serde_json::Value, "json", Value::Json(j) => j.clone());
impl FromValue for Value {
    fn from_value(value: &Value) -> std::result::Result<Self, &'static str> {
        Ok(value.clone())
    }
}

/// Reads a JSON value as any deserialisable type.
pub(crate) fn json_as<T: DeserializeOwned>(value: &Value) -> std::result::Result<T, String> {
    match value {
        Value::Json(j) => serde_json::from_value(j.clone())
            .map_err(|e| format!("JSON that does not fit that type ({e})")),
        other => Err(format!("a {} value", other.type_of())),
    }
}

/// [`redact`] on every text a typed output holds: a `str`, and every
/// string (keys too) of a JSON value. File and Dir outputs stay on disk as
/// written.
pub(crate) fn redact_value(value: &mut Value, secrets: &[(String, String)]) {
    fn json(value: &mut serde_json::Value, secrets: &[(String, String)]) {
        match value {
            serde_json::Value::String(s) => *s = crate::settings::redact(s, secrets),
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| json(v, secrets)),
            serde_json::Value::Object(map) => {
                let entries = std::mem::take(map);
                for (key, mut item) in entries {
                    json(&mut item, secrets);
                    map.insert(crate::settings::redact(&key, secrets), item);
                }
            }
            _ => {}
        }
    }
    match value {
        Value::Str(s) => *s = crate::settings::redact(s, secrets),
        Value::Json(j) => json(j, secrets),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_outputs_are_redacted_keys_and_all() {
        let secrets = [("TOKEN".to_string(), "abc123".to_string())];
        let mut text = Value::Str("got abc123!".into());
        redact_value(&mut text, &secrets);
        assert_eq!(text, Value::Str("got [redacted:TOKEN]!".into()));
        let mut json = Value::Json(serde_json::json!({
            "abc123": ["x abc123", 1, {"deep": "abc123"}],
        }));
        redact_value(&mut json, &secrets);
        assert_eq!(
            json,
            Value::Json(serde_json::json!({
                "[redacted:TOKEN]": ["x [redacted:TOKEN]", 1, {"deep": "[redacted:TOKEN]"}],
            }))
        );
    }

    #[test]
    fn scalars_round_trip_through_text() {
        let dt =
            NaiveDateTime::parse_from_str("2024-01-02T03:04:05.123456", "%Y-%m-%dT%H:%M:%S%.f")
                .unwrap();
        let cases = [
            Value::Int(-42),
            Value::Float(1.5),
            Value::Float(1e300),
            Value::Float(f64::INFINITY),
            Value::Str("héllo\nworld ".into()),
            Value::Bool(true),
            Value::Bool(false),
            Value::Datetime(dt),
            Value::Timedelta(Duration::from_micros(86_400_000_001)),
            Value::Json(serde_json::json!({"a": [1, 2.5, null, "x"]})),
        ];
        for v in cases {
            let text = v.to_text().unwrap();
            assert_eq!(Value::parse(v.type_of(), &text).unwrap(), v, "{text}");
        }
        let nan = Value::parse(Type::Float, &Value::Float(f64::NAN).to_text().unwrap()).unwrap();
        assert!(matches!(nan, Value::Float(f) if f.is_nan()));
    }

    #[test]
    fn python_spellings_parse() {
        assert_eq!(Value::parse(Type::Bool, "True").unwrap(), Value::Bool(true));
        assert_eq!(
            Value::parse(Type::Float, "3.0\n").unwrap(),
            Value::Float(3.0)
        );
        let with_offset = Value::parse(Type::Datetime, "2024-01-02T01:00:00+01:00").unwrap();
        assert_eq!(with_offset.to_text().unwrap(), "2024-01-02T00:00:00");
        assert!(Value::parse(Type::Int, "4.5").is_err());
        assert!(Value::parse(Type::Timedelta, "-5").is_err());
    }

    #[test]
    fn coercion_widens_but_never_narrows() {
        assert_eq!(Value::Int(2).coerce(Type::Float), Ok(Value::Float(2.0)));
        assert_eq!(
            Value::Str("a".into()).coerce(Type::Json),
            Ok(Value::Json("a".into()))
        );
        assert!(Value::Float(2.0).coerce(Type::Int).is_err());
        assert!(Value::Str("1".into()).coerce(Type::Int).is_err());
    }

    #[test]
    fn rust_conversions() {
        assert_eq!(i64::from_value(&Value::from(7u8)), Ok(7));
        assert_eq!(String::from_value(&"x".into()), Ok("x".to_string()));
        assert_eq!(i64::from_value(&Value::Str("x".into())), Err("int"));
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct P {
            a: u32,
        }
        let v = Value::json(&P { a: 3 }).unwrap();
        assert_eq!(json_as::<P>(&v).unwrap(), P { a: 3 });
    }
}
