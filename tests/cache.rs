//! The output cache against the real daemon: a hit returns exactly what the
//! run returned (floats to the last digit, truncation and byte counts), runs
//! with network access are not replayed unless asked, and the cache can be
//! inspected and cleared. It is off unless a sandbox asks for it.

mod common;

use dockhand::{CacheMode, Client, Network, Sandbox, Type};

async fn client_with_own_cache(dir: &std::path::Path) -> Client {
    Client::builder()
        .cache_dir(dir)
        .connect()
        .await
        .expect("daemon reachable")
}

#[tokio::test]
async fn a_hit_returns_exactly_what_the_run_returned() {
    let dir = tempfile::tempdir().unwrap();
    let client = client_with_own_cache(dir.path()).await;
    let sb = Sandbox::code(
        "exact-cache",
        "import random\nprint('x' * 5000)\nf = random.random() / 3\n",
    )
    .input("seed", Type::Int)
    .output("f", Type::Float)
    .output_limit(1000)
    .cache(CacheMode::Auto)
    .build()
    .unwrap();
    let first = client.run(&sb, [("seed", 1)]).await.unwrap();
    assert!(!first.cached);
    assert!(first.stdout.truncated);
    let hit = client.run(&sb, [("seed", 1)]).await.unwrap();
    assert!(hit.cached, "an identical run is served from the cache");
    assert_eq!(hit.get::<f64>("f").unwrap(), first.get::<f64>("f").unwrap());
    assert_eq!(hit.stdout, first.stdout, "text, truncation and byte count");
    assert_eq!(hit.stdout.total_bytes, 5001);

    let stats = client.output_cache().stats().unwrap();
    assert_eq!(stats.entries, 1);
    assert!(
        stats.bytes > 0 && stats.bytes <= stats.limit_bytes,
        "{stats:?}"
    );
    assert_eq!(client.output_cache().clear().unwrap().entries, 1);
    assert_eq!(client.output_cache().stats().unwrap().entries, 0);
    assert!(!client.run(&sb, [("seed", 1)]).await.unwrap().cached);
}

#[tokio::test]
async fn runs_with_network_access_are_not_replayed_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let client = client_with_own_cache(dir.path()).await;
    let networked = |allow: bool| {
        Sandbox::code("networked-cache", "n = 7")
            .output("n", Type::Int)
            .network(Network::Bridge)
            .cache(CacheMode::Auto)
            .cache_with_network(allow)
            .build()
            .unwrap()
    };
    for _ in 0..2 {
        let out = client
            .run(&networked(false), dockhand::NO_INPUTS)
            .await
            .unwrap();
        assert!(!out.cached, "a networked run is never replayed by default");
    }
    assert_eq!(client.output_cache().stats().unwrap().entries, 0);
    assert!(
        !client
            .run(&networked(true), dockhand::NO_INPUTS)
            .await
            .unwrap()
            .cached
    );
    let hit = client
        .run(&networked(true), dockhand::NO_INPUTS)
        .await
        .unwrap();
    assert!(hit.cached, "asked for: cached");
    assert_eq!(hit.get::<i64>("n").unwrap(), 7);
}

#[tokio::test]
async fn without_asking_every_run_runs() {
    let dir = tempfile::tempdir().unwrap();
    let client = client_with_own_cache(dir.path()).await;
    let sb = Sandbox::code("random-uncached", "import random\nf = random.random()")
        .output("f", Type::Float)
        .build()
        .unwrap();
    let first = client.run(&sb, dockhand::NO_INPUTS).await.unwrap();
    let second = client.run(&sb, dockhand::NO_INPUTS).await.unwrap();
    assert!(!first.cached && !second.cached);
    assert_ne!(
        first.get::<f64>("f").unwrap(),
        second.get::<f64>("f").unwrap(),
        "the second run ran its own random()"
    );
    assert_eq!(client.output_cache().stats().unwrap().entries, 0);
}
