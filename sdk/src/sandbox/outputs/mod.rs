//! Outputs: parsing `/var/outputs` (downloaded as a tar) by declared type, and
//! extracting File and Dir outputs safely into a directory the result owns.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use tempfile::TempDir;

use super::spec::Param;
use super::value::{json_as, FromValue, Type, Value};
use crate::error::{Error, Result};

mod collect;
pub use collect::{collect, from_frame, Collected};

/// The typed outputs of a run, in declared order.
///
/// File and Dir outputs live in a host directory owned by this value: it is
/// removed when the value is dropped, unless [`Outputs::keep`] is called.
#[derive(Debug, Default)]
pub struct Outputs {
    values: Vec<(String, Value)>,
    dir: Option<TempDir>,
}

impl Outputs {
    pub(crate) fn new(values: Vec<(String, Value)>, dir: Option<TempDir>) -> Self {
        Outputs { values, dir }
    }

    /// The output `name` as a Rust type (`i64`, `f64`, `String`, `bool`,
    /// `NaiveDateTime`, `DateTime<Utc>`, `Duration`, `PathBuf`, `serde_json::Value`, `Value`).
    pub fn get<T: FromValue>(&self, name: &str) -> Result<T> {
        let value = self.declared(name)?;
        T::from_value(value).map_err(|_| Error::OutputType {
            name: name.into(),
            stored: format!("a {} value", value.type_of()),
            requested: std::any::type_name::<T>().into(),
            hint: value.rust_type().into(),
        })
    }

    /// A JSON output deserialised into any type.
    pub fn json<T: DeserializeOwned>(&self, name: &str) -> Result<T> {
        let value = self.declared(name)?;
        json_as(value).map_err(|got| Error::OutputType {
            name: name.into(),
            stored: got,
            requested: std::any::type_name::<T>().into(),
            hint: "a type whose serde shape matches the JSON".into(),
        })
    }

    /// The value of declared output `name`, or [`Error::UnknownOutput`].
    fn declared(&self, name: &str) -> Result<&Value> {
        self.value(name).ok_or_else(|| {
            let declared: Vec<String> = self.values.iter().map(|(n, _)| n.clone()).collect();
            Error::UnknownOutput {
                name: name.into(),
                suggestion: crate::util::closest(name, declared.iter().map(String::as_str))
                    .map(str::to_string),
                declared,
            }
        })
    }

    /// The outputs as a tuple, in declared order: `let (a, b): (i64, String) = out.tuple()?;`
    pub fn tuple<T: FromOutputs>(&self) -> Result<T> {
        T::from_outputs(self)
    }

    /// The raw value of an output.
    pub fn value(&self, name: &str) -> Option<&Value> {
        self.values.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Each typed value, to change in place (redaction).
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut Value> {
        self.values.iter_mut().map(|(_, v)| v)
    }

    /// `(name, value)` pairs in declared order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.values.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// Number of outputs.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are no outputs.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The host directory holding File and Dir outputs, if any.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(|d| d.path())
    }

    /// Keeps the File/Dir outputs on disk after this value is dropped and
    /// returns their directory (the caller removes it).
    pub fn keep(&mut self) -> Option<PathBuf> {
        self.dir.take().map(|d| d.keep())
    }
}

/// Tuples that [`Outputs::tuple`] can produce.
pub trait FromOutputs: Sized {
    /// Reads the outputs in declared order.
    fn from_outputs(outputs: &Outputs) -> Result<Self>;
}

macro_rules! tuple_outputs {
    ($n:literal; $($t:ident $i:tt),+) => {
        impl<$($t: FromValue),+> FromOutputs for ($($t,)+) {
            fn from_outputs(outputs: &Outputs) -> Result<Self> {
                if outputs.values.len() != $n {
                    return Err(Error::spec("outputs", format!(
                        "a tuple of {} was asked for, but there are {} outputs", $n, outputs.values.len())));
                }
                Ok(($(outputs.get::<$t>(&outputs.values[$i].0)?,)+))
            }
        }
    };
}
tuple_outputs!(1; A 0);
tuple_outputs!(2; A 0, B 1);
tuple_outputs!(3; A 0, B 1, C 2);
tuple_outputs!(4; A 0, B 1, C 2, D 3);
tuple_outputs!(5; A 0, B 1, C 2, D 3, E 4);
tuple_outputs!(6; A 0, B 1, C 2, D 3, E 4, F 5);
tuple_outputs!(7; A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_outputs!(8; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// What the auto-IO runner reported in its status file.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct RunnerStatus {
    /// The exception that ended the code.
    pub error: Option<RunnerError>,
    /// Outputs the code never assigned.
    pub unassigned: Option<Vec<String>>,
    /// An output that could not be written as its type.
    pub bad_output: Option<RunnerBadOutput>,
}

/// An exception reported by the runner.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct RunnerError {
    /// Exception class.
    #[serde(rename = "type")]
    pub kind: String,
    /// Message.
    pub message: String,
    /// Formatted traceback.
    pub traceback: String,
}

/// An output of the wrong type, reported by the runner.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct RunnerBadOutput {
    /// Output name.
    pub name: String,
    /// Declared type.
    pub expected: String,
    /// What the variable held.
    pub got: String,
}

/// Turns what was collected into typed values, failing on the first missing
/// or unparsable output.
pub fn parse(collected: Collected, declared: &[Param]) -> Result<Outputs> {
    let mut values = Vec::with_capacity(declared.len());
    for p in declared {
        let value = if p.ty.is_path() {
            if !collected.extracted.contains(&p.name) {
                return Err(Error::MissingOutput {
                    name: p.name.clone(),
                });
            }
            let path = collected
                .dir
                .as_ref()
                .map(|d| d.path().join(&p.name))
                .unwrap_or_default();
            if p.ty == Type::File {
                Value::File(path)
            } else {
                Value::Dir(path)
            }
        } else {
            let text = collected
                .texts
                .iter()
                .find(|(n, _)| *n == p.name)
                .map(|(_, t)| t)
                .ok_or_else(|| Error::MissingOutput {
                    name: p.name.clone(),
                })?;
            let got = || String::from_utf8_lossy(&text[..text.len().min(200)]).into_owned();
            let text = std::str::from_utf8(text).map_err(|_| Error::BadOutput {
                name: p.name.clone(),
                expected: p.ty.to_string(),
                got: got(),
            })?;
            Value::parse(p.ty, text).map_err(|_| Error::BadOutput {
                name: p.name.clone(),
                expected: p.ty.to_string(),
                got: got(),
            })?
        };
        values.push((p.name.clone(), value));
    }
    Ok(Outputs::new(values, collected.dir))
}

#[cfg(test)]
mod tests;
