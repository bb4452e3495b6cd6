//! Kernels of every language against the real kernels in a real container
//! (Deno for JavaScript and TypeScript, bash_kernel, IRkernel): state across
//! runs, results, errors with name, value and traceback, interrupts that
//! keep state, charts where the language makes them, and notebooks.

mod common;

use std::time::Duration;

use dockhand::kernel::{
    ContextOptions, Execution, Kernel, KernelConfig, KernelError, Language, RunOptions,
};
use dockhand::Error;

use common::{client, with_host_ca};

/// Python and every other language, in one image all these tests share.
fn languages_config() -> KernelConfig {
    let config = KernelConfig::new().languages(Language::ALL);
    let image = with_host_ca(config.image_spec().clone());
    config.image(image)
}

async fn kernel_with(language: Language, context: &str) -> Kernel {
    let k = client().await.kernel(languages_config());
    k.start().await.expect("the kernel starts");
    k.create_context_with(context, ContextOptions::new().language(language))
        .await
        .unwrap_or_else(|e| panic!("a {language} context starts: {e}"));
    k
}

/// What a run gave: its result's text (IRkernel shows values as display
/// data, not as an execute result), or for Bash, whose values are its
/// output, stdout.
fn value(ex: &Execution) -> Option<&str> {
    ex.text()
        .or_else(|| ex.results.last().and_then(|r| r.text()))
        .or_else(|| Some(ex.stdout.trim_end()).filter(|s| !s.is_empty()))
}

fn in_context(name: &str) -> RunOptions {
    RunOptions::new().context(name)
}

/// State across runs, a result, stdout, an error; and the interrupt of a
/// run that would not end, after which the state is still there.
async fn the_results_model(
    language: Language,
    set: &str,
    result: (&str, &str),
    print: (&str, &str),
    raise: (&str, &str),
    sleep: &str,
) {
    let name = language.as_str();
    let k = kernel_with(language, name).await;
    assert_eq!(k.context_language(name).await.unwrap(), language);
    let ex = k.run_with(set, in_context(name)).await.unwrap();
    assert!(ex.success(), "{language}: {:?}", ex.error);
    let ex = k.run_with(result.0, in_context(name)).await.unwrap();
    assert_eq!(value(&ex), Some(result.1), "{language}: {ex:?}");
    let ex = k.run_with(print.0, in_context(name)).await.unwrap();
    assert_eq!(ex.stdout, print.1, "{language}: {ex:?}");

    let ex = k.run_with(raise.0, in_context(name)).await.unwrap();
    let error = ex
        .error
        .as_ref()
        .unwrap_or_else(|| panic!("{language}: no error in {ex:?}"));
    // Bash's message is the command's output (bash_kernel runs it on a
    // terminal: stderr joins stdout); its error, the status.
    assert!(
        error.value.contains(raise.1)
            || error.traceback.contains(raise.1)
            || ex.stdout.contains(raise.1),
        "{language}: {error:?} {ex:?}"
    );
    assert!(!error.name.is_empty(), "{language}: {error:?}");

    let err = k
        .run_with(sleep, in_context(name).timeout(Duration::from_secs(3)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Kernel(KernelError::Timeout { .. })),
        "{language}: {err:?}"
    );
    // State kept or lost, the context answers again; and says which.
    let ex = k.run_with(result.0, in_context(name)).await.unwrap();
    if let Error::Kernel(KernelError::Timeout { state_lost, .. }) = err {
        if !state_lost {
            assert_eq!(
                value(&ex),
                Some(result.1),
                "{language}: state after interrupt"
            );
        }
    }

    let notebook = k.notebook(name).await.unwrap();
    assert_eq!(notebook["metadata"]["language_info"]["name"], name);
    k.close().await.unwrap();
}

#[tokio::test]
async fn javascript_runs_in_deno() {
    the_results_model(
        Language::JavaScript,
        "var n = 40;",
        ("n + 2", "42"),
        ("console.log('hi', n)", "hi 40\n"),
        ("throw new RangeError('too far')", "too far"),
        "while (true) {}",
    )
    .await;
}

#[tokio::test]
async fn typescript_runs_in_deno() {
    the_results_model(
        Language::TypeScript,
        "const n: number = 40;",
        ("n + 2", "42"),
        ("console.log(`${n} items`)", "40 items\n"),
        (
            "function f(): never { throw new TypeError('typed no') }\nf()",
            "typed no",
        ),
        "await new Promise((r) => setTimeout(r, 60000))",
    )
    .await;
}

#[tokio::test]
async fn bash_runs_in_bash_kernel() {
    the_results_model(
        Language::Bash,
        "N=40",
        ("echo $((N + 2))", "42"),
        ("echo hi $N", "hi 40\n"),
        ("ls /no/such/dir", "No such file"),
        "sleep 60",
    )
    .await;
}

#[tokio::test]
async fn r_runs_in_irkernel_with_charts() {
    the_results_model(
        Language::R,
        "n <- 40",
        ("n + 2", "[1] 42"),
        ("cat('hi', n, '\\n')", "hi 40 \n"),
        ("stop('too far')", "too far"),
        "Sys.sleep(60)",
    )
    .await;
    let k = kernel_with(Language::R, "plots").await;
    let ex = k
        .run_with(
            "plot(1:10, (1:10)^2, main = 'squares')",
            in_context("plots"),
        )
        .await
        .unwrap();
    assert!(ex.success(), "{:?}", ex.error);
    let png = ex.pngs();
    assert_eq!(png.len(), 1, "{ex:?}");
    k.close().await.unwrap();
}

#[tokio::test]
async fn a_language_the_image_lacks_is_a_typed_error() {
    let k = client().await.kernel(common::kernel_config());
    let err = k
        .create_context_with("r", ContextOptions::new().language(Language::R))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Kernel(KernelError::LanguageNotInImage {
                language: Language::R,
                ..
            })
        ),
        "{err:?}"
    );
    assert!(k.contexts().iter().all(|c| c != "r"));
    k.close().await.unwrap();
}
