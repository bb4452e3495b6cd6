//! The code's values with the types JSON loses, read from the tagged JSON
//! the bridge sends: ints past 64 bits always, and with
//! [`CodeHostConfig::exact_values`](super::CodeHostConfig::exact_values)
//! tuples, sets, bytes, decimals, dates and times, non-finite floats,
//! dicts with keys that are not strings, and class instances.
//!
//! ```text
//! int past 64 bits  {"$int": "1180591620717411303424"}
//! tuple             {"$tuple": [...]}       set   {"$set": [...]}
//! frozenset         {"$frozenset": [...]}   bytes {"$bytes": "<base64>"}
//! float nan/inf     {"$float": "nan" | "inf" | "-inf"}
//! Decimal           {"$decimal": "1.10"}
//! date, datetime    {"$date": "2024-01-02"}, {"$datetime": "2024-01-02T03:04:05+01:00"}
//! time              {"$time": "03:04:05.000006"}
//! timedelta         {"$timedelta": {"days": 1, "seconds": 2, "microseconds": 3}}
//! other dict        {"$dict": [[key, value], ...]}
//! class instance    {"$instance": {"class": "Point", "attrs": {"x": 1, "y": 2}}}
//! ```
//!
//! Without exact values, a class instance is the dict of its attributes.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use serde_json::Value;

/// An int of any size, as its decimal digits.
///
/// ```
/// use dockhand::codemode::BigInt;
/// let n: BigInt = "-1180591620717411303424".parse().unwrap();
/// assert!(n.is_negative() && n.to_i128() == Some(-1180591620717411303424));
/// assert!("12x".parse::<BigInt>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BigInt {
    /// Canonical: an optional `-`, then digits with no leading zero.
    digits: String,
}

impl BigInt {
    /// The decimal text.
    pub fn as_str(&self) -> &str {
        &self.digits
    }

    /// Whether it is below zero.
    pub fn is_negative(&self) -> bool {
        self.digits.starts_with('-')
    }

    /// The value, if it fits in an `i128`.
    pub fn to_i128(&self) -> Option<i128> {
        self.digits.parse().ok()
    }
}

/// Text that is not an int.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotAnInt(String);

impl fmt::Display for NotAnInt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not an int", self.0)
    }
}

impl std::error::Error for NotAnInt {}

impl FromStr for BigInt {
    type Err = NotAnInt;

    fn from_str(s: &str) -> Result<Self, NotAnInt> {
        let (sign, digits) = match s.strip_prefix('-') {
            Some(rest) => ("-", rest),
            None => ("", s.strip_prefix('+').unwrap_or(s)),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(NotAnInt(s.chars().take(40).collect()));
        }
        let digits = digits.trim_start_matches('0');
        Ok(if digits.is_empty() {
            BigInt { digits: "0".into() }
        } else {
            BigInt {
                digits: format!("{sign}{digits}"),
            }
        })
    }
}

impl fmt::Display for BigInt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.digits)
    }
}

/// A value of the code's with its Python type (see the module docs for the
/// JSON it is read from).
///
/// ```
/// use dockhand::codemode::{BigInt, CodeValue};
/// let v = CodeValue::from_json(&serde_json::json!(
///     {"$instance": {"class": "Point", "attrs": {"x": {"$int": "99999999999999999999"}}}}
/// ));
/// let CodeValue::Instance { class, attrs } = v else { panic!() };
/// assert_eq!(class, "Point");
/// assert_eq!(attrs["x"], CodeValue::BigInt("99999999999999999999".parse().unwrap()));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CodeValue {
    /// `None`
    None,
    /// `bool`
    Bool(bool),
    /// An `int` that fits in 64 bits.
    Int(i64),
    /// An `int` that does not.
    BigInt(BigInt),
    /// `float`, NaN and infinities included.
    Float(f64),
    /// `str`
    Str(String),
    /// `bytes`
    Bytes(Vec<u8>),
    /// `list`
    List(Vec<CodeValue>),
    /// `tuple`
    Tuple(Vec<CodeValue>),
    /// `set`
    Set(Vec<CodeValue>),
    /// `frozenset`
    FrozenSet(Vec<CodeValue>),
    /// `dict`, in its order.
    Dict(Vec<(CodeValue, CodeValue)>),
    /// `Decimal`, as its text.
    Decimal(String),
    /// `date`, ISO text.
    Date(String),
    /// `datetime`, ISO text.
    DateTime(String),
    /// `time`, ISO text.
    Time(String),
    /// `timedelta`.
    TimeDelta {
        /// Days.
        days: i64,
        /// Seconds past the days.
        seconds: i64,
        /// Microseconds past the seconds.
        microseconds: i64,
    },
    /// An instance of a class the code defined (a dataclass, say).
    Instance {
        /// The class's name.
        class: String,
        /// Its attributes.
        attrs: BTreeMap<String, CodeValue>,
    },
}

impl CodeValue {
    /// Reads the bridge's JSON. A one-key object whose key is a tag this
    /// does not know, or whose content does not fit the tag, stays a dict.
    pub fn from_json(value: &Value) -> CodeValue {
        match value {
            Value::Null => CodeValue::None,
            Value::Bool(b) => CodeValue::Bool(*b),
            Value::Number(n) => match (n.as_i64(), n.as_f64()) {
                (Some(i), _) => CodeValue::Int(i),
                (None, _) if !n.to_string().contains(['.', 'e', 'E']) => {
                    n.to_string().parse().map_or(
                        CodeValue::Float(n.as_f64().unwrap_or(f64::NAN)),
                        CodeValue::BigInt,
                    )
                }
                (None, Some(f)) => CodeValue::Float(f),
                (None, None) => CodeValue::Float(f64::NAN),
            },
            Value::String(s) => CodeValue::Str(s.clone()),
            Value::Array(items) => {
                CodeValue::List(items.iter().map(CodeValue::from_json).collect())
            }
            Value::Object(map) => {
                if let Some((key, inner)) = map.iter().next().filter(|_| map.len() == 1) {
                    if let Some(tagged) = tagged(key, inner) {
                        return tagged;
                    }
                }
                CodeValue::Dict(
                    map.iter()
                        .map(|(k, v)| (CodeValue::Str(k.clone()), CodeValue::from_json(v)))
                        .collect(),
                )
            }
        }
    }
}

fn tagged(key: &str, inner: &Value) -> Option<CodeValue> {
    let items = || -> Option<Vec<CodeValue>> {
        Some(inner.as_array()?.iter().map(CodeValue::from_json).collect())
    };
    let text = || inner.as_str().map(String::from);
    Some(match key {
        "$int" => CodeValue::BigInt(inner.as_str()?.parse().ok()?),
        "$tuple" => CodeValue::Tuple(items()?),
        "$set" => CodeValue::Set(items()?),
        "$frozenset" => CodeValue::FrozenSet(items()?),
        "$bytes" => CodeValue::Bytes(
            base64::engine::general_purpose::STANDARD
                .decode(inner.as_str()?)
                .ok()?,
        ),
        "$float" => CodeValue::Float(match inner.as_str()? {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            _ => return None,
        }),
        "$decimal" => CodeValue::Decimal(text()?),
        "$date" => CodeValue::Date(text()?),
        "$datetime" => CodeValue::DateTime(text()?),
        "$time" => CodeValue::Time(text()?),
        "$timedelta" => {
            let part = |name: &str| inner.get(name).and_then(Value::as_i64);
            CodeValue::TimeDelta {
                days: part("days")?,
                seconds: part("seconds")?,
                microseconds: part("microseconds")?,
            }
        }
        "$dict" => CodeValue::Dict(
            inner
                .as_array()?
                .iter()
                .map(|pair| match pair.as_array()?.as_slice() {
                    [k, v] => Some((CodeValue::from_json(k), CodeValue::from_json(v))),
                    _ => None,
                })
                .collect::<Option<_>>()?,
        ),
        "$instance" => CodeValue::Instance {
            class: inner.get("class")?.as_str()?.to_string(),
            attrs: inner
                .get("attrs")?
                .as_object()?
                .iter()
                .map(|(k, v)| (k.clone(), CodeValue::from_json(v)))
                .collect(),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_tag_is_read_and_unknown_ones_stay_dicts() {
        let v = CodeValue::from_json(&json!([
            {"$int": "-000123456789012345678901234567890"},
            {"$tuple": [1, "a"]}, {"$set": [true]}, {"$frozenset": []},
            {"$bytes": "aGk="}, {"$float": "-inf"}, {"$decimal": "1.10"},
            {"$date": "2024-01-02"}, {"$datetime": "2024-01-02T03:04:05+01:00"},
            {"$time": "03:04:05"}, {"$timedelta": {"days": 1, "seconds": 2, "microseconds": 3}},
            {"$dict": [[1, "one"]]}, {"$unknown": 1}, {"$int": "12x"},
            18446744073709551615u64, 1.5
        ]));
        let CodeValue::List(items) = v else {
            panic!("{v:?}")
        };
        assert_eq!(
            items[0],
            CodeValue::BigInt("-123456789012345678901234567890".parse().unwrap())
        );
        assert_eq!(
            items[0].clone(),
            CodeValue::BigInt(BigInt {
                digits: "-123456789012345678901234567890".into()
            })
        );
        assert_eq!(
            items[1],
            CodeValue::Tuple(vec![CodeValue::Int(1), CodeValue::Str("a".into())])
        );
        assert_eq!(items[4], CodeValue::Bytes(b"hi".to_vec()));
        assert_eq!(items[5], CodeValue::Float(f64::NEG_INFINITY));
        assert_eq!(
            items[10],
            CodeValue::TimeDelta {
                days: 1,
                seconds: 2,
                microseconds: 3
            }
        );
        assert_eq!(
            items[11],
            CodeValue::Dict(vec![(CodeValue::Int(1), CodeValue::Str("one".into()))])
        );
        assert!(matches!(&items[12], CodeValue::Dict(d) if d.len() == 1));
        assert!(
            matches!(&items[13], CodeValue::Dict(_)),
            "a bad $int stays a dict"
        );
        assert_eq!(
            items[14],
            CodeValue::BigInt("18446744073709551615".parse().unwrap())
        );
        assert_eq!(items[15], CodeValue::Float(1.5));
    }

    #[test]
    fn big_ints_are_canonical() {
        let zero: BigInt = "-000".parse().unwrap();
        assert_eq!(zero.as_str(), "0");
        assert!(!zero.is_negative());
        assert_eq!("+42".parse::<BigInt>().unwrap().to_i128(), Some(42));
        assert!("".parse::<BigInt>().is_err() && "-".parse::<BigInt>().is_err());
        let huge: BigInt = "9".repeat(60).parse().unwrap();
        assert_eq!(huge.to_i128(), None);
        assert_eq!(huge.to_string(), "9".repeat(60));
    }
}
