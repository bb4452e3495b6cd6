//! What an operator watches: Prometheus metrics of the server (sandboxes
//! by template and state, creates and their failures by cause, request
//! latencies, pools) and one structured log line per request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use super::{lock, Pool, Server};

/// The log target of request lines (`DOCKHAND_LOG=dockhand::requests=info`).
pub const REQUEST_LOG: &str = "dockhand::requests";
/// The longest path a request line carries.
const LOGGED_PATH: usize = 200;

/// Why a create was refused or failed: a closed set, so the label's
/// values stay few.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The request was not one the server serves (400).
    BadRequest,
    /// The key has its limit of sandboxes (429).
    KeyLimit,
    /// The server has its limit of sandboxes (429).
    ServerLimit,
    /// Too many creates waiting for a start already, or waited too long (429).
    Busy,
    /// The container did not start (500).
    StartFailed,
    /// It started but its setup (env, start commands) failed (500).
    SetupFailed,
}

impl Failure {
    fn as_str(self) -> &'static str {
        match self {
            Failure::BadRequest => "bad_request",
            Failure::KeyLimit => "key_limit",
            Failure::ServerLimit => "server_limit",
            Failure::Busy => "busy",
            Failure::StartFailed => "start_failed",
            Failure::SetupFailed => "setup_failed",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TemplateLabel {
    template: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    template: String,
    cause: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    template: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResponseLabels {
    method: String,
    route: String,
    status: u16,
}

fn latency_buckets() -> Histogram {
    // 1 ms to ~33 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// The server's metrics.
pub struct Telemetry {
    registry: Registry,
    requests: Family<ResponseLabels, Counter>,
    request_seconds: Family<RouteLabels, Histogram, fn() -> Histogram>,
    creates: Family<TemplateLabel, Counter>,
    create_failures: Family<FailureLabels, Counter>,
    create_seconds: Family<TemplateLabel, Histogram, fn() -> Histogram>,
    sandboxes: Family<StateLabels, Gauge>,
    pending: Gauge,
    waiting: Gauge,
    pool_ready: Family<TemplateLabel, Gauge>,
    pool_size: Family<TemplateLabel, Gauge>,
    pool_handovers: Family<TemplateLabel, Counter>,
    pool_misses: Family<TemplateLabel, Counter>,
    pool_fill_failures: Family<TemplateLabel, Counter>,
    gateway_sandboxes: Gauge,
    gateway_open: Gauge,
    gateway_accepted: Counter,
    gateway_turned_away: Counter,
    gateway_denied: Counter,
    /// Refreshing the gauges and encoding: one scrape at a time.
    scrape: std::sync::Mutex<()>,
}

impl Default for Telemetry {
    fn default() -> Self {
        let mut t = Telemetry {
            requests: Family::default(),
            request_seconds: Family::new_with_constructor(latency_buckets),
            creates: Family::default(),
            create_failures: Family::default(),
            create_seconds: Family::new_with_constructor(latency_buckets),
            sandboxes: Family::default(),
            pending: Gauge::default(),
            waiting: Gauge::default(),
            pool_ready: Family::default(),
            pool_size: Family::default(),
            pool_handovers: Family::default(),
            pool_misses: Family::default(),
            pool_fill_failures: Family::default(),
            gateway_sandboxes: Gauge::default(),
            gateway_open: Gauge::default(),
            gateway_accepted: Counter::default(),
            gateway_turned_away: Counter::default(),
            gateway_denied: Counter::default(),
            scrape: std::sync::Mutex::new(()),
            registry: Registry::with_prefix("dockhand"),
        };
        t.registry.register(
            "http_requests",
            "Requests answered, by route and status",
            t.requests.clone(),
        );
        t.registry.register(
            "http_request_duration_seconds",
            "Time to answer a request (to its response head; streams go on after)",
            t.request_seconds.clone(),
        );
        t.registry
            .register("sandbox_creates", "Sandboxes created", t.creates.clone());
        t.registry.register(
            "sandbox_create_failures",
            "Creates refused or failed, by cause",
            t.create_failures.clone(),
        );
        t.registry.register(
            "sandbox_create_duration_seconds",
            "Time from a create's request to its sandbox, for creates that succeeded",
            t.create_seconds.clone(),
        );
        t.registry.register(
            "sandboxes",
            "Sandboxes now, by template and state",
            t.sandboxes.clone(),
        );
        t.registry.register(
            "sandbox_creates_in_flight",
            "Creates under way or waiting for a start",
            t.pending.clone(),
        );
        t.registry.register(
            "sandbox_creates_waiting",
            "Creates waiting for their turn to start a sandbox",
            t.waiting.clone(),
        );
        t.registry.register(
            "pool_ready",
            "Warm sandboxes ready to hand over",
            t.pool_ready.clone(),
        );
        t.registry.register(
            "pool_target",
            "Warm sandboxes a pool aims to hold now (grown under demand)",
            t.pool_size.clone(),
        );
        t.registry.register(
            "pool_handovers",
            "Creates served from a pool (hits)",
            t.pool_handovers.clone(),
        );
        t.registry.register(
            "pool_misses",
            "Creates that found the pool empty and started cold",
            t.pool_misses.clone(),
        );
        t.registry.register(
            "pool_fill_failures",
            "Warm sandboxes that failed to start",
            t.pool_fill_failures.clone(),
        );
        t.registry.register(
            "egress_sandboxes",
            "Running sandboxes whose traffic goes through the egress gateway",
            t.gateway_sandboxes.clone(),
        );
        t.registry.register(
            "egress_connections_open",
            "Connections from sandboxes open through the egress gateway",
            t.gateway_open.clone(),
        );
        t.registry.register(
            "egress_connections",
            "Connections from sandboxes the egress gateway took",
            t.gateway_accepted.clone(),
        );
        t.registry.register(
            "egress_connections_turned_away",
            "Connections the egress gateway closed at once: their sandbox held its share open",
            t.gateway_turned_away.clone(),
        );
        t.registry.register(
            "egress_requests_denied",
            "Requests a sandbox's network policy refused",
            t.gateway_denied.clone(),
        );
        t
    }
}

impl Telemetry {
    /// A create begins; the guard counts it in flight until dropped.
    pub fn create_started(&self) -> InFlight<'_> {
        self.pending.inc();
        InFlight(self)
    }

    /// A create ended with a sandbox, after `took`.
    pub fn created(&self, template: &str, took: Duration) {
        let label = TemplateLabel {
            template: template.to_string(),
        };
        self.creates.get_or_create(&label).inc();
        self.create_seconds
            .get_or_create(&label)
            .observe(took.as_secs_f64());
    }

    /// A create refused or failed. `template` must be one the server
    /// serves (or empty): label values come from the server, never the
    /// client.
    pub fn create_failed(&self, template: &str, cause: Failure) {
        self.create_failures
            .get_or_create(&FailureLabels {
                template: template.to_string(),
                cause: cause.as_str().to_string(),
            })
            .inc();
    }

    /// The metrics in Prometheus' text format, the gauges read now (the
    /// egress gateway's figures as it just gave them, if one runs).
    pub fn encode(
        &self,
        server: &Server,
        egress: Option<dockhand::EgressStats>,
    ) -> Result<String, std::fmt::Error> {
        let _one = lock(&self.scrape);
        if let Some(stats) = egress {
            self.gateway_open.set(stats.open_connections as i64);
            // The gateway counts from its start: a new one's totals count
            // once they pass the old one's.
            catch_up(&self.gateway_accepted, stats.connections_accepted);
            catch_up(&self.gateway_turned_away, stats.connections_turned_away);
            catch_up(&self.gateway_denied, stats.requests_denied);
        }
        self.sandboxes.clear();
        let mut egress = 0;
        for sandbox in server.registry.all() {
            egress += i64::from(sandbox.internet && !sandbox.is_paused());
            self.sandboxes
                .get_or_create(&StateLabels {
                    template: sandbox.template.clone(),
                    state: sandbox.state_name().to_string(),
                })
                .inc();
        }
        self.gateway_sandboxes.set(egress);
        self.waiting.set(server.admission.waiting() as i64);
        for (name, cell) in &server.pools {
            let stats = match cell.get() {
                Some(Pool::Kernel(p)) => p.stats(),
                Some(Pool::Session(p)) => p.stats(),
                None => continue,
            };
            let label = TemplateLabel {
                template: name.clone(),
            };
            self.pool_ready
                .get_or_create(&label)
                .set(stats.ready as i64);
            self.pool_size.get_or_create(&label).set(stats.size as i64);
            catch_up(
                &self.pool_handovers.get_or_create(&label),
                stats.handed_over,
            );
            catch_up(&self.pool_misses.get_or_create(&label), stats.misses);
            catch_up(
                &self.pool_fill_failures.get_or_create(&label),
                stats.fill_failures,
            );
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

/// Moves a counter up to a total counted elsewhere (a pool's, the egress
/// gateway's).
fn catch_up(counter: &Counter, total: u64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

/// A create in flight; see [`Telemetry::create_started`].
pub struct InFlight<'a>(&'a Telemetry);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.pending.dec();
    }
}

/// The tenant of a request's `X-API-Key` (`None`: no key of the server's),
/// found once by [`observe`].
#[derive(Clone, Copy)]
pub struct KeyTenant(pub Option<usize>);

/// Counts, times and logs every request. The log line names the key by
/// an id (never the key), the sandbox, the route and path (never the
/// query, which may carry a signature), the status and the latency.
pub async fn observe(
    State(server): State<Arc<Server>>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let method = request.method().as_str().to_string();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |m| m.as_str().to_string());
    let path: String = request.uri().path().chars().take(LOGGED_PATH).collect();
    // The key is compared once a request: the handler's `Tenant` takes
    // what is found here.
    let tenant = server.key_tenant(request.headers());
    request.extensions_mut().insert(KeyTenant(tenant));
    let key = tenant.map(|tenant| server.keys.key_id(tenant));
    let headers = request.headers();
    let sandbox = headers
        .get("e2b-sandbox-id")
        .and_then(|v| v.to_str().ok())
        .filter(|id| id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric()))
        .map(str::to_string);
    let response = next.run(request).await;
    let took = started.elapsed();
    let status = response.status().as_u16();
    let t = &server.telemetry;
    t.requests
        .get_or_create(&ResponseLabels {
            method: method.clone(),
            route: route.clone(),
            status,
        })
        .inc();
    t.request_seconds
        .get_or_create(&RouteLabels {
            method: method.clone(),
            route: route.clone(),
        })
        .observe(took.as_secs_f64());
    tracing::info!(
        target: REQUEST_LOG,
        method = %method,
        route = %route,
        path = %path,
        status,
        latency_ms = (took.as_secs_f64() * 1e6).round() / 1e3,
        key = key.as_deref().unwrap_or("-"),
        sandbox = sandbox.as_deref().unwrap_or("-"),
        "request"
    );
    response
}
