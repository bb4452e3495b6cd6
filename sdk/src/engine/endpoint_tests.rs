use super::*;

fn env() -> Environment {
    Environment::default()
}

/// A docker config folder with one context, as `docker context create` writes it.
fn store_with_context(
    name: &str,
    host: &str,
    with_tls: bool,
    skip_verify: bool,
) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let id = hex::encode(Sha256::digest(name.as_bytes()));
    let meta = dir.path().join("contexts/meta").join(&id);
    std::fs::create_dir_all(&meta).unwrap();
    let json = serde_json::json!({
        "Name": name,
        "Metadata": {},
        "Endpoints": {"docker": {"Host": host, "SkipTLSVerify": skip_verify}},
    });
    std::fs::write(meta.join("meta.json"), json.to_string()).unwrap();
    if with_tls {
        let tls = dir.path().join("contexts/tls").join(&id).join("docker");
        std::fs::create_dir_all(&tls).unwrap();
        for f in ["ca.pem", "cert.pem", "key.pem"] {
            std::fs::write(tls.join(f), "x").unwrap();
        }
    }
    dir
}

#[test]
fn precedence_follows_the_docker_cli() {
    let t = Target::resolve(&Choice::default(), &env()).unwrap();
    assert_eq!(t.host, DEFAULT_ENDPOINT);
    assert!(t.shares_filesystem);

    let from_env = Environment {
        docker_host: Some("tcp://10.0.0.1:2375".into()),
        ..env()
    };
    let t = Target::resolve(&Choice::default(), &from_env).unwrap();
    assert_eq!(
        (t.host.as_str(), t.origin.as_str()),
        ("tcp://10.0.0.1:2375", "DOCKER_HOST")
    );
    assert!(
        !t.shares_filesystem,
        "a TCP daemon is another machine unless told"
    );
    assert_eq!(t.tls, None);

    let explicit = Choice {
        endpoint: Some("/run/other.sock".into()),
        ..Default::default()
    };
    let t = Target::resolve(&explicit, &from_env).unwrap();
    assert_eq!(t.host, "unix:///run/other.sock", "a bare path is a socket");
}

#[test]
fn docker_tls_verify_takes_files_from_cert_path() {
    let e = Environment {
        docker_host: Some("tcp://d:2376".into()),
        tls_verify: Some("1".into()),
        cert_path: Some("/certs".into()),
        config_dir: Some("/home/u/.docker".into()),
        ..env()
    };
    let t = Target::resolve(&Choice::default(), &e).unwrap();
    assert_eq!(t.tls, Some(TlsFiles::from_dir("/certs")));
    // Without DOCKER_CERT_PATH the CLI looks in its config folder.
    let e = Environment {
        cert_path: None,
        ..e
    };
    let t = Target::resolve(&Choice::default(), &e).unwrap();
    assert_eq!(t.tls, Some(TlsFiles::from_dir("/home/u/.docker")));
    // TLS settings never apply to a socket.
    let e = Environment {
        docker_host: Some("unix:///s".into()),
        ..e
    };
    assert_eq!(Target::resolve(&Choice::default(), &e).unwrap().tls, None);
}

#[test]
fn explicit_tls_beats_the_environment() {
    let e = Environment {
        docker_host: Some("tcp://d:2376".into()),
        tls_verify: Some("1".into()),
        cert_path: Some("/certs".into()),
        ..env()
    };
    let choice = Choice {
        tls: Some(TlsFiles::new("/a", "/b", "/c")),
        ..Default::default()
    };
    let t = Target::resolve(&choice, &e).unwrap();
    assert_eq!(t.tls, Some(TlsFiles::new("/a", "/b", "/c")));
}

#[test]
fn contexts_come_from_the_store_with_their_tls_material() {
    let store = store_with_context("remote", "tcp://10.1.2.3:2376", true, false);
    let e = Environment {
        config_dir: Some(store.path().to_path_buf()),
        ..env()
    };
    let choice = Choice {
        context: Some("remote".into()),
        ..Default::default()
    };
    let t = Target::resolve(&choice, &e).unwrap();
    assert_eq!(t.host, "tcp://10.1.2.3:2376");
    assert_eq!(t.origin, "context `remote`");
    let tls = t.tls.unwrap();
    assert!(tls.ca().starts_with(store.path().join("contexts/tls")));
    assert!(tls.key().ends_with("docker/key.pem"));

    // DOCKER_CONTEXT, and config.json's currentContext, pick it too...
    let by_env = Environment {
        docker_context: Some("remote".into()),
        ..e.clone()
    };
    assert_eq!(
        Target::resolve(&Choice::default(), &by_env).unwrap().host,
        "tcp://10.1.2.3:2376"
    );
    std::fs::write(
        store.path().join("config.json"),
        r#"{"currentContext":"remote"}"#,
    )
    .unwrap();
    assert_eq!(
        Target::resolve(&Choice::default(), &e).unwrap().host,
        "tcp://10.1.2.3:2376"
    );
    // ...but DOCKER_HOST wins over both, as in the CLI.
    let host_wins = Environment {
        docker_host: Some("unix:///x.sock".into()),
        ..by_env
    };
    assert_eq!(
        Target::resolve(&Choice::default(), &host_wins)
            .unwrap()
            .host,
        "unix:///x.sock"
    );
    // `default` is DOCKER_HOST or the socket.
    let default = Choice {
        context: Some("default".into()),
        ..Default::default()
    };
    assert_eq!(
        Target::resolve(&default, &e).unwrap().host,
        DEFAULT_ENDPOINT
    );
}

#[test]
fn unknown_contexts_and_skipped_verification_are_refused_clearly() {
    let store = store_with_context("lax", "tcp://h:2376", false, true);
    let e = Environment {
        config_dir: Some(store.path().to_path_buf()),
        ..env()
    };
    let missing = Choice {
        context: Some("nope".into()),
        ..Default::default()
    };
    match Target::resolve(&missing, &e) {
        Err(Error::DaemonUnreachable { reason, hint, .. }) => {
            assert!(reason.contains("no such context"), "{reason}");
            assert!(hint.contains("docker context ls"), "{hint}");
        }
        other => panic!("{other:?}"),
    }
    let lax = Choice {
        context: Some("lax".into()),
        ..Default::default()
    };
    assert!(matches!(
        Target::resolve(&lax, &e),
        Err(Error::DaemonTls { .. })
    ));
}

#[test]
fn tls_files_are_checked_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let files = TlsFiles::from_dir(dir.path());
    match files.check("tcp://h:2376", "DOCKER_CERT_PATH") {
        Err(Error::DaemonTls { reason, hint, .. }) => {
            assert!(reason.contains("ca.pem"), "{reason}");
            assert!(hint.contains("DOCKER_CERT_PATH"), "{hint}");
        }
        other => panic!("{other:?}"),
    }
    let pem = |kind: &str| format!("-----BEGIN {kind}-----\nAAAA\n-----END {kind}-----\n");
    std::fs::write(dir.path().join("ca.pem"), pem("CERTIFICATE")).unwrap();
    std::fs::write(dir.path().join("cert.pem"), pem("CERTIFICATE")).unwrap();
    std::fs::write(dir.path().join("key.pem"), "not a key").unwrap();
    match files.check("tcp://h:2376", "x") {
        Err(Error::DaemonTls { reason, .. }) => assert!(reason.contains("key.pem"), "{reason}"),
        other => panic!("{other:?}"),
    }
    std::fs::write(dir.path().join("key.pem"), pem("PRIVATE KEY")).unwrap();
    files.check("tcp://h:2376", "x").unwrap();
}

#[test]
fn ssh_endpoints_take_user_and_host_only() {
    let resolve = |host: &str| {
        let choice = Choice {
            endpoint: Some(host.into()),
            ssh_identity: Some("/k".into()),
            ..Default::default()
        };
        Target::resolve(&choice, &env())
    };
    let t = resolve("ssh://me@box").unwrap();
    assert_eq!(t.ssh_identity, Some(PathBuf::from("/k")));
    assert!(!t.shares_filesystem);
    assert_eq!(t.tls, None);
    for bad in ["ssh://me@box:2222", "ssh://box/path", "ssh://me@"] {
        match resolve(bad) {
            Err(Error::DaemonUnreachable { hint, .. }) => {
                assert!(hint.contains("~/.ssh/config"), "{bad}: {hint}")
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
}
