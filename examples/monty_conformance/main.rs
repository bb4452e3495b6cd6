//! Runs a directory of Python test cases (Monty's own suite, say) three
//! times: in plain Monty (pydantic-monty) and in CPython inside the code
//! host's image, and through dockhand's code host (see `compare.rs`). Differences caused by rules the
//! policy adds on purpose are counted apart. The code host runs the default
//! policy; `DOCKHAND_POLICY=strict` runs the strict one.
//!
//! ```text
//! cargo run --release --example monty_conformance -- DIR
//! ```
//!
//! Monty's suite ships in the `pydantic-monty-runtime` source distribution
//! (`crates/monty/test_cases/`); it is not part of this repository. The
//! `monty_conformance` test fetches it and holds the code host to a
//! threshold.

mod compare;

use std::path::PathBuf;

use dockhand::codemode::{CodeHostConfig, CodePolicy};
use dockhand::Client;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir: PathBuf = std::env::args()
        .nth(1)
        .ok_or("usage: monty_conformance DIR (a directory of .py test cases)")?
        .into();
    let dir = dir.canonicalize()?;
    let client = Client::connect().await?;
    // The reference runs on Monty's Python package, in the same image.
    let image = dockhand::ImageSpec::default()
        .pip([dockhand::codemode::MONTY_PACKAGE])
        .trust_host_certificates();
    let policy = match std::env::var("DOCKHAND_POLICY").as_deref() {
        Ok("strict") => CodePolicy::Strict,
        _ => CodePolicy::Default,
    };
    let mut config = CodeHostConfig::default()
        .image(image)
        .policy(policy)
        .exact_values(true);
    for (key, value) in compare::MONTY_TEST_ENV {
        config = config.env(key, value);
    }
    let host = client.code_host(config);
    host.start().await?;
    let image = host.describe().image.ok_or("the code host has no image")?;
    let expected = compare::reference(compare::PLAIN_MONTY, &image, &dir)?;
    let cpython = compare::reference(compare::CPYTHON, &image, &dir)?;
    let report = compare::compare(&host, &dir, &expected).await?;
    let against = compare::against_cpython(&cpython, &expected, &report.outcomes);
    for (name, want, got) in &against.differ {
        println!("DIFFERS FROM CPYTHON {name}:\n  cpython:  {want:?}\n  dockhand: {got:?}");
    }
    for (name, want, got) in &report.differ {
        println!("DIFFERS {name}:\n  monty:    {want:?}\n  dockhand: {got:?}");
    }
    println!(
        "{} cases ({} complete without an exception in plain Monty): {} same through dockhand, {} stopped by the policy's rules {:?}, {} differ ({} of them OS-call cases the code host answers and passes, {} unexpected)",
        report.cases,
        report.passing,
        report.same,
        report.by_rule.values().sum::<u32>(),
        report.by_rule,
        report.differ.len(),
        report.answered,
        report.unexpected().len()
    );
    println!(
        "CPython ran {} cases; on the {} where it and plain Monty agree, dockhand agrees on {}",
        against.ran, against.compared, against.same
    );
    host.close().await?;
    Ok(())
}
