//! dockhand's watchdog: removes one process's containers, volumes, networks and
//! own-use images when that process goes, and a container's scratch volumes as
//! soon as the container goes.
//!
//! Runs as the only program of a `FROM scratch` image that dockhand builds
//! itself, one container per owning process, with the daemon's socket
//! mounted, no network, no capabilities and a read-only root. Its stdin is
//! the owner's attach connection and carries nothing: the watchdog reads it
//! only to learn that it closed (the kernel closes the owner's end when the
//! owner exits or is killed). Then it removes every object labelled with the
//! owner's session id. Meanwhile it follows the daemon's events, so a
//! container of the owner removed from outside (`docker rm -f`) does not
//! leave its volumes behind for the life of a long-lived owner.
//!
//! Its configuration is its environment, set by dockhand at create:
//! `DOCKHAND_OWNER_SESSION`, the owner's session id.

mod http;
mod objects;

use std::io::{BufRead, Read, Write};
use std::time::Duration;

use objects::{Filter, Owner};

fn main() {
    std::process::exit(run());
}

fn run() -> i32 {
    let session = match std::env::var("DOCKHAND_OWNER_SESSION") {
        Ok(session) if objects::is_token(&session) => session,
        _ => {
            eprintln!("DOCKHAND_OWNER_SESSION must be the owner's session id");
            return 2;
        }
    };
    let owner = Owner::new(session);
    // The owner waits for this line: the socket answers and stdin is watched.
    match http::request("GET", "/_ping") {
        Ok(answer) if answer.status == 200 => {}
        Ok(answer) => {
            eprintln!("the daemon's socket answered {}", answer.status);
            return 1;
        }
        Err(e) => {
            eprintln!("the daemon's socket did not answer: {e}");
            return 1;
        }
    }
    {
        let follower = owner.clone();
        // If the thread cannot start, volumes wait for the final sweep.
        let _ = std::thread::Builder::new()
            .name("events".into())
            .stack_size(256 * 1024)
            .spawn(move || follow_removals(&follower));
    }
    let mut stdout = std::io::stdout();
    if stdout
        .write_all(b"ready\n")
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return 1;
    }
    wait_for_close();
    // A create the owner sent just before it died may land after the first
    // sweep, so look again once the daemon has had time to finish it.
    for pause in [0, 1, 3] {
        std::thread::sleep(Duration::from_secs(pause));
        owner.sweep();
    }
    0
}

/// Reads stdin to its end and throws every byte away: nothing the owner
/// could write there is a command.
fn wait_for_close() {
    let mut stdin = std::io::stdin().lock();
    let mut buf = [0u8; 8192];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Follows the daemon's `destroy` events for the owner's containers and
/// removes the scratch volumes each one leaves. Reconnects when the stream
/// ends (a daemon restart), after a pause.
fn follow_removals(owner: &Owner) {
    loop {
        let path = format!("/events?filters={}", http::encode(&owner.destroy_filter()));
        if let Ok((200, reader)) = http::stream(&path) {
            for line in reader.lines() {
                let Ok(line) = line else { break };
                if let Some(token) = objects::scratch_token_of_event(&line) {
                    owner.remove_volumes(Filter::Scratch(&token));
                }
            }
        }
        // Removals missed while the stream was down are caught here.
        owner.remove_orphaned_volumes();
        std::thread::sleep(Duration::from_secs(1));
    }
}
