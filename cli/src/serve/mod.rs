//! `dockhand serve`: E2B's API over dockhand sandboxes, so the E2B SDKs run
//! unchanged against any Docker host (set `E2B_API_URL` and
//! `E2B_SANDBOX_URL` to this server). One listener answers both the control
//! plane and the in-sandbox calls (envd's process and filesystem services,
//! `/files`, the code interpreter), which name their sandbox in the
//! `E2b-Sandbox-Id` header and prove access with its token.

// Helpers return a ready error response as `Err`: boxing it would only add
// an allocation on the error path.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use dockhand::pool::{KernelPool, PoolConfig, SessionPool};
use dockhand::Network;
use tokio::sync::OnceCell;

mod admission;
mod caller;
mod config;
mod connect;
mod contexts;
mod control;
mod dashboard;
mod errors;
mod files;
mod interpreter;
mod ports;
mod process;
mod process_table;
mod registry;
mod restore;
mod routes;
mod snapshots;
mod state;
mod telemetry;
mod template_build;
mod template_files;
mod template_spec;
mod templates;
mod usage;
mod volume_content;
mod volumes;
mod watch;
mod watchers;

use config::{same_secret, Keys, Template, TemplateKind};
use errors::{api_error, Parts};
use registry::{Registry, Sandbox};

/// The log target of the server's own news (listening, restored, pools
/// at shutdown): shown by default, as the request lines are.
pub const SERVE_LOG: &str = "dockhand::serve";

/// The envd version reported: the SDKs then use stdin control, default
/// users and octet-stream uploads, all of which are served.
pub const ENVD_VERSION: &str = "0.5.7";

/// `dockhand serve`'s options.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:3000", env = "DOCKHAND_SERVE_ADDR")]
    listen: SocketAddr,
    /// API keys, comma-separated (each is a tenant of its own); clients send one as E2B_API_KEY.
    #[arg(
        long = "api-keys",
        env = "DOCKHAND_SERVE_API_KEYS",
        hide_env_values = true
    )]
    api_keys: Option<String>,
    /// A file of API keys, one per line.
    #[arg(long)]
    api_keys_file: Option<PathBuf>,
    /// Templates as dockhand image specs, by name (JSON; see docs/serve.md).
    #[arg(long)]
    templates: Option<PathBuf>,
    /// Warm sandboxes kept ready per template (a template's own `pool` wins).
    #[arg(long, default_value_t = 2)]
    pool: usize,
    /// How far a template's pool grows while creates keep finding it empty
    /// (it shrinks back after 30 s without): this many times its size.
    #[arg(long, default_value_t = 2)]
    pool_growth: usize,
    /// Seconds a sandbox lives when the request gives no timeout (E2B's default).
    #[arg(long, default_value_t = 300)]
    default_timeout: u64,
    /// The longest timeout a request may set, in seconds.
    #[arg(long, default_value_t = 86_400)]
    max_timeout: u64,
    /// The most sandboxes one key may have at once (creating ones count).
    #[arg(long, default_value_t = 100)]
    max_sandboxes_per_key: usize,
    /// The most sandboxes the server runs at once, all keys together.
    #[arg(long, default_value_t = 1000)]
    max_sandboxes: usize,
    /// The largest upload and download, in bytes.
    #[arg(long, default_value_t = 100 << 20)]
    max_upload: usize,
    /// Longest run of one `run_code`, in seconds.
    #[arg(long, default_value_t = 300)]
    run_timeout: u64,
    /// Sandboxes may reach the internet unless the request says otherwise
    /// (E2B's default); without it they are offline unless asked.
    #[arg(long)]
    internet_by_default: bool,
    /// Keep sandboxes (owners, tokens, timeouts, paused ones) in an SQLite
    /// database here, so a restarted server adopts them again.
    #[arg(long, env = "DOCKHAND_SERVE_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// On `--backend kubernetes`: each sandbox keeps its files on a
    /// PersistentVolumeClaim of its own (the class of `--kube-storage-class`,
    /// else the cluster's default), so E2B's pause, connect and auto-pause
    /// work there (files only: a pod's memory is not kept). Every sandbox
    /// then needs a claim the cluster binds.
    #[arg(long, env = "DOCKHAND_SERVE_KUBE_PAUSABLE")]
    kube_pausable: bool,
    /// What a shutdown (SIGTERM, Ctrl-C) does to the sandboxes: `keep`
    /// them for the next start (the default with --state-dir), `pause`
    /// them, or `kill` them (the default without).
    #[arg(long, value_enum)]
    on_shutdown: Option<restore::OnShutdown>,
    /// How long a shutdown (SIGTERM, Ctrl-C) waits for requests under way
    /// once it has stopped accepting connections and ended open streams,
    /// in seconds; what still runs then is cut off.
    #[arg(long, default_value_t = 5)]
    shutdown_grace: u64,
    /// Template builds (the SDKs' `Template.build`) run at once; more wait.
    #[arg(long, default_value_t = 2)]
    concurrent_builds: usize,
    /// Sandboxes run under gVisor (the daemon's `runsc` runtime): with the
    /// daemon's `experimental` flag on, pauses and snapshots keep memory.
    #[arg(long)]
    gvisor: bool,
    /// Refuse template builds: their steps run in the daemon's build
    /// containers (root inside, the daemon's default network).
    #[arg(long)]
    no_template_builds: bool,
    /// Languages the code interpreter runs beside Python, for
    /// `run_code(language=...)` and `create_code_context(language=...)`:
    /// any of javascript, typescript, bash, r, or `all` (their kernels are
    /// added to its image).
    #[arg(long, value_delimiter = ',', value_parser = parse_language)]
    languages: Vec<Vec<dockhand::kernel::Language>>,
    /// Sandboxes that start at once when creates find no warm one (the
    /// rest wait their turn in order).
    #[arg(long, default_value_t = 4)]
    concurrent_starts: usize,
    /// Creates that may wait for a start; past that a create is answered
    /// 429 at once.
    #[arg(long, default_value_t = 500)]
    max_waiting_creates: usize,
    /// Seconds a create may wait for a start before it is answered 429.
    #[arg(long, default_value_t = 45)]
    max_start_wait: u64,
    /// Seconds between readings of each sandbox's CPU, memory and disk
    /// (E2B's `get_metrics`); 0 reads only when asked.
    #[arg(long, default_value_t = 5)]
    metrics_interval: u64,
    /// Also serve `/metrics` (Prometheus) here, with no key: for a scraper
    /// on a private network. On the main address it needs an API key.
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// The domain of sandbox addresses: a port inside a sandbox is reached
    /// as `<port>-<sandbox id>.<domain>` (E2B's `get_host(port)`), routed
    /// by the Host header. Point a wildcard DNS name (or `*.localhost`) at
    /// this server. Without it, such names are routed whatever their domain.
    #[arg(long, env = "DOCKHAND_SERVE_DOMAIN")]
    domain: Option<String>,
}

/// A language name, or `all`.
fn parse_language(name: &str) -> Result<Vec<dockhand::kernel::Language>, String> {
    if name.trim().eq_ignore_ascii_case("all") {
        return Ok(dockhand::kernel::Language::ALL.to_vec());
    }
    name.parse::<dockhand::kernel::Language>()
        .map(|l| vec![l])
        .map_err(|e| e.to_string())
}

/// The server's limits.
pub struct Limits {
    default_timeout: Duration,
    max_timeout: Duration,
    max_per_key: usize,
    max_total: usize,
    max_upload: usize,
    run_timeout: Duration,
    internet_default: bool,
    template_builds: bool,
    pool_growth: usize,
    /// How old a sandbox's newest reading may be before a `get_metrics`
    /// takes a fresh one.
    metrics_interval: Duration,
    /// The domain sandbox addresses end with, if one was given.
    domain: Option<String>,
}

enum Pool {
    Kernel(Box<KernelPool>),
    Session(Box<SessionPool>),
}

/// Everything the handlers share.
pub struct Server {
    client: dockhand::Client,
    keys: Keys,
    templates: BTreeMap<String, Template>,
    pools: BTreeMap<String, OnceCell<Pool>>,
    registry: Arc<Registry>,
    snapshots: snapshots::Snapshots,
    /// Templates keys built through the SDKs' `Template` API.
    built: templates::Templates,
    /// Sessions that reach volumes' files for the volume content API.
    volume_helpers: volume_content::Helpers,
    limits: Limits,
    telemetry: telemetry::Telemetry,
    /// Turns for starting sandboxes that no pool hands over.
    admission: admission::Admission,
    /// Whether sandboxes can pause: always on Docker; on a cluster with
    /// `--kube-pausable` (their files on claims).
    pausable: bool,
}

impl Server {
    /// A started container for `template`: from its warm pool when the
    /// network is the pool's (none) and no snapshot's `image` is asked for,
    /// else started now with the network (and the image).
    async fn container(
        &self,
        template: &Template,
        network: Network,
        image: Option<&str>,
        files: Option<&str>,
        volumes: &[(String, String)],
    ) -> dockhand::Result<Parts> {
        if !from_pool(&network, image, volumes) {
            let networked = !matches!(network, Network::None);
            // A kept session cannot hold a gateway registration: a sandbox
            // with a network ends with the server.
            let adapt = |s: dockhand::session::SessionConfig| {
                let mut s = s.network(network.clone());
                if networked {
                    s = s.keep(false);
                }
                for (volume, path) in volumes {
                    s = s.volume(volume, path);
                }
                match (image, files) {
                    // A snapshot on a claim (a cluster's): a copy of it.
                    (Some(image), Some(files)) => s.from_snapshot(&dockhand::session::Snapshot {
                        image: image.to_string(),
                        id: files.to_string(),
                        files: Some(files.to_string()),
                    }),
                    (Some(image), None) => s.image(dockhand::ImageSpec::prebuilt(image)),
                    (None, _) => s,
                }
            };
            return match &template.kind {
                TemplateKind::Kernel(config) => {
                    // A kernel's image is the kernel's setting, not its session's.
                    let mut config = (**config).clone().session(adapt);
                    if let Some(image) = image {
                        config = config.image(dockhand::ImageSpec::prebuilt(image));
                    }
                    let kernel = self.client.kernel(config);
                    kernel.start().await?;
                    Ok((kernel.session().clone(), Some(kernel)))
                }
                TemplateKind::Session(config) => {
                    let session = self.client.session(adapt((**config).clone()));
                    session.start().await?;
                    Ok((session, None))
                }
            };
        }
        match self.pool(template).await? {
            Pool::Kernel(pool) => {
                let kernel = pool.kernel().await?;
                Ok((kernel.session().clone(), Some(kernel)))
            }
            Pool::Session(pool) => Ok((pool.session().await?, None)),
        }
    }

    /// Whether a create of `template` with these settings is handed a
    /// ready warm sandbox (so it needs no turn to start one).
    fn warm_ready(
        &self,
        template: &Template,
        network: &Network,
        image: Option<&str>,
        volumes: &[(String, String)],
    ) -> bool {
        if !from_pool(network, image, volumes) {
            return false;
        }
        let ready = match self.pools.get(&template.name).and_then(|c| c.get()) {
            Some(Pool::Kernel(p)) => p.stats().ready,
            Some(Pool::Session(p)) => p.stats().ready,
            None => 0,
        };
        ready > 0
    }

    async fn pool(&self, template: &Template) -> dockhand::Result<&Pool> {
        let cell = self
            .pools
            .get(&template.name)
            .ok_or_else(|| dockhand::Error::InvalidSpec {
                what: "template",
                message: format!("no pool for {}", template.name),
            })?;
        cell.get_or_try_init(|| async {
            let size = PoolConfig::new(template.pool)
                .max_size(template.pool.saturating_mul(self.limits.pool_growth.max(1)));
            Ok(match &template.kind {
                // A kernel's start is seconds of CPU: more at once than
                // cores only makes each late (past its start limit, under
                // a pool of 100 on two cores).
                TemplateKind::Kernel(config) => Pool::Kernel(Box::new(
                    self.client
                        .kernel_pool((**config).clone(), size.max_starting(cores()))
                        .await?,
                )),
                TemplateKind::Session(config) => Pool::Session(Box::new(
                    self.client.session_pool((**config).clone(), size).await?,
                )),
            })
        })
        .await
    }

    /// The tenant of a control-plane request's `X-API-Key`.
    fn tenant(&self, headers: &HeaderMap) -> Result<usize, Response> {
        Server::known_tenant(self.key_tenant(headers))
    }

    /// The tenant whose key a request's `X-API-Key` is, if any.
    fn key_tenant(&self, headers: &HeaderMap) -> Option<usize> {
        let key = headers
            .get("x-api-key")
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        self.keys.tenant(key)
    }

    /// A tenant found, or the answer to a key that is none of the server's.
    fn known_tenant(found: Option<usize>) -> Result<usize, Response> {
        found.ok_or_else(|| {
            api_error(
                StatusCode::UNAUTHORIZED,
                "Invalid API key: set E2B_API_KEY to a key this server was started with",
            )
        })
    }

    /// The sandbox an in-sandbox call names, if its token is the sandbox's.
    /// A wrong token reads as an unknown sandbox: knowing an id gives
    /// nothing away.
    fn sandbox(&self, headers: &HeaderMap) -> Result<Arc<Sandbox>, Response> {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let Some(id) = header("e2b-sandbox-id") else {
            return Err(api_error(
                StatusCode::BAD_REQUEST,
                "the E2b-Sandbox-Id header is missing (set E2B_SANDBOX_URL to this server)",
            ));
        };
        let sandbox = self.registry.get(id).filter(|s| {
            let envd = header("x-access-token").is_some_and(|t| same_secret(t, &s.envd_token));
            let traffic = header("e2b-traffic-access-token")
                .is_some_and(|t| same_secret(t, &s.traffic_token));
            envd || traffic
        });
        sandbox.ok_or_else(|| {
            api_error(
                StatusCode::NOT_FOUND,
                format!("The sandbox {id} was not found"),
            )
        })
    }
}

/// Whether a sandbox with these settings can come from its template's
/// warm pool: pooled ones have no network, the template's image and no
/// volumes.
fn from_pool(network: &Network, image: Option<&str>, volumes: &[(String, String)]) -> bool {
    matches!(network, Network::None) && image.is_none() && volumes.is_empty()
}

type Shared = State<Arc<Server>>;

/// The cores this process may use.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Locks a mutex, taking it over from a thread that panicked holding it:
/// the maps it guards stay consistent at every await-free step.
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The pairs of a URL-encoded query string (`a=1&b=x%20y`); none if it
/// does not parse.
pub fn query_pairs(raw: &str) -> Vec<(String, String)> {
    let Ok(uri) = format!("/?{raw}").parse() else {
        return Vec::new();
    };
    Query::<Vec<(String, String)>>::try_from_uri(&uri)
        .map(|q| q.0)
        .unwrap_or_default()
}

/// A JSON body, or the type's defaults for an empty one; a body that is
/// not the JSON asked for is the caller's error (400), never ignored.
pub fn json_or_default<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| format!("bad request body: {e}"))
}

/// Runs the server until SIGINT or SIGTERM, then kills every sandbox.
pub async fn serve(args: ServeArgs, host: Option<String>) -> anyhow::Result<()> {
    // A cluster's pods are owned by this process's lease: they end with it,
    // so no later server could adopt them.
    let on_cluster = dockhand::KubeConfig::from_env()?.is_some();
    if on_cluster
        && matches!(
            args.on_shutdown,
            Some(restore::OnShutdown::Keep | restore::OnShutdown::Pause)
        )
    {
        anyhow::bail!(
            "--on-shutdown {} is not available on the kubernetes backend: a sandbox's pod is owned by this server's lease and ends with it; use --on-shutdown kill (the default there)",
            format!("{:?}", args.on_shutdown.unwrap_or(restore::OnShutdown::Kill)).to_lowercase()
        );
    }
    // What is wrong in the server's own settings is said before the
    // daemon is asked anything: a bad key is a bad key with no daemon too.
    let keys = Keys::load(args.api_keys.as_deref(), args.api_keys_file.as_deref())?;
    let client = crate::connect(host, true).await?;
    let store = match &args.state_dir {
        Some(dir) => Some(Arc::new(state::Store::open(dir)?)),
        None => None,
    };
    let on_shutdown = match (args.on_shutdown, &store) {
        (Some(mode), _) => mode,
        (None, Some(_)) if !on_cluster => restore::OnShutdown::Keep,
        (None, _) => restore::OnShutdown::Kill,
    };
    if store.is_none() && on_shutdown != restore::OnShutdown::Kill {
        anyhow::bail!("--on-shutdown keep or pause needs --state-dir: without one no later server could find the sandboxes");
    }
    let templates = config::templates(
        args.templates.as_deref(),
        args.pool,
        args.max_upload as u64,
        // A cluster's pods are not kept for a later server (see above).
        store
            .as_deref()
            .filter(|_| !on_cluster)
            .map(restore::owner_name),
        args.gvisor,
        &args.languages.concat(),
        on_cluster && !args.kube_pausable,
    )?;
    let pools = templates
        .keys()
        .map(|name| (name.clone(), OnceCell::new()))
        .collect();
    let server = Arc::new(Server {
        client,
        keys,
        templates,
        pools,
        registry: Arc::new(Registry::with_store(store.clone())),
        snapshots: snapshots::Snapshots::default(),
        built: templates::Templates::new(
            template_files::Uploads::new(args.state_dir.as_deref())?,
            args.concurrent_builds,
        ),
        volume_helpers: volume_content::Helpers::default(),
        limits: Limits {
            default_timeout: Duration::from_secs(args.default_timeout),
            max_timeout: Duration::from_secs(args.max_timeout),
            max_per_key: args.max_sandboxes_per_key,
            max_total: args.max_sandboxes,
            max_upload: args.max_upload,
            run_timeout: Duration::from_secs(args.run_timeout),
            internet_default: args.internet_by_default,
            template_builds: !args.no_template_builds,
            pool_growth: args.pool_growth,
            metrics_interval: Duration::from_secs(args.metrics_interval.max(1)),
            domain: args
                .domain
                .as_deref()
                .map(|d| d.trim_matches('.').to_ascii_lowercase()),
        },
        telemetry: telemetry::Telemetry::default(),
        admission: admission::Admission::new(
            args.concurrent_starts,
            args.max_waiting_creates,
            Duration::from_secs(args.max_start_wait),
        ),
        pausable: !on_cluster || args.kube_pausable,
    });
    if let Some(store) = &store {
        let adopted = restore::adopt(&server, store).await?;
        tracing::info!(
            target: SERVE_LOG,
            "state in {} ({adopted} sandboxes restored)",
            store.path().display()
        );
    }
    let reaper = tokio::spawn(registry::reap_forever(server.registry.clone()));
    let helpers = tokio::spawn(volume_content::close_idle_forever(server.clone()));
    // A cluster's pods have no usage readings here (no Docker stats).
    let sampler = (args.metrics_interval > 0 && !on_cluster).then(|| {
        tokio::spawn(registry::sample_forever(
            server.registry.clone(),
            Duration::from_secs(args.metrics_interval),
        ))
    });
    let metrics_listener = match args.metrics_listen {
        Some(address) => {
            let listener = tokio::net::TcpListener::bind(address).await?;
            tracing::info!(
                target: SERVE_LOG,
                "metrics on http://{}/metrics",
                listener.local_addr()?
            );
            let app = Router::new()
                .route("/metrics", get(routes::open_metrics))
                .with_state(server.clone());
            Some(tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, app).await {
                    tracing::warn!(error = %e, "the metrics listener ended");
                }
            }))
        }
        None => None,
    };
    // Warm the pools now (images are built on first use): the first create
    // is then a handover too.
    for template in server.templates.values().filter(|t| t.pool > 0) {
        let (server, template) = (server.clone(), template.clone());
        tokio::spawn(async move {
            if let Err(e) = server.pool(&template).await {
                tracing::warn!(template = %template.name, error = %e, "preparing a template's pool");
            }
        });
    }
    if !args.listen.ip().is_loopback() {
        tracing::warn!(
            target: SERVE_LOG,
            "listening on {}, beyond this machine, in plain HTTP: \
             API keys and sandbox tokens cross the network readable; put a TLS-terminating \
             proxy in front (see docs/serve.md)",
            args.listen
        );
    }
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    tracing::info!(
        target: SERVE_LOG,
        "listening on http://{} (set E2B_API_URL and E2B_SANDBOX_URL to it)",
        listener.local_addr()?
    );
    let app = routes::router(server.clone());
    // Streams go out in small frames; Nagle's algorithm would hold each
    // for the client's delayed ACK (40 ms a response).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY on a connection");
        }
    });
    // At a signal: no new connection, open streams told they end (a
    // retryable `unavailable`), then what is still under way gets the
    // grace before it is cut off.
    let (signalled_tx, mut signalled) = tokio::sync::watch::channel(false);
    let serving = std::future::IntoFuture::into_future(
        axum::serve(listener, app).with_graceful_shutdown(async move {
            shutdown_signal().await;
            connect::start_draining();
            signalled_tx.send_replace(true);
        }),
    );
    let grace = Duration::from_secs(args.shutdown_grace);
    let cut_off = async move {
        let _ = signalled.wait_for(|s| *s).await;
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        served = serving => served?,
        () = cut_off => tracing::warn!(
            target: SERVE_LOG,
            "requests still under way after the {grace:?} shutdown grace were cut off"
        ),
    }
    reaper.abort();
    helpers.abort();
    for task in sampler.into_iter().chain(metrics_listener) {
        task.abort();
    }
    server.volume_helpers.close_idle(true).await;
    restore::shut_down(&server, on_shutdown).await;
    for (name, cell) in &server.pools {
        let stats = match cell.get() {
            Some(Pool::Kernel(p)) => {
                let stats = p.stats();
                p.shutdown().await;
                stats
            }
            Some(Pool::Session(p)) => {
                let stats = p.stats();
                p.shutdown().await;
                stats
            }
            None => continue,
        };
        // What an operator sizes `--pool` by.
        tracing::info!(
            target: SERVE_LOG,
            "pool {name}: {} handed over ({} waited for), {} creates found it empty, {} made, {} failed to start",
            stats.handed_over, stats.waited, stats.misses, stats.filled, stats.fill_failures
        );
    }
    Ok(())
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
