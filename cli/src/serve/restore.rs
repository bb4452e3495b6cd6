//! A server that outlives its own restart: its sandboxes written to the
//! state directory as they change, adopted again when it starts, and what
//! a shutdown does to them (`--on-shutdown keep|pause|kill`).

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Result;
use dockhand::session::PauseMode;

use super::config::TemplateKind;
use super::registry::{NewSandbox, Sandbox};
use super::state::{Row, Store};
use super::Server;

/// What a shutdown does to the sandboxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnShutdown {
    /// Leave them for the next start (with a state directory): their
    /// containers stop with their files when the server's connections go,
    /// and the next server resumes them.
    Keep,
    /// Pause each (with its memory where the daemon can save it, else its
    /// files) for the next start, which keeps them paused.
    Pause,
    /// Remove them all.
    Kill,
}

/// The name every kept container of the state directory `store` carries.
pub fn owner_name(store: &Store) -> String {
    format!("dockhand-serve-{}", store.id)
}

/// Adopts every stored sandbox: running ones are resumed (on their files,
/// or from their memory if they were paused with it), paused ones stay
/// paused. A sandbox whose key or template the server no longer has, or
/// whose container is gone, is removed and said so; a kept container of
/// this directory's that no row names (a crash between its create and its
/// row, a warm pool's) is removed.
pub async fn adopt(server: &Arc<Server>, store: &Arc<Store>) -> Result<usize> {
    let rows = store.all()?;
    let named: Vec<&str> = rows.iter().map(|r| r.container_id.as_str()).collect();
    let owner = owner_name(store);
    for kept in server.client.kept_sessions().await? {
        if kept.name.as_deref() == Some(owner.as_str()) && !named.contains(&kept.id.as_str()) {
            tracing::info!(container = %kept.id, "removing a kept container no sandbox names");
            server.client.remove_kept_session(&kept.id).await?;
        }
    }
    for mut snapshot in store.snapshots()? {
        match server.keys.tenant_of_hash(&snapshot.key_hash) {
            Some(tenant) => {
                snapshot.tenant = tenant;
                server.snapshots.insert(snapshot);
            }
            None => {
                tracing::warn!(target: super::SERVE_LOG, "snapshot {} is not restored: its API key is no longer one of the server's", snapshot.id);
                super::snapshots::remove_image(server, &snapshot).await;
                store.remove_snapshot(&snapshot.id)?;
            }
        }
    }
    for mut built in store.templates()? {
        match server.keys.tenant_of_hash(&built.key_hash) {
            // Only finished templates: a build the restart cut short is gone.
            Some(tenant) if built.image.is_some() => {
                built.tenant = tenant;
                server.built.insert(built);
            }
            Some(_) => store.remove_template(&built.id)?,
            None => {
                tracing::warn!(target: super::SERVE_LOG, "template {} is not restored: its API key is no longer one of the server's", built.name);
                if let Some(image) = &built.image {
                    super::templates::remove_image(server, image).await;
                }
                store.remove_template(&built.id)?;
            }
        }
    }
    let mut adopted = 0;
    for row in rows {
        match adopt_one(server, &row).await {
            Ok(sandbox) => {
                server.registry.adopt(sandbox.clone());
                server.registry.persist(&sandbox);
                adopted += 1;
            }
            Err(why) => {
                tracing::warn!(target: super::SERVE_LOG, "sandbox {} is not restored: {why}", row.id);
                let _ = server.client.remove_kept_session(&row.container_id).await;
                store.remove(&row.id)?;
            }
        }
    }
    Ok(adopted)
}

async fn adopt_one(server: &Arc<Server>, row: &Row) -> Result<Arc<Sandbox>, String> {
    let tenant = server
        .keys
        .tenant_of_hash(&row.key_hash)
        .ok_or("its API key is no longer one of the server's")?;
    let template = server
        .templates
        .get(&row.template)
        .ok_or_else(|| format!("the template `{}` is no longer served", row.template))?;
    let (session, kernel) = match &template.kind {
        TemplateKind::Kernel(config) => {
            let kernel = server
                .client
                .kept_kernel(&row.container_id, (**config).clone())
                .await
                .map_err(|e| e.to_string())?;
            (kernel.session().clone(), Some(kernel))
        }
        TemplateKind::Session(config) => {
            let session = server
                .client
                .kept_session(&row.container_id, (**config).clone())
                .await
                .map_err(|e| e.to_string())?;
            (session, None)
        }
    };
    let on_timeout_pause = match row.on_timeout_pause.as_str() {
        "" => None,
        "auto" => Some(None),
        mode => Some(Some(mode.parse::<PauseMode>()?)),
    };
    let parse = |text: &str| serde_json::from_str::<BTreeMap<String, String>>(text);
    let mut sandbox = Sandbox::new(NewSandbox {
        id: row.id.clone(),
        tenant,
        key_hash: row.key_hash.clone(),
        template: row.template.clone(),
        metadata: parse(&row.metadata).map_err(|e| e.to_string())?,
        envs: parse(&row.envs).map_err(|e| e.to_string())?,
        internet: false,
        public: row.public,
        cpus: row.cpus,
        memory_mb: row.memory_mb,
        timeout: std::time::Duration::ZERO,
        session,
        kernel,
        on_timeout_pause,
        auto_resume: row.auto_resume,
    });
    sandbox.envd_token = row.envd_token.clone();
    sandbox.traffic_token = row.traffic_token.clone();
    sandbox.started_at = row.started_at;
    sandbox.set_end(row.end_at);
    let sandbox = Arc::new(sandbox);
    if !row.paused {
        sandbox.resume().await.map_err(|e| e.to_string())?;
        // Its timeout ran on while the server was away; a moment to be
        // found again is given.
        let least = chrono::Utc::now() + chrono::Duration::seconds(30);
        if sandbox.end_at() < least {
            sandbox.set_end(least);
        }
    }
    Ok(sandbox)
}

/// What a shutdown does to the sandboxes still held.
pub async fn shut_down(server: &Server, mode: OnShutdown) {
    // Memory snapshots are this process's (the next server has their files).
    server.snapshots.thaw_all().await;
    let all = server.registry.take_all();
    match mode {
        OnShutdown::Kill => {
            futures::future::join_all(all.iter().map(|s| async {
                s.close().await;
                if let Some(store) = server.registry.store() {
                    let _ = store.remove(&s.id);
                }
            }))
            .await;
            // Without a state directory no later server could reach them.
            if server.registry.store().is_none() {
                for snapshot in server.snapshots.take_all() {
                    super::snapshots::remove_image(server, &snapshot).await;
                }
                for built in server.built.take_all() {
                    if let Some(image) = &built.image {
                        super::templates::remove_image(server, image).await;
                    }
                }
            }
        }
        OnShutdown::Pause => {
            for sandbox in &all {
                if let Err(e) = sandbox.pause(None).await {
                    tracing::warn!(sandbox = %sandbox.id, error = %e, "pausing at shutdown");
                }
                server.registry.persist(sandbox);
            }
            leave(&all).await;
        }
        OnShutdown::Keep => {
            for sandbox in &all {
                server.registry.persist(sandbox);
            }
            leave(&all).await;
        }
    }
}

/// Lets kept sandboxes go without removing them (their containers are the
/// next server's); those that cannot be kept (under an egress policy) end
/// with the server.
async fn leave(all: &[Arc<Sandbox>]) {
    let unkept = all.iter().filter(|s| !s.session.config().is_kept());
    futures::future::join_all(unkept.map(|s| s.close())).await;
}
