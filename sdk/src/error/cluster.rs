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

    /// 403: the account dockhand uses may not do this.
    #[error("the cluster forbids {verb} on {resource} in namespace `{namespace}`: {message}\nhint: bind the Role in docs/scale-out.md (\"RBAC\") to the account dockhand uses")]
    Forbidden {
        /// `create`, `get`, `watch`, `delete`, ...
        verb: &'static str,
        /// `pods`, `pods/attach`, `leases`, ...
        resource: &'static str,
        /// The namespace.
        namespace: String,
        /// The API server's message.
        message: String,
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
