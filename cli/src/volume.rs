//! `dockhand volume ...`: named volumes that outlive sessions.

use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use dockhand::Volume;
use serde_json::json;

#[derive(Subcommand, Debug)]
pub enum VolumeCommand {
    /// Make a volume (mount it with `--volume NAME:PATH` where sessions take one).
    Create {
        /// Its name: letters, digits, `_`, `.`, `-`.
        name: String,
    },
    /// List the volumes dockhand made.
    Ls,
    /// Remove a volume and its files (refused while a session mounts it).
    Rm {
        /// Its name.
        name: String,
    },
}

pub async fn run(command: VolumeCommand, host: Option<String>, json: bool) -> Result<ExitCode> {
    let client = crate::connect(host, json).await?;
    match command {
        VolumeCommand::Create { name } => {
            let volume = Volume::create(&client, &name).await?;
            if json {
                println!(
                    "{}",
                    json!({"name": volume.name, "created": volume.created})
                );
            } else {
                println!("{}", volume.name);
            }
        }
        VolumeCommand::Ls => {
            let volumes = Volume::list(&client).await?;
            if json {
                let listed: Vec<_> = volumes
                    .iter()
                    .map(|v| json!({"name": v.name, "created": v.created}))
                    .collect();
                println!("{}", json!({ "volumes": listed }));
            } else {
                for v in volumes {
                    println!("{} {}", v.name, v.created.unwrap_or_default());
                }
            }
        }
        VolumeCommand::Rm { name } => {
            Volume::remove_named(&client, &name).await?;
            if json {
                println!("{}", json!({"removed": name}));
            } else {
                println!("removed {name}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
