//! A context's history as a Jupyter notebook (nbformat 4.5).

use serde_json::{json, Map, Value};

use super::execution::Execution;
use super::Language;

/// One run: its code and what it produced.
pub(crate) enum Cell {
    /// A run: its code and what it gave.
    Run {
        code: String,
        execution: Box<Execution>,
    },
    /// The context's kernel started again here: what the runs above made
    /// in memory is gone (their files stay).
    Restart,
}

/// nbformat wants multi-line text as a list of lines, each keeping its `\n`.
fn lines(text: &str) -> Value {
    Value::Array(
        text.split_inclusive('\n')
            .map(|l| Value::String(l.to_string()))
            .collect(),
    )
}

fn outputs(e: &Execution) -> Vec<Value> {
    let mut out = Vec::new();
    for (name, text) in [("stdout", &e.stdout), ("stderr", &e.stderr)] {
        if !text.is_empty() {
            out.push(json!({"output_type": "stream", "name": name, "text": lines(text)}));
        }
    }
    for r in &e.results {
        let data: Map<String, Value> = r
            .data
            .iter()
            .map(|(mime, value)| {
                // Text types are stored as lists of lines; JSON types as JSON.
                let value = match value {
                    Value::String(s) if !mime.ends_with("json") => lines(s),
                    other => other.clone(),
                };
                (mime.clone(), value)
            })
            .collect();
        if r.is_main {
            out.push(
                json!({"output_type": "execute_result", "execution_count": e.execution_count,
                "data": data, "metadata": r.metadata}),
            );
        } else {
            out.push(json!({"output_type": "display_data", "data": data, "metadata": r.metadata}));
        }
    }
    if let Some(err) = &e.error {
        let traceback: Vec<&str> = err.traceback.lines().collect();
        out.push(json!({"output_type": "error", "ename": err.name, "evalue": err.value, "traceback": traceback}));
    }
    out
}

/// What a notebook says where its context's kernel started again.
const RESTART_NOTE: &str =
    "*The kernel restarted here: variables and imports of the cells above are gone (files stay).*";

/// The notebook of these runs, in a context of `language`.
pub(crate) fn render(history: &[Cell], language: Language) -> Value {
    let cells: Vec<Value> = history
        .iter()
        .enumerate()
        .map(|(i, cell)| match cell {
            Cell::Run { code, execution } => json!({
                "cell_type": "code",
                "id": format!("cell-{i}"),
                "execution_count": execution.execution_count,
                "metadata": {},
                "source": lines(code),
                "outputs": outputs(execution),
            }),
            Cell::Restart => json!({
                "cell_type": "markdown",
                "id": format!("cell-{i}"),
                "metadata": {},
                "source": lines(RESTART_NOTE),
            }),
        })
        .collect();
    json!({
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": language.kernelspec(),
            "language_info": {"name": language.as_str(), "file_extension": language.file_extension()},
        },
        "cells": cells,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notebooks_keep_code_outputs_and_counts() {
        let mut execution = Execution {
            stdout: "a\nb\n".into(),
            execution_count: Some(2),
            ..Execution::default()
        };
        execution.results.push(super::super::RichResult {
            data: [("text/plain".to_string(), json!("2"))].into(),
            metadata: Map::new(),
            is_main: true,
            cut: vec![],
        });
        let nb = render(
            &[
                Cell::Run {
                    code: "print('a')\nprint('b')\n1 + 1".into(),
                    execution: Box::new(execution),
                },
                Cell::Restart,
            ],
            Language::Python,
        );
        assert_eq!(nb["metadata"]["kernelspec"]["name"], "python3");
        assert_eq!(nb["cells"][1]["cell_type"], "markdown");
        assert!(nb["cells"][1]["source"][0]
            .as_str()
            .unwrap()
            .contains("restarted"));
        assert_eq!(nb["nbformat"], 4);
        let cell = &nb["cells"][0];
        assert_eq!(
            cell["source"],
            json!(["print('a')\n", "print('b')\n", "1 + 1"])
        );
        assert_eq!(cell["outputs"][0]["text"], json!(["a\n", "b\n"]));
        assert_eq!(cell["outputs"][1]["output_type"], "execute_result");
        assert_eq!(cell["outputs"][1]["execution_count"], 2);
    }
}
