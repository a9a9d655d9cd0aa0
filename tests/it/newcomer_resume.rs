//! The two resume traps a newcomer met, through the binary: a refused `resume --script`
//! changes nothing (the stored script stays, plain resumes and replays still work), and the
//! calls an accepted re-key replaced are history, not orphans (`cairn replay` passes).

use std::path::Path;

use serde_json::Value;

use super::lease::{entries, run, text};

fn setup(script: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cairn.toml"), "[providers.echo]\nkind = \"echo\"\n").unwrap();
    std::fs::write(dir.path().join("flow.rhai"), script).unwrap();
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    (dir, store)
}

fn inspect_meta(dir: &Path, store: &str, id: &str) -> Value {
    let out = run(dir, store, &["inspect", id, "--json"]);
    let report: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("not JSON: {}", text(&out.stdout)));
    report["meta"].clone()
}

const TWO_CALLS: &str = "let a = agent(\"one\"); let b = agent(\"two\", #{label: \"second\"}); [a, b]";
const EDITED: &str = "let a = agent(\"one\"); let b = agent(\"two, edited\", #{label: \"second\"}); [a, b]";

#[test]
fn a_refused_resume_with_an_edited_script_keeps_the_stored_script() {
    let (dir, store) = setup(TWO_CALLS);
    let out = run(dir.path(), &store, &["run", "flow.rhai", "--run-id", "keep", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let before = inspect_meta(dir.path(), &store, "keep");
    std::fs::write(dir.path().join("edited.rhai"), EDITED).unwrap();

    let out = run(dir.path(), &store, &["resume", "keep", "--script", "edited.rhai", "-q"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("rekey_refused"), "{}", text(&out.stderr));

    let after = inspect_meta(dir.path(), &store, "keep");
    for field in ["source_ref", "source_hash", "previous_sources", "status"] {
        assert_eq!(after[field], before[field], "{field} changed: {after:#}");
    }
    // The run is as it was: a plain resume and a dry run replay it, and so does `cairn replay`.
    let out = run(dir.path(), &store, &["resume", "keep", "--dry-run", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = run(dir.path(), &store, &["replay", "keep"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = run(dir.path(), &store, &["resume", "keep", "--json", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["preview"]["misses"], 0, "{outcome:#}");
}

#[test]
fn calls_an_accepted_rekey_replaced_are_superseded_not_orphaned() {
    let (dir, store) = setup(TWO_CALLS);
    let out = run(dir.path(), &store, &["run", "flow.rhai", "--run-id", "acc", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    std::fs::write(dir.path().join("edited.rhai"), EDITED).unwrap();

    let out = run(
        dir.path(),
        &store,
        &["resume", "acc", "--script", "edited.rhai", "--accept-rekey", "--json", "-q"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["value"][1], "echo: two, edited", "{outcome:#}");
    assert_eq!(outcome["preview"]["orphaned"], 0, "{outcome:#}");
    assert_eq!(outcome["preview"]["superseded"], 1, "{outcome:#}");
    let journal = entries(dir.path(), &store, "acc");
    assert!(
        journal.iter().any(|e| e["kind"] == "decision" && e["value"]["type"] == "rekey_accepted"),
        "{journal:#?}"
    );

    // The deliberately edited, finished run passes the CI gate.
    let out = run(dir.path(), &store, &["replay", "acc"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("0 orphaned"), "{}", text(&out.stdout));

    // A call deleted by an edit is still an orphan: superseding is only what a re-key replaced.
    std::fs::write(dir.path().join("shorter.rhai"), "let a = agent(\"one\"); [a]").unwrap();
    let out = run(dir.path(), &store, &["resume", "acc", "--script", "shorter.rhai", "--json", "-q"]);
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["preview"]["orphaned"], 1, "{outcome:#}");
}

/// A step whose body was edited is re-keyed: a plain resume refuses it, `--accept-rekey` runs
/// the new body and journals the old step as superseded, together with everything its old body
/// journaled (a nested step and the agent calls inside), so `cairn replay` passes and a later
/// resume replays every call. Both dialects.
#[test]
fn an_accepted_rekey_of_a_step_supersedes_the_old_step_and_its_body() {
    let cases = [
        (
            "flow.rhai",
            "let a = step(\"gather\", || { let x = step(\"inner\", || agent(\"deep\")); agent(\"one \" + x) });\n\
             let b = agent(\"two\", #{label: \"second\"});\n[a, b]",
            "let a = step(\"gather\", || { let x = step(\"inner\", || agent(\"deep\")); agent(\"one, edited \" + x) });\n\
             let b = agent(\"two\", #{label: \"second\"});\n[a, b]",
        ),
        (
            "flow.lua",
            "local a = step(\"gather\", function()\n  local x = step(\"inner\", function() return agent(\"deep\") end)\n  \
             return agent(\"one \" .. x)\nend)\nlocal b = agent(\"two\", {label = \"second\"})\nreturn {a, b}",
            "local a = step(\"gather\", function()\n  local x = step(\"inner\", function() return agent(\"deep\") end)\n  \
             return agent(\"one, edited \" .. x)\nend)\nlocal b = agent(\"two\", {label = \"second\"})\nreturn {a, b}",
        ),
    ];
    for (file, script, edited) in cases {
        let (dir, store) = setup("");
        std::fs::write(dir.path().join(file), script).unwrap();
        let edited_file = format!("edited.{}", file.rsplit('.').next().unwrap_or("rhai"));
        std::fs::write(dir.path().join(&edited_file), edited).unwrap();
        let out = run(dir.path(), &store, &["run", file, "--run-id", "st", "-q"]);
        assert_eq!(out.status.code(), Some(0), "{file}: {}", text(&out.stderr));
        let old_step = entries(dir.path(), &store, "st")
            .into_iter()
            .find(|e| e["kind"] == "step" && e["label"] == "gather" && e["status"] == "running")
            .unwrap_or_else(|| panic!("{file}: no step entry"));

        let out = run(dir.path(), &store, &["resume", "st", "--script", &edited_file, "-q"]);
        assert_eq!(out.status.code(), Some(1), "{file}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("step 'gather'"), "{file}: {}", text(&out.stderr));

        let out = run(
            dir.path(),
            &store,
            &["resume", "st", "--script", &edited_file, "--accept-rekey", "--json", "-q"],
        );
        assert_eq!(out.status.code(), Some(0), "{file}: {}", text(&out.stderr));
        let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(outcome["value"][0], "echo: one, edited echo: deep", "{file}: {outcome:#}");
        assert_eq!(outcome["value"][1], "echo: two", "{file}: {outcome:#}");
        assert_eq!(outcome["preview"]["orphaned"], 0, "{file}: {outcome:#}");
        // The old step, its nested step, and the two agent calls inside them.
        assert_eq!(outcome["preview"]["superseded"], 4, "{file}: {outcome:#}");
        let journal = entries(dir.path(), &store, "st");
        let decisions: Vec<&Value> = journal
            .iter()
            .filter(|e| e["kind"] == "decision" && e["value"]["type"] == "rekey_accepted")
            .collect();
        assert_eq!(decisions.len(), 1, "{file}: {journal:#?}");
        assert_eq!(decisions[0]["value"]["supersedes"], old_step["seq"], "{file}: {journal:#?}");

        let out = run(dir.path(), &store, &["replay", "st"]);
        assert_eq!(out.status.code(), Some(0), "{file}: {}{}", text(&out.stdout), text(&out.stderr));
        assert!(text(&out.stdout).contains("0 orphaned, 4 superseded"), "{file}: {}", text(&out.stdout));
        let out = run(dir.path(), &store, &["resume", "st", "--json", "-q"]);
        assert_eq!(out.status.code(), Some(0), "{file}: {}", text(&out.stderr));
        let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(outcome["preview"]["misses"], 0, "{file}: {outcome:#}");
        assert_eq!(outcome["preview"]["orphaned"], 0, "{file}: {outcome:#}");
    }
}
