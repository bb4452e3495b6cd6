//! Reading `-i name[:type]=value`, `-o name:type`, `-e K=V` and
//! `--secret NAME=env:VAR` from the command line.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use dockhand::{Secret, Type, Value};

/// A type by the name the CLI and Python use for it.
pub fn parse_type(name: &str) -> Result<Type> {
    Ok(match name {
        "int" => Type::Int,
        "float" => Type::Float,
        "str" => Type::Str,
        "bool" => Type::Bool,
        "datetime" => Type::Datetime,
        "timedelta" => Type::Timedelta,
        "file" | "File" => Type::File,
        "dir" | "Dir" => Type::Dir,
        "json" => Type::Json,
        other => bail!(
            "unknown type `{other}`: use int, float, str, bool, datetime, timedelta, file, dir or json"
        ),
    })
}

/// One input: `name=value`, `name:type=value`, `name=@path`.
pub fn parse_input(arg: &str) -> Result<(String, Type, Value)> {
    let (head, text) = arg
        .split_once('=')
        .ok_or_else(|| anyhow!("input `{arg}`: write name=value, name:type=value or name=@path"))?;
    let (name, declared) = match head.split_once(':') {
        Some((name, ty)) => (name, Some(parse_type(ty)?)),
        None => (head, None),
    };
    if name.is_empty() {
        bail!("input `{arg}` has no name");
    }
    if let Some(path) = text.strip_prefix('@') {
        let path = PathBuf::from(path);
        let meta = std::fs::metadata(&path)
            .map_err(|e| anyhow!("input `{name}`: {}: {e}", path.display()))?;
        let ty = declared.unwrap_or(if meta.is_dir() { Type::Dir } else { Type::File });
        let value = match ty {
            Type::Dir if meta.is_dir() => Value::dir(&path),
            Type::File if meta.is_file() => Value::file(&path),
            Type::Dir | Type::File => bail!("input `{name}`: {} is not a {ty}", path.display()),
            // A typed value read from a file: `n:int=@count.txt`.
            ty => {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| anyhow!("input `{name}`: {}: {e}", path.display()))?;
                Value::parse(ty, &text).map_err(|e| anyhow!("input `{name}`: {e}"))?
            }
        };
        return Ok((name.to_string(), ty, value));
    }
    let ty = declared.unwrap_or_else(|| infer(text));
    let value = Value::parse(ty, text).map_err(|e| anyhow!("input `{name}`: `{text}` is {e}"))?;
    Ok((name.to_string(), ty, value))
}

/// The type a bare value reads as: int, float, bool, JSON, else str.
fn infer(text: &str) -> Type {
    let t = text.trim();
    if t.parse::<i64>().is_ok() {
        Type::Int
    } else if t.parse::<f64>().is_ok() && !t.is_empty() {
        Type::Float
    } else if matches!(t, "true" | "false") {
        Type::Bool
    } else if (t.starts_with('{') || t.starts_with('['))
        && serde_json::from_str::<serde_json::Value>(t).is_ok()
    {
        Type::Json
    } else {
        Type::Str
    }
}

/// One output: `name:type`, or `name` for a str.
pub fn parse_output(arg: &str) -> Result<(String, Type)> {
    match arg.split_once(':') {
        Some((name, ty)) => Ok((name.to_string(), parse_type(ty)?)),
        None => Ok((arg.to_string(), Type::Str)),
    }
}

/// `gvisor` (or `runsc`) is gVisor; `runc`/`default` the daemon's default;
/// anything else a runtime registered under that name.
pub fn parse_isolation(name: &str) -> dockhand::Isolation {
    match name {
        "gvisor" | "runsc" => dockhand::Isolation::Gvisor,
        "runc" | "default" => dockhand::Isolation::Default,
        other => dockhand::Isolation::Runtime(other.to_string()),
    }
}

/// `K=V`.
pub fn parse_env(arg: &str) -> Result<(String, String)> {
    let (k, v) = arg
        .split_once('=')
        .ok_or_else(|| anyhow!("env `{arg}`: write NAME=value"))?;
    Ok((k.to_string(), v.to_string()))
}

/// `NAME=env:VAR` (the value stays on the host until the run) or
/// `NAME=file:VAR` for `/run/secrets/NAME`, optionally `@host,host` for a
/// secret that never enters the sandbox (the egress gateway puts it into
/// requests to those hosts only). Values are never given on the command
/// line, where they would show in `ps` and shell history.
pub fn parse_secret(arg: &str) -> Result<Secret> {
    let (name, source) = arg
        .split_once('=')
        .ok_or_else(|| anyhow!("secret `{arg}`: write NAME=env:HOST_VAR"))?;
    // An environment variable's name has no `@`: what follows is hosts.
    let (source, hosts) = match source.split_once('@') {
        Some((source, hosts)) => (source, Some(hosts)),
        None => (source, None),
    };
    let secret = match source.split_once(':') {
        Some(("env", var)) => Secret::from_env(name, var),
        Some(("file", var)) => Secret::from_env(name, var).as_file(),
        _ => bail!(
            "secret `{name}`: write {name}=env:HOST_VAR (an env var) or {name}=file:HOST_VAR \
             (/run/secrets/{name}), with @host,host to keep it outside the sandbox; values are \
             not taken on the command line"
        ),
    };
    Ok(match hosts {
        Some(hosts) => {
            let hosts: Vec<&str> = hosts.split(',').filter(|h| !h.is_empty()).collect();
            if hosts.is_empty() {
                bail!("secret `{name}`: name at least one host after `@`");
            }
            secret.only_for(hosts)
        }
        None => secret,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_typed_or_inferred() {
        let (name, ty, value) = parse_input("n=42").unwrap();
        assert_eq!((name.as_str(), ty, value), ("n", Type::Int, Value::Int(42)));
        assert_eq!(parse_input("x=1.5").unwrap().1, Type::Float);
        assert_eq!(parse_input("b=true").unwrap().1, Type::Bool);
        assert_eq!(parse_input("j=[1, 2]").unwrap().1, Type::Json);
        assert_eq!(
            parse_input("s=hello world").unwrap().2,
            Value::Str("hello world".into())
        );
        assert_eq!(parse_input("s:str=42").unwrap().2, Value::Str("42".into()));
        assert_eq!(parse_input("e=").unwrap().2, Value::Str(String::new()));
    }

    #[test]
    fn bad_inputs_say_why() {
        let err = |arg: &str| parse_input(arg).unwrap_err().to_string();
        assert!(
            err("n:int=abc").contains("not a valid int"),
            "{}",
            err("n:int=abc")
        );
        assert!(err("novalue").contains("name=value"));
        assert!(err("n:money=1").contains("unknown type `money`"));
        assert!(err("f=@/surely/not/here").contains("/surely/not/here"));
        assert!(err("=1").contains("no name"));
    }

    #[test]
    fn files_and_dirs_by_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "7").unwrap();
        let arg = |s: &str, p: &std::path::Path| format!("{s}=@{}", p.display());
        assert_eq!(parse_input(&arg("f", &file)).unwrap().1, Type::File);
        assert_eq!(parse_input(&arg("d", dir.path())).unwrap().1, Type::Dir);
        assert_eq!(parse_input(&arg("n:int", &file)).unwrap().2, Value::Int(7));
        assert!(parse_input(&arg("d:dir", &file)).is_err());
    }

    #[test]
    fn outputs_env_and_secrets() {
        assert_eq!(parse_output("y:int").unwrap(), ("y".into(), Type::Int));
        assert_eq!(parse_output("y").unwrap(), ("y".into(), Type::Str));
        assert_eq!(parse_env("A=b=c").unwrap(), ("A".into(), "b=c".into()));
        let s = parse_secret("TOKEN=env:MY_TOKEN").unwrap();
        assert_eq!(s.name(), "TOKEN");
        let bound = parse_secret("KEY=env:MY_KEY@api.example.com,*.example.org").unwrap();
        assert_eq!(bound.hosts().unwrap(), ["api.example.com", "*.example.org"]);
        assert!(parse_secret("KEY=env:MY_KEY@").is_err());
        assert!(parse_secret("TOKEN=hunter2")
            .unwrap_err()
            .to_string()
            .contains("env:"));
    }
}
