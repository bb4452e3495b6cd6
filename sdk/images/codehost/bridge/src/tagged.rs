//! The exact encoding: Python values that plain JSON would change, as
//! one-key objects naming their type. Hosts that ask for exact values get
//! them from the code this way, and any host may send them (inputs, tool
//! results), so a value round-trips unchanged:
//!
//! ```text
//! int past 64 bits  {"$int": "1180591620717411303424"}
//! tuple             {"$tuple": [...]}        set  {"$set": [...]}
//! frozenset         {"$frozenset": [...]}    bytes {"$bytes": "<base64>"}
//! float nan/inf     {"$float": "nan" | "inf" | "-inf"}
//! Decimal           {"$decimal": "1.10"}
//! date              {"$date": "2024-01-02"}
//! datetime          {"$datetime": "2024-01-02T03:04:05.000006+01:00"}
//! time              {"$time": "03:04:05.000006"}
//! timedelta         {"$timedelta": {"days": 1, "seconds": 2, "microseconds": 3}}
//! a dict whose keys are not all str, or that looks like a tag
//!                   {"$dict": [[key, value], ...]}
//! class instance    {"$instance": {"class": "Point", "attrs": {...}}}
//! ```
//!
//! A `$instance` the host sends is read as the dict of its attributes: the
//! class is the code's, and the host cannot make one.
//!
//! Lists, str-keyed dicts, bools, None, strs, finite floats and ints that
//! fit in 64 bits (signed or unsigned) are plain JSON in both encodings.

use base64::Engine as _;
use monty_types::unstable::{self, MontyNode};
use monty_types::{MontyObject, MontyTime, MontyTimeDelta, ObjectRef};
use serde_json::{json, Value};

use crate::values::{iso, NotJson};

/// A value the plain encoding leaves to the caller, in the exact one;
/// `None`: encode it as plain JSON.
pub fn encode(
    value: ObjectRef<'_>,
    depth: usize,
    convert: &dyn Fn(ObjectRef<'_>, usize) -> Result<Value, NotJson>,
) -> Result<Option<Value>, NotJson> {
    let items = |value: ObjectRef<'_>| -> Result<Value, NotJson> {
        value
            .items()
            .unwrap_or_default()
            .into_iter()
            .map(|item| convert(item, depth + 1))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array)
    };
    Ok(Some(match unstable::node(value) {
        // What a 64-bit JSON number holds stays a number.
        MontyNode::BigInt(b) if i64::try_from(b).is_err() && u64::try_from(b).is_err() => {
            json!({"$int": b.to_string()})
        }
        MontyNode::Float(f) if !f.is_finite() => {
            let name = if f.is_nan() {
                "nan"
            } else if *f > 0.0 {
                "inf"
            } else {
                "-inf"
            };
            json!({ "$float": name })
        }
        MontyNode::Tuple(_) => json!({ "$tuple": items(value)? }),
        MontyNode::Set(_) => json!({ "$set": items(value)? }),
        MontyNode::FrozenSet(_) => json!({ "$frozenset": items(value)? }),
        MontyNode::Bytes(b) => {
            json!({"$bytes": base64::engine::general_purpose::STANDARD.encode(b)})
        }
        MontyNode::Decimal(d) => json!({ "$decimal": d }),
        MontyNode::Date(_) => json!({ "$date": iso(value) }),
        MontyNode::DateTime(_) => json!({ "$datetime": iso(value) }),
        MontyNode::Time(_) => json!({ "$time": iso(value) }),
        MontyNode::TimeDelta(d) => json!({"$timedelta": {
            "days": d.days, "seconds": d.seconds, "microseconds": d.microseconds
        }}),
        MontyNode::ClassInstance { .. } => {
            let mut attrs = serde_json::Map::new();
            for (k, v) in value.pairs().unwrap_or_default() {
                let name = k.as_str().map_or_else(|| k.py_repr(), String::from);
                attrs.insert(name, convert(v, depth + 1)?);
            }
            json!({"$instance": {"class": value.type_name(), "attrs": attrs}})
        }
        MontyNode::Dict(_) => {
            let pairs = value.pairs().unwrap_or_default();
            let plain_keys = pairs.iter().all(|(k, _)| k.as_str().is_some());
            let looks_tagged =
                pairs.len() == 1 && pairs[0].0.as_str().is_some_and(|k| k.starts_with('$'));
            if plain_keys && !looks_tagged {
                return Ok(None);
            }
            let mut out = Vec::with_capacity(pairs.len());
            for (k, v) in pairs {
                out.push(json!([convert(k, depth + 1)?, convert(v, depth + 1)?]));
            }
            json!({ "$dict": out })
        }
        _ => return Ok(None),
    }))
}

/// A tag the host sent (other than `$datetime` and `$date`, which
/// `values` reads); `None` when `key` names no tag.
pub fn decode(
    key: &str,
    inner: &Value,
    from_wire: &dyn Fn(&Value) -> Result<MontyObject, String>,
) -> Option<Result<MontyObject, String>> {
    let items = |v: &Value| -> Result<Vec<MontyObject>, String> {
        v.as_array()
            .ok_or_else(|| format!("{key} takes a list"))?
            .iter()
            .map(from_wire)
            .collect()
    };
    Some(match key {
        "$int" => inner
            .as_str()
            .and_then(|s| s.parse().ok())
            .map(MontyObject::bigint)
            .ok_or_else(|| format!("{inner} is not an int")),
        "$tuple" => items(inner).map(MontyObject::tuple),
        "$instance" => match inner.get("attrs") {
            Some(attrs @ Value::Object(_)) => from_wire(attrs),
            _ => Err("$instance takes {\"class\", \"attrs\": {...}}".into()),
        },
        "$set" => items(inner).map(MontyObject::set),
        "$frozenset" => items(inner).map(MontyObject::frozenset),
        "$bytes" => inner
            .as_str()
            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
            .map(MontyObject::bytes)
            .ok_or_else(|| "$bytes takes base64 text".to_string()),
        "$float" => match inner.as_str() {
            Some("nan") => Ok(MontyObject::float(f64::NAN)),
            Some("inf") => Ok(MontyObject::float(f64::INFINITY)),
            Some("-inf") => Ok(MontyObject::float(f64::NEG_INFINITY)),
            _ => Err("$float takes \"nan\", \"inf\" or \"-inf\"".into()),
        },
        "$decimal" => inner
            .as_str()
            .map(MontyObject::decimal)
            .ok_or_else(|| "$decimal takes its text".to_string()),
        "$time" => inner
            .as_str()
            .ok_or_else(|| "$time takes ISO text".to_string())
            .and_then(parse_time)
            .map(MontyObject::time),
        "$timedelta" if inner.is_object() => {
            let part = |name: &str| inner[name].as_i64().unwrap_or(0);
            let micros = part("days") as i128 * 86_400_000_000
                + part("seconds") as i128 * 1_000_000
                + part("microseconds") as i128;
            timedelta_of(micros).map(MontyObject::timedelta)
        }
        "$dict" => inner
            .as_array()
            .ok_or_else(|| "$dict takes a list of pairs".to_string())
            .and_then(|pairs| {
                pairs
                    .iter()
                    .map(|pair| match pair.as_array().map(Vec::as_slice) {
                        Some([k, v]) => Ok((from_wire(k)?, from_wire(v)?)),
                        _ => Err("$dict takes [key, value] pairs".to_string()),
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .map(MontyObject::dict),
        _ => return None,
    })
}

/// A timedelta of `micros` microseconds, normalised as Python does.
pub fn timedelta_of(micros: i128) -> Result<MontyTimeDelta, String> {
    let days = micros.div_euclid(86_400_000_000);
    let rest = micros.rem_euclid(86_400_000_000);
    if days.abs() > 999_999_999 {
        return Err(format!("{micros} microseconds is not a timedelta"));
    }
    Ok(MontyTimeDelta {
        days: days as i32,
        seconds: (rest / 1_000_000) as i32,
        microseconds: (rest % 1_000_000) as i32,
    })
}

/// `HH:MM[:SS[.ffffff]][+HH:MM]` as a time.
fn parse_time(text: &str) -> Result<MontyTime, String> {
    let bad = || format!("{text:?} is not an ISO time");
    let (clock, offset) = match text.find(['+', '-']) {
        Some(at) => (&text[..at], Some(&text[at..])),
        None => (text, None),
    };
    let (whole, fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let mut parts = whole.split(':').map(|p| p.parse::<u8>().map_err(|_| bad()));
    let hour = parts.next().ok_or_else(bad)??;
    let minute = parts.next().ok_or_else(bad)??;
    let second = parts.next().transpose()?.unwrap_or(0);
    let microsecond = if fraction.is_empty() {
        0
    } else {
        format!("{fraction:0<6}")[..6].parse().map_err(|_| bad())?
    };
    let offset_seconds = match offset {
        None => None,
        Some(o) => {
            let sign = if o.starts_with('-') { -1 } else { 1 };
            let (h, m) = o[1..].split_once(':').ok_or_else(bad)?;
            let (h, m): (i32, i32) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
            Some(sign * (h * 3600 + m * 60))
        }
    };
    if hour > 23 || minute > 59 || second > 59 {
        return Err(bad());
    }
    Ok(MontyTime {
        hour,
        minute,
        second,
        microsecond,
        offset_seconds,
        timezone_name: None,
        fold: 0,
    })
}
