//! A ceiling raised on resume: `cairn resume --budget` and `{"budget_usd": X}` on the service's
//! resume route, validated, refused below the settled spend with nothing written, journaled as
//! a `run_budget_override` decision, applied from a new segment, shown by `cairn inspect`.

use std::path::Path;

use serde_json::{Value, json};

use super::lease::{run, text};
use super::support::serve::{serve_in, wait_status};

/// Echo at $0.001 a token: each round costs $0.01 and reserves $0.02.
const PRICED_ECHO: &str = "[providers.echo]\nkind = \"echo\"\nlatency_ms = 1\nprice = [1000, 1000]\n";

const LOOP_RHAI: &str = "let notes = [];\nfor round in 0..3 {\n    \
    notes.push(agent(`Review ${round} please`, #{max_output_tokens: 16, label: `round ${round}`}));\n}\nnotes\n";
const LOOP_LUA: &str = "local notes = {}\nfor round = 0, 2 do\n  \
    notes[#notes + 1] = agent(\"Review \" .. round .. \" please\", { max_output_tokens = 16, label = \"round \" .. round })\n\
    end\nreturn notes\n";

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cairn.toml"), PRICED_ECHO).unwrap();
    std::fs::write(dir.path().join("loop.rhai"), LOOP_RHAI).unwrap();
    std::fs::write(dir.path().join("loop.lua"), LOOP_LUA).unwrap();
    dir
}

fn sqlite(dir: &Path) -> String {
    format!("sqlite:{}", dir.join("c.db").display())
}

fn inspect(dir: &Path, store: &str, id: &str) -> Value {
    let out = run(dir, store, &["inspect", id, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn overrides(report: &Value) -> Vec<Value> {
    report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "decision" && e["value"]["type"] == "run_budget_override")
        .map(|e| e["value"].clone())
        .collect()
}

#[test]
fn a_resume_raises_the_ceiling_once_and_refuses_below_the_spend() {
    let dir = project();
    let root = dir.path();
    let store = sqlite(root);
    for (script, id) in [("loop.rhai", "raise-rhai"), ("loop.lua", "raise-lua")] {
        let out = run(root, &store, &["run", script, "--budget", "0.02", "--run-id", id, "-q"]);
        assert_eq!(out.status.code(), Some(3), "{script} ends exhausted: {}", text(&out.stderr));
        let before = inspect(root, &store, id);
        assert_eq!(before["meta"]["budget_ceiling_nano_usd"], 20_000_000);
        // Below the settled spend ($0.01): refused typed, exit 2, nothing written.
        for bad in ["0.005", "-1", "NaN"] {
            let out = run(root, &store, &["resume", id, "--budget", bad, "-q"]);
            assert_eq!(out.status.code(), Some(2), "{bad}: {}", text(&out.stderr));
            let after = inspect(root, &store, id);
            assert_eq!(after["entries"], before["entries"], "{bad}: nothing is written");
            assert_eq!(after["meta"], before["meta"], "{bad}: nothing is written");
        }
        assert!(
            text(&run(root, &store, &["resume", id, "--budget", "0.005", "-q"]).stderr)
                .contains("already spent"),
            "the refusal names the spend"
        );
        // A bare resume keeps the recorded ceiling: still exhausted, no override journaled.
        let out = run(root, &store, &["resume", id, "-q"]);
        assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
        let bare = inspect(root, &store, id);
        assert!(overrides(&bare).is_empty());
        assert_eq!(bare["meta"]["budget_ceiling_nano_usd"], 20_000_000);
        // Raised once: the run finishes, paying only the rounds it had not paid.
        let out = run(root, &store, &["resume", id, "--budget", "0.5", "--json", "-q"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            outcome["value"],
            json!(["echo: Review 0 please", "echo: Review 1 please", "echo: Review 2 please"])
        );
        let report = inspect(root, &store, id);
        assert_eq!(
            overrides(&report),
            [json!({"type": "run_budget_override", "segment": 2, "recorded_nano_usd": 20_000_000,
                    "applied_nano_usd": 500_000_000, "spent_nano_usd": 10_000_000})]
        );
        let paid = report["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "agent" && e["status"] == "ok");
        assert_eq!(paid.count(), 3, "round 0 was paid once");
        assert_eq!(report["cost"]["total"]["cost_nano_usd"], 30_000_000);
        let ceilings: Vec<(Value, Value)> = report["segments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["ceiling_usd"].clone(), s["overridden"].clone()))
            .collect();
        assert_eq!(
            ceilings,
            [(json!(0.02), json!(false)), (json!(0.02), json!(false)), (json!(0.5), json!(true))]
        );
        let shown = text(&run(root, &store, &["inspect", id]).stdout);
        assert!(shown.contains("ceiling $0.50 (raised on resume)"), "{shown}");
        // The decision never matches a call: a strict replay passes with nothing live.
        let out = run(root, &store, &["replay", id]);
        assert_eq!(out.status.code(), Some(0), "{} {}", text(&out.stdout), text(&out.stderr));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_service_raises_a_ceiling_on_resume_within_its_maximum() {
    let dir = project();
    let root = dir.path();
    let store = sqlite(root);
    let server = serve_in(root, &store, &["--max-budget", "1"]).await;
    let client = reqwest::Client::new();
    for (dialect, source) in [("rhai", LOOP_RHAI), ("lua", LOOP_LUA)] {
        let id = format!("svc-{dialect}");
        let submitted = client
            .post(format!("{}/v1/runs", server.base))
            .json(&json!({"source": source, "dialect": dialect, "budget_usd": 0.02, "run_id": id}))
            .send()
            .await
            .unwrap();
        assert_eq!(submitted.status().as_u16(), 202, "{}", submitted.text().await.unwrap());
        wait_status(&server.base, &id, "exhausted").await;
        let resume = |body: Value| {
            let client = client.clone();
            let url = format!("{}/v1/runs/{id}/resume", server.base);
            async move {
                let r = client.post(url).json(&body).send().await.unwrap();
                (r.status().as_u16(), r.json::<Value>().await.unwrap_or(Value::Null))
            }
        };
        // Above the server's maximum, below the spend, or malformed: refused, nothing written.
        let before = inspect(root, &store, &id);
        for body in [
            json!({"budget_usd": 5}),
            json!({"budget_usd": 0.005}),
            json!({"budget_usd": "x"}),
            json!({"ceiling": 1}),
        ] {
            let (code, error) = resume(body.clone()).await;
            assert_eq!(code, 400, "{body}: {error}");
            assert_eq!(inspect(root, &store, &id)["entries"], before["entries"], "{body}");
        }
        let (code, body) = resume(json!({"budget_usd": 0.5})).await;
        assert_eq!(code, 202, "{body}");
        let done = wait_status(&server.base, &id, "ok").await;
        assert_eq!(done["cost"]["total"]["cost_nano_usd"], 30_000_000, "each round paid once: {done}");
        let report = inspect(root, &store, &id);
        let raised = overrides(&report);
        assert_eq!(raised.len(), 1, "{raised:?}");
        assert_eq!(raised[0]["applied_nano_usd"], 500_000_000);
        assert_eq!(raised[0]["spent_nano_usd"], 10_000_000);
        assert!(report["meta"].get("budget_override_usd").is_none(), "the pending ceiling is cleared");
    }
}

#[test]
fn the_review_loop_sample_raises_its_ceiling_once_in_both_dialects() {
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/review_raise");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for file in ["cairn.toml", "review_loop.rhai", "review_loop.lua"] {
        std::fs::copy(samples.join(file), root.join(file)).unwrap();
    }
    let store = sqlite(root);
    for (file, id) in [("review_loop.rhai", "review-rhai"), ("review_loop.lua", "review-lua")] {
        let out = run(root, &store, &["run", file, "--budget", "0.04", "--run-id", id, "-q"]);
        assert_eq!(out.status.code(), Some(3), "{file}: {}", text(&out.stderr));
        let out = run(root, &store, &["resume", id, "--budget", "0.10", "--json", "-q"]);
        assert_eq!(out.status.code(), Some(0), "{file}: {}", text(&out.stderr));
        let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(outcome["value"].as_array().map(Vec::len), Some(3), "{file}: {outcome}");
        let report = inspect(root, &store, id);
        assert_eq!(overrides(&report).len(), 1, "{file}");
        assert_eq!(report["cost"]["total"]["cost_nano_usd"], 75_000_000, "{file}: each round paid once");
    }
}
