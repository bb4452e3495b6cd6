//! An LLM data-analysis backend's three steps in one kernel: load a CSV,
//! summarise it, chart it. State carries from step to step; the chart comes
//! back as a PNG (saved here) and as data a model can read.
//!
//! ```text
//! cargo run --example data_analysis
//! ```

use dockhand::kernel::KernelConfig;
use dockhand::session::SessionApi;
use dockhand::Client;

const SALES: &str = "month,region,total\n\
2026-01,north,120\n2026-01,south,90\n2026-02,north,135\n2026-02,south,80\n\
2026-03,north,150\n2026-03,south,110\n2026-04,north,160\n2026-04,south,125\n";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::builder()
        .on_progress(|p| eprintln!("{p}"))
        .connect()
        .await?;
    let config = KernelConfig::data_science();
    // pip must trust the host's CA where outbound TLS is intercepted.
    let image = config.image_spec().clone().trust_host_certificates();
    let kernel = client.kernel(config.image(image));
    kernel.start().await?;
    kernel.write_file("sales.csv", SALES.as_bytes()).await?;

    // Step 1: load. The frame stays in the kernel for the next steps.
    let ex = kernel
        .run("df = pd.read_csv('sales.csv')\ndf.head(3)")
        .await?;
    println!("step 1, first rows:\n{}", ex.text().unwrap_or_default());

    // Step 2: summarise.
    let ex = kernel
        .run("by_region = df.groupby('region').total.sum()\nby_region")
        .await?;
    println!(
        "step 2, totals by region:\n{}",
        ex.text().unwrap_or_default()
    );

    // Step 3: chart, without show() or savefig.
    let ex = kernel
        .run("ax = df.pivot(index='month', columns='region', values='total').plot(title='Sales by month')\nax.set_ylabel('total')")
        .await?;
    if let Some(err) = &ex.error {
        return Err(format!("step 3 raised {}: {}", err.name, err.value).into());
    }
    let figure = ex
        .results
        .iter()
        .find(|r| r.png().is_some())
        .ok_or("step 3 made no chart")?;
    let png = figure.png().unwrap_or_default();
    std::fs::write("sales.png", &png)?;
    println!("step 3, chart: sales.png ({} bytes)", png.len());
    if let Some(chart) = figure.chart() {
        println!(
            "        as data: a {} chart \"{}\" with {} series",
            chart.kind,
            chart.title,
            chart.elements.len()
        );
    }
    let notebook = kernel.notebook("default").await?;
    std::fs::write("analysis.ipynb", serde_json::to_vec_pretty(&notebook)?)?;
    println!("the session as a notebook: analysis.ipynb");
    kernel.close().await?;
    Ok(())
}
