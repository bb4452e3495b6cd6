//! [`Client`]: the entry point. Connects once, then runs everything.

use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::Backend;
pub use crate::backend::ReapReport;
use crate::engine::Engine;
use crate::error::Result;
use crate::image::{ImageResolver, ImageSpec, ResolvedImage};
use crate::paths;
use crate::progress::{Progress, ProgressHandler, Reporter};

/// A connection to a Docker daemon plus the SDK's shared state (image cache,
/// progress reporting). Cheap to clone: clones share one connection.
///
/// ```no_run
/// # async fn demo() -> dockhand::Result<()> {
/// let client = dockhand::Client::connect().await?; // honours DOCKER_HOST
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Backend,
    reporter: Reporter,
    cache_dir: PathBuf,
    cache_limit: u64,
    gateways: crate::gateway::Gateways,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.endpoint())
            .field("cache_dir", &self.inner.cache_dir)
            .finish()
    }
}

/// Options for [`Client`], validated when connecting.
#[derive(Default)]
pub struct ClientBuilder {
    daemon: crate::engine::Choice,
    progress: Option<ProgressHandler>,
    cache_dir: Option<PathBuf>,
    cache_limit: Option<u64>,
    egress: crate::gateway::GatewaySettings,
    #[cfg(feature = "kubernetes")]
    kubernetes: Option<crate::cluster::KubeConfig>,
    /// Docker whatever `DOCKHAND_BACKEND` says.
    docker_chosen: bool,
}

impl ClientBuilder {
    /// Runs on a Kubernetes cluster instead of a Docker daemon (feature
    /// `kubernetes`). `DOCKHAND_BACKEND=kubernetes` does the same without
    /// code. One-shot runs work there as on Docker; what the cluster backend
    /// cannot do yet fails with [`Error::Unsupported`](crate::Error::Unsupported)
    /// before anything is made (see `docs/scale-out.md`).
    ///
    /// ```no_run
    /// # async fn demo() -> dockhand::Result<()> {
    /// use dockhand::{Client, KubeConfig};
    /// let client = Client::builder()
    ///     .kubernetes(KubeConfig::infer().namespace("sandboxes"))
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "kubernetes")]
    pub fn kubernetes(mut self, config: crate::cluster::KubeConfig) -> Self {
        self.kubernetes = Some(config);
        self.docker_chosen = false;
        self
    }

    /// Runs on a Docker daemon whatever `DOCKHAND_BACKEND` says: for the
    /// Docker client that builds and pushes a cluster's images
    /// ([`KubeConfig::push_images`](crate::KubeConfig::push_images)) in a
    /// process whose environment picks Kubernetes.
    ///
    /// ```no_run
    /// # async fn demo() -> dockhand::Result<()> {
    /// let docker = dockhand::Client::builder().docker().connect().await?;
    /// assert_eq!(docker.backend(), "docker");
    /// # Ok(()) }
    /// ```
    pub fn docker(mut self) -> Self {
        self.docker_chosen = true;
        #[cfg(feature = "kubernetes")]
        {
            self.kubernetes = None;
        }
        self
    }

    /// The daemon to use: `unix:///path`, `tcp://host:port` (TLS when
    /// [`tls`](Self::tls) is given or `DOCKER_TLS_VERIFY` is set),
    /// `https://host:port`, or `ssh://user@host[:port]` (through the system
    /// `ssh`, running `docker system dial-stdio` there, as the docker CLI does).
    ///
    /// Without it the daemon is chosen as the docker CLI chooses:
    /// [`context`](Self::context), then `DOCKER_HOST`, then `DOCKER_CONTEXT`,
    /// then the current context of `~/.docker/config.json` (or
    /// `$DOCKER_CONFIG`), then the local socket.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.daemon.endpoint = Some(endpoint.into());
        self
    }

    /// Uses a Docker context by name (`docker context ls`): its endpoint and
    /// TLS material, read from the docker CLI's context store.
    pub fn context(mut self, name: impl Into<String>) -> Self {
        self.daemon.context = Some(name.into());
        self
    }

    /// TLS material for a `tcp://` daemon, instead of `DOCKER_CERT_PATH` or a
    /// context's. The daemon's certificate is always verified.
    ///
    /// ```no_run
    /// # async fn demo() -> dockhand::Result<()> {
    /// let client = dockhand::Client::builder()
    ///     .endpoint("tcp://build-box:2376")
    ///     .tls(dockhand::TlsFiles::from_dir("/etc/dockhand/tls"))
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn tls(mut self, files: crate::engine::TlsFiles) -> Self {
        self.daemon.tls = Some(files);
        self
    }

    /// The private key `ssh://` endpoints log in with (default: what `ssh`
    /// itself picks from `~/.ssh`).
    pub fn ssh_identity(mut self, key: impl Into<PathBuf>) -> Self {
        self.daemon.ssh_identity = Some(key.into());
        self
    }

    /// How long connecting may take, the first answer of the daemon included
    /// (default 5 s: enough for an SSH login). Past it, `connect` fails with
    /// [`Error::DaemonUnreachable`](crate::Error::DaemonUnreachable).
    pub fn connect_timeout(mut self, limit: std::time::Duration) -> Self {
        self.daemon.connect_timeout = Some(limit);
        self
    }

    /// Whether the daemon sees this machine's files at the same paths. By
    /// default only a daemon behind a local Unix socket does; host-path
    /// mounts on any other fail with
    /// [`Error::NeedsLocalDaemon`](crate::Error::NeedsLocalDaemon). Say `true`
    /// for a TCP daemon on this same machine.
    pub fn daemon_shares_filesystem(mut self, shares: bool) -> Self {
        self.daemon.shares_filesystem = Some(shares);
        self
    }

    /// Receives progress of pulls, base bootstraps and builds (also sent to `tracing`).
    pub fn on_progress(mut self, handler: impl Fn(&Progress) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(handler));
        self
    }

    /// Where to keep the output cache and lock files (default: `DOCKHAND_CACHE_DIR`,
    /// else `~/.cache/dockhand`).
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// The most bytes the output cache may hold (default
    /// [`DEFAULT_CACHE_LIMIT`](crate::sandbox::DEFAULT_CACHE_LIMIT), 1 GiB);
    /// past it, the least recently used runs are evicted.
    pub fn cache_limit(mut self, bytes: u64) -> Self {
        self.cache_limit = Some(bytes);
        self
    }

    /// The Docker network dockhand's egress gateway reaches allowed hosts
    /// through: for hosts only reachable on a network of yours. Without it,
    /// `DOCKHAND_EGRESS_NETWORK`, else the daemon's `bridge`. See
    /// [`Egress`](crate::Egress).
    pub fn egress_network(mut self, network: impl Into<String>) -> Self {
        self.egress.outside = Some(network.into());
        self
    }

    /// A certificate (PEM) the egress gateway trusts for its own TLS
    /// connections, besides the host's CA bundle and the files
    /// `DOCKHAND_CA_CERTS` names (as builds do) and `DOCKHAND_EGRESS_CA`
    /// names (the gateway only). The sandboxes behind it trust it too.
    pub fn egress_trust(mut self, pem: impl Into<String>) -> Self {
        self.egress.trust.push(pem.into());
        self
    }

    /// Connects and pings the daemon; fails with
    /// [`Error::DaemonUnreachable`](crate::Error::DaemonUnreachable) within seconds
    /// when nothing answers, and with [`Error::DaemonTls`](crate::Error::DaemonTls)
    /// when the TLS material is missing or does not match the daemon's.
    pub async fn connect(self) -> Result<Client> {
        #[cfg(feature = "kubernetes")]
        {
            let chosen = match self.kubernetes.clone() {
                Some(config) => Some(config),
                None if self.docker_chosen => None,
                None => crate::cluster::KubeConfig::from_env()?,
            };
            if let Some(config) = chosen {
                let cluster = crate::cluster::Cluster::connect(&config).await?;
                return Ok(self.finish(|_| Backend::Kubernetes(cluster)));
            }
        }
        #[cfg(not(feature = "kubernetes"))]
        if !self.docker_chosen
            && matches!(
                std::env::var("DOCKHAND_BACKEND").as_deref(),
                Ok("kubernetes" | "k8s")
            )
        {
            return Err(crate::Error::spec(
                "DOCKHAND_BACKEND",
                "`kubernetes` is not in this build of dockhand (compiled without its \
                 `kubernetes` feature); unset DOCKHAND_BACKEND to use Docker, or build \
                 with the feature",
            ));
        }
        let engine = Engine::connect(&self.daemon)
            .await?
            .with_watchdog(|engine| Box::pin(crate::image::watchdog::ensure(engine)));
        Ok(self.finish(|reporter| Backend::docker(engine, reporter.clone())))
    }

    fn finish(self, backend: impl FnOnce(&Reporter) -> Backend) -> Client {
        let cache_dir = self.cache_dir.unwrap_or_else(paths::default_cache_dir);
        let reporter = Reporter::new(self.progress);
        Client {
            inner: Arc::new(Inner {
                backend: backend(&reporter),
                reporter,
                cache_dir,
                cache_limit: self.cache_limit.unwrap_or(paths::DEFAULT_CACHE_LIMIT),
                gateways: crate::gateway::Gateways::new(self.egress),
            }),
        }
    }
}

impl Client {
    /// Connects with default options (see [`ClientBuilder::connect`]).
    pub async fn connect() -> Result<Client> {
        Client::builder().connect().await
    }

    /// Options for connecting.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The daemon endpoint in use, or the Kubernetes API server's URL.
    pub fn endpoint(&self) -> &str {
        self.inner.backend.endpoint()
    }

    /// `"docker"` or `"kubernetes"`: the backend this client runs on.
    pub fn backend(&self) -> &'static str {
        self.inner.backend.name()
    }

    /// The most bytes the output cache may hold.
    pub(crate) fn cache_limit(&self) -> u64 {
        self.inner.cache_limit
    }

    /// The cache directory in use.
    pub fn cache_dir(&self) -> &std::path::Path {
        &self.inner.cache_dir
    }

    /// Makes sure the image for `spec` exists locally: reuses it, pulls it or
    /// builds it (its base included), once per spec even under concurrency.
    ///
    /// On the Kubernetes backend the nodes pull: a prebuilt reference is
    /// passed on as it is, and a spec to build is refused
    /// ([`Error::Unsupported`](crate::Error::Unsupported)).
    pub async fn resolve_image(&self, spec: &ImageSpec) -> Result<ResolvedImage> {
        self.inner.backend.resolve_image(spec, None).await
    }

    /// [`Client::resolve_image`], with the build's progress (each log line
    /// of the base and the image) sent to `on_progress` as well as to the
    /// client's handler: the log of one build, for a caller that shows it.
    /// A spec found already built reports nothing but its source.
    ///
    /// ```no_run
    /// # async fn demo() -> dockhand::Result<()> {
    /// let client = dockhand::Client::connect().await?;
    /// let spec = dockhand::ImageSpec::default().env("MODE", "fast").run("echo built");
    /// let image = client
    ///     .resolve_image_with_progress(&spec, |p| println!("{}", p.message))
    ///     .await?;
    /// println!("{} ({:?})", image.reference, image.source);
    /// # Ok(()) }
    /// ```
    pub async fn resolve_image_with_progress(
        &self,
        spec: &ImageSpec,
        on_progress: impl Fn(&crate::Progress) + Send + Sync + 'static,
    ) -> Result<ResolvedImage> {
        self.inner
            .backend
            .resolve_image(spec, Some(Arc::new(on_progress)))
            .await
    }

    /// Removes what dockhand processes left behind when they died (killed,
    /// crashed): on Docker, containers, volumes and networks of owner
    /// processes of this host that are gone; on Kubernetes, the pods of
    /// owners whose lease lapsed, and the leases. Objects of live
    /// processes, this one included, are left alone.
    pub async fn reap(&self) -> Result<ReapReport> {
        self.inner.backend.reap().await
    }

    /// Ends this client before the program exits. On Kubernetes it deletes
    /// the connection's owner lease now and waits for the answer, so the
    /// cluster removes whatever the lease still owns (pods of sessions left
    /// open) at once. Without it a drop at exit cannot reach the API server
    /// any more (the runtime is ending), and the lease lapses instead: any
    /// client's next sweep removes it, within about two minutes by
    /// default. On Docker there is nothing to end: the containers' guards
    /// and the watchdog remove them.
    ///
    /// The client and its clones must not start anything after it.
    ///
    /// ```no_run
    /// # async fn demo() -> dockhand::Result<()> {
    /// let client = dockhand::Client::connect().await?;
    /// // ... runs, sessions ...
    /// client.close().await?;
    /// # Ok(()) }
    /// ```
    pub async fn close(&self) -> Result<()> {
        self.inner.backend.close().await
    }

    /// Ids of the containers this process created that still exist (its
    /// watchdog aside); on Kubernetes, the names of its pods.
    pub async fn live_containers(&self) -> Result<Vec<String>> {
        self.inner.backend.live().await
    }

    /// The Docker engine; on the Kubernetes backend, the typed refusal of
    /// whatever needed it.
    pub(crate) fn engine(&self) -> Result<&Engine> {
        self.inner.backend.engine().ok_or_else(docker_only)
    }

    /// The daemon's version, API version, storage driver and registered
    /// runtimes.
    pub async fn daemon_info(&self) -> Result<crate::DaemonInfo> {
        self.engine()?.daemon_info().await
    }

    /// Every image the SDK made on this daemon (built images, bases, snapshots).
    pub async fn managed_images(&self) -> Result<Vec<crate::ManagedImage>> {
        self.engine()?.managed_images().await
    }

    /// Removes images built from specs (kind `image`) that no container
    /// uses; bases and snapshots stay. Returns the removed images' tags (or
    /// ids). An image is built again, once, when a spec next needs it.
    pub async fn prune_images(&self) -> Result<Vec<String>> {
        let mut removed = Vec::new();
        for image in self.managed_images().await? {
            if image.kind != "image" {
                continue;
            }
            let name = image.tags.first().cloned().unwrap_or(image.id.clone());
            // Without force: the daemon refuses an image a container still uses.
            if self.engine()?.remove_image_if_unused(&image.id).await? {
                removed.push(name);
            }
        }
        Ok(removed)
    }

    /// What this client's egress gateway has done since it started:
    /// sandboxes served, connections open, taken and turned away, requests
    /// denied. `None` while no gateway runs (no sandbox of this client has
    /// had a network policy yet).
    ///
    /// ```no_run
    /// # async fn demo(client: dockhand::Client) -> dockhand::Result<()> {
    /// if let Some(stats) = client.egress_stats().await? {
    ///     println!("{} connections open", stats.open_connections);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn egress_stats(&self) -> Result<Option<crate::EgressStats>> {
        self.inner.gateways.stats().await
    }

    pub(crate) fn reporter(&self) -> &Reporter {
        &self.inner.reporter
    }

    /// Pushes a local image (one [`Client::resolve_image`] or
    /// [`Client::code_host_image`] made) to `registry`, tagged as
    /// [`Registry`](crate::image::Registry) says. The registry's tag is
    /// removed from this daemon afterwards; the image stays.
    pub async fn push_image(
        &self,
        image: &ResolvedImage,
        registry: &crate::image::Registry,
    ) -> Result<crate::image::PushedImage> {
        registry.push(self.engine()?, image).await
    }

    /// What an egress lease is opened with (Docker only).
    pub(crate) fn gateway_access(&self) -> Result<crate::gateway::Access<'_>> {
        Ok(crate::gateway::Access {
            gateways: &self.inner.gateways,
            engine: self.engine()?,
            reporter: &self.inner.reporter,
        })
    }

    /// Where this client runs what it launches.
    pub(crate) fn runs_on(&self) -> &crate::backend::Backend {
        &self.inner.backend
    }

    pub(crate) fn images(&self) -> Result<&ImageResolver> {
        self.inner.backend.images().ok_or_else(docker_only)
    }
}

/// What a client on the Kubernetes backend answers where a Docker daemon is needed.
fn docker_only() -> crate::Error {
    crate::Error::Unsupported {
        backend: "kubernetes",
        feature: "this (pause, resume, fork, snapshots, usage readings, volumes, image listing and pruning, local image builds)".into(),
        hint: "these need a Docker daemon: run such sandboxes on a Docker client (`Client::connect()`); docs/scale-out.md says what runs where".into(),
    }
}

#[cfg(feature = "kubernetes")]
impl crate::cluster::KubeConfig {
    /// Builds images from specs with `docker` (a client on a Docker daemon
    /// of the nodes' platform) and pushes them to `registry`, which the
    /// nodes pull from: one-shots, sessions, kernels and code hosts then
    /// take an [`ImageSpec`](crate::ImageSpec) on the cluster as on Docker.
    /// Each image is pushed once per process and pulled by digest.
    /// Without it, only prebuilt references run on a cluster.
    ///
    /// ```no_run
    /// # async fn demo() -> dockhand::Result<()> {
    /// use dockhand::{image::Registry, Client, KubeConfig};
    /// let docker = Client::connect().await?;
    /// let cluster = Client::builder()
    ///     .kubernetes(KubeConfig::infer().push_images(
    ///         docker,
    ///         Registry::new("registry.example.com/team/sandboxes"),
    ///     ))
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn push_images(self, docker: Client, registry: crate::image::Registry) -> Self {
        let builder = match &docker.inner.backend {
            Backend::Docker { engine, images } => Ok(crate::cluster::Builder {
                engine: engine.clone(),
                images: images.clone(),
                registry,
            }),
            Backend::Kubernetes(_) => Err(format!(
                "the client given to build with is on {}, not a Docker daemon",
                docker.endpoint()
            )),
        };
        self.with_builder(builder)
    }
}
