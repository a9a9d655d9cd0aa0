//! Output people and programs read, through the binary: money in every JSON output carries
//! its unit (`<name>_nano_usd` beside `<name>_usd`), and the service's answers match the
//! schemas its OpenAPI document gives them; the `runs` and `inspect` tables; the progress
//! lines of finished calls.

use serde_json::{Value, json};

use super::lease::{run, text};
use super::support::serve::start_on;

/// The names money went by before it carried its unit.
const BARE_MONEY: [&str; 6] = ["cost", "budget_ceiling", "ceiling", "spent", "remaining", "worst_case"];

/// Every bare money name holding a number anywhere in `value`, as a JSON path.
fn bare_money(value: &Value, path: &str, found: &mut Vec<String>) {
    match value {
        Value::Object(fields) => {
            for (name, field) in fields {
                let at = format!("{path}.{name}");
                if BARE_MONEY.contains(&name.as_str()) && field.is_number() {
                    found.push(at.clone());
                }
                bare_money(field, &at, found);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                bare_money(item, &format!("{path}[{i}]"), found);
            }
        }
        _ => {}
    }
}

/// Asserts `value` names no money without its unit, and that every `X_nano_usd` has its
/// `X_usd` twin holding the same amount.
pub(super) fn assert_money_has_units(what: &str, value: &Value) {
    let mut found = Vec::new();
    bare_money(value, "", &mut found);
    assert!(found.is_empty(), "{what}: money without its unit at {found:?}");
    check_pairs(what, value);
}

fn check_pairs(what: &str, value: &Value) {
    match value {
        Value::Object(fields) => {
            for (name, field) in fields {
                if let Some(stem) = name.strip_suffix("_nano_usd")
                    && let Some(nanos) = field.as_i64()
                    // A journal entry's cost is the stored record: the integer alone.
                    && !fields.contains_key("hash_version")
                {
                    let usd = fields.get(&format!("{stem}_usd")).and_then(Value::as_f64);
                    assert_eq!(usd, Some(nanos as f64 / 1e9), "{what}: {name} without its {stem}_usd twin");
                }
                check_pairs(what, field);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| check_pairs(what, item)),
        _ => {}
    }
}

fn json_of(what: &str, bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|_| panic!("{what}: not JSON: {}", text(bytes)))
}

/// A priced echo model and a run that pays one call, then waits.
fn priced_project() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cairn.toml"), "[providers.echo]\nkind = \"echo\"\nprice = [1.0, 2.0]\n")
        .unwrap();
    std::fs::write(
        dir.path().join("flow.rhai"),
        "let a = phase(\"one\", || agent(\"hello there\", #{label: \"greet\"}));\nlet b = await_external(\"ok\");\n[a, b]",
    )
    .unwrap();
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    (dir, store)
}

/// `run --json`, `resume --json`, `runs --json`, `inspect --json` and `lint --bound --json`
/// print every amount as `<name>_nano_usd` with `<name>_usd` beside it, never a bare name.
#[test]
fn money_in_the_clis_json_carries_its_unit() {
    let (dir, store) = priced_project();
    let out =
        run(dir.path(), &store, &["run", "flow.rhai", "--run-id", "m1", "--budget", "1", "--json", "-q"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let outcome = json_of("run --json", &out.stdout);
    let total = &outcome["cost"]["total"];
    assert!(total["cost_nano_usd"].as_i64().unwrap() > 0, "{outcome:#}");
    assert_money_has_units("run --json", &outcome);

    let out = run(dir.path(), &store, &["runs", "--json"]);
    let runs = json_of("runs --json", &out.stdout);
    assert_eq!(runs[0]["budget_ceiling_nano_usd"], 1_000_000_000, "{runs:#}");
    assert_eq!(runs[0]["budget_ceiling_usd"], 1.0, "{runs:#}");
    assert_money_has_units("runs --json", &runs);

    let out = run(dir.path(), &store, &["inspect", "m1", "--json"]);
    let inspected = json_of("inspect --json", &out.stdout);
    assert_eq!(inspected["meta"]["budget_ceiling_usd"], 1.0, "{inspected:#}");
    assert_eq!(inspected["segments"][0]["ceiling_nano_usd"], 1_000_000_000, "{inspected:#}");
    assert_eq!(inspected["cost"]["total"], *total, "one report, one shape");
    assert_money_has_units("inspect --json", &inspected);

    let out = run(dir.path(), &store, &["resolve", "m1", "ok", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = run(dir.path(), &store, &["resume", "m1", "--json", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_money_has_units("resume --json", &json_of("resume --json", &out.stdout));

    let out = run(dir.path(), &store, &["lint", "flow.rhai", "--bound", "--json"]);
    let linted = json_of("lint --bound --json", &out.stdout);
    assert!(linted["cost_bound"]["worst_case_nano_usd"].as_i64().unwrap() > 0, "{linted:#}");
    assert_money_has_units("lint --bound --json", &linted);
}

/// Validates `instance` against the OpenAPI document's component schema `name`.
fn assert_matches_schema(document: &Value, name: &str, instance: &Value) {
    let mut schema = document.clone();
    schema["$ref"] = json!(format!("#/components/schemas/{name}"));
    let validator = jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("schema {name}: {e}"));
    let errors: Vec<String> = validator.iter_errors(instance).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{name}: {errors:?}\n{instance:#}");
}

/// The service says money the same way: a run's cost report and meta, the run listing with
/// `cost=true`, and the SSE `outcome` event; the answers match `/openapi.json`'s schemas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn money_in_the_service_carries_its_unit_and_matches_its_document() {
    let (dir, store) = priced_project();
    let source = std::fs::read_to_string(dir.path().join("flow.rhai")).unwrap();
    let server = start_on(dir, store, Some("tok"), &[]).await;
    let (code, body) = server.submit(json!({ "source": source, "budget_usd": 0.5 })).await;
    assert_eq!(code, 202, "{body}");
    let run_id = body["run_id"].as_str().unwrap().to_owned();
    let shown = server.wait_for(&run_id, "suspended").await;
    let (code, document) = server.get("/openapi.json").await;
    assert_eq!(code, 200);
    assert_eq!(shown["meta"]["budget_ceiling_nano_usd"], 500_000_000, "{shown:#}");
    assert!(shown["cost"]["total"]["cost_nano_usd"].as_i64().unwrap() > 0, "{shown:#}");
    assert_money_has_units("GET /v1/runs/{id}", &shown);
    assert_matches_schema(&document, "RunMeta", &shown["meta"]);
    assert_matches_schema(&document, "CostReport", &shown["cost"]);
    // The document's schemas do refuse a line in the old shape.
    let mut schema = document.clone();
    schema["$ref"] = json!("#/components/schemas/CostLine");
    let old_line = json!({"cost": 13000, "usage": {}, "entries": 1});
    assert!(!jsonschema::validator_for(&schema).unwrap().is_valid(&old_line));

    let (code, listed) = server.get("/v1/runs?cost=true").await;
    assert_eq!(code, 200, "{listed}");
    assert_eq!(listed["runs"][0]["cost_nano_usd"], shown["cost"]["total"]["cost_nano_usd"], "{listed:#}");
    assert_money_has_units("GET /v1/runs?cost=true", &listed);
    assert_matches_schema(&document, "RunMeta", &listed["runs"][0]);

    let (code, _) = server.post(&format!("/v1/runs/{run_id}/resolve/ok"), json!(true)).await;
    assert_eq!(code, 200);
    let events = server.events(&run_id, None, None).await;
    let (name, _, outcome) = events.last().unwrap();
    assert_eq!(name, "outcome", "{events:?}");
    assert_money_has_units("SSE outcome", outcome);
    assert_matches_schema(&document, "CostReport", &outcome["cost"]);
    for (_, _, data) in &events {
        assert_money_has_units("SSE event", data);
    }
}

/// Polls `cairn inspect --json` until the run has dispatched an agent call.
fn wait_for_a_dispatched_agent(dir: &std::path::Path, store: &str, run_id: &str) {
    let started = std::time::Instant::now();
    loop {
        let out = run(dir, store, &["inspect", run_id, "--json"]);
        if out.status.success() {
            let report = json_of("inspect --json", &out.stdout);
            let entries = report["entries"].as_array().cloned().unwrap_or_default();
            if entries.iter().any(|e| e["kind"] == "agent" && e["status"] == "running") {
                return;
            }
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the driver never dispatched its call"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `cairn runs` prints a header and, per run, its id, status, name, start time, cost and
/// segments, every cell escaped; a `running` run whose driver was killed (no live lease, its
/// process gone) is `stalled`, told apart from one a live driver holds (`runs --json`:
/// `driver` `gone` or `live`). On the SQLite and the JSONL store.
#[test]
fn runs_lists_a_table_and_tells_a_dead_driver_from_a_live_one() {
    for store_kind in ["sqlite", "jsonl"] {
        let dir = tempfile::tempdir().unwrap();
        let store = match store_kind {
            "sqlite" => format!("sqlite:{}", dir.path().join("c.db").display()),
            _ => format!("jsonl:{}", dir.path().join("runs").display()),
        };
        // Priced and fast for the finished run; the slow run is killed long before its call ends.
        std::fs::write(
            dir.path().join("cairn.toml"),
            "[providers.echo]\nkind = \"echo\"\nprice = [1.0, 2.0]\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("evil\u{1b}[2J.rhai"), "agent(\"hello there\")").unwrap();
        let out = run(dir.path(), &store, &["run", "evil\u{1b}[2J.rhai", "--run-id", "done", "-q"]);
        assert_eq!(out.status.code(), Some(0), "{store_kind}: {}", text(&out.stderr));

        let slow = dir.path().join("slow");
        std::fs::create_dir(&slow).unwrap();
        std::fs::write(slow.join("cairn.toml"), "[providers.echo]\nkind = \"echo\"\nlatency_ms = 120000\n")
            .unwrap();
        std::fs::write(slow.join("slow.rhai"), "agent(\"wait for it\")").unwrap();
        let mut driver = super::lease::cairn(&slow, &store)
            .args(["run", "slow.rhai", "--run-id", "live", "-q"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        wait_for_a_dispatched_agent(dir.path(), &store, "live");

        let listed = |what: &str| {
            let out = run(dir.path(), &store, &["runs"]);
            assert_eq!(out.status.code(), Some(0), "{store_kind} {what}: {}", text(&out.stderr));
            let table = text(&out.stdout);
            let json = json_of("runs --json", &run(dir.path(), &store, &["runs", "--json"]).stdout);
            (table, json)
        };
        let (table, json) = listed("while driven");
        let mut lines = table.lines();
        let header = lines.next().unwrap_or_default();
        for column in ["RUN", "STATUS", "NAME", "STARTED (UTC)", "COST", "SEGMENTS"] {
            assert!(header.contains(column), "{store_kind}: no {column} column: {table}");
        }
        let done = row_of(&table, "done ");
        assert!(done.contains(" ok ") && done.contains("$0.000013"), "{store_kind}: {table}");
        assert!(
            done.contains("evil\\u{1b}[2J") && !table.contains('\u{1b}'),
            "{store_kind}: escaped: {table:?}"
        );
        assert!(done.contains(" 20") && done.contains(':'), "{store_kind}: a start time: {table}");
        assert!(row_of(&table, "live ").contains(" running "), "{store_kind}: {table}");
        let live = json.as_array().unwrap().iter().find(|r| r["run_id"] == "live").unwrap().clone();
        assert_eq!(live["driver"], "live", "{store_kind}: {json:#}");

        driver.kill().unwrap(); // SIGKILL: the run stays `running`, its lease never released
        driver.wait().unwrap();
        let (table, json) = listed("after the kill");
        assert!(row_of(&table, "live ").contains(" stalled "), "{store_kind}: {table}");
        assert!(table.contains("cairn resume RUN"), "{store_kind}: the note says what to do: {table}");
        let live = json.as_array().unwrap().iter().find(|r| r["run_id"] == "live").unwrap().clone();
        assert_eq!((&live["status"], &live["driver"]), (&json!("running"), &json!("gone")), "{store_kind}");
        let done = json.as_array().unwrap().iter().find(|r| r["run_id"] == "done").unwrap().clone();
        assert_eq!(done["cost_nano_usd"], 13_000, "{store_kind}: {done:#}");
        assert!(done.get("driver").is_none(), "{store_kind}: only a running run has a driver");
    }
}

fn row_of(table: &str, start: &str) -> String {
    table.lines().find(|l| l.starts_with(start)).map(str::to_owned).unwrap_or_default()
}

/// `cairn inspect RUN` (no `--json`) shows a table of its calls: seq, kind, label, model,
/// status, tokens, cost and time, a labelled agent call, the calls a step and a fan-out made,
/// and a resolved wait, every cell escaped. Both dialects.
#[test]
fn inspect_shows_a_table_of_calls_in_both_dialects() {
    let cases = [
        (
            "flow.rhai",
            "let a = agent(\"hello there\", #{label: \"greet\"});\n\
             let s = step(\"gather\", || parallel([|| agent(\"x\"), || agent(\"y\", #{label: \"why\\u001b[2J\"})]));\n\
             let b = await_external(\"ok\");\n[a, s, b]",
        ),
        (
            "flow.lua",
            "local a = agent(\"hello there\", {label = \"greet\"})\n\
             local s = step(\"gather\", function() return parallel({function() return agent(\"x\") end, \
             function() return agent(\"y\", {label = \"why\\27[2J\"}) end}) end)\n\
             local b = await_external(\"ok\")\nreturn {a, s, b}",
        ),
    ];
    for (file, script) in cases {
        let (dir, store) = priced_project();
        std::fs::write(dir.path().join(file), script).unwrap();
        let out = run(dir.path(), &store, &["run", file, "--run-id", "t", "-q"]);
        assert_eq!(out.status.code(), Some(4), "{file}: {}", text(&out.stderr));
        let out = run(dir.path(), &store, &["inspect", "t"]);
        let shown = text(&out.stdout);
        let waiting = row_with(&shown, " external ");
        assert!(waiting.contains(" ok ") && waiting.contains(" waiting "), "{file}: {shown}");
        assert!(run(dir.path(), &store, &["resolve", "t", "ok", "1"]).status.success());
        assert!(run(dir.path(), &store, &["resume", "t", "-q"]).status.success());

        let out = run(dir.path(), &store, &["inspect", "t"]);
        assert_eq!(out.status.code(), Some(0), "{file}: {}", text(&out.stderr));
        let shown = text(&out.stdout);
        let header = row_with(&shown, "SEQ");
        let columns = ["SEQ", "KIND", "LABEL", "MODEL", "STATUS", "TOKENS", "COST", "TIME"];
        let mut at = 0;
        for column in columns {
            let found = header[at..].find(column).unwrap_or_else(|| panic!("{file}: no {column}: {shown}"));
            at += found + column.len();
        }
        // 3 input and 5 output tokens at $1/M and $2/M.
        let greet = row_with(&shown, " greet ");
        for cell in ["agent", "echo:default", " ok ", " 8 ", "$0.000013"] {
            assert!(greet.contains(cell), "{file}: {cell:?} missing from {greet:?}");
        }
        assert!(row_with(&shown, " gather ").contains(" step "), "{file}: {shown}");
        assert!(row_with(&shown, "why\\u{1b}[2J").contains("agent"), "{file}: escaped: {shown:?}");
        assert!(!shown.contains('\u{1b}'), "{file}: a raw escape reached the terminal");
        assert!(row_with(&shown, " external ").contains(" resolved "), "{file}: {shown}");
        let agents = shown.lines().filter(|l| l.contains(" agent  ") && l.contains("echo:default")).count();
        assert_eq!(agents, 3, "{file}: one row per agent call: {shown}");
    }
}

/// The first line of the call table (from its header to the blank line after it) that
/// contains `needle`.
fn row_with(shown: &str, needle: &str) -> String {
    shown
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("SEQ"))
        .take_while(|l| !l.is_empty())
        .find(|l| l.contains(needle))
        .map(str::to_owned)
        .unwrap_or_default()
}

/// The progress lines of finished agent calls name their label.
#[test]
fn finished_call_lines_in_the_progress_name_their_label() {
    let (dir, store) = priced_project();
    std::fs::write(dir.path().join("two.rhai"), "[agent(\"hi\", #{label: \"greet\"}), agent(\"bye\")]")
        .unwrap();
    let out = run(dir.path(), &store, &["run", "two.rhai", "--run-id", "p"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let progress = text(&out.stderr);
    assert!(progress.contains("+ agent greet ok:"), "{progress}");
    assert!(progress.contains("+ agent ok:"), "an unlabelled call: {progress}");
    let out = run(dir.path(), &store, &["resume", "p"]);
    assert!(text(&out.stderr).contains("= agent greet replayed:"), "{}", text(&out.stderr));
}
