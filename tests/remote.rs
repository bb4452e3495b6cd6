//! Remote daemons for real: a second dockerd of the test's own serving TLS on
//! 127.0.0.1 with certificates made here, reached over TCP+TLS (explicitly,
//! through `DOCKER_HOST`/`DOCKER_TLS_VERIFY`/`DOCKER_CERT_PATH`, and through a
//! Docker context) and over SSH through an sshd of the test's own. One-shots,
//! a code host and a session run there; wrong certificates, unreachable
//! endpoints and host-path mounts fail typed and fast.
//!
//! One test function: it sets process environment variables, which other
//! tests in the same binary would race with.

mod common;
#[path = "common/second_daemon.rs"]
mod second_daemon;
#[path = "common/sshd.rs"]
mod sshd;
#[path = "common/tls_certs.rs"]
mod tls_certs;

use std::time::{Duration, Instant};

use dockhand::codemode::{CodeHostConfig, Toolset};
use dockhand::session::{Edit, SessionApi, SessionConfig};
use dockhand::{CacheMode, Client, Error, ImageSpec, Sandbox, TlsFiles, Type, Value};
use second_daemon::SecondDaemon;
use tls_certs::{free_port, TlsSet};

/// A one-shot with a File input and a File output: both cross the wire
/// through the archive API, never through a shared path.
fn file_job() -> Sandbox {
    Sandbox::code(
        "remote-file",
        "text = open(f).read()\nn = len(text)\nopen('/var/outputs/up', 'w').write(text.upper())",
    )
    .input("f", Type::File)
    .output("n", Type::Int)
    .output("up", Type::File)
    .cache(CacheMode::Disable)
    .build()
    .unwrap()
}

async fn runs_a_one_shot(client: &Client, dir: &std::path::Path) {
    let input = dir.join("in.txt");
    std::fs::write(&input, "over the wire").unwrap();
    let out = client
        .run(&file_job(), [("f", Value::file(&input))])
        .await
        .unwrap();
    assert_eq!(out.get::<i64>("n").unwrap(), 13);
    let up: std::path::PathBuf = out.get("up").unwrap();
    assert_eq!(std::fs::read_to_string(up).unwrap(), "OVER THE WIRE");
}

fn cache_dir(tag: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("remote-cache-{tag}-{}", std::process::id()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_daemons_over_tls_contexts_and_ssh() {
    let main = common::client().await;
    let base = main.resolve_image(&ImageSpec::default()).await.unwrap();
    // The code host's image has Monty pip-installed: made here, where PyPI answers.
    let made = main.code_host(CodeHostConfig::new());
    made.start().await.unwrap();
    let code_image = made.describe().image.unwrap();
    made.close().await.unwrap();

    let certs = tempfile::tempdir().unwrap();
    let tls = TlsSet::make(certs.path(), "good");
    let port = free_port();
    let daemon = SecondDaemon::start_with("{}", &base.reference, &tls.daemon_args(port));
    daemon.load(&code_image);
    let kernel_image = main
        .resolve_image(&common::kernel_config().container_image())
        .await
        .unwrap();
    daemon.load(&kernel_image.reference);
    let endpoint = format!("tcp://127.0.0.1:{port}");

    // Explicit endpoint and TLS files.
    let client = Client::builder()
        .endpoint(&endpoint)
        .tls(TlsFiles::from_dir(&tls.client))
        .cache_dir(cache_dir("tls"))
        .connect()
        .await
        .unwrap();
    assert_eq!(client.endpoint(), endpoint);
    runs_a_one_shot(&client, certs.path()).await;

    // A code host, started and used over TLS.
    let host = client.code_host(CodeHostConfig::new());
    host.start().await.unwrap();
    let run = host
        .execute(
            "sum(xs) * 2",
            serde_json::json!({"xs": [1, 2, 18]}),
            &Toolset::new(),
        )
        .await
        .unwrap();
    assert_eq!(run.value, serde_json::json!(42));
    host.close().await.unwrap();

    // A kernel over TLS: state, a chart as PNG.
    let kernel = client.kernel(common::kernel_config());
    kernel.start().await.unwrap();
    kernel.run("xs = [1, 2, 3]").await.unwrap();
    let ex = kernel.run("plt.plot(xs)\nsum(xs)").await.unwrap();
    assert_eq!(ex.text(), Some("6"));
    assert_eq!(ex.pngs().len(), 1);
    kernel.close().await.unwrap();

    // A session: exec, files, edits, a snapshot.
    let session = client.session(SessionConfig::new());
    session.start().await.unwrap();
    session.write_file("a.py", b"print(6 * 7)\n").await.unwrap();
    session
        .edit_file("a.py", &[Edit::replace("6 * 7", "6 * 8")])
        .await
        .unwrap();
    assert_eq!(session.exec("python3 a.py").await.unwrap().stdout, "48\n");
    assert_eq!(session.read_file("a.py").await.unwrap(), b"print(6 * 8)\n");
    let snapshot = session.snapshot().await.unwrap();
    session.close().await.unwrap();
    client.remove_snapshot(&snapshot).await.unwrap();

    // A host path means nothing to the daemon: refused before anything is made.
    let mounted = client.session(SessionConfig::new().mount("/etc", "/host-etc", true));
    match mounted.start().await {
        Err(e @ Error::NeedsLocalDaemon { .. }) => {
            assert!(e.to_string().contains("/etc"), "{e}");
            assert!(e.to_string().contains("write_file"), "{e}");
        }
        other => panic!("expected NeedsLocalDaemon, got {other:?}"),
    }
    // Told that it is on this machine (it is), the mount works.
    let local = Client::builder()
        .endpoint(&endpoint)
        .tls(TlsFiles::from_dir(&tls.client))
        .daemon_shares_filesystem(true)
        .cache_dir(cache_dir("tls"))
        .connect()
        .await
        .unwrap();
    let mounted = local.session(SessionConfig::new().mount("/etc", "/host-etc", true));
    mounted.start().await.unwrap();
    assert!(
        mounted
            .exec("test -f /host-etc/hostname")
            .await
            .unwrap()
            .exit_code
            == 0
    );
    mounted.close().await.unwrap();

    // The docker CLI's environment variables, as the CLI reads them.
    std::env::set_var("DOCKER_HOST", &endpoint);
    std::env::set_var("DOCKER_TLS_VERIFY", "1");
    std::env::set_var("DOCKER_CERT_PATH", &tls.client);
    let from_env = Client::builder()
        .cache_dir(cache_dir("env"))
        .connect()
        .await
        .unwrap();
    assert_eq!(from_env.endpoint(), endpoint);
    runs_a_one_shot(&from_env, certs.path()).await;
    for var in ["DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"] {
        std::env::remove_var(var);
    }

    // A Docker context made by the docker CLI itself, in a config folder of our own.
    let config = tempfile::tempdir().unwrap();
    let f = |name: &str| tls.client.join(name).display().to_string();
    let created = std::process::Command::new("docker")
        .arg("--config")
        .arg(config.path())
        .args(["context", "create", "dh-remote", "--docker"])
        .arg(format!(
            "host={endpoint},ca={},cert={},key={}",
            f("ca.pem"),
            f("cert.pem"),
            f("key.pem")
        ))
        .output()
        .unwrap();
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    std::env::set_var("DOCKER_CONFIG", config.path());
    let by_context = Client::builder()
        .context("dh-remote")
        .cache_dir(cache_dir("ctx"))
        .connect()
        .await;
    // And as the current context, the way `docker context use` leaves it.
    std::fs::write(
        config.path().join("config.json"),
        r#"{"currentContext": "dh-remote"}"#,
    )
    .unwrap();
    let current = Client::builder()
        .cache_dir(cache_dir("ctx"))
        .connect()
        .await;
    std::env::remove_var("DOCKER_CONFIG");
    let by_context = by_context.unwrap();
    assert_eq!(by_context.endpoint(), endpoint);
    runs_a_one_shot(&by_context, certs.path()).await;
    assert_eq!(current.unwrap().endpoint(), endpoint);

    // A client certificate from another CA: the daemon refuses it. A CA that
    // did not sign the daemon's certificate: the client refuses the daemon.
    let other = TlsSet::make(certs.path(), "other");
    let mixed = certs.path().join("mixed");
    std::fs::create_dir_all(&mixed).unwrap();
    std::fs::copy(other.client.join("ca.pem"), mixed.join("ca.pem")).unwrap();
    std::fs::copy(tls.client.join("cert.pem"), mixed.join("cert.pem")).unwrap();
    std::fs::copy(tls.client.join("key.pem"), mixed.join("key.pem")).unwrap();
    for (case, files) in [("foreign client", &other.client), ("foreign CA", &mixed)] {
        let started = Instant::now();
        let result = Client::builder()
            .endpoint(&endpoint)
            .tls(TlsFiles::from_dir(files))
            .connect()
            .await;
        let took = started.elapsed();
        match result {
            Err(Error::DaemonTls { reason, hint, .. }) => {
                assert!(!reason.is_empty() && hint.contains("CA"), "{case}: {hint}")
            }
            other => panic!("{case}: expected DaemonTls, got {other:?}"),
        }
        // Generous: it only catches a wait for a timeout.
        assert!(took < Duration::from_secs(10), "{case}: took {took:?}");
    }
    // TLS files that are not there: named before any connection.
    match Client::builder()
        .endpoint(&endpoint)
        .tls(TlsFiles::from_dir(certs.path().join("nowhere")))
        .connect()
        .await
    {
        Err(Error::DaemonTls { reason, .. }) => assert!(reason.contains("ca.pem"), "{reason}"),
        other => panic!("expected DaemonTls, got {other:?}"),
    }
    // Plain HTTP to a TLS port, and a port nothing listens on: unreachable, at once.
    for target in [endpoint.clone(), format!("tcp://127.0.0.1:{}", free_port())] {
        let started = Instant::now();
        let result = Client::builder().endpoint(&target).connect().await;
        let took = started.elapsed();
        assert!(
            matches!(result, Err(Error::DaemonUnreachable { .. })),
            "{target}: {result:?}"
        );
        assert!(took < Duration::from_secs(10), "{target}: took {took:?}");
    }

    // An address nothing answers from (TEST-NET-1): the connect limit holds.
    let started = Instant::now();
    let result = Client::builder()
        .endpoint("tcp://192.0.2.1:2376")
        .connect_timeout(Duration::from_millis(800))
        .connect()
        .await;
    let took = started.elapsed();
    assert!(
        matches!(result, Err(Error::DaemonUnreachable { .. })),
        "{result:?}"
    );
    // Under the 5 s default: the 800 ms limit was the one applied.
    assert!(took < Duration::from_secs(4), "took {took:?}");

    // SSH, through the system `ssh` and `docker system dial-stdio` on the far side.
    match sshd::Sshd::start(&format!("unix://{}/sock", daemon.dir().display())) {
        Ok(sshd) => {
            let over_ssh = Client::builder()
                .endpoint(sshd.endpoint())
                .ssh_identity(&sshd.identity)
                .cache_dir(cache_dir("ssh"))
                .connect()
                .await
                .unwrap();
            runs_a_one_shot(&over_ssh, certs.path()).await;
            let session = over_ssh.session(SessionConfig::new());
            session.start().await.unwrap();
            assert_eq!(session.exec("echo $((6*7))").await.unwrap().stdout, "42\n");
            session.close().await.unwrap();
            drop(over_ssh);
        }
        Err(why) => eprintln!("SSH part skipped: {why}"),
    }

    // Nothing of the SDK's is left on the remote daemon.
    let mut left = usize::MAX;
    for _ in 0..50 {
        left = daemon.containers_with_label("dev.dockhand.managed");
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(left, 0, "containers left on the remote daemon");
}
