//! Pushing images dockhand made to a real registry: the CNCF distribution
//! registry from Debian's `docker-registry` package, run here on
//! 127.0.0.1, open and behind a login. What was pushed is read back through
//! the registry's own API: the tag, the manifest and every layer.

mod common;
#[path = "common/registry.rs"]
mod registry;

use dockhand::image::Registry;
use dockhand::{Error, ImageSpec};
use registry::{TestRegistry, PASSWORD, USER};

/// A push the registry refused or never answered: a typed Docker error.
fn assert_push_failed(err: &Error) {
    assert!(
        matches!(
            err,
            Error::Docker {
                operation: "push image",
                ..
            }
        ),
        "{err:?}"
    );
}

/// Whether the daemon has an image (or tag) by this reference.
fn has_image(reference: &str) -> bool {
    std::process::Command::new("docker")
        .args(["image", "inspect", reference])
        .output()
        .expect("docker CLI")
        .status
        .success()
}

#[tokio::test]
async fn a_built_spec_is_pushed_whole_and_can_be_pinned() {
    let client = common::client().await;
    let registry = TestRegistry::open(&client).await;
    let image = client
        .resolve_image(&common::with_host_ca(
            ImageSpec::default().run("echo pushed > /pushed"),
        ))
        .await
        .expect("image");
    let to = Registry::new(format!("{}/dockhand-test", registry.host));
    let pushed = client.push_image(&image, &to).await.expect("push");
    let tag = image.reference.rsplit(':').next().unwrap();
    assert_eq!(
        pushed.reference,
        format!("{}/dockhand-test/image:{tag}", registry.host)
    );
    // The registry lists the tag, serves the manifest by tag and by the
    // digest the push reported, and holds every layer it names.
    let (status, tags) = registry.get("/v2/dockhand-test/image/tags/list");
    assert_eq!(status, 200, "{tags}");
    assert!(tags.contains(tag), "{tags}");
    let digest = pushed.digest.clone().expect("the push reports a digest");
    let (status, manifest) = registry.manifest("dockhand-test/image", &digest);
    assert_eq!(status, 200, "{manifest}");
    let manifest: serde_json::Value = serde_json::from_str(&manifest).expect("manifest JSON");
    let layers = manifest["layers"].as_array().expect("layers");
    assert!(
        layers.len() > 1,
        "the base's layers and the spec's: {manifest}"
    );
    for layer in layers {
        let blob = layer["digest"].as_str().expect("a layer digest");
        assert_eq!(
            registry.head(&format!("/v2/dockhand-test/image/blobs/{blob}")),
            200,
            "{blob}"
        );
    }
    assert!(pushed
        .pinned()
        .ends_with(&format!("/dockhand-test/image@{digest}")));
    // The push's own tag is gone from this daemon; the image is not.
    assert!(!has_image(&pushed.reference));
    assert!(has_image(&image.reference));
    // The same image again: the same tag and digest, nothing uploaded anew.
    let again = client.push_image(&image, &to).await.expect("second push");
    assert_eq!(again, pushed);
}

#[tokio::test]
async fn a_registry_that_asks_a_login_gets_it_and_a_wrong_one_fails_typed() {
    let client = common::client().await;
    let registry = TestRegistry::with_login(&client).await;
    let image = client
        .resolve_image(&common::with_host_ca(ImageSpec::default()))
        .await
        .expect("image");
    let repository = format!("{}/private", registry.host);
    // Without a login, and with a wrong password: refused, typed, and the
    // password is nowhere in the error.
    for to in [
        Registry::new(&repository),
        Registry::new(&repository).login(USER, "wrong-pass-77"),
    ] {
        let err = client.push_image(&image, &to).await.expect_err("refused");
        assert_push_failed(&err);
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains("wrong-pass-77"), "{shown}");
        assert!(!has_image(&format!("{repository}/image")), "a tag stayed");
    }
    let pushed = client
        .push_image(&image, &Registry::new(&repository).login(USER, PASSWORD))
        .await
        .expect("push with the login");
    assert!(pushed.digest.is_some());
    let (status, tags) = registry.get("/v2/private/image/tags/list");
    assert_eq!(status, 200, "{tags}");
}

#[tokio::test]
async fn nobody_listening_and_a_bad_repository_fail_typed_and_fast() {
    let client = common::client().await;
    let image = client
        .resolve_image(&common::with_host_ca(ImageSpec::default()))
        .await
        .expect("image");
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let to = Registry::new(format!("127.0.0.1:{port}/nobody"))
        .timeout(std::time::Duration::from_secs(60));
    let started = std::time::Instant::now();
    let err = client
        .push_image(&image, &to)
        .await
        .expect_err("no registry");
    assert_push_failed(&err);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(50),
        "{err}"
    );
    assert!(!has_image(&format!("127.0.0.1:{port}/nobody/image")));
    // A repository the daemon could not name: refused before any call.
    let err = client
        .push_image(&image, &Registry::new("127.0.0.1:5000/Upper:tag"))
        .await
        .expect_err("bad repository");
    assert!(matches!(err, Error::InvalidSpec { .. }), "{err:?}");
}
