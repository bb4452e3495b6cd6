//! [`KubeConfig`]: which cluster, which namespace, read the way kubectl reads it.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{ClusterError, Error, Result};

/// Where the Kubernetes backend finds its cluster, for
/// [`ClientBuilder::kubernetes`](crate::ClientBuilder::kubernetes).
///
/// ```no_run
/// # async fn demo() -> dockhand::Result<()> {
/// use dockhand::{Client, KubeConfig};
/// // As kubectl: in-cluster, else $KUBECONFIG, else ~/.kube/config; its current context.
/// let client = Client::builder()
///     .kubernetes(KubeConfig::infer().namespace("sandboxes"))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
///
/// `DOCKHAND_BACKEND=kubernetes` picks this backend without code changes;
/// `DOCKHAND_KUBE_CONTEXT` and `DOCKHAND_KUBE_NAMESPACE` then name the
/// context and namespace.
#[derive(Debug, Clone, Default)]
pub struct KubeConfig {
    source: Source,
    pub(super) namespace: Option<String>,
    pub(super) gvisor_runtime_class: Option<String>,
    pub(super) connect_timeout: Option<Duration>,
    pub(super) lease_duration: Option<Duration>,
    pub(super) builder: Option<Result<super::images::Builder, String>>,
    pub(super) agent_sandbox: Option<bool>,
    pub(super) agent_image: Option<String>,
    pub(super) placement: crate::manifests::Placement,
    pub(super) pod_start_limit: Option<Duration>,
    pub(super) storage: super::Storage,
}

#[derive(Debug, Clone, Default)]
enum Source {
    /// In-cluster, else `$KUBECONFIG`, else `~/.kube/config`.
    #[default]
    Infer,
    /// A kubeconfig file (`None`: the usual one) and a context in it.
    File {
        path: Option<PathBuf>,
        context: Option<String>,
    },
    /// An API server that asks no credentials, e.g. `kubectl proxy`.
    Url(String),
}

impl KubeConfig {
    /// The cluster kubectl would use: the in-cluster service account when
    /// running in a pod, else `$KUBECONFIG`, else `~/.kube/config`, at its
    /// current context.
    pub fn infer() -> Self {
        KubeConfig::default()
    }

    /// A kubeconfig file at `path`, at its current context (or
    /// [`context`](Self::context)).
    pub fn file(path: impl Into<PathBuf>) -> Self {
        KubeConfig {
            source: Source::File {
                path: Some(path.into()),
                context: None,
            },
            ..Default::default()
        }
    }

    /// An API server reached without credentials, such as the one
    /// `kubectl proxy` serves at `http://127.0.0.1:8001`.
    pub fn url(url: impl Into<String>) -> Self {
        KubeConfig {
            source: Source::Url(url.into()),
            ..Default::default()
        }
    }

    /// A context of the kubeconfig other than its current one.
    pub fn context(mut self, name: impl Into<String>) -> Self {
        let path = match self.source {
            Source::File { path, .. } => path,
            _ => None,
        };
        self.source = Source::File {
            path,
            context: Some(name.into()),
        };
        self
    }

    /// The namespace every object is made in (default: the context's, else `default`).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Where images are built and pushed from (see `push_images`): a
    /// Docker daemon's parts, or why the client given has none.
    pub(crate) fn with_builder(mut self, builder: Result<super::images::Builder, String>) -> Self {
        self.builder = Some(builder);
        self
    }

    /// The RuntimeClass that runs gVisor on this cluster (default `gvisor`),
    /// used for [`Isolation::Gvisor`](crate::Isolation).
    pub fn gvisor_runtime_class(mut self, class: impl Into<String>) -> Self {
        self.gvisor_runtime_class = Some(class.into());
        self
    }

    /// Where every pod goes and what its images are pulled with: node
    /// selector, tolerations, priority class, a default RuntimeClass and
    /// image pull secrets (see [`Placement`](crate::manifests::Placement)).
    ///
    /// ```
    /// use dockhand::k8s::Placement;
    /// use dockhand::KubeConfig;
    /// let config = KubeConfig::infer().placement(
    ///     Placement::new().node_selector("pool", "sandboxes").priority_class("sandbox-low"),
    /// );
    /// # let _ = config;
    /// ```
    pub fn placement(mut self, placement: crate::manifests::Placement) -> Self {
        self.placement = placement;
        self
    }

    /// How long a one-shot's pod may take to be ready for its inputs
    /// (scheduling, image pull, start; default 5 min). A run's timeout
    /// counts from then, as on Docker it counts from the container's start.
    /// Past it the run fails with the scheduler's reason
    /// ([`ClusterError::Unschedulable`]) or as not ready.
    pub fn pod_start_limit(mut self, limit: Duration) -> Self {
        self.pod_start_limit = Some(limit);
        self
    }

    /// How long connecting may take, the API server's first answer included
    /// (default 10 s).
    pub fn connect_timeout(mut self, limit: Duration) -> Self {
        self.connect_timeout = Some(limit);
        self
    }

    /// Whether pools (of one-shots, sessions, kernels and code hosts) use
    /// agent-sandbox (kubernetes-sigs/agent-sandbox): `true` requires its extensions,
    /// `false` never uses them. Unset (the default), a pool uses them where
    /// the cluster serves `extensions.agents.x-k8s.io/v1beta1`, and makes
    /// its own pods where it does not.
    ///
    /// On agent-sandbox, a pool is a `SandboxTemplate` of its pod and a
    /// `SandboxWarmPool` keeping its size of them started; each run (or
    /// session) claims one with a `SandboxClaim` and deletes the claim when
    /// it ends. Sandboxes and sessions with secrets or an allow-list keep
    /// pools of their own pods.
    pub fn agent_sandbox(mut self, use_it: bool) -> Self {
        self.agent_sandbox = Some(use_it);
        self
    }

    /// The image sessions' pods take dockhand's session agent from (an
    /// init container copies it into the pod, so the session's image needs
    /// no interpreter). By default: with [`push_images`](Self::push_images),
    /// the agent's image made by that Docker client and pushed; otherwise
    /// `dockhand/agent:<tag>` as this SDK names it
    /// ([`Client::session_agent_image`](crate::Client::session_agent_image)
    /// makes it), which the nodes must be able to pull or have loaded.
    pub fn agent_image(mut self, reference: impl Into<String>) -> Self {
        self.agent_image = Some(reference.into());
        self
    }

    /// What volumes and sessions' kept files are stored on: the
    /// PersistentVolumeClaims' storage class (default: the cluster's
    /// default class), their sizes and whether a class lets several pods
    /// write one claim (see [`Storage`](crate::k8s::Storage)).
    ///
    /// ```
    /// use dockhand::k8s::Storage;
    /// use dockhand::KubeConfig;
    /// let config = KubeConfig::infer().storage(
    ///     Storage::new().class("nfs").volume_size("20Gi").shared_writers(true),
    /// );
    /// # let _ = config;
    /// ```
    pub fn storage(mut self, storage: super::Storage) -> Self {
        self.storage = storage;
        self
    }

    /// How long this process's owner lease lasts unrenewed (default 30 s,
    /// renewed every third of it). Past it, the process counts as dead and
    /// its pods are removed by the next sweep.
    pub fn lease_duration(mut self, duration: Duration) -> Self {
        self.lease_duration = Some(duration);
        self
    }

    /// The backend `DOCKHAND_BACKEND` asks for: `None` for Docker (unset,
    /// empty or `docker`), a config for `kubernetes` (or `k8s`) with the
    /// context and namespace of `DOCKHAND_KUBE_CONTEXT` and
    /// `DOCKHAND_KUBE_NAMESPACE` (and claims in the StorageClass of
    /// `DOCKHAND_KUBE_STORAGE_CLASS`); any other value is
    /// [`Error::InvalidSpec`](crate::Error::InvalidSpec). What
    /// `Client::connect` does without a config, for a caller that adds to it.
    ///
    /// ```no_run
    /// # async fn demo() -> dockhand::Result<()> {
    /// if let Some(config) = dockhand::KubeConfig::from_env()? {
    ///     let config = config.pod_start_limit(std::time::Duration::from_secs(60));
    ///     let client = dockhand::Client::builder().kubernetes(config).connect().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn from_env() -> Result<Option<KubeConfig>> {
        backend_choice(&std::env::var("DOCKHAND_BACKEND").unwrap_or_default())
    }

    /// The kube-rs configuration, and the server's URL for messages.
    pub(super) async fn load(&self) -> Result<(kube::Config, String)> {
        let failed = |server: String, reason: String| {
            Error::from(ClusterError::Unreachable {
                server,
                reason,
                hint: "set KUBECONFIG, or name the file with KubeConfig::file".into(),
            })
        };
        let config = match &self.source {
            Source::Infer => kube::Config::infer()
                .await
                .map_err(|e| failed("(inferred)".into(), e.to_string()))?,
            Source::File { path, context } => {
                let options = kube::config::KubeConfigOptions {
                    context: context.clone(),
                    ..Default::default()
                };
                let where_ = path
                    .as_ref()
                    .map_or("(the usual kubeconfig)".into(), |p| p.display().to_string());
                match path {
                    Some(path) => {
                        let file = kube::config::Kubeconfig::read_from(path)
                            .map_err(|e| failed(where_.clone(), e.to_string()))?;
                        kube::Config::from_custom_kubeconfig(file, &options)
                            .await
                            .map_err(|e| failed(where_, e.to_string()))?
                    }
                    None => kube::Config::from_kubeconfig(&options)
                        .await
                        .map_err(|e| failed(where_, e.to_string()))?,
                }
            }
            Source::Url(url) => {
                let uri = url
                    .parse()
                    .map_err(|e| Error::spec("Kubernetes API URL", format!("`{url}`: {e}")))?;
                kube::Config::new(uri)
            }
        };
        let server = config.cluster_url.to_string();
        Ok((config, server))
    }
}

/// The config a `DOCKHAND_BACKEND` value asks for.
pub(super) fn backend_choice(backend: &str) -> Result<Option<KubeConfig>> {
    match backend.trim() {
        "" | "docker" => Ok(None),
        "kubernetes" | "k8s" => {
            let mut config = KubeConfig::infer();
            if let Some(context) = non_empty_env("DOCKHAND_KUBE_CONTEXT") {
                config = config.context(context);
            }
            if let Some(namespace) = non_empty_env("DOCKHAND_KUBE_NAMESPACE") {
                config = config.namespace(namespace);
            }
            if let Some(class) = non_empty_env("DOCKHAND_KUBE_STORAGE_CLASS") {
                config = config.storage(super::Storage::new().class(class));
            }
            Ok(Some(config))
        }
        other => Err(Error::spec(
            "DOCKHAND_BACKEND",
            format!("`{other}` is not a backend; use `docker` or `kubernetes`"),
        )),
    }
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}
