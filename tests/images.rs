//! Image specs against the real daemon: bootstrap, build, reuse, typed failures.

mod common;

use std::time::{Duration, Instant};

use dockhand::{Client, Error, ImageSource, ImageSpec, PackageManager};

#[tokio::test]
async fn pip_and_apt_packages_build_once_then_hit_the_cache() {
    let client = common::client().await;
    // A spec unique to this test so the first resolve really builds (base
    // bootstrap included on a fresh machine).
    let spec = common::with_host_ca(ImageSpec::default().pip(["six==1.16.0"]).apt(["jq"]))
        .run("echo built-for-images-test > /etc/dockhand-test-marker");
    let first = client.resolve_image(&spec).await.expect("build");
    let reused = matches!(first.source, ImageSource::Cached);
    eprintln!("first resolve: {:?} in {:?}", first.source, first.elapsed);

    // The packages are really there.
    let out = common::docker_python(
        &first.reference,
        "import six, shutil; print(six.__version__, bool(shutil.which('jq')))",
    );
    assert_eq!(out.trim(), "1.16.0 True");

    // A second client (as another process would) resolves from the daemon's
    // cache, without building.
    let other = common::client().await;
    let second = other.resolve_image(&spec).await.expect("second resolve");
    assert_eq!(second.source, ImageSource::Cached);
    assert_eq!(second.reference, first.reference);
    assert_eq!(second.id, first.id);
    if !reused {
        assert_eq!(first.source, ImageSource::Built);
    }
}

#[tokio::test]
async fn concurrent_resolves_share_one_build() {
    let client = common::client().await;
    let spec = ImageSpec::default().run(format!("echo single-flight-{}", std::process::id()));
    let (a, b, c) = tokio::join!(
        client.resolve_image(&spec),
        client.resolve_image(&spec),
        client.resolve_image(&spec)
    );
    let sources = [a.unwrap(), b.unwrap(), c.unwrap()];
    let built = sources
        .iter()
        .filter(|r| r.source == ImageSource::Built)
        .count();
    assert_eq!(built, 1, "{sources:?}");
    assert!(sources.iter().all(|r| r.reference == sources[0].reference));
    // Per-process image: do not let it pile up across runs.
    let _ = std::process::Command::new("docker")
        .args(["rmi", "-f", &sources[0].reference])
        .output();
}

#[tokio::test]
async fn unknown_apt_package_is_named() {
    let client = common::client().await;
    let spec = ImageSpec::default().apt(["dockhand-no-such-package"]);
    match client.resolve_image(&spec).await {
        Err(Error::InvalidPackage { manager, package }) => {
            assert_eq!(manager, PackageManager::Apt);
            assert_eq!(package, "dockhand-no-such-package");
        }
        other => panic!("expected InvalidPackage, got {other:?}"),
    }
}

#[tokio::test]
async fn unknown_pip_package_is_named() {
    let client = common::client().await;
    let spec =
        common::with_host_ca(ImageSpec::default().pip(["dockhand-no-such-package-xyz==0.0.1"]));
    match client.resolve_image(&spec).await {
        Err(Error::InvalidPackage { manager, package }) => {
            assert_eq!(manager, PackageManager::Pip);
            assert_eq!(package, "dockhand-no-such-package-xyz==0.0.1");
        }
        other => panic!("expected InvalidPackage, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unreachable_index_is_named_not_blamed_on_the_package() {
    let client = common::client().await;
    // Nothing listens on the discard port: pip cannot reach this index.
    let spec = ImageSpec::default().run(
        "python3 -m pip install --retries 1 --timeout 2 --index-url http://127.0.0.1:9/simple requests",
    );
    match client.resolve_image(&spec).await {
        Err(Error::PackageIndex {
            problem, evidence, ..
        }) => {
            assert_eq!(problem, dockhand::IndexProblem::Unreachable);
            assert!(evidence.contains("Connection refused"), "{evidence}");
        }
        other => panic!("expected PackageIndex, got {other:?}"),
    }
}

#[tokio::test]
async fn without_the_host_ca_an_intercepted_index_is_named() {
    let client = common::client().await;
    // Without trusting the host's CA bundle: where outbound TLS is
    // intercepted (as on CI), the build must say so; where it is not, the
    // package installs. Never "the package does not exist".
    let spec = ImageSpec::default().pip(["pyyaml"]);
    match client.resolve_image(&spec).await {
        Ok(_) => {}
        Err(Error::PackageIndex { problem, .. }) => {
            assert_eq!(problem, dockhand::IndexProblem::UntrustedCertificate)
        }
        Err(other) => panic!("expected success or PackageIndex, got {other:?}"),
    }
}

#[tokio::test]
async fn a_failing_command_carries_the_log_tail() {
    let client = common::client().await;
    let spec = ImageSpec::default().run("echo about-to-fail && exit 3");
    match client.resolve_image(&spec).await {
        Err(Error::ImageBuild {
            log_tail, message, ..
        }) => {
            assert!(log_tail.contains("about-to-fail"), "{log_tail}");
            assert!(message.contains("3"), "{message}");
        }
        other => panic!("expected ImageBuild, got {other:?}"),
    }
}

#[tokio::test]
async fn unsupported_python_is_explained() {
    let client = common::client().await;
    // No registry here, and the Debian bootstrap has no 3.7.
    if std::env::var("DOCKHAND_TEST_REGISTRY").is_ok() {
        return;
    }
    match client.resolve_image(&ImageSpec::python("3.7")).await {
        Err(Error::UnsupportedPython { requested, offered }) => {
            assert_eq!(requested, "3.7");
            assert!(offered.contains("3.11"), "{offered}");
        }
        other => panic!("expected UnsupportedPython, got {other:?}"),
    }
}

#[tokio::test]
async fn unreachable_daemon_fails_fast_and_says_where_it_looked() {
    let started = Instant::now();
    let err = Client::builder()
        .endpoint("unix:///nonexistent/docker.sock")
        .connect()
        .await
        .unwrap_err();
    // Generous: it only catches a wait for a timeout.
    assert!(started.elapsed() < Duration::from_secs(20));
    match &err {
        Error::DaemonUnreachable { endpoint, hint, .. } => {
            assert_eq!(endpoint, "unix:///nonexistent/docker.sock");
            assert!(hint.contains("start the Docker daemon"), "{hint}");
        }
        other => panic!("expected DaemonUnreachable, got {other:?}"),
    }
    let tcp = Client::builder()
        .endpoint("tcp://127.0.0.1:1")
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(tcp, Error::DaemonUnreachable { .. }), "{tcp:?}");
    assert!(tcp.to_string().contains("127.0.0.1:1"));
}

#[tokio::test]
async fn an_image_removed_behind_the_clients_back_is_made_again() {
    let client = common::client().await;
    let spec = ImageSpec::default().run(format!("echo remade-{}", std::process::id()));
    let sb = dockhand::Sandbox::code("remade", "print('ran')")
        .image(spec)
        .cache(dockhand::CacheMode::Disable)
        .build()
        .unwrap();
    let first = client.run(&sb, dockhand::NO_INPUTS).await.unwrap();
    let removed = std::process::Command::new("docker")
        .args(["rmi", "-f", &first.image])
        .output()
        .unwrap();
    assert!(removed.status.success());
    // The daemon answers the create with 404; the client builds it again, once.
    let again = client.run(&sb, dockhand::NO_INPUTS).await.unwrap();
    assert_eq!(again.stdout.text, "ran\n");
    assert_eq!(again.attempts.len(), 2, "{:?}", again.attempts);
    let _ = std::process::Command::new("docker")
        .args(["rmi", "-f", &again.image])
        .output();
}
