//! The smallest useful dockhand program: double a number in a sandbox.
//!
//! On a fresh machine the first run makes the Python base image (pulled, or
//! bootstrapped from Debian packages when no registry answers) and prints its
//! progress; later runs reuse it.
//!
//! ```text
//! cargo run --example quickstart
//! ```

use dockhand::{CacheMode, Client, Sandbox, Type};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::builder()
        .on_progress(|p| eprintln!("{p}"))
        .connect()
        .await?;

    let double = Sandbox::code("double", "result = x * 2")
        .input("x", Type::Int)
        .output("result", Type::Int)
        // Doubling is deterministic, so an identical call may return the
        // stored result without a container. Off by default: a run runs.
        .cache(CacheMode::Auto)
        .build()?;

    let out = client.run(&double, [("x", 21)]).await?;
    let result: i64 = out.get("result")?;
    println!("{result}");
    match out.attempts.last() {
        Some(attempt) => eprintln!(
            "ran in {:.0} ms in a fresh container from {} (removed)",
            attempt.duration.as_secs_f64() * 1000.0,
            out.image
        ),
        // Nothing ran: an identical earlier run's result came from the cache.
        None => eprintln!(
            "cached: the result of an identical earlier run, returned in {:.0} ms without a container",
            out.duration.as_secs_f64() * 1000.0
        ),
    }
    Ok(())
}
