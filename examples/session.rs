//! An agent-style session: write a small Python project, run its tests, fix
//! the bug with `edit_file`, run the tests again, and snapshot the result.
//!
//! ```text
//! cargo run --example session
//! ```

use dockhand::session::{Edit, SessionApi, SessionConfig};
use dockhand::Client;

const CALC: &str = "\
def add(a, b):
    return a - b


def mean(xs):
    return sum(xs) / len(xs)
";

const TESTS: &str = "\
import unittest

from calc import add, mean


class CalcTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_mean(self):
        self.assertEqual(mean([1, 2, 3]), 2)


if __name__ == '__main__':
    unittest.main()
";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::builder()
        .on_progress(|p| eprintln!("{p}"))
        .connect()
        .await?;
    let session = client.session(
        SessionConfig::new()
            .name("calc-agent")
            .workspace("/workspace"),
    );
    session.start().await?;
    println!("session started: {:?}", session.describe().container_id);

    session.write_file("calc.py", CALC.as_bytes()).await?;
    session.write_file("test_calc.py", TESTS.as_bytes()).await?;
    let listing: Vec<String> = session
        .list_dir(".")
        .await?
        .into_iter()
        .map(|e| e.name)
        .collect();
    println!("workspace: {listing:?}");

    let run = session
        .exec("python3 -m unittest -q test_calc 2>&1")
        .await?;
    println!(
        "first test run: exit {}\n{}",
        run.exit_code,
        run.stdout.trim_end()
    );

    // The agent reads the failure and fixes the bug with a targeted edit; had
    // it quoted the whole line with other indentation, the edit would still
    // match and be re-indented.
    let fix = session
        .edit_file("calc.py", &[Edit::replace("return a - b", "return a + b")])
        .await?;
    for change in &fix.changes {
        println!(
            "edited line {}: {:?} -> {:?}",
            change.line,
            change.removed.trim(),
            change.added.trim()
        );
    }

    let run = session
        .exec("python3 -m unittest -q test_calc 2>&1")
        .await?;
    println!(
        "second test run: exit {}\n{}",
        run.exit_code,
        run.stdout.trim_end()
    );

    let snapshot = session.snapshot().await?;
    println!("snapshot: {}", snapshot.image);
    session.close().await?;

    // The snapshot holds the fixed project; remove it when done with it.
    let restored = client.session(SessionConfig::new().from_snapshot(&snapshot));
    restored.start().await?;
    println!(
        "restored calc.py starts with: {:?}",
        restored.read_to_string("calc.py").await?.lines().nth(1)
    );
    restored.close().await?;
    client.remove_snapshot(&snapshot).await?;
    Ok(())
}
