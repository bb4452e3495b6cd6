//! The `dockhand` command against the real daemon, good input and bad.

use std::time::{Duration, Instant};

mod common;

use common::dockhand;
use predicates::prelude::*;

fn json_of(output: &[u8]) -> serde_json::Value {
    serde_json::from_slice(output)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(output)))
}

#[test]
fn run_code_streams_its_output() {
    dockhand()
        .args(["run", "-c", "print(6 * 7)"])
        .assert()
        .success()
        .stdout("42\n");
}

#[test]
fn run_takes_typed_inputs_and_prints_outputs_as_json() {
    let out = dockhand()
        .args(["--json", "run", "-c", "y = x * 2\nz = name.upper()"])
        .args(["-i", "x=21", "-i", "name=web", "-o", "y:int", "-o", "z:str"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let body = json_of(&out);
    assert_eq!(body["outputs"], serde_json::json!({"y": 42, "z": "WEB"}));
    assert_eq!(body["exit_code"], 0);
}

#[test]
fn the_exit_code_mirrors_the_run() {
    dockhand()
        .args(["run", "-c", "import sys\nprint('bye')\nsys.exit(3)"])
        .assert()
        .code(3)
        .stdout("bye\n");
}

#[test]
fn commands_take_inputs_as_arguments() {
    dockhand()
        .args(["run", "-i", "who=world"])
        .args(["--command", "sh", "-c", "echo hello $0", "{{who}}"])
        .assert()
        .success()
        .stdout("hello world\n");
}

#[test]
fn file_outputs_are_copied_into_the_out_dir() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "abc").unwrap();
    dockhand()
        .args(["run", "--verbatim", "-c"])
        .arg("data = open('/var/inputs/src').read()\nopen('/var/outputs/copy', 'w').write(data.upper())")
        .arg("-i")
        .arg(format!("src=@{}", input.display()))
        .args(["-o", "copy:file", "--out-dir"])
        .arg(dir.path().join("out"))
        .assert()
        .success();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out/copy")).unwrap(),
        "ABC"
    );
}

#[test]
fn a_timeout_exits_124() {
    dockhand()
        .args(["run", "--timeout", "1", "-c", "import time\ntime.sleep(30)"])
        .assert()
        .code(124)
        .stderr(predicate::str::contains("timed out after 1s"));
}

#[test]
fn bad_input_is_a_clear_message_and_exit_2() {
    dockhand()
        .args(["run", "-c", "print(n)", "-i", "n:int=abc"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("not a valid int"));
    dockhand()
        .args(["run", "--bogus"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--bogus"));
    dockhand()
        .args(["run", "/surely/not/here.py"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("/surely/not/here.py"));
    dockhand()
        .args(["run", "-c", "print(1)", "--secret", "TOKEN=hunter2"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("env:"));
    dockhand()
        .args(["run", "-c", "print(1)", "--memory", "lots"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("lots"));
    // A server's bad key is said first, with no daemon to reach too.
    dockhand()
        .args([
            "-H",
            "tcp://127.0.0.1:1",
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .env("DOCKHAND_SERVE_API_KEYS", "short")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("too short"));
}

#[test]
fn an_unreachable_daemon_fails_fast_and_clearly() {
    let started = Instant::now();
    dockhand()
        .args([
            "--host",
            "unix:///tmp/dockhand-no-daemon.sock",
            "run",
            "-c",
            "print(1)",
        ])
        .assert()
        .code(125)
        .stderr(predicate::str::contains("cannot reach the Docker daemon"));
    assert!(started.elapsed() < Duration::from_secs(30));
    let out = dockhand()
        .args([
            "--json",
            "--host",
            "unix:///tmp/dockhand-no-daemon.sock",
            "reap",
        ])
        .assert()
        .code(125)
        .get_output()
        .stdout
        .clone();
    assert_eq!(json_of(&out)["kind"], "DaemonUnreachable");
}

#[test]
fn images_reap_and_doctor() {
    // Something to list: the base image, made by any run.
    dockhand()
        .args(["run", "-c", "print(1)"])
        .assert()
        .success();
    let out = dockhand()
        .args(["--json", "images", "ls"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let images = json_of(&out)["images"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        images.iter().any(|i| i["kind"] == "base-image"),
        "{images:?}"
    );
    // Pruning for real would make later tests build their images again.
    let out = dockhand()
        .args(["--json", "images", "prune", "--dry-run"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert!(json_of(&out)["would_remove"].is_array());
    dockhand()
        .args(["reap"])
        .assert()
        .success()
        .stdout(predicate::str::contains("removed"));
    let out = dockhand()
        .args(["--json", "doctor"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let checks = json_of(&out)["checks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = checks.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "daemon",
            "gvisor",
            "base image",
            "registry",
            "debootstrap",
            "CA bundle",
            "disk"
        ]
    );
    assert_eq!(checks[0]["status"], "ok", "{checks:?}");
}

#[test]
fn code_mode_calls_the_python_tool() {
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("plan.py");
    std::fs::write(
        &program,
        "out = python(code='print(sum(range(10)))')\nprint('tool said', out)\nlen(out)",
    )
    .unwrap();
    dockhand()
        .arg("code")
        .arg(&program)
        .assert()
        .success()
        .stdout(predicate::str::contains("tool said 45"));
    dockhand()
        .args(["code", "/surely/not/here.py"])
        .assert()
        .code(2);
}

#[test]
fn a_session_outlives_each_command_until_closed() {
    let id = common::start_session();
    assert!(id.starts_with('s'), "{id}");
    dockhand()
        .args([
            "session",
            "write",
            &id,
            "calc.py",
            "--content",
            "def add(a, b):\n    return a - b\n",
        ])
        .assert()
        .success();
    dockhand()
        .args([
            "session",
            "edit",
            &id,
            "calc.py",
            r#"[{"old": "a - b", "new": "a + b"}]"#,
        ])
        .assert()
        .success()
        .stdout("applied 1\n");
    dockhand()
        .args(["session", "read", &id, "calc.py"])
        .assert()
        .success()
        .stdout(predicate::str::contains("a + b"));
    dockhand()
        .args([
            "session",
            "exec",
            &id,
            "python3 -c 'import calc; print(calc.add(2, 3))'",
        ])
        .assert()
        .success()
        .stdout("5\n");
    dockhand()
        .args(["session", "exec", &id, "echo oops >&2; exit 7"])
        .assert()
        .code(7)
        .stderr("oops\n");
    dockhand()
        .args(["session", "shell", &id])
        .write_stdin("cd /tmp\npwd\nexit\n")
        .assert()
        .success()
        .stdout("/tmp\n");
    let listed = dockhand()
        .args(["--json", "session", "ls"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert!(String::from_utf8_lossy(&listed).contains(&id));
    let snap = dockhand()
        .args(["--json", "session", "snapshot", &id])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let image = json_of(&snap)["image"].as_str().unwrap().to_string();
    dockhand()
        .args(["session", "close", &id])
        .assert()
        .success();
    dockhand()
        .args(["session", "exec", &id, "true"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no session"));
    let removed = std::process::Command::new("docker")
        .args(["rmi", &image])
        .output()
        .unwrap();
    assert!(
        removed.status.success(),
        "docker rmi {image}: {}",
        String::from_utf8_lossy(&removed.stderr)
    );
}

#[test]
fn kernel_cells_charts_and_notebooks() {
    let dir = tempfile::tempdir().unwrap();
    let cells = dir.path().join("analysis.py");
    std::fs::write(
        &cells,
        "xs = [3, 1, 2]\n# %%\nplt.bar(['a', 'b', 'c'], xs)\nprint('total', sum(xs))\n# %%\nmax(xs)\n",
    )
    .unwrap();
    let images = dir.path().join("charts");
    let notebook = dir.path().join("out.ipynb");
    dockhand()
        .args(["kernel", "run"])
        .arg(&cells)
        .arg("--images")
        .arg(&images)
        .arg("--notebook")
        .arg(&notebook)
        .assert()
        .success()
        .stdout(predicate::str::contains("total 6").and(predicate::str::contains("3\n")));
    let png = std::fs::read(images.join("cell2-1.png")).expect("the chart was saved");
    assert_eq!(&png[..4], b"\x89PNG");
    let nb: serde_json::Value = serde_json::from_slice(&std::fs::read(&notebook).unwrap()).unwrap();
    assert_eq!(nb["cells"].as_array().unwrap().len(), 3);
    // A cell that raises: its traceback on stderr, exit code 1.
    dockhand()
        .args(["kernel", "run", "-c", "1 / 0"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("ZeroDivisionError"));

    // A kept kernel holds state between commands until closed.
    let out = dockhand().args(["kernel", "start"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    dockhand()
        .args(["kernel", "run", "--id", &id, "-c", "v = 21"])
        .assert()
        .success();
    dockhand()
        .args(["kernel", "run", "--id", &id, "-c", "v * 2"])
        .assert()
        .success()
        .stdout("42\n");
    // A binary file goes in as it is (not only UTF-8 text).
    let binary = dir.path().join("blob.bin");
    let bytes: Vec<u8> = (0..=255u8).rev().collect();
    std::fs::write(&binary, &bytes).unwrap();
    dockhand()
        .args(["kernel", "run", "--id", &id, "--upload"])
        .arg(&binary)
        .args([
            "-c",
            "b = open('blob.bin', 'rb').read(); (len(b), b[0], b[-1])",
        ])
        .assert()
        .success()
        .stdout("(256, 255, 0)\n");
    // A time limit exits 124, as the README says, kept or not; the kept
    // context keeps its state (the run was interrupted).
    for kept in [&["--id", id.as_str()][..], &[]] {
        dockhand()
            .args(["kernel", "run"])
            .args(kept)
            .args(["--timeout", "1", "-c", "import time; time.sleep(30)"])
            .assert()
            .code(124);
    }
    dockhand()
        .args(["kernel", "notebook", &id])
        .arg(&notebook)
        .assert()
        .success();
    let nb: serde_json::Value = serde_json::from_slice(&std::fs::read(&notebook).unwrap()).unwrap();
    // The runs that finished (the one past its time limit is not a cell).
    assert_eq!(nb["cells"].as_array().unwrap().len(), 3);
    dockhand().args(["kernel", "close", &id]).assert().success();
    dockhand()
        .args(["kernel", "run", "--id", &id, "-c", "v"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("no session"));
}

#[test]
fn sessions_pause_resume_and_fork_and_volumes_outlive_them() {
    let volume = format!("cli-{}", std::process::id());
    dockhand()
        .args(["volume", "create", &volume])
        .assert()
        .success()
        .stdout(format!("{volume}\n"));
    let out = dockhand()
        .args(["session", "start", "--volume", &format!("{volume}:/data")])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let id = String::from_utf8_lossy(&out).trim().to_string();
    dockhand()
        .args(["session", "write", &id, "/data/kept.txt", "--content", "v"])
        .assert()
        .success();
    dockhand()
        .args(["session", "write", &id, "state.txt", "--content", "base"])
        .assert()
        .success();
    dockhand()
        .args(["session", "pause", &id])
        .assert()
        .success()
        .stdout(format!("paused {id} (filesystem)\n"));
    dockhand()
        .args(["session", "exec", &id, "true"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("paused"));
    dockhand()
        .args(["session", "resume", &id])
        .assert()
        .success();
    dockhand()
        .args(["session", "read", &id, "state.txt"])
        .assert()
        .success()
        .stdout("base");
    // Memory needs gVisor: refused, typed, and the session runs on.
    dockhand()
        .args(["session", "pause", &id, "--mode", "memory"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("gVisor"));
    let forked = dockhand()
        .args(["session", "fork", &id, "-n", "2"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let forks: Vec<String> = String::from_utf8_lossy(&forked)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(forks.len(), 2, "{forks:?}");
    dockhand()
        .args([
            "session",
            "write",
            &forks[0],
            "state.txt",
            "--content",
            "zero",
        ])
        .assert()
        .success();
    dockhand()
        .args(["session", "read", &forks[1], "state.txt"])
        .assert()
        .success()
        .stdout("base");
    dockhand()
        .args(["session", "read", &id, "state.txt"])
        .assert()
        .success()
        .stdout("base");
    // A mounted volume is not removed.
    dockhand()
        .args(["volume", "rm", &volume])
        .assert()
        .failure()
        .stderr(predicate::str::contains("mounted"));
    dockhand()
        .args(["session", "close", &id])
        .assert()
        .success();
    // The forks went with their parent.
    let started = Instant::now();
    for fork in &forks {
        while dockhand()
            .args(["session", "read", fork, "state.txt"])
            .output()
            .unwrap()
            .status
            .success()
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "fork {fork} outlived its parent"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let listed = dockhand()
        .args(["--json", "volume", "ls"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert!(String::from_utf8_lossy(&listed).contains(&volume));
    // Removal waits for the forks' containers to go.
    let started = Instant::now();
    while !dockhand()
        .args(["volume", "rm", &volume])
        .output()
        .unwrap()
        .status
        .success()
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the volume stayed in use"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let listed = dockhand()
        .args(["--json", "volume", "ls"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert!(!String::from_utf8_lossy(&listed).contains(&volume));
}

/// `kernel run --language`: Bash and R cells through the CLI, on the image
/// with every language the SDK's kernel language tests build (given with
/// `--image`, so this test builds nothing of its own).
#[test]
fn kernel_cells_run_in_other_languages() {
    use dockhand::kernel::{KernelConfig, Language};
    let config = KernelConfig::new().languages(Language::ALL);
    let spec = config.image_spec().clone().trust_host_certificates();
    let image = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async {
            let client = dockhand::Client::connect().await?;
            client
                .resolve_image(&config.image(spec).container_image())
                .await
        })
        .expect("the languages image builds")
        .reference;

    let out = dockhand()
        .args(["kernel", "run", "--image", &image, "--language", "bash"])
        .args(["-c", "N=6", "-c", "echo $((N * 7))"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42");

    let out = dockhand()
        .args([
            "--json",
            "kernel",
            "run",
            "--image",
            &image,
            "--language",
            "r",
        ])
        .args(["-c", "x <- 6 * 7", "-c", "x", "-c", "stop('no such thing')"])
        .output()
        .unwrap();
    // A cell that raises: exit 1, its error in the report.
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let report = json_of(&out.stdout);
    let text = report.to_string();
    assert!(text.contains("[1] 42"), "{text}");
    assert!(text.contains("no such thing"), "{text}");

    dockhand()
        .args(["kernel", "run", "--language", "cobol", "-c", "1"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cobol"));
}

/// The command has the Kubernetes backend: `DOCKHAND_BACKEND=kubernetes`
/// reaches for the cluster the kubeconfig names (here one that does not
/// answer) rather than saying the backend is missing.
#[test]
fn the_kubernetes_backend_is_chosen_by_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kubeconfig");
    std::fs::write(
        &config,
        "apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n\
         clusters:\n- name: nowhere\n  cluster:\n    server: https://127.0.0.1:9\n\
         contexts:\n- name: nowhere\n  context:\n    cluster: nowhere\n    user: nobody\n\
         users:\n- name: nobody\n  user: {}\n",
    )
    .unwrap();
    let started = Instant::now();
    dockhand()
        .env("DOCKHAND_BACKEND", "kubernetes")
        .env("KUBECONFIG", &config)
        .args(["run", "-c", "print(1)"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("https://127.0.0.1:9"))
        .stderr(predicate::str::contains("not in this build").not());
    assert!(started.elapsed() < Duration::from_secs(30));
    dockhand()
        .env("DOCKHAND_BACKEND", "nomad")
        .args(["run", "-c", "print(1)"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("invalid value 'nomad'"))
        .stderr(predicate::str::contains(
            "possible values: docker, kubernetes",
        ));
}
