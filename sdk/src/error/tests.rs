//! Errors are said once: a variant shows its cause in its message or returns
//! it from `source()`, never both, so reporters that print the whole chain
//! (anyhow's `{:#}`, eyre, the CLI) say each thing once.

use super::EditError;
use super::Error;

fn wrapping_errors() -> Vec<Error> {
    let io = || Error::io("reading /tmp/x", std::io::Error::other("disk on fire"));
    vec![
        io(),
        Error::Edit(EditError::InvalidEdit {
            edit: 0,
            reason: "an anchor is empty".into(),
        }),
        Error::RetriesExhausted {
            attempts: vec![
                "first failure".into(),
                "reading /tmp/x: disk on fire".into(),
            ],
            last: Box::new(io()),
        },
        Error::from(super::KernelError::Unavailable {
            reason: "the relay exited".into(),
        }),
    ]
}

/// Sentences of a message, trimmed (what a reader would notice repeated).
fn sentences(text: &str) -> Vec<String> {
    text.split([':', ';', '\n'])
        .map(|s| s.trim().to_string())
        .filter(|s| s.len() > 3)
        .collect()
}

#[test]
fn anyhow_chains_say_nothing_twice() {
    for error in wrapping_errors() {
        let shown = format!("{:#}", anyhow::Error::new(error));
        let parts = sentences(&shown);
        let mut seen = std::collections::HashSet::new();
        for part in &parts {
            assert!(seen.insert(part.clone()), "`{part}` said twice in: {shown}");
        }
    }
}

#[test]
fn a_cause_in_the_message_is_not_also_the_source() {
    for error in wrapping_errors() {
        if let Some(source) = std::error::Error::source(&error) {
            assert!(
                !error.to_string().contains(&source.to_string()),
                "{error} repeats its source"
            );
        }
    }
    // The cause is still in the message.
    assert!(wrapping_errors()[0].to_string().contains("disk on fire"));
}

/// 403 messages as Kubernetes words them, each told apart with its own hint.
#[test]
fn forbidden_refusals_are_told_apart_by_their_message() {
    use super::ForbiddenBy;
    let cases = [
        (
            r#"pods is forbidden: User "system:serviceaccount:sim:dockhand" cannot create resource "pods" in API group "" in the namespace "sim""#,
            ForbiddenBy::Rbac,
        ),
        (
            r#"pods "dockhand-1" is forbidden: exceeded quota: compute-resources, requested: limits.cpu=1, used: limits.cpu=4, limited: limits.cpu=4"#,
            ForbiddenBy::Quota,
        ),
        (
            r#"pods "dockhand-1" is forbidden: failed quota: compute-resources: must specify limits.memory"#,
            ForbiddenBy::Quota,
        ),
        (
            r#"pods "dockhand-1" is forbidden: [maximum cpu usage per Container is 500m, but limit is 1, maximum memory usage per Pod is 256Mi]"#,
            ForbiddenBy::LimitRange,
        ),
        (
            r#"pods "dockhand-1" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true (pod or container "run" must set securityContext.runAsNonRoot=true)"#,
            ForbiddenBy::PodSecurity,
        ),
        (
            r#"admission webhook "validate.kyverno.svc-fail" denied the request: resource Pod/sim/dockhand-1 was blocked due to the following policies"#,
            ForbiddenBy::Webhook,
        ),
        (
            r#"pods "dockhand-1" is forbidden: unable to create new content in namespace sim because it is being terminated"#,
            ForbiddenBy::NamespaceTerminating,
        ),
        ("forbidden", ForbiddenBy::Other),
    ];
    let mut hints = std::collections::HashSet::new();
    let mut kinds = std::collections::HashSet::new();
    for (message, want) in cases {
        let by = ForbiddenBy::of(message);
        assert_eq!(by, want, "{message}");
        hints.insert(by.hint());
        kinds.insert(by);
        let shown = super::ClusterError::Forbidden {
            verb: "create",
            resource: "pods",
            namespace: "sim".into(),
            message: message.into(),
            by,
        }
        .to_string();
        assert!(shown.contains(by.hint()), "{shown}");
        assert_eq!(shown.contains("RBAC"), by == ForbiddenBy::Rbac, "{shown}");
    }
    // Each kind has a hint of its own.
    assert_eq!(hints.len(), kinds.len());
}

/// A retry may cure what the cluster did to a pod and an API server that
/// said "later"; not a refusal, nor an image the nodes cannot pull.
#[test]
fn cluster_errors_retried_are_the_transient_ones() {
    use super::ClusterError;
    let api = |status| ClusterError::Api {
        operation: "create",
        status,
        reason: "r".into(),
        message: "m".into(),
    };
    let retried = |e: ClusterError| Error::from(e).is_retryable();
    for status in [429, 500, 502, 503, 504] {
        assert!(retried(api(Some(status))), "{status}");
    }
    for status in [Some(400), Some(422), None] {
        assert!(!retried(api(status)), "{status:?}");
    }
    assert!(retried(ClusterError::Evicted {
        pod: "p".into(),
        message: "m".into()
    }));
    assert!(retried(ClusterError::NodeLost {
        pod: "p".into(),
        message: "m".into()
    }));
    assert!(!retried(ClusterError::ImagePull {
        pod: "p".into(),
        image: "i".into(),
        reason: "ErrImagePull".into(),
        message: "m".into()
    }));
    assert!(!retried(ClusterError::Forbidden {
        verb: "create",
        resource: "pods",
        namespace: "n".into(),
        message: "m".into(),
        by: super::ForbiddenBy::Quota,
    }));
}
