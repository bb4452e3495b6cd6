//! Monty's own test cases, run in plain Monty and through a code host with
//! the default policy: the code host must give the same output, value (in
//! the exact encoding) and exception class on every case but the one its
//! prelude changes on purpose (`asyncio` without an import) and the three
//! that call `os.getenv`/`os.environ`, which plain Monty without a handler
//! refuses and the code host must answer so that their own assertions pass.
//! The cases also run in CPython (the image's): wherever CPython and plain
//! Monty agree, the code host must agree with both. The cases come from the
//! `pydantic-monty-runtime` source distribution on PyPI, fetched once per
//! machine into the target directory.

mod common;

#[path = "../examples/monty_conformance/compare.rs"]
#[allow(dead_code)]
mod compare;

use std::path::PathBuf;
use std::process::Command;

use dockhand::codemode::{CodeHostConfig, MONTY_PACKAGE};
use dockhand::ImageSpec;

/// Monty's test cases at the pinned version, fetched once.
fn cases() -> PathBuf {
    let version = MONTY_PACKAGE.split("==").nth(1).expect("a pinned version");
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("monty-cases-{version}"));
    let cases = root.join(format!(
        "pydantic_monty_runtime-{version}/crates/monty/test_cases"
    ));
    if cases.is_dir() {
        return cases;
    }
    std::fs::create_dir_all(&root).unwrap();
    // The sdist as PyPI lists it, fetched as is: `pip download --no-binary`
    // would build its build backend (maturin) from source first, minutes.
    let fetch = format!(
        r#"
import json, sys, urllib.parse, urllib.request
index = "https://pypi.org/pypi/pydantic-monty-runtime/json"
project = json.load(urllib.request.urlopen(index, timeout=60))
sdist = next(u for u in project["releases"]["{version}"] if u["packagetype"] == "sdist")
# A mirror may list it relative to the index.
url = urllib.parse.urljoin(index, sdist["url"])
with urllib.request.urlopen(url, timeout=300) as r, open(sys.argv[1], "wb") as f:
    f.write(r.read())
"#
    );
    let sdist = root.join(format!("pydantic_monty_runtime-{version}.tar.gz"));
    let status = Command::new("python3")
        .args(["-c", &fetch])
        .arg(&sdist)
        .status()
        .expect("python3 (the cases come from PyPI)");
    assert!(
        status.success(),
        "could not fetch Monty's sources from PyPI"
    );
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(&sdist)
        .arg("-C")
        .arg(&root)
        .arg(format!(
            "pydantic_monty_runtime-{version}/crates/monty/test_cases"
        ))
        .status()
        .unwrap();
    assert!(
        status.success() && cases.is_dir(),
        "no test cases in {sdist:?}"
    );
    cases
}

#[tokio::test]
async fn monty_s_own_cases_behave_as_in_plain_monty() {
    let dir = cases();
    let image = ImageSpec::default()
        .pip([MONTY_PACKAGE])
        .trust_host_certificates();
    let mut config = CodeHostConfig::default().image(image).exact_values(true);
    for (key, value) in compare::MONTY_TEST_ENV {
        config = config.env(key, value);
    }
    let host = common::code_host(config).await;
    let reference_image = host.describe().image.expect("an image");
    let expected = compare::reference(compare::PLAIN_MONTY, &reference_image, &dir)
        .expect("plain Monty ran the cases");
    assert!(expected.len() >= 700, "{} cases", expected.len());
    let cpython = compare::reference(compare::CPYTHON, &reference_image, &dir)
        .expect("CPython ran the cases");
    let report = compare::compare(&host, &dir, &expected).await.unwrap();
    host.close().await.unwrap();
    let unexpected: Vec<String> = report
        .unexpected()
        .into_iter()
        .map(|(name, want, got)| format!("{name}:\n  monty:    {want:?}\n  dockhand: {got:?}"))
        .collect();
    assert!(
        report.by_rule.is_empty(),
        "the default policy refused cases: {:?}",
        report.by_rule
    );
    assert!(
        unexpected.is_empty(),
        "{} of {} cases differ from plain Monty:\n{}",
        unexpected.len(),
        report.cases,
        unexpected.join("\n")
    );
    assert_eq!(
        report.answered,
        compare::ANSWERED_BY_THE_HOST.len(),
        "the OS-call cases pass their own assertions through the code host"
    );
    println!(
        "{} cases: {} same, {} differ on purpose",
        report.cases,
        report.same,
        report.differ.len()
    );

    // Against CPython, where CPython and plain Monty agree: every case but
    // those the prelude or the host's OS answers change on purpose.
    let against = compare::against_cpython(&cpython, &expected, &report.outcomes);
    let unexpected: Vec<String> = against
        .differ
        .iter()
        .filter(|(name, _, _)| !compare::CHANGED_BY_THE_PRELUDE.contains(&name.as_str()))
        .map(|(name, want, got)| format!("{name}:\n  cpython:  {want:?}\n  dockhand: {got:?}"))
        .collect();
    assert!(
        against.compared >= 300,
        "only {} of {} cases CPython ran agree with plain Monty",
        against.compared,
        against.ran
    );
    assert!(
        unexpected.is_empty(),
        "{} of {} cases differ from CPython:\n{}",
        unexpected.len(),
        against.compared,
        unexpected.join("\n")
    );
    println!(
        "CPython ran {} cases; on the {} where it and plain Monty agree, the code host agrees on {}",
        against.ran, against.compared, against.same
    );
}
