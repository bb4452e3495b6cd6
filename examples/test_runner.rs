//! A test-runner harness: run pytest over a submitted `solution.py` with a
//! `tests.py`, collect the exit code, a one-line summary and a JUnit XML report.
//! One passing and one failing submission.
//!
//! ```text
//! cargo run --example test_runner
//! ```

use std::path::{Path, PathBuf};

use dockhand::{Client, ImageSpec, Sandbox, Type, Value};

const TESTS: &str = "from solution import add, is_even\n\n\
def test_add():\n    assert add(2, 3) == 5\n\n\
def test_add_negative():\n    assert add(-1, 1) == 0\n\n\
def test_is_even():\n    assert is_even(4) and not is_even(3)\n";

const GOOD: &str = "def add(a, b):\n    return a + b\n\ndef is_even(n):\n    return n % 2 == 0\n";
const BAD: &str = "def add(a, b):\n    return a - b\n\ndef is_even(n):\n    return n % 2 == 0\n";

/// The harness script: pytest's own exit code is an output, not a failure of the run.
const RUN_TESTS: &str = r#"set -u
mkdir -p /tmp/work && cd /tmp/work
cp {{solution}} solution.py && cp {{tests}} test_submission.py
python3 -m pytest -q -p no:cacheprovider --junitxml=/var/outputs/junit test_submission.py > /tmp/pytest.log 2>&1
echo $? > /var/outputs/exit_code
tail -n 1 /tmp/pytest.log > /var/outputs/summary
"#;

async fn grade(
    client: &Client,
    harness: &Sandbox,
    dir: &Path,
    name: &str,
    solution: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let solution_path = dir.join(format!("{name}.py"));
    let tests_path = dir.join("tests.py");
    std::fs::write(&solution_path, solution)?;
    std::fs::write(&tests_path, TESTS)?;
    let out = client
        .run(
            harness,
            [
                ("solution", Value::file(&solution_path)),
                ("tests", Value::file(&tests_path)),
            ],
        )
        .await?;
    let exit_code: i64 = out.get("exit_code")?;
    let summary: String = out.get("summary")?;
    let junit: PathBuf = out.get("junit")?;
    let xml = std::fs::read_to_string(&junit)?;
    let failures = xml.matches("<failure").count();
    println!(
        "{name:<8} exit {exit_code}  {}  (JUnit: {} bytes, {failures} failure element(s))",
        summary.trim(),
        xml.len()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::builder()
        .on_progress(|p| eprintln!("{p}"))
        .connect()
        .await?;
    let harness = Sandbox::command("pytest-harness", "sh")
        .args(["-c", RUN_TESTS])
        .input("solution", Type::File)
        .input("tests", Type::File)
        .output("exit_code", Type::Int)
        .output("summary", Type::Str)
        .output("junit", Type::File)
        .image(
            ImageSpec::default()
                .pip(["pytest"])
                .trust_host_certificates(),
        )
        .build()?;
    let dir = tempfile::tempdir()?;
    grade(&client, &harness, dir.path(), "passing", GOOD).await?;
    grade(&client, &harness, dir.path(), "failing", BAD).await?;
    Ok(())
}
