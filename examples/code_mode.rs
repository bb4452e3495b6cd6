//! Code mode: the data-analysis scenario. An LLM is given four tools and writes
//! one program that fetches a table, filters Q4, totals revenue per month,
//! computes statistics and draws a chart. The program runs in a sandboxed
//! code host; each tool call pauses it while the host (Rust) runs the tool.
//! Only the printed output and the final value come back.
//!
//! ```text
//! cargo run --example code_mode
//! ```

use dockhand::codemode::{CodeHostConfig, ParamType, Tool, Toolset};
use dockhand::Client;
use serde_json::{json, Map, Value};

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// A small built-in table: revenue and units per month and region.
fn sales_2024() -> Vec<Value> {
    let regions = [
        ("North", 1.00),
        ("South", 0.85),
        ("East", 1.10),
        ("West", 0.95),
    ];
    let mut rows = Vec::new();
    for (m, month) in MONTHS.iter().enumerate() {
        for (r, (region, factor)) in regions.iter().enumerate() {
            let base = 10_000.0 + 1_250.0 * m as f64 + 400.0 * r as f64;
            let revenue = (base * factor).round();
            let units = (revenue / 25.0).round() as i64;
            rows.push(
                json!({"month": month, "region": region, "revenue": revenue, "units": units}),
            );
        }
    }
    rows
}

fn compare(a: &Value, operator: &str, b: &Value) -> Result<bool, String> {
    let num = |v: &Value| v.as_f64();
    Ok(match operator {
        "==" => a == b,
        "!=" => a != b,
        "in" => b.as_array().is_some_and(|xs| xs.contains(a)),
        ">" | "<" | ">=" | "<=" => {
            let (x, y) = (
                num(a).ok_or("not a number")?,
                num(b).ok_or("value is not a number")?,
            );
            match operator {
                ">" => x > y,
                "<" => x < y,
                ">=" => x >= y,
                _ => x <= y,
            }
        }
        other => {
            return Err(format!(
                "unknown operator `{other}`; use ==, !=, >, <, >=, <= or in"
            ))
        }
    })
}

fn tools() -> Toolset {
    let fetch_data = Tool::new(
        "fetch_data",
        "Returns the rows of a dataset as a list of dicts.",
    )
    .param(
        "dataset",
        ParamType::Str,
        "dataset name; available: \"sales_2024\" (month, region, revenue, units)",
    )
    .returns("list[dict]")
    .handler(|args| async move {
        match args["dataset"].as_str() {
            Some("sales_2024") => Ok(Value::Array(sales_2024())),
            other => Err(format!("unknown dataset {other:?}; available: sales_2024")),
        }
    });
    let filter_data = Tool::new(
        "filter_data",
        "Keeps the rows whose `column` compares true with `value`.",
    )
    .param("data", ParamType::List, "rows (list of dicts)")
    .param("column", ParamType::Str, "column to compare")
    .param(
        "operator",
        ParamType::Str,
        "one of ==, !=, >, <, >=, <=, in",
    )
    .param(
        "value",
        ParamType::Any,
        "value to compare with (a list for `in`)",
    )
    .returns("list[dict]")
    .handler(|args| async move {
        let column = args["column"].as_str().unwrap_or_default();
        let operator = args["operator"].as_str().unwrap_or_default();
        let mut kept = Vec::new();
        for row in args["data"].as_array().into_iter().flatten() {
            if compare(&row[column], operator, &args["value"])? {
                kept.push(row.clone());
            }
        }
        Ok(Value::Array(kept))
    });
    let calculate_statistics = Tool::new("calculate_statistics", "Count, mean, median, min, max and standard deviation of a numeric column.")
        .param("data", ParamType::List, "rows (list of dicts)")
        .param("column", ParamType::Str, "numeric column")
        .returns("dict")
        .handler(|args| async move {
            let column = args["column"].as_str().unwrap_or_default();
            let mut xs: Vec<f64> = args["data"].as_array().into_iter().flatten().filter_map(|r| r[column].as_f64()).collect();
            if xs.is_empty() {
                return Err(format!("no numeric values in column `{column}`"));
            }
            xs.sort_by(f64::total_cmp);
            let n = xs.len() as f64;
            let mean = xs.iter().sum::<f64>() / n;
            let median = if xs.len() % 2 == 1 { xs[xs.len() / 2] } else { (xs[xs.len() / 2 - 1] + xs[xs.len() / 2]) / 2.0 };
            let std_dev = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
            Ok(json!({"count": xs.len(), "mean": mean, "median": median, "min": xs[0], "max": xs[xs.len() - 1], "std_dev": std_dev}))
        });
    let create_chart = Tool::new("create_chart", "Renders a chart as an HTML snippet.")
        .param("chart_type", ParamType::Str, "bar or line")
        .param("title", ParamType::Str, "chart title")
        .param("labels", ParamType::List, "x-axis labels")
        .param("values", ParamType::List, "one number per label")
        .returns("str")
        .handler(|args| async move {
            let labels = args["labels"].as_array().cloned().unwrap_or_default();
            let values = args["values"].as_array().cloned().unwrap_or_default();
            if labels.len() != values.len() {
                return Err(format!(
                    "{} labels but {} values",
                    labels.len(),
                    values.len()
                ));
            }
            let max = values
                .iter()
                .filter_map(Value::as_f64)
                .fold(0.0, f64::max)
                .max(1.0);
            let bars: String = labels
                .iter()
                .zip(&values)
                .map(|(l, v)| {
                    let width = (v.as_f64().unwrap_or(0.0) / max * 300.0).round();
                    format!(
                        "<div class=\"bar\" style=\"width:{width}px\">{} {}</div>",
                        l.as_str().unwrap_or("?"),
                        v
                    )
                })
                .collect();
            let kind = args["chart_type"].as_str().unwrap_or("bar");
            let title = args["title"].as_str().unwrap_or_default();
            Ok(json!(format!(
                "<figure class=\"{kind}\"><figcaption>{title}</figcaption>{bars}</figure>"
            )))
        });
    Toolset::new()
        .tool(fetch_data)
        .tool(filter_data)
        .tool(calculate_statistics)
        .tool(create_chart)
}

/// What a model writes for "analyse Q4 2024 sales": tools called like
/// functions, the final expression is the answer.
const GENERATED: &str = r#"
sales = await fetch_data("sales_2024")
q4 = await filter_data(sales, "month", "in", ["Oct", "Nov", "Dec"])
print(f"Q4 rows: {len(q4)}")

monthly = defaultdict(float)
for row in q4:
    monthly[row["month"]] += row["revenue"]
months = ["Oct", "Nov", "Dec"]
totals = [monthly[m] for m in months]
for m, t in zip(months, totals):
    print(f"{m}: {t:,.0f}")

stats, units = await gather(
    calculate_statistics(q4, "revenue"),
    calculate_statistics(q4, "units"),
)
chart = await create_chart("bar", "Q4 2024 revenue by month", months, totals)

{
    "quarter": "Q4 2024",
    "total_revenue": sum(totals),
    "best_month": months[totals.index(max(totals))],
    "revenue_stats": {k: round(v, 2) for k, v in stats.items()},
    "units_mean": round(units["mean"], 1),
    "chart_html": chart,
}
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::builder()
        .on_progress(|p| eprintln!("{p}"))
        .connect()
        .await?;
    let tools = tools();
    println!("--- system prompt for the model ---\n{}", tools.prompt());

    let host = client.code_host(CodeHostConfig::default());
    host.start().await?;
    let run = host.execute(GENERATED, Map::new(), &tools).await?;
    println!("--- printed by the code ---\n{}", run.stdout);
    println!("--- tool calls ---");
    for call in &run.tool_calls {
        println!(
            "{:<22} {:>7.2} ms  ok={}",
            call.name,
            call.duration.as_secs_f64() * 1e3,
            call.ok
        );
    }
    let v = &run.value;
    println!("--- final value ---");
    println!("total Q4 revenue: {}", v["total_revenue"]);
    println!("best month: {}", v["best_month"]);
    println!("revenue stats: {}", v["revenue_stats"]);
    println!("mean units per row: {}", v["units_mean"]);
    println!(
        "chart: {} bytes of HTML",
        v["chart_html"].as_str().map_or(0, str::len)
    );
    println!("executed in {:.1} ms", run.duration.as_secs_f64() * 1e3);
    host.close().await?;
    Ok(())
}
