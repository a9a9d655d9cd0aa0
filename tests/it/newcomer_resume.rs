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
