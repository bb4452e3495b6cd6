//! Four typical one-shot jobs, each in its own fresh container:
//!
//! 1. auto-IO with a flag: the sum of 0..=n when `flag` is set;
//! 2. numpy statistics over a CSV string, plus datetime + timedelta arithmetic;
//! 3. a verbatim ETL script that reads a JSON file input itself;
//! 4. a command-mode line counter (`grep -c .`) over a text file input.
//!
//! ```text
//! cargo run --example end_to_end
//! ```

use std::time::Duration;

use chrono::NaiveDateTime;
use dockhand::{Client, ImageSpec, Sandbox, Type, Value};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::builder()
        .on_progress(|p| eprintln!("{p}"))
        .connect()
        .await?;

    // 1. Auto-IO: inputs are typed Python variables, outputs are read back by name.
    let sum_job = Sandbox::code("sum-to-n", "total = sum(range(n + 1)) if flag else 0")
        .input("n", Type::Int)
        .input("flag", Type::Bool)
        .output("total", Type::Int)
        .build()?;
    let out = client
        .run(&sum_job, [("n", Value::from(10)), ("flag", true.into())])
        .await?;
    println!("1. sum of 0..=10 = {}", out.get::<i64>("total")?);

    // 2. numpy in an image built once (pip over a TLS-intercepting proxy needs
    //    the host's CA bundle; harmless elsewhere).
    let numpy = ImageSpec::default()
        .pip(["numpy"])
        .trust_host_certificates();
    let stats_job = Sandbox::code(
        "stats",
        "import numpy as np\n\
         xs = np.array([float(v) for v in values.split(',')])\n\
         mean = float(xs.mean())\n\
         std = float(xs.std())\n\
         window_end = start + window\n",
    )
    .input("values", Type::Str)
    .input("start", Type::Datetime)
    .input("window", Type::Timedelta)
    .output("mean", Type::Float)
    .output("std", Type::Float)
    .output("window_end", Type::Datetime)
    .image(numpy)
    .build()?;
    let start = NaiveDateTime::parse_from_str("2024-01-01T00:00:00", "%Y-%m-%dT%H:%M:%S")?;
    let out = client
        .run(
            &stats_job,
            [
                ("values", Value::from("1,2,3,4,5")),
                ("start", start.into()),
                ("window", Duration::from_secs(24 * 3600).into()),
            ],
        )
        .await?;
    let (mean, std, end): (f64, f64, NaiveDateTime) = out.outputs.tuple()?;
    println!(
        "2. mean = {mean:.1}, std = {std:.4}, window end = {}",
        end.format("%Y-%m-%dT%H:%M:%S")
    );

    let work = tempfile::tempdir()?;

    // 3. Verbatim: the script reads /var/inputs and writes /var/outputs itself.
    let data = work.path().join("data.json");
    std::fs::write(&data, r#"{"values": [1, 2, 3, 4, 5]}"#)?;
    let etl_job = Sandbox::code(
        "etl",
        "import json\n\
         with open('/var/inputs/data') as f:\n    doc = json.load(f)\n\
         with open('/var/outputs/total', 'w') as f:\n    f.write(str(sum(doc['values'])))\n",
    )
    .verbatim()
    .input("data", Type::File)
    .output("total", Type::Int)
    .build()?;
    let out = client.run(&etl_job, [("data", Value::file(&data))]).await?;
    println!("3. ETL total = {}", out.get::<i64>("total")?);

    // 4. Command mode: any program; file inputs are paths under /var/inputs.
    let text = work.path().join("lines.txt");
    std::fs::write(&text, "line 1\n\nline 2\n")?;
    let count_job = Sandbox::command("count-lines", "sh")
        .args(["-c", "grep -c . {{text}} > /var/outputs/count"])
        .input("text", Type::File)
        .output("count", Type::Int)
        .build()?;
    let out = client
        .run(&count_job, [("text", Value::file(&text))])
        .await?;
    println!("4. non-empty lines = {}", out.get::<i64>("count")?);
    Ok(())
}
