//! `dockhand images ls|prune` and `dockhand reap`.

use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum ImagesCommand {
    /// List the images dockhand made (built, base, snapshot).
    Ls,
    /// Remove built images no container uses (bases and snapshots stay).
    Prune {
        /// Only list the built images it would try to remove.
        #[arg(long)]
        dry_run: bool,
    },
}

pub async fn run(command: ImagesCommand, host: Option<String>, json: bool) -> Result<ExitCode> {
    let client = crate::connect(host, json).await?;
    match command {
        ImagesCommand::Ls => {
            let images = client.managed_images().await?;
            if json {
                println!("{}", serde_json::json!({ "images": images }));
            } else {
                println!("{:<12} {:<10} {:>10}  TAG", "KIND", "ID", "SIZE");
                for i in images {
                    let id =
                        i.id.trim_start_matches("sha256:")
                            .chars()
                            .take(10)
                            .collect::<String>();
                    let size = format!("{:.1} MB", i.size as f64 / 1e6);
                    let tag = i.tags.first().map(String::as_str).unwrap_or("<none>");
                    println!("{:<12} {id:<10} {size:>10}  {tag}", i.kind);
                }
            }
        }
        ImagesCommand::Prune { dry_run: true } => {
            let built: Vec<String> = client
                .managed_images()
                .await?
                .into_iter()
                .filter(|i| i.kind == "image")
                .map(|i| i.tags.first().cloned().unwrap_or(i.id))
                .collect();
            if json {
                println!("{}", serde_json::json!({ "would_remove": built }));
            } else {
                for b in &built {
                    println!("would remove {b} (unless a container uses it)");
                }
            }
        }
        ImagesCommand::Prune { dry_run: false } => {
            let removed = client.prune_images().await?;
            if json {
                println!("{}", serde_json::json!({ "removed": removed }));
            } else {
                for r in &removed {
                    println!("removed {r}");
                }
                println!("{} image(s) removed", removed.len());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn reap(host: Option<String>, json: bool) -> Result<ExitCode> {
    let client = crate::connect(host, json).await?;
    let report = client.reap().await?;
    // Kept sessions are left on purpose: listed, not removed. A cluster
    // keeps none (its backend refuses kept sessions), so there is nothing
    // to list there.
    let kept = match client.kept_sessions().await {
        Ok(kept) => kept,
        Err(dockhand::Error::Unsupported { .. }) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    if json {
        println!(
            "{}",
            serde_json::json!({
                "containers": report.containers,
                "volumes": report.volumes,
                "networks": report.networks,
                "images": report.images,
                "kept_sessions": kept,
            })
        );
    } else {
        println!(
            "removed {} container(s), {} volume(s) and {} image(s) left by dead processes",
            report.containers.len(),
            report.volumes.len(),
            report.images.len()
        );
        for k in &kept {
            println!(
                "kept (not removed): {} {} {}{}",
                &k.id[..12.min(k.id.len())],
                k.name.as_deref().unwrap_or("-"),
                k.state,
                k.since
                    .as_deref()
                    .map(|s| format!(" since {s}"))
                    .unwrap_or_default()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
