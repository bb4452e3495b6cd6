//! Kernels against a real ipykernel in a real container: state, rich
//! results, errors, interrupts, contexts, files, notebooks.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dockhand::kernel::{KernelError, KernelEvent, RunOptions};
use dockhand::session::SessionApi;
use dockhand::Error;

use common::{kernel, kernel_config as config};

#[tokio::test]
async fn state_results_charts_frames_and_errors() {
    let k = kernel(config().figure_formats(["png", "svg"])).await;
    let ex = k.run("x = 20\nprint('hi')\nx + 22").await.unwrap();
    assert_eq!((ex.stdout.as_str(), ex.text()), ("hi\n", Some("42")));
    assert!(ex.success());
    // State persists across runs.
    assert_eq!(k.run("x * 2").await.unwrap().text(), Some("40"));

    // A DataFrame: HTML with its rows, and data.
    let ex = k
        .run("df = pd.DataFrame({'city': ['Oslo', 'Lima', 'Pune'], 'n': [3, 1, 2]})\ndf")
        .await
        .unwrap();
    let main = ex.main_result().unwrap();
    let html = main.html().unwrap();
    for city in ["Oslo", "Lima", "Pune"] {
        assert!(html.contains(city), "{html}");
    }
    let frame = main.dataframe().unwrap();
    assert_eq!(frame["shape"], serde_json::json!([3, 2]));
    assert_eq!(frame["columns"], serde_json::json!(["city", "n"]));

    // A chart without show(): PNG of the figure's size, SVG, and data.
    let ex = k
        .run("fig = plt.figure(figsize=(4, 3), dpi=100)\nplt.plot([1, 2, 3], [2, 4, 8], label='growth')\nplt.title('Growth')\nplt.xlabel('day')")
        .await
        .unwrap();
    let figure = ex
        .results
        .iter()
        .find(|r| r.png().is_some())
        .expect("a figure");
    let png = figure.png().unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let (w, h) = (
        u32::from_be_bytes(png[16..20].try_into().unwrap()),
        u32::from_be_bytes(png[20..24].try_into().unwrap()),
    );
    // 4x3 inches at 100 dpi, less the margins the inline backend trims
    // (`bbox_inches="tight"`, as in Jupyter).
    assert!(
        (250..=450).contains(&w) && (200..=400).contains(&h),
        "{w}x{h}"
    );
    let svg = figure.svg().expect("an SVG too");
    assert!(svg.contains("<svg") && svg.trim_end().ends_with("</svg>"));
    let chart = figure.chart().expect("chart data");
    assert_eq!(
        (
            chart.kind.as_str(),
            chart.title.as_str(),
            chart.x_label.as_str()
        ),
        ("line", "Growth", "day")
    );
    assert_eq!(chart.elements[0]["y"], serde_json::json!([2, 4, 8]));
    assert_eq!(chart.elements[0]["label"], "growth");

    // An error is data, with the user's line, and the kernel goes on.
    let ex = k.run("a = 1\nb = 0\na / b").await.unwrap();
    let e = ex.error.as_ref().expect("an error");
    assert_eq!(
        (e.name.as_str(), e.value.as_str(), e.line),
        ("ZeroDivisionError", "division by zero", Some(3))
    );
    assert!(!e.traceback.contains('\u{1b}'));
    assert_eq!(k.run("a").await.unwrap().text(), Some("1"));

    // A restart keeps the notebook's history, and says where it was.
    k.restart_context("default").await.unwrap();
    assert_eq!(k.run("7 * 6").await.unwrap().text(), Some("42"));

    // The notebook of the context.
    let nb = k.notebook("default").await.unwrap();
    assert_eq!(nb["cells"].as_array().unwrap().len(), 8);
    assert_eq!(nb["cells"][6]["cell_type"], "markdown");
    assert_eq!(nb["cells"][7]["source"], serde_json::json!(["7 * 6"]));
    // Valid by Jupyter's own validator.
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), serde_json::to_vec(&nb).unwrap()).unwrap();
    let python = common::venv_python(&["nbformat"]);
    let check = std::process::Command::new(python)
        .args(["-c", "import sys, nbformat; nb = nbformat.read(sys.argv[1], as_version=4); nbformat.validate(nb); print(len(nb.cells))"])
        .arg(file.path())
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&check.stdout).trim(), "8");
    k.close().await.unwrap();
}

/// Chart data as a model reads it: a gap is null (not 0.0), a text index
/// stays its labels (pandas plots it at positions), dates stay dates
/// (pandas plots them as period ordinals or day numbers), value by value.
#[tokio::test]
async fn chart_data_keeps_gaps_categories_and_dates() {
    let k = kernel(config()).await;
    let chart = |code: &'static str| {
        let k = k.clone();
        async move {
            let ex = k.run(code).await.unwrap();
            let figure = ex
                .results
                .iter()
                .find(|r| r.chart().is_some())
                .unwrap_or_else(|| panic!("a chart from {code}: {ex:?}"));
            figure.chart().unwrap().elements[0].clone()
        }
    };
    k.run("import numpy as np\nimport pandas as pd")
        .await
        .unwrap();
    let by_city =
        chart("pd.Series([1.0, np.nan, 3.0], index=['Oslo', 'Lima', 'Pune']).plot().figure").await;
    assert_eq!(by_city["x"], serde_json::json!(["Oslo", "Lima", "Pune"]));
    assert_eq!(by_city["y"], serde_json::json!([1.0, null, 3.0]));
    let daily = chart(
        "pd.Series([1.0, 2.0], index=pd.date_range('2024-02-28', periods=2, freq='D')).plot().figure",
    )
    .await;
    assert_eq!(
        daily["x"],
        serde_json::json!(["2024-02-28T00:00:00", "2024-02-29T00:00:00"])
    );
    let irregular = chart(
        "pd.Series([5.0, 6.0], index=pd.to_datetime(['2024-01-01', '2024-03-01'])).plot().figure",
    )
    .await;
    assert_eq!(
        irregular["x"],
        serde_json::json!(["2024-01-01T00:00:00", "2024-03-01T00:00:00"])
    );
    let numpy_dates = chart(
        "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot(np.array(['2024-05-01', '2024-05-02'], dtype='datetime64[ns]'), [1, np.nan])\nfig",
    )
    .await;
    assert_eq!(
        numpy_dates["x"],
        serde_json::json!([
            "2024-05-01T00:00:00.000000000",
            "2024-05-02T00:00:00.000000000"
        ])
    );
    assert_eq!(numpy_dates["y"], serde_json::json!([1.0, null]));
    k.close().await.unwrap();
}

#[tokio::test]
async fn live_output_and_interrupts_that_keep_state() {
    let k = kernel(config()).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let options = RunOptions::new().on_event(move |e| {
        if let KernelEvent::Stdout(t) = e {
            sink.lock().unwrap().push(t.clone())
        }
    });
    let ex = k
        .run_with(
            "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.2)",
            options,
        )
        .await
        .unwrap();
    assert_eq!(ex.stdout, "0\n1\n2\n");
    assert!(
        seen.lock().unwrap().len() >= 2,
        "{:?}",
        seen.lock().unwrap()
    );

    k.run("x = 1").await.unwrap();
    let err = k
        .run_with(
            "while True: pass",
            RunOptions::new().timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Kernel(KernelError::Timeout {
                state_lost: false,
                ..
            })
        ),
        "{err:?}"
    );
    assert_eq!(k.run("x").await.unwrap().text(), Some("1"));

    // Code that ignores the interrupt: the context restarts, and says so.
    let err = k
        .run_with(
            "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass",
            RunOptions::new().timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Kernel(KernelError::Timeout {
                state_lost: true,
                ..
            })
        ),
        "{err:?}"
    );
    let ex = k.run("'x' in globals()").await.unwrap();
    assert_eq!(ex.text(), Some("False"));
    k.close().await.unwrap();
}

#[tokio::test]
async fn contexts_keep_state_apart_and_files_come_and_go() {
    let k = kernel(config()).await;
    k.create_context("b").await.unwrap();
    assert_eq!(k.contexts(), ["b", "default"]);
    let in_b = |code: &'static str| k.run_with(code, RunOptions::new().context("b"));
    k.run("v = 'default'").await.unwrap();
    in_b("v = 'b'").await.unwrap();
    assert_eq!(k.run("v").await.unwrap().text(), Some("'default'"));
    assert_eq!(in_b("v").await.unwrap().text(), Some("'b'"));

    k.restart_context("b").await.unwrap();
    let ex = in_b("v").await.unwrap();
    assert_eq!(ex.error.unwrap().name, "NameError");

    // Files: a CSV in, a PNG and a CSV out, in the working directory.
    k.write_file("sales.csv", b"month,total\n1,10\n2,30\n3,20\n")
        .await
        .unwrap();
    let ex = k
        .run("s = pd.read_csv('sales.csv')\ns.plot(x='month', y='total').figure.savefig('sales.png')\ns.assign(double=s.total * 2).to_csv('out.csv', index=False)\nint(s.total.sum())")
        .await
        .unwrap();
    assert_eq!(ex.text(), Some("60"), "{ex:?}");
    assert_eq!(&k.read_file("sales.png").await.unwrap()[..4], b"\x89PNG");
    let out = k.read_to_string("out.csv").await.unwrap();
    assert_eq!(out.lines().nth(1), Some("1,10,20"));

    // A removed context is gone, with what it started.
    in_b("import subprocess\np = subprocess.Popen(['sleep', '600'])")
        .await
        .unwrap();
    k.remove_context("b").await.unwrap();
    assert_eq!(k.contexts(), ["default"]);
    let err = in_b("1").await.unwrap_err();
    assert!(
        matches!(err, Error::Kernel(KernelError::NoSuchContext(_))),
        "{err:?}"
    );
    let ps = k.exec(common::PROCESS_LIST).await.unwrap().stdout;
    assert!(ps.contains("python3"), "{ps}");
    assert!(!ps.contains("sleep 600"), "{ps}");
    let bad = k.create_context("no/slash").await.unwrap_err();
    assert!(matches!(bad, Error::Kernel(KernelError::BadContextName(_))));
    k.close().await.unwrap();
}

#[tokio::test]
async fn pooled_kernels_are_handed_over_started_with_imports_done() {
    let client = common::client().await;
    let pool = client
        .kernel_pool(
            config().preload_modules(true),
            dockhand::pool::PoolConfig::new(1),
        )
        .await
        .unwrap();
    assert!(
        pool.wait_ready(Duration::from_secs(180)).await,
        "{:?}",
        pool.stats()
    );
    let k = pool.kernel().await.unwrap();
    assert_eq!(pool.stats().handed_over, 1, "{:?}", pool.stats());
    // The data-science modules were imported before the handover.
    let ex = k
        .run("import sys\n'pandas' in sys.modules and 'pd' in globals()")
        .await
        .unwrap();
    assert_eq!(ex.text(), Some("True"));
    let id = k.session().describe().container_id.unwrap();
    k.close().await.unwrap();
    pool.shutdown().await;
    common::wait_gone(&id).await;
}

#[tokio::test]
async fn bound_modules_are_imported_when_the_code_first_uses_them() {
    // A startup line may use a bound name: bindings come first.
    let k = kernel(config().startup("startup_saw = type(np).__name__")).await;
    let ex = k
        .run("import sys\nprint([m in sys.modules for m in ('pandas', 'numpy', 'matplotlib')], startup_saw, pd.__name__, repr(plt))")
        .await
        .unwrap();
    assert_eq!(
        ex.stdout,
        "[False, False, False] DeferredModule pandas <module 'matplotlib.pyplot' (imported when first used)>\n",
        "{ex:?}"
    );
    // First use imports it; the name is then the module itself.
    let ex = k
        .run("import pandas\nframe = pd.DataFrame({'a': [1, 2]})\n(pd is pandas, type(pd).__name__, int(frame.a.sum()), 'numpy' in sys.modules)")
        .await
        .unwrap();
    assert_eq!(ex.text(), Some("(True, 'module', 3, True)"), "{ex:?}");
    // np was imported by pandas, but the name still stood in for it until used.
    let ex = k
        .run("f = lambda: int(np.arange(3).sum())\n(f(), np is sys.modules['numpy'], 'arange' in dir(np))")
        .await
        .unwrap();
    assert_eq!(ex.text(), Some("(3, True, True)"), "{ex:?}");
    // A name the code rebinds first is the code's.
    let ex = k.run("plt = 7\nplt + 1").await.unwrap();
    assert_eq!(ex.text(), Some("8"));
    // A new context gets its own stand-ins, forked from a fork server that
    // has since imported what earlier contexts used (pandas, numpy), and
    // only that.
    k.create_context("other").await.unwrap();
    let ex = common::run_in(
        &k,
        "import sys\n[m in sys.modules for m in ('pandas', 'numpy', 'matplotlib')], type(pd).__name__",
        "other",
    )
    .await;
    assert_eq!(
        ex.text(),
        Some("([True, True, False], 'DeferredModule')"),
        "{ex:?}"
    );
    let ex = common::run_in(
        &k,
        "import time\nt = time.perf_counter()\nlen(pd.DataFrame({'a': [1, 2]}))\nround(time.perf_counter() - t, 3)",
        "other",
    )
    .await;
    let took: f64 = ex.text().and_then(|t| t.parse().ok()).expect("seconds");
    assert!(
        took < 0.2,
        "pandas' first use in a later context took {took} s"
    );
    let id = k.session().describe().container_id.unwrap();
    k.close().await.unwrap();
    common::wait_gone(&id).await;

    // A binding that is not Python is refused before anything starts.
    let client = common::client().await;
    let bad = client.kernel(config().bind_module("pd", "pandas; import os"));
    match bad.start().await {
        Err(Error::Kernel(KernelError::BadModuleBinding { name, module })) => {
            assert_eq!(
                (name.as_str(), module.as_str()),
                ("pd", "pandas; import os")
            )
        }
        other => panic!("expected BadModuleBinding, got {other:?}"),
    }
    assert!(bad.session().describe().container_id.is_none());
}
