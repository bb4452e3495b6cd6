//! Errors of the Kubernetes backend: what the API server answered, and why a
//! pod ended when its program did not end it.

/// Why the Kubernetes backend failed (inside [`Error::Cluster`](crate::Error::Cluster)).
///
/// API refusals carry the verb and resource so that a missing RBAC rule can
/// be read off the message; pod failures say what the cluster did to the
/// pod (evicted it, could not pull its image, lost its node), so a caller
/// can tell a run to repeat from a program to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The API server did not answer, or its certificate or credentials
    /// could not be used.
    #[error("cannot reach the Kubernetes API server {server}: {reason}\nhint: {hint}")]
    Unreachable {
        /// The server's URL, or where its configuration was looked for.
        server: String,
        /// Why.
        reason: String,
        /// What to check.
        hint: String,
    },

    /// 403: the cluster refused the request; `by` says what refused it
    /// (RBAC, a quota, a LimitRange, Pod Security, a webhook), each with
    /// its own hint.
    #[error("the cluster forbids {verb} on {resource} in namespace `{namespace}`: {message}\nhint: {}", by.hint())]
    Forbidden {
        /// `create`, `get`, `watch`, `delete`, ...
        verb: &'static str,
        /// `pods`, `pods/attach`, `leases`, ...
        resource: &'static str,
        /// The namespace.
        namespace: String,
        /// The API server's message.
        message: String,
        /// What refused it, read off the message.
        by: ForbiddenBy,
    },

    /// 404 on something dockhand did not just make: most often the namespace.
    #[error("{resource} not found in namespace `{namespace}`: {message}\nhint: create the namespace, or name another with KubeConfig::namespace")]
    NotFound {
        /// What was asked for.
        resource: &'static str,
        /// The namespace.
        namespace: String,
        /// The API server's message.
        message: String,
    },

    /// 409: an object of that name exists already.
    #[error("{resource} `{name}` already exists: {message}")]
    Conflict {
        /// The kind of object.
        resource: &'static str,
        /// Its name.
        name: String,
        /// The API server's message.
        message: String,
    },

    /// Any other answer of the API server.
    #[error("the Kubernetes API failed to {operation} ({}): {message}", status.map_or("no status".to_string(), |s| s.to_string()))]
    Api {
        /// What was being done.
        operation: &'static str,
        /// The HTTP status, when there was one.
        status: Option<u16>,
        /// The API server's reason (`Invalid`, `Timeout`, ...).
        reason: String,
        /// The API server's message.
        message: String,
    },

    /// The node evicted the pod (memory or disk pressure, a drain): the
    /// program did not end it. Running again is safe.
    #[error("pod {pod} was evicted by its node: {message}; run again")]
    Evicted {
        /// The pod.
        pod: String,
        /// The kubelet's message.
        message: String,
    },

    /// The node could not pull the pod's image. Nothing ran.
    #[error("the cluster cannot pull image `{image}` for pod {pod} ({reason}): {message}\nhint: push the image where the nodes pull from (a local tag means nothing to a node), and check its name")]
    ImagePull {
        /// The pod.
        pod: String,
        /// The image reference.
        image: String,
        /// `ErrImagePull`, `ImagePullBackOff`, `InvalidImageName`, ...
        reason: String,
        /// The kubelet's message.
        message: String,
    },

    /// The pod's node stopped answering or was removed while the pod ran.
    /// Whether the program finished is unknown: run again.
    #[error("the node of pod {pod} was lost while it ran: {message}; run again")]
    NodeLost {
        /// The pod.
        pod: String,
        /// The cluster's message.
        message: String,
    },

    /// The scheduler could not place the pod on any node within the time
    /// allowed: the pod asks for more than any node has free, or matches no
    /// node (its selector, taints, affinity). Nothing ran.
    #[error("the cluster could not place pod {pod}: {message}\nhint: free room or add nodes, lower what each pod asks (cpus, memory; a pool asks that many times its size), or check the placement (node selector, tolerations)")]
    Unschedulable {
        /// The pod.
        pod: String,
        /// The scheduler's message ("0/2 nodes are available: 2 Insufficient cpu.").
        message: String,
    },

    /// The pod failed for a reason of the cluster's before its program could
    /// end (a container that could not be created, a deadline, ...).
    #[error("pod {pod} failed ({reason}): {message}")]
    PodFailed {
        /// The pod.
        pod: String,
        /// The cluster's reason.
        reason: String,
        /// The cluster's message.
        message: String,
    },
}

impl ClusterError {
    /// Whether the same request or run may succeed later: the cluster
    /// lost the pod (evicted, its node gone), or the API server did not
    /// answer or said to come back (429, 500, 502, 503, 504).
    pub fn is_transient(&self) -> bool {
        match self {
            ClusterError::Evicted { .. }
            | ClusterError::NodeLost { .. }
            | ClusterError::Unreachable { .. } => true,
            ClusterError::Api { status, .. } => {
                matches!(status, Some(429 | 500 | 502 | 503 | 504))
            }
            _ => false,
        }
    }
}

/// What made the API server answer 403, read off its message: the fix
/// differs (a Role, a quota, the pod's requests, the namespace's Pod
/// Security level, a policy engine's rule).
///
/// ```
/// use dockhand::error::ForbiddenBy;
/// let by = ForbiddenBy::of(r#"pods "x" is forbidden: exceeded quota: compute, requested: limits.cpu=2"#);
/// assert_eq!(by, ForbiddenBy::Quota);
/// assert!(by.hint().contains("ResourceQuota"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ForbiddenBy {
    /// RBAC: the account may not use this verb on this resource.
    Rbac,
    /// A ResourceQuota is used up, or wants requests or limits the pod lacks.
    Quota,
    /// A LimitRange refuses the pod's requests or limits.
    LimitRange,
    /// Pod Security admission (or a PodSecurityPolicy) refuses the pod.
    PodSecurity,
    /// An admission webhook (a policy engine) denied the request.
    Webhook,
    /// The namespace is being deleted.
    NamespaceTerminating,
    /// None of the above.
    Other,
}

impl ForbiddenBy {
    /// Reads the API server's message of a 403.
    pub fn of(message: &str) -> ForbiddenBy {
        let has = |needle: &str| message.contains(needle);
        if has("exceeded quota") || has("failed quota") {
            ForbiddenBy::Quota
        } else if has("usage per Container") || has("usage per Pod") || has("ratio per Container") {
            ForbiddenBy::LimitRange
        } else if has("violates PodSecurity") || has("pod security policy") {
            ForbiddenBy::PodSecurity
        } else if has("admission webhook") {
            ForbiddenBy::Webhook
        } else if has("is being terminated") {
            ForbiddenBy::NamespaceTerminating
        } else if has("cannot ") && has(" resource \"") {
            ForbiddenBy::Rbac
        } else {
            ForbiddenBy::Other
        }
    }

    /// What to do about it.
    pub fn hint(&self) -> &'static str {
        match self {
            ForbiddenBy::Rbac => "bind the Role in docs/scale-out.md (\"RBAC\") to the account dockhand uses",
            ForbiddenBy::Quota => "the namespace's ResourceQuota is used up, or asks for requests or limits the pod lacks: wait for sandboxes to end, raise the quota, or ask for fewer cpus or less memory (`kubectl describe resourcequota`)",
            ForbiddenBy::LimitRange => "a LimitRange in the namespace refuses the pod's requests or limits: set cpus and memory within it (`kubectl describe limitrange`)",
            ForbiddenBy::PodSecurity => "the namespace's Pod Security level refuses the pod for the reasons the message lists: label the namespace with a level that allows them (pod-security.kubernetes.io/enforce), or drop the setting that needs them",
            ForbiddenBy::Webhook => "an admission webhook (a policy engine such as Kyverno or Gatekeeper) denied it for the rule the message names: ask for an exception for dockhand's objects (labelled dev.dockhand.*)",
            ForbiddenBy::NamespaceTerminating => "the namespace is being deleted: name another with KubeConfig::namespace",
            ForbiddenBy::Other => "the message above says why the API server refused it",
        }
    }
}
