//! Many tools: past a threshold, a prompt lists each tool by name and a
//! one-line summary, and two tools the code can call, `search_tools(query)`
//! and `describe_tool(name)`, give the model the rest when it needs it.

use std::sync::Arc;

use serde_json::{json, Value};

use super::tools::{ParamType, Tool};

/// Names of the discovery tools.
pub const SEARCH_TOOLS: &str = "search_tools";
/// See [`SEARCH_TOOLS`].
pub const DESCRIBE_TOOL: &str = "describe_tool";

/// What the discovery tools know of one tool.
struct Entry {
    name: String,
    summary: String,
    signature: String,
    /// Lowercase name and description, for matching.
    haystack: String,
}

/// The first sentence or line of a description, at most 100 characters.
pub(crate) fn summary(description: &str) -> String {
    let first = description.trim().lines().next().unwrap_or_default().trim();
    let sentence = match first.find(". ") {
        Some(end) => &first[..=end],
        None => first,
    };
    if sentence.chars().count() > 100 {
        let cut: String = sentence.chars().take(99).collect();
        format!("{}…", cut.trim_end())
    } else {
        sentence.to_string()
    }
}

/// `search_tools` and `describe_tool` over `tools` (leaving out a name a
/// tool of the application already has).
pub(crate) fn discovery_tools(tools: &[Tool]) -> Vec<Tool> {
    let catalog: Arc<Vec<Entry>> = Arc::new(
        tools
            .iter()
            .map(|t| Entry {
                name: t.name.clone(),
                summary: summary(&t.description),
                signature: t.python_signature(),
                haystack: format!("{} {}", t.name.replace('_', " "), t.description).to_lowercase(),
            })
            .collect(),
    );
    let taken = |name: &str| tools.iter().any(|t| t.name == name);
    let mut found = Vec::new();
    if !taken(SEARCH_TOOLS) {
        let catalog = catalog.clone();
        found.push(
            Tool::new(
                SEARCH_TOOLS,
                "Finds tools by what they do. Returns up to `limit` matches, best first, \
                 each a dict with `name`, `summary` and `signature` (with its docstring).",
            )
            .param("query", ParamType::Str, "words describing what you need")
            .optional_param("limit", ParamType::Int, "how many (default 5)")
            .returns("list[dict[str, str]]")
            .handler(move |args| {
                let query = args["query"].as_str().unwrap_or_default().to_string();
                let limit = args.get("limit").and_then(Value::as_u64).unwrap_or(5);
                let found = search(&catalog, &query, limit.clamp(1, 50) as usize);
                async move { Ok(found) }
            }),
        );
    }
    if !taken(DESCRIBE_TOOL) {
        found.push(
            Tool::new(
                DESCRIBE_TOOL,
                "The full signature and docstring of a tool, by name.",
            )
            .param("name", ParamType::Str, "the tool's name")
            .returns("str")
            .handler(move |args| {
                let name = args["name"].as_str().unwrap_or_default().to_string();
                let described = describe(&catalog, &name);
                async move { described }
            }),
        );
    }
    found
}

/// Tools matching the query's words, best first: a word in the name counts
/// three times one in the description.
fn search(catalog: &[Entry], query: &str, limit: usize) -> Value {
    let words: Vec<String> = query
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 1)
        .map(String::from)
        .collect();
    let mut scored: Vec<(usize, &Entry)> = catalog
        .iter()
        .map(|e| {
            let score = words
                .iter()
                .map(|w| {
                    let in_name = e.name.to_lowercase().contains(w.as_str());
                    3 * usize::from(in_name) + e.haystack.matches(w.as_str()).count().min(3)
                })
                .sum();
            (score, e)
        })
        .filter(|(score, _)| *score > 0)
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    Value::Array(
        scored
            .into_iter()
            .take(limit)
            .map(|(_, e)| json!({"name": e.name, "summary": e.summary, "signature": e.signature}))
            .collect(),
    )
}

fn describe(catalog: &[Entry], name: &str) -> Result<Value, String> {
    if let Some(e) = catalog.iter().find(|e| e.name == name) {
        return Ok(json!(e.signature));
    }
    let closest = catalog
        .iter()
        .map(|e| (strsim::jaro_winkler(&e.name, name), &e.name))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .filter(|(score, _)| *score > 0.8);
    Err(match closest {
        Some((_, near)) => format!("there is no tool named `{name}`; did you mean `{near}`?"),
        None => format!("there is no tool named `{name}`; search_tools(query) finds tools"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codemode::Toolset;

    /// 100 tools with three parameters each and two-sentence descriptions.
    fn hundred() -> Toolset {
        let mut tools = Toolset::new();
        for i in 0..100 {
            let topic = ["invoice", "customer", "shipment", "ticket", "report"][i % 5];
            tools = tools.tool(
                Tool::new(
                    format!("{topic}_op_{i}"),
                    format!(
                        "Operation {i} on a {topic}. Reads the {topic} by id, applies the change \
                         and returns the updated record with its history."
                    ),
                )
                .param("id", ParamType::Str, format!("the {topic}'s id"))
                .param("amount", ParamType::Float, "how much")
                .optional_param("note", ParamType::Str, "why, for the audit log"),
            );
        }
        tools
    }

    #[test]
    fn past_the_threshold_the_prompt_lists_summaries_and_offers_discovery() {
        let tools = hundred();
        let full = tools.clone().full_listing_up_to(usize::MAX).prompt();
        let compact = tools.prompt();
        assert!(full.contains("def invoice_op_0("));
        assert!(!compact.contains("def invoice_op_0("));
        assert!(compact.contains("invoice_op_0: Operation 0 on a invoice."));
        assert!(compact.contains("def search_tools(query: str"));
        assert!(compact.contains("def describe_tool(name: str)"));
        // The figures the docs quote (bytes; about four per token).
        println!(
            "100 tools: full {} bytes, compact {} bytes",
            full.len(),
            compact.len()
        );
        assert!(
            compact.len() * 2 < full.len(),
            "{} vs {}",
            compact.len(),
            full.len()
        );
        assert!(tools.names().contains(&SEARCH_TOOLS.to_string()));
        assert!(tools.stubs().contains("async def describe_tool("));
        // Under the threshold nothing changes.
        let few = Toolset::new().tool(Tool::new("one", "One."));
        assert!(few.prompt().contains("def one()"));
        assert!(!few.prompt().contains("search_tools"));
        assert_eq!(few.names(), ["one"]);
    }

    #[tokio::test]
    async fn search_and_describe_answer_from_the_catalog() {
        let tools = hundred();
        let search = tools.get(SEARCH_TOOLS).unwrap();
        let args = search
            .bind(&[json!("shipment 42")], &serde_json::Map::new())
            .unwrap();
        let super::super::tools::ToolKind::Handler(h) = &search.kind else {
            panic!()
        };
        let found = h(args).await.unwrap();
        let names: Vec<&str> = found
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        assert_eq!(names[0], "shipment_op_42");
        assert!(names.iter().all(|n| n.starts_with("shipment")), "{names:?}");
        assert_eq!(names.len(), 5);
        let describe = tools.get(DESCRIBE_TOOL).unwrap();
        let super::super::tools::ToolKind::Handler(h) = &describe.kind else {
            panic!()
        };
        let mut named = serde_json::Map::new();
        named.insert("name".into(), json!("ticket_op_3"));
        let text = h(named).await.unwrap();
        assert!(text
            .as_str()
            .unwrap()
            .starts_with("def ticket_op_3(id: str, amount: float"));
        let mut named = serde_json::Map::new();
        named.insert("name".into(), json!("ticket_op_3x"));
        let err = h(named).await.unwrap_err();
        assert!(err.contains("did you mean `ticket_op_3`"), "{err}");
    }

    #[test]
    fn summaries_are_one_short_sentence() {
        assert_eq!(summary("Adds. Then more."), "Adds.");
        assert_eq!(summary("  Line one\nline two"), "Line one");
        assert_eq!(summary(&"x".repeat(300)).chars().count(), 100);
    }
}
