//! Values crossing between the host's JSON and Monty's Python objects.
//!
//! The plain encoding is JSON as a model reads it: tuples and sets as lists,
//! datetimes as ISO strings, timedeltas as seconds; an int past 64 bits as
//! `{"$int": digits}` rather than a rounded float. The exact encoding (see
//! `tagged`) keeps every type. Hosts may send tagged values either way.

use chrono::{Datelike, NaiveDate, NaiveDateTime, Timelike};
use monty_types::unstable::{self, graph_parts, MontyNode};
use monty_types::{MontyDate, MontyDateTime, MontyObject, MontyTimeDelta, ObjectRef};
use serde_json::{Map, Number, Value};

/// A value that cannot cross to the host.
#[derive(Debug)]
pub struct NotJson(pub String);

/// How values go to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// JSON as a model reads it.
    #[default]
    Plain,
    /// Every type kept (see `tagged`).
    Exact,
}

/// Host JSON -> a Monty value (tagged datetimes become datetimes).
pub fn from_wire(value: &Value) -> Result<MontyObject, String> {
    Ok(match value {
        Value::Null => MontyObject::none(),
        Value::Bool(b) => MontyObject::bool(*b),
        Value::Number(n) => number(n)?,
        Value::String(s) => MontyObject::string(s.as_str()),
        Value::Array(items) => {
            MontyObject::list(items.iter().map(from_wire).collect::<Result<Vec<_>, _>>()?)
        }
        Value::Object(map) => {
            if let Some(tagged) = tagged(map)? {
                return Ok(tagged);
            }
            MontyObject::dict(
                map.iter()
                    .map(|(k, v)| Ok((MontyObject::string(k.as_str()), from_wire(v)?)))
                    .collect::<Result<Vec<_>, String>>()?,
            )
        }
    })
}

fn number(n: &Number) -> Result<MontyObject, String> {
    if let Some(i) = n.as_i64() {
        return Ok(MontyObject::int(i));
    }
    let text = n.to_string();
    if !text.contains(['.', 'e', 'E']) {
        if let Ok(big) = text.parse() {
            return Ok(MontyObject::bigint(big));
        }
    }
    n.as_f64()
        .map(MontyObject::float)
        .ok_or_else(|| format!("{text} is not a number Monty can hold"))
}

fn tagged(map: &Map<String, Value>) -> Result<Option<MontyObject>, String> {
    if map.len() != 1 {
        return Ok(None);
    }
    let Some((key, inner)) = map.iter().next() else {
        return Ok(None);
    };
    Ok(match (key.as_str(), inner) {
        ("$datetime", Value::String(s)) => Some(MontyObject::datetime(parse_datetime(s)?)),
        ("$date", Value::String(s)) => {
            let d = NaiveDate::parse_from_str(s, "%Y-%m-%d")
                .map_err(|e| format!("{s:?} is not an ISO date: {e}"))?;
            Some(MontyObject::date(MontyDate {
                year: d.year(),
                month: d.month() as u8,
                day: d.day() as u8,
            }))
        }
        ("$timedelta", Value::Number(n)) => {
            let seconds = n.as_f64().ok_or("the timedelta is not a number")?;
            Some(MontyObject::timedelta(timedelta(seconds)?))
        }
        (key, inner) => crate::tagged::decode(key, inner, &from_wire).transpose()?,
    })
}

fn parse_datetime(s: &str) -> Result<MontyDateTime, String> {
    let bad = |e: chrono::ParseError| format!("{s:?} is not an ISO datetime: {e}");
    let normalised = s.replacen(' ', "T", 1);
    let (naive, offset) = match chrono::DateTime::parse_from_rfc3339(&normalised) {
        Ok(dt) => (dt.naive_local(), Some(dt.offset().local_minus_utc())),
        Err(_) => {
            let naive = NaiveDateTime::parse_from_str(&normalised, "%Y-%m-%dT%H:%M:%S%.f")
                .or_else(|_| NaiveDateTime::parse_from_str(&normalised, "%Y-%m-%dT%H:%M"))
                .or_else(|_| {
                    NaiveDate::parse_from_str(&normalised, "%Y-%m-%d")
                        .map(|d| d.and_hms_opt(0, 0, 0).unwrap_or_default())
                })
                .map_err(bad)?;
            (naive, None)
        }
    };
    Ok(MontyDateTime {
        year: naive.year(),
        month: naive.month() as u8,
        day: naive.day() as u8,
        hour: naive.hour() as u8,
        minute: naive.minute() as u8,
        second: naive.second() as u8,
        microsecond: naive.nanosecond() / 1000 % 1_000_000,
        offset_seconds: offset,
        timezone_name: None,
    })
}

fn timedelta(seconds: f64) -> Result<MontyTimeDelta, String> {
    if !seconds.is_finite() || seconds.abs() > 86_400.0 * 999_999_999.0 {
        return Err(format!("{seconds} seconds is not a timedelta"));
    }
    crate::tagged::timedelta_of((seconds * 1e6).round() as i128)
}

/// A Monty value -> JSON for the host.
pub fn to_wire(value: &MontyObject, encoding: Encoding) -> Result<Value, NotJson> {
    let (graph, root) = graph_parts(value);
    convert(graph.value(root), 0, encoding)
}

/// A borrowed Monty value (a tool argument) -> JSON for the host.
pub fn ref_to_wire(value: ObjectRef<'_>, encoding: Encoding) -> Result<Value, NotJson> {
    convert(value, 0, encoding)
}

/// A call's arguments as JSON: positional, and keyword by name.
pub fn wire_args<'a>(
    args: impl Iterator<Item = ObjectRef<'a>>,
    kwargs: impl Iterator<Item = (ObjectRef<'a>, ObjectRef<'a>)>,
    encoding: Encoding,
) -> Result<(Vec<Value>, Map<String, Value>), String> {
    let argument = |v: ObjectRef<'_>| {
        let value = ref_to_wire(v, encoding).map_err(|e| e.0)?;
        if encoding == Encoding::Plain {
            fits_64_bits(&value)?;
        }
        Ok::<_, String>(value)
    };
    let positional = args.map(argument).collect::<Result<Vec<_>, _>>()?;
    let mut keywords = Map::new();
    for (k, v) in kwargs {
        let key = k.as_str().ok_or("keyword names must be str")?.to_string();
        keywords.insert(key, argument(v)?);
    }
    Ok((positional, keywords))
}

/// Tools take plain JSON: an int past 64 bits is refused rather than sent
/// in a shape they do not expect (hosts asking for exact values get it).
fn fits_64_bits(value: &Value) -> Result<(), String> {
    match value {
        Value::Number(n) if !(n.is_i64() || n.is_u64() || n.is_f64()) => Err(format!(
            "the int {n} does not fit in 64 bits; pass it as a str"
        )),
        Value::Object(map) if map.len() == 1 && map.contains_key("$int") => Err(format!(
            "the int {} does not fit in 64 bits; pass it as a str",
            map["$int"].as_str().unwrap_or_default()
        )),
        Value::Array(items) => items.iter().try_for_each(fits_64_bits),
        Value::Object(map) => map.values().try_for_each(fits_64_bits),
        _ => Ok(()),
    }
}

fn convert(value: ObjectRef<'_>, depth: usize, encoding: Encoding) -> Result<Value, NotJson> {
    if depth > 100 {
        return Err(NotJson(
            "the value is nested more than 100 levels deep".into(),
        ));
    }
    if encoding == Encoding::Exact {
        let inner = |v: ObjectRef<'_>, d: usize| convert(v, d, encoding);
        if let Some(tagged) = crate::tagged::encode(value, depth, &inner)? {
            return Ok(tagged);
        }
    }
    Ok(match unstable::node(value) {
        MontyNode::None => Value::Null,
        MontyNode::Bool(b) => Value::Bool(*b),
        MontyNode::Int(i) => Value::from(*i),
        // Past 64 bits the host's JSON reader would round it to a float.
        MontyNode::BigInt(b) => match (i64::try_from(b), u64::try_from(b)) {
            (Ok(i), _) => Value::from(i),
            (_, Ok(u)) => Value::from(u),
            _ => serde_json::json!({"$int": b.to_string()}),
        },
        MontyNode::Float(f) => {
            if !f.is_finite() {
                return Err(NotJson(format!("{} is not a JSON number", float_repr(*f))));
            }
            Number::from_f64(*f).map_or(Value::Null, Value::Number)
        }
        MontyNode::String(s) => Value::String(s.to_string()),
        // What Monty can only show: a value's repr, or the placeholder of a
        // container that holds itself (`[...]`), as pydantic-monty gives them.
        MontyNode::Repr(s) | MontyNode::Cycle(s) => Value::String(s.to_string()),
        MontyNode::List(_) | MontyNode::Tuple(_) | MontyNode::NamedTuple { .. } => {
            list(value, depth, encoding)?
        }
        MontyNode::Set(_) | MontyNode::FrozenSet(_) => {
            let Value::Array(mut items) = list(value, depth, encoding)? else {
                return Err(NotJson("a set could not be read".into()));
            };
            sort_if_comparable(&mut items);
            Value::Array(items)
        }
        MontyNode::Dict(_) | MontyNode::ClassInstance { .. } => {
            let mut out = Map::new();
            for (k, v) in value.pairs().unwrap_or_default() {
                out.insert(key(k)?, convert(v, depth + 1, encoding)?);
            }
            Value::Object(out)
        }
        MontyNode::Date(_) | MontyNode::DateTime(_) | MontyNode::Time(_) => {
            Value::String(iso(value))
        }
        MontyNode::TimeDelta(d) => Number::from_f64(
            d.days as f64 * 86_400.0 + d.seconds as f64 + d.microseconds as f64 / 1e6,
        )
        .map_or(Value::Null, Value::Number),
        MontyNode::Bytes(_) => {
            return Err(NotJson(
                "bytes are not JSON; decode them to str first".into(),
            ))
        }
        _ => {
            return Err(NotJson(format!(
                "a value of type {} is not JSON",
                value.type_name()
            )))
        }
    })
}

fn list(value: ObjectRef<'_>, depth: usize, encoding: Encoding) -> Result<Value, NotJson> {
    Ok(Value::Array(
        value
            .items()
            .unwrap_or_default()
            .into_iter()
            .map(|item| convert(item, depth + 1, encoding))
            .collect::<Result<_, _>>()?,
    ))
}

/// A date, datetime or time as ISO text (`isoformat()`); empty for others.
pub fn iso(value: ObjectRef<'_>) -> String {
    match unstable::node(value) {
        MontyNode::Date(d) => format!("{:04}-{:02}-{:02}", d.year, d.month, d.day),
        MontyNode::DateTime(dt) => datetime_iso(dt),
        MontyNode::Time(t) => format!(
            "{:02}:{:02}:{:02}{}{}",
            t.hour,
            t.minute,
            t.second,
            fraction(t.microsecond),
            offset_iso(t.offset_seconds)
        ),
        _ => String::new(),
    }
}

/// Python's `sorted` of the set's JSON items, when they are all numbers or
/// all strings (what `sorted` accepts); otherwise their order as they came.
fn sort_if_comparable(items: &mut [Value]) {
    if items.iter().all(Value::is_number) {
        items.sort_by(|a, b| {
            let (a, b) = (a.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
            a.partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal)
        });
    } else if items.iter().all(Value::is_string) {
        items.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    }
}

/// A dict key as JSON object keys must be: str as it is, scalars as their
/// JSON text (as `json.dumps` writes them).
fn key(k: ObjectRef<'_>) -> Result<String, NotJson> {
    if let Some(s) = k.as_str() {
        return Ok(s.to_string());
    }
    match k.type_name() {
        "int" | "float" | "bool" | "NoneType" => {
            let v = convert(k, 0, Encoding::Plain)?;
            Ok(v.to_string())
        }
        other => Err(NotJson(format!(
            "a dict key of type {other} is not JSON; use str keys"
        ))),
    }
}

fn float_repr(f: f64) -> &'static str {
    if f.is_nan() {
        "nan"
    } else if f > 0.0 {
        "inf"
    } else {
        "-inf"
    }
}

fn fraction(microsecond: u32) -> String {
    if microsecond == 0 {
        String::new()
    } else {
        format!(".{microsecond:06}")
    }
}

fn offset_iso(offset: Option<i32>) -> String {
    let Some(offset) = offset else {
        return String::new();
    };
    let sign = if offset < 0 { '-' } else { '+' };
    let abs = offset.unsigned_abs();
    let (h, m, s) = (abs / 3600, abs % 3600 / 60, abs % 60);
    if s == 0 {
        format!("{sign}{h:02}:{m:02}")
    } else {
        format!("{sign}{h:02}:{m:02}:{s:02}")
    }
}

fn datetime_iso(dt: &MontyDateTime) -> String {
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{}{}",
        dt.year,
        dt.month,
        dt.day,
        dt.hour,
        dt.minute,
        dt.second,
        fraction(dt.microsecond),
        offset_iso(dt.offset_seconds)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(v: Value) -> Value {
        to_wire(&from_wire(&v).unwrap(), Encoding::Plain).unwrap()
    }

    fn exact(v: Value) -> Value {
        to_wire(&from_wire(&v).unwrap(), Encoding::Exact).unwrap()
    }

    #[test]
    fn tagged_values_round_trip_exactly() {
        for v in [
            json!({"$int": "1180591620717411303424"}),
            json!({"$int": "-15511210043330985984000000"}),
            json!({"$tuple": [1, {"$tuple": []}, "x"]}),
            json!({"$set": [1]}),
            json!({"$frozenset": ["a"]}),
            json!({"$bytes": "AP8="}),
            json!({"$float": "nan"}),
            json!({"$float": "-inf"}),
            json!({"$decimal": "1.10"}),
            json!({"$date": "2024-01-02"}),
            json!({"$datetime": "2024-01-02T03:04:05.000006+01:00"}),
            json!({"$datetime": "2024-01-02T03:04:05"}),
            json!({"$time": "03:04:05.000006"}),
            json!({"$timedelta": {"days": -1, "seconds": 86399, "microseconds": 999999}}),
            json!({"$dict": [[1, "a"], [{"$tuple": [1, 2]}, "b"]]}),
            json!({"$dict": [["$int", "not a tag"]]}),
            json!([0.1, 1e300, -0.0, 9007199254740993u64, i64::MIN]),
        ] {
            assert_eq!(exact(v.clone()), v);
        }
    }

    #[test]
    fn plain_ints_past_64_bits_stay_exact() {
        let big = MontyObject::bigint("1180591620717411303424".parse().unwrap());
        assert_eq!(
            to_wire(&big, Encoding::Plain).unwrap(),
            json!({"$int": "1180591620717411303424"})
        );
        let fits = MontyObject::bigint(u64::MAX.into());
        assert_eq!(to_wire(&fits, Encoding::Plain).unwrap(), json!(u64::MAX));
    }

    #[test]
    fn json_round_trips() {
        let v = json!({"a": [1, 2.5, "x\u{0}😀", null, true], "big": u64::MAX});
        assert_eq!(round_trip(v.clone()), v);
    }

    #[test]
    fn tagged_datetimes_come_back_as_iso_and_seconds() {
        assert_eq!(
            round_trip(json!({"$datetime": "2024-01-02T03:04:05.5+01:00"})),
            json!("2024-01-02T03:04:05.500000+01:00")
        );
        assert_eq!(
            round_trip(json!({"$date": "2024-01-02"})),
            json!("2024-01-02")
        );
        assert_eq!(round_trip(json!({"$timedelta": -1.5})), json!(-1.5));
    }

    #[test]
    fn what_is_not_json_is_named() {
        let plain = |v: &MontyObject| to_wire(v, Encoding::Plain);
        let e = plain(&MontyObject::float(f64::NAN)).unwrap_err();
        assert!(e.0.contains("nan"), "{}", e.0);
        let e = plain(&MontyObject::bytes(b"x".to_vec())).unwrap_err();
        assert!(e.0.contains("bytes"), "{}", e.0);
        let d = MontyObject::dict([(MontyObject::tuple([]), MontyObject::none())]);
        assert!(plain(&d).unwrap_err().0.contains("tuple"));
    }

    #[test]
    fn tool_arguments_past_64_bits_are_refused() {
        let big = json!({"n": [{"$int": "123456789012345678901234567890"}]});
        assert!(fits_64_bits(&big).unwrap_err().contains("64 bits"));
        assert!(fits_64_bits(&json!([u64::MAX, i64::MIN, 1.5e300, "9".repeat(40)])).is_ok());
    }

    #[test]
    fn reprs_and_cycles_come_back_as_their_text() {
        assert_eq!(
            to_wire(&MontyObject::cycle("[...]"), Encoding::Plain).unwrap(),
            json!("[...]")
        );
        assert_eq!(
            to_wire(&MontyObject::repr("<class 'Box'>"), Encoding::Plain).unwrap(),
            json!("<class 'Box'>")
        );
    }

    #[test]
    fn sets_sort_and_scalar_keys_become_json_text() {
        let s = MontyObject::set([MontyObject::int(3), MontyObject::int(1)]);
        assert_eq!(to_wire(&s, Encoding::Plain).unwrap(), json!([1, 3]));
        let d = MontyObject::dict([(MontyObject::int(1), MontyObject::bool(true))]);
        assert_eq!(to_wire(&d, Encoding::Plain).unwrap(), json!({"1": true}));
    }
}
