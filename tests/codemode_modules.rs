//! Code mode as "code execution with MCP", on the real code host: tools
//! are modules the code imports (Monty's host modules), tools are values,
//! and skills the code saves are type-checked, kept by the host and
//! imported by later executions, under the limits any code has. MCP
//! servers: the reference `mcp-server-time` from PyPI and a local server
//! with 50 tools (`tests/mcp/many_tools_server.py`, on the `mcp` package).

mod common;

use common::{code_error, code_host as host_with};

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use dockhand::codemode::{
    CodeError, CodeHostConfig, CodePolicy, Listing, McpServer, ParamType, SkillStore, Tool, Toolset,
};
use serde_json::json;

fn double() -> Tool {
    Tool::new("double", "Doubles x.")
        .param("x", ParamType::Int, "")
        .returns("int")
        .handler(|a| async move { Ok(json!(a["x"].as_i64().unwrap_or(0) * 2)) })
}

fn shout() -> Tool {
    Tool::new("shout", "Upper-cases text.")
        .param("text", ParamType::Str, "")
        .returns("str")
        .handler(|a| async move { Ok(json!(a["text"].as_str().unwrap_or("").to_uppercase())) })
        .in_module("text")
}

fn native() -> Toolset {
    Toolset::new().tool(double()).tool(shout())
}

fn python() -> &'static PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| common::venv_python(&["mcp-server-time==2026.10.19"]))
}

fn time_server() -> McpServer {
    McpServer::stdio(
        "time",
        python().to_string_lossy(),
        ["-m", "mcp_server_time", "--local-timezone", "UTC"],
    )
}

fn inventory_server() -> McpServer {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/mcp/many_tools_server.py"
    );
    McpServer::stdio("inventory", python().to_string_lossy(), [script])
}

/// What the local server answers for `stock(warehouse, item)`.
fn stock(warehouse: &str, item: &str) -> i64 {
    let sum: u32 = format!("{warehouse}:{item}")
        .chars()
        .map(|c| c as u32)
        .sum();
    i64::from(sum * 7 % 1000)
}

#[tokio::test]
async fn tools_are_modules_and_values_the_code_imports() {
    let host = host_with(CodeHostConfig::new()).await;
    let code = r#"
import tools
import tools.text as t
from tools import double, text
from tools.text import shout as s
f = double
pair = await gather(t.shout("a"), double(4))
try:
    double.missing()
    attr = "no error"
except AttributeError:
    attr = "AttributeError"
try:
    from tools import nothing
    missing = "imported"
except ImportError:
    missing = "ImportError"
{"direct": double(2), "value": f(3), "alias": s("hi"), "module": t.shout("x"),
 "path": tools.text.shout("y"), "submodule": text.shout("z"),
 "mapped": [f(x) for x in [1, 2]], "eval": eval("double(5)"),
 "gathered": pair, "awaited": await t.shout("w"), "attr": attr, "missing": missing}
"#;
    let run = host.execute(code, json!({}), &native()).await.unwrap();
    assert_eq!(
        run.value,
        json!({"direct": 4, "value": 6, "alias": "HI", "module": "X", "path": "Y",
               "submodule": "Z", "mapped": [2, 4], "eval": 10, "gathered": ["A", 8],
               "awaited": "W", "attr": "AttributeError", "missing": "ImportError"})
    );
    let called: Vec<&str> = run.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        called.iter().filter(|n| **n == "shout").count(),
        6,
        "{called:?}"
    );
    assert_eq!(
        called.iter().filter(|n| **n == "double").count(),
        6,
        "{called:?}"
    );

    // A module no tool is in is missing as any module is.
    let err = code_error(
        host.execute("import tools.nope", json!({}), &native())
            .await,
    );
    assert!(
        matches!(&err, CodeError::Runtime { exception_type, .. } if exception_type.contains("ModuleNotFoundError") || exception_type.contains("ImportError")),
        "{err:?}"
    );
    // With no `tools` module offered (no tools), the import fails the same way.
    let err = code_error(
        host.execute("import tools", json!({}), &Toolset::new())
            .await,
    );
    assert!(matches!(&err, CodeError::Runtime { .. }), "{err:?}");
    host.close().await.unwrap();

    // The strict policy allows the host's modules and nothing else new.
    let strict = host_with(CodeHostConfig::new().policy(CodePolicy::Strict)).await;
    let run = strict
        .execute(
            "from tools.text import shout\nshout('q')",
            json!({}),
            &native(),
        )
        .await
        .unwrap();
    assert_eq!(run.value, json!("Q"));
    let err = code_error(strict.execute("import os", json!({}), &native()).await);
    assert!(
        matches!(&err, CodeError::Validation { rule, .. } if rule == "import"),
        "{err:?}"
    );
    strict.close().await.unwrap();

    // The type checker reads the modules' stubs.
    let checked = host_with(CodeHostConfig::new().type_check(true)).await;
    let err = code_error(
        checked
            .execute(
                "from tools.text import shout\nr = await shout(7)\nr",
                json!({}),
                &native(),
            )
            .await,
    );
    assert!(
        matches!(&err, CodeError::Validation { rule, line: 2, .. } if rule == "type"),
        "{err:?}"
    );
    let run = checked
        .execute(
            "import tools.text as t\nr = await gather(t.shout('ok'), double(1))\nr",
            json!({}),
            &native(),
        )
        .await
        .unwrap();
    assert_eq!(run.value, json!(["OK", 2]));
    checked.close().await.unwrap();
}

#[tokio::test]
async fn mcp_servers_are_discovered_as_modules_imported_and_called() {
    let mut tools = Toolset::new().listing(Listing::Modules);
    for server in [time_server(), inventory_server()] {
        for tool in server.connect().await.unwrap() {
            tools = tools.tool(tool);
        }
    }
    let prompt = tools.prompt();
    assert!(
        prompt.contains("- tools.inventory (50 tools): "),
        "{prompt}"
    );
    assert!(prompt.contains("- tools.time (2 tools): "), "{prompt}");
    assert!(
        !prompt.contains("def amsterdam_stock"),
        "signatures stay out: {prompt}"
    );
    // Beyond the language rules every prompt has, the tree is a fraction
    // of the flat listing.
    let rules = Toolset::new().listing(Listing::Full).prompt().len();
    let flat = tools.clone().listing(Listing::Full).prompt();
    assert!(
        (prompt.len() - rules) * 4 < flat.len() - rules,
        "the module tree ({} bytes) against the flat listing ({} bytes), {rules} of rules",
        prompt.len(),
        flat.len()
    );

    let host = host_with(CodeHostConfig::new()).await;
    // Discover, read one module, import from it, call.
    let code = r#"
modules = {m["path"]: len(m["tools"]) for m in list_modules()}
source = read_module("tools.inventory")
from tools.inventory import berlin_stock, berlin_reserve
import tools.time as t
now = await t.get_current_time(timezone="Etc/GMT-3")
left = await berlin_reserve(item="bolt", units=5)
{"modules": modules, "documented": "def essen_items() -> " in source,
 "stock": berlin_stock("bolt"), "left": left, "zone": now["timezone"]}
"#;
    let run = host.execute(code, json!({}), &tools).await.unwrap();
    // `tools` itself holds no tool here, so only the servers' modules are listed.
    assert_eq!(
        run.value,
        json!({"modules": {"tools.inventory": 50, "tools.time": 2}, "documented": true,
               "stock": stock("berlin", "bolt"), "left": stock("berlin", "bolt") - 5,
               "zone": "Etc/GMT-3"})
    );

    // Working code kept as a skill, used by a later execution on another host.
    let dir = tempfile::tempdir().unwrap();
    let with_skills = tools.clone().skills(SkillStore::at(dir.path()).unwrap());
    let code = r#"
from tools.inventory import berlin_stock, essen_stock

async def total_stock(item: str) -> int:
    """Units of an item in Berlin and Essen together."""
    a, b = await gather(berlin_stock(item=item), essen_stock(item=item))
    return a + b

save_skill(total_stock)
"#;
    let saved = host.execute(code, json!({}), &with_skills).await.unwrap();
    assert_eq!(saved.value, json!({"name": "total_stock", "version": 1}));
    host.close().await.unwrap();
    let later = tools.skills(SkillStore::at(dir.path()).unwrap());
    assert!(
        later.prompt().contains("- skills (1 tool): "),
        "{}",
        later.prompt()
    );
    let other = host_with(CodeHostConfig::new()).await;
    let run = other
        .execute(
            "from skills import total_stock
await total_stock('nut')",
            json!({}),
            &later,
        )
        .await
        .unwrap();
    assert_eq!(
        run.value,
        json!(stock("berlin", "nut") + stock("essen", "nut"))
    );
    other.close().await.unwrap();
}

#[tokio::test]
async fn skills_are_checked_kept_and_imported_by_later_executions() {
    let dir = tempfile::tempdir().unwrap();
    let tools = native().skills(SkillStore::at(dir.path()).unwrap());
    let host = host_with(CodeHostConfig::new()).await;
    let code = r#"
from tools.text import shout

async def loud_double(word: str, n: int) -> dict:
    """Shouts a word and doubles a number."""
    return {"word": await shout(word), "n": await double(n)}

def unused():
    return 0

first = await save_skill(loud_double)
second = save_skill(loud_double, description="Loud and doubled.")
[first, second]
"#;
    let run = host.execute(code, json!({}), &tools).await.unwrap();
    assert_eq!(
        run.value,
        json!([{"name": "loud_double", "version": 1}, {"name": "loud_double", "version": 2}])
    );
    let kept = SkillStore::at(dir.path())
        .unwrap()
        .get("loud_double")
        .unwrap()
        .unwrap();
    assert_eq!(kept.description, "Loud and doubled.");
    assert!(
        kept.source.starts_with("from tools.text import shout\n"),
        "{}",
        kept.source
    );
    assert!(!kept.source.contains("unused"), "{}", kept.source);
    assert!(kept
        .stub
        .starts_with("async def loud_double(word: str, n: int) -> dict:"));
    host.close().await.unwrap();

    // Another host, with a store opened afresh on the same directory.
    let later = native().skills(SkillStore::at(dir.path()).unwrap());
    assert!(later
        .prompt()
        .contains("async def loud_double(word: str, n: int) -> dict:"));
    assert!(later
        .module_source("skills")
        .unwrap()
        .contains("Loud and doubled."));
    let host = host_with(CodeHostConfig::new()).await;
    let code = r#"
from skills import loud_double
import skills
a = await loud_double("hi", 4)
b = skills.loud_double("yo", n=1)
[a, b]
"#;
    let run = host.execute(code, json!({}), &later).await.unwrap();
    assert_eq!(
        run.value,
        json!([{"word": "HI", "n": 8}, {"word": "YO", "n": 2}])
    );
    let called: Vec<&str> = run.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        called
            .iter()
            .filter(|n| **n == "skills.loud_double")
            .count(),
        2,
        "{called:?}"
    );
    assert_eq!(
        called.iter().filter(|n| **n == "shout").count(),
        2,
        "{called:?}"
    );

    // A skill that does not type-check is refused with the checker's
    // message, and nothing is kept.
    let err = code_error(
        host.execute(
            "async def bad(n: int) -> int:\n    return await double('ten')\nsave_skill(bad)",
            json!({}),
            &later,
        )
        .await,
    );
    let CodeError::Tool { message, line } = &err else {
        panic!("{err:?}");
    };
    assert!(message.contains("does not type-check"), "{message}");
    assert!(message.contains("double"), "{message}");
    assert_eq!(*line, 3);
    assert!(later.skill_store().unwrap().get("bad").unwrap().is_none());
    // Only a function defined at the top level is a skill.
    let run = host
        .execute(
            "try:\n    save_skill('../../etc')\n    r = 'saved'\nexcept ToolError as e:\n    r = str(e)\nr",
            json!({}),
            &later,
        )
        .await
        .unwrap();
    assert!(
        run.value.as_str().unwrap().contains("top level"),
        "{}",
        run.value
    );
    host.close().await.unwrap();
}

#[tokio::test]
async fn a_hostile_skill_is_stopped_by_the_limits_any_code_has() {
    std::env::set_var("DOCKHAND_TEST_SKILL_SECRET", "s3cr3t-value");
    let dir = tempfile::tempdir().unwrap();
    let store = SkillStore::at(dir.path()).unwrap();
    // The application's own tool, given to the execution that saves.
    let host_env = Tool::new("host_env", "A variable of the host's environment.")
        .param("name", ParamType::Str, "")
        .returns("str")
        .handler(|a| async move {
            Ok(json!(
                std::env::var(a["name"].as_str().unwrap_or("")).unwrap_or_default()
            ))
        });
    let saving = native().tool(host_env.clone()).skills(store.clone());
    let host = host_with(CodeHostConfig::new().timeout(Duration::from_secs(3))).await;
    let code = r#"
async def spin() -> int:
    n = 0
    while True:
        n += 1
    return n

async def leak() -> str:
    return await host_env("DOCKHAND_TEST_SKILL_SECRET")

[save_skill(spin), save_skill(leak)]
"#;
    let started = Instant::now();
    let run = host.execute(code, json!({}), &saving).await.unwrap();
    assert_eq!(run.value[1], json!({"name": "leak", "version": 1}));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "saving runs nothing"
    );

    // The loop is stopped by the time limit, as any code's is; the host is
    // fine afterwards.
    let using = native().skills(store.clone());
    let started = Instant::now();
    let err = code_error(
        host.execute("from skills import spin\nawait spin()", json!({}), &using)
            .await,
    );
    assert!(
        matches!(&err, CodeError::Timeout { .. })
            || matches!(&err, CodeError::Tool { message, .. } if message.contains("timeout")),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let run = host.execute("double(21)", json!({}), &using).await.unwrap();
    assert_eq!(run.value, json!(42));

    // Without the tool, the skill cannot reach the host's environment; with
    // it needing approval, a skill cannot call it either (a skill cannot
    // stop for approval).
    for tools in [
        using.clone(),
        using.clone().tool(host_env.clone().requires_approval()),
    ] {
        let run = host
            .execute(
                "from skills import leak\ntry:\n    r = await leak()\nexcept ToolError as e:\n    r = 'refused: ' + str(e)\nr",
                json!({}),
                &tools,
            )
            .await
            .unwrap();
        let text = run.value.as_str().unwrap().to_string();
        assert!(text.starts_with("refused: skill `leak` failed"), "{text}");
        assert!(text.contains("host_env"), "{text}");
        assert!(!format!("{run:?}").contains("s3cr3t-value"));
        assert!(run.suspended.is_none());
    }
    // A skill calling itself ends at the depth limit, not in a loop.
    // (Its first version does not, so the second can import it.)
    for code in [
        "async def again(n: int) -> int:\n    return n\nsave_skill(again)",
        "from skills import again as a\n\nasync def again(n: int) -> int:\n    return await a(n + 1)\n\nsave_skill(again)",
    ] {
        host.execute(code, json!({}), &using).await.unwrap();
    }
    let err = code_error(
        host.execute(
            "from skills import again\nawait again(0)",
            json!({}),
            &using,
        )
        .await,
    );
    assert!(err.to_string().contains("deep"), "{err}");
    host.close().await.unwrap();
}
