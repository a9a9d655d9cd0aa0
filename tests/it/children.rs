//! Child workflows from files: `[workflows]` in `cairn.toml` and the `workflows/` folder beside
//! it, called from either dialect, stored with the run (a replay needs no files), known to lint
//! and the planner's card, under a configurable nesting limit: all through the binary.

use std::path::Path;

use serde_json::Value;

use super::lease::{entries, run, text};

fn sqlite(dir: &Path) -> String {
    format!("sqlite:{}", dir.join("c.db").display())
}

const ECHO: &str = "[providers.echo]\nkind = \"echo\"\nlatency_ms = 1\n";

/// A project: `research` named in `[workflows]` (Lua, in `kids/`), `draft` in `workflows/`
/// (Rhai), and the two parents.
fn project(extra_config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(
        root.join("cairn.toml"),
        format!("{extra_config}{ECHO}\n[workflows]\nresearch = \"kids/research.lua\"\n"),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("kids")).unwrap();
    std::fs::create_dir_all(root.join("workflows")).unwrap();
    std::fs::write(
        root.join("kids/research.lua"),
        "-- Lists the facts about a topic.\nreturn agent(\"facts about \" .. args.topic)\n",
    )
    .unwrap();
    std::fs::write(
        root.join("workflows/draft.rhai"),
        "// Drafts a report from notes.\nagent(\"draft from \" + args.notes)\n",
    )
    .unwrap();
    std::fs::write(
        root.join("parent.rhai"),
        "let r = workflow(\"research\", #{topic: \"tides\"});\n\
         let d = workflow(\"draft\", #{notes: r});\n#{research: r, draft: d}\n",
    )
    .unwrap();
    std::fs::write(
        root.join("parent.lua"),
        "local r = workflow(\"research\", { topic = \"tides\" })\n\
         local d = workflow(\"draft\", { notes = r })\nreturn { research = r, draft = d }\n",
    )
    .unwrap();
    dir
}

fn outcome(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("not JSON: {} / {}", text(&out.stdout), text(&out.stderr)))
}

#[test]
fn a_rhai_parent_calls_a_lua_child_and_the_reverse_and_replays_with_no_files() {
    let dir = project("");
    let root = dir.path();
    let store = sqlite(root);
    for (parent, id) in [("parent.rhai", "from-rhai"), ("parent.lua", "from-lua")] {
        let out = run(root, &store, &["run", parent, "--run-id", id, "--json", "-q"]);
        assert_eq!(out.status.code(), Some(0), "{parent}: {}", text(&out.stderr));
        let value = &outcome(&out)["value"];
        assert_eq!(value["research"], "echo: facts about tides", "{parent}: {value}");
        assert_eq!(value["draft"], "echo: draft from echo: facts about tides", "{parent}: {value}");
        let journal = entries(root, &store, id);
        let scopes: Vec<&str> = journal.iter().filter_map(|e| e["scope"].as_str()).collect();
        assert!(scopes.iter().any(|s| s.contains("wf:research:0")), "{scopes:?}");
        assert!(scopes.iter().any(|s| s.contains("wf:draft:0")), "{scopes:?}");
    }
    // The children's sources are stored with the runs: with every file gone, the runs replay
    // with nothing live and resume to the same value.
    std::fs::remove_dir_all(root.join("kids")).unwrap();
    std::fs::remove_dir_all(root.join("workflows")).unwrap();
    std::fs::write(root.join("cairn.toml"), ECHO).unwrap();
    for id in ["from-rhai", "from-lua"] {
        let out = run(root, &store, &["replay", id]);
        assert_eq!(out.status.code(), Some(0), "{id}: {} {}", text(&out.stdout), text(&out.stderr));
        let out = run(root, &store, &["resume", id, "--json", "-q"]);
        assert_eq!(out.status.code(), Some(0), "{id}: {}", text(&out.stderr));
        let outcome = outcome(&out);
        assert_eq!(outcome["value"]["draft"], "echo: draft from echo: facts about tides");
    }
}

#[test]
fn lint_and_the_card_know_the_registered_children() {
    let dir = project("");
    let root = dir.path();
    let store = sqlite(root);
    for parent in ["parent.rhai", "parent.lua"] {
        let out = run(root, &store, &["lint", parent]);
        assert_eq!(out.status.code(), Some(0), "{parent}: {} {}", text(&out.stdout), text(&out.stderr));
    }
    std::fs::write(root.join("typo.rhai"), "workflow(\"reserch\", #{topic: \"x\"})").unwrap();
    std::fs::write(root.join("typo.lua"), "return workflow(\"reserch\", { topic = \"x\" })").unwrap();
    for typo in ["typo.rhai", "typo.lua"] {
        let out = run(root, &store, &["lint", typo, "--json"]);
        assert_eq!(out.status.code(), Some(6), "{typo}: {}", text(&out.stderr));
        let report = text(&out.stdout);
        assert!(
            report.contains("unknown-workflow") && report.contains("did you mean 'research'"),
            "{report}"
        );
    }
    let out = run(root, &store, &["card", "--profiles"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let card = text(&out.stdout);
    assert!(card.contains("research") && card.contains("Lists the facts about a topic."), "{card}");
    assert!(card.contains("draft") && card.contains("Drafts a report from notes."), "{card}");
    assert!(card.contains("\"topic\"") && card.contains("\"notes\""), "{card}");
}

#[test]
fn the_nesting_limit_is_configurable_and_capped() {
    let dir = project("max_workflow_depth = 2\n");
    let root = dir.path();
    let store = sqlite(root);
    std::fs::write(
        root.join("workflows/deep.rhai"),
        "if args.n > 0 { workflow(\"deep\", #{n: args.n - 1}) } else { \"bottom\" }",
    )
    .unwrap();
    std::fs::write(root.join("two.rhai"), "workflow(\"deep\", #{n: 1})").unwrap();
    std::fs::write(root.join("three.lua"), "return workflow(\"deep\", { n = 2 })").unwrap();
    let out = run(root, &store, &["run", "two.rhai", "--json", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(outcome(&out)["value"], "bottom");
    let out = run(root, &store, &["run", "three.lua", "--json", "-q"]);
    assert_ne!(out.status.code(), Some(0));
    let shown = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(shown.contains("depth limit 2"), "{shown}");
    // The default is 4, and past 16 the config is refused.
    for (depth, code) in [("0", 2), ("17", 2)] {
        let config = format!("max_workflow_depth = {depth}\n{ECHO}");
        std::fs::write(root.join("cairn.toml"), config).unwrap();
        let out = run(root, &store, &["run", "two.rhai", "-q"]);
        assert_eq!(out.status.code(), Some(code), "{depth}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("max_workflow_depth"), "{}", text(&out.stderr));
    }
    std::fs::write(root.join("cairn.toml"), ECHO).unwrap();
    std::fs::write(root.join("five.rhai"), "workflow(\"deep\", #{n: 4})").unwrap();
    let out = run(root, &store, &["run", "five.rhai", "--json", "-q"]);
    assert_ne!(out.status.code(), Some(0));
    let shown = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(shown.contains("depth limit 4"), "{shown}");
    std::fs::write(root.join("four.rhai"), "workflow(\"deep\", #{n: 3})").unwrap();
    let out = run(root, &store, &["run", "four.rhai", "--json", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn the_phase_chain_sample_runs_its_children_and_replays_without_them() {
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/phase_chain_children");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for file in ["cairn.toml", "report.rhai", "workflows/research.lua", "workflows/draft.rhai"] {
        std::fs::create_dir_all(root.join(file).parent().unwrap()).unwrap();
        std::fs::copy(samples.join(file), root.join(file)).unwrap();
    }
    let store = sqlite(root);
    let out = run(root, &store, &["run", "report.rhai", "--run-id", "chain", "--json", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let value = &outcome(&out)["value"];
    assert!(value["draft"].as_str().unwrap().starts_with("echo: Write a 500-word article"), "{value}");
    assert!(value["brief"].as_str().unwrap().contains("Research the history"), "{value}");
    let journal = entries(root, &store, "chain");
    let scopes: Vec<&str> = journal.iter().filter_map(|e| e["scope"].as_str()).collect();
    assert!(scopes.iter().any(|s| s.starts_with("at:research:0")), "{scopes:?}");
    std::fs::remove_dir_all(root.join("workflows")).unwrap();
    let out = run(root, &store, &["replay", "chain"]);
    assert_eq!(out.status.code(), Some(0), "{} {}", text(&out.stdout), text(&out.stderr));
}
