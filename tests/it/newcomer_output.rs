//! Output people and programs read, through the binary: money in every JSON output carries
//! its unit (`<name>_nano_usd` beside `<name>_usd`), and the service's answers match the
//! schemas its OpenAPI document gives them.

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
fn assert_money_has_units(what: &str, value: &Value) {
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
