//! A child workflow declares its args (`@args` in its leading comment) and lint holds every
//! literal `workflow(NAME, args)` call to it in both dialects and both directions (a Rhai
//! parent calling a Lua child and the reverse): a missing required arg, an unknown one and a
//! literal of the wrong type are `workflow-args` errors naming what to write; `cairn run`
//! refuses such a script before any effect; the card lists each child's args. All through
//! the binary.

use std::path::Path;

use serde_json::Value;

use super::lease::{run, text};

const CONFIG: &str =
    "[providers.echo]\nkind = \"echo\"\nlatency_ms = 1\n\n[workflows]\nresearch = \"kids/research.lua\"\n";

/// A project whose two children declare their args: `research` (Lua) takes a string topic and
/// an optional integer depth, `draft` (Rhai) a string of notes.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("cairn.toml"), CONFIG).unwrap();
    std::fs::create_dir_all(root.join("kids")).unwrap();
    std::fs::create_dir_all(root.join("workflows")).unwrap();
    std::fs::write(
        root.join("kids/research.lua"),
        "-- Lists the facts about a topic.\n-- @args topic: string, depth?: integer\n\
         return agent(\"facts about \" .. args.topic)\n",
    )
    .unwrap();
    std::fs::write(
        root.join("workflows/draft.rhai"),
        "// Drafts a report from notes.\n// @args notes: string\nagent(\"draft from \" + args.notes)\n",
    )
    .unwrap();
    dir
}

fn sqlite(dir: &Path) -> String {
    format!("sqlite:{}", dir.join("c.db").display())
}

/// The `workflow-args` diagnostics of `cairn lint --json FILE`, which must reject it.
fn rejected(root: &Path, file: &str) -> Vec<Value> {
    let out = run(root, &sqlite(root), &["lint", file, "--json"]);
    assert_eq!(out.status.code(), Some(6), "{file}: {} {}", text(&out.stdout), text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{file}: not JSON: {}", text(&out.stdout)));
    let diagnostics =
        report.as_array().or_else(|| report["diagnostics"].as_array()).cloned().unwrap_or_default();
    diagnostics.into_iter().filter(|d| d["rule_id"] == "workflow-args").collect()
}

fn messages(diagnostics: &[Value]) -> Vec<String> {
    diagnostics.iter().map(|d| d["message"].as_str().unwrap_or_default().to_owned()).collect()
}

#[test]
fn lint_holds_each_call_to_the_childs_declared_args_in_both_directions() {
    let dir = project();
    let root = dir.path();
    // A Rhai parent calling the Lua child, and a Lua parent calling the Rhai child.
    let cases = [
        (
            "missing.rhai",
            "workflow(\"research\", #{depth: 2})",
            "requires arg 'topic' (a string); add topic: ...",
        ),
        ("missing.lua", "return workflow(\"draft\", {})", "requires arg 'notes' (a string); add notes = ..."),
        (
            "unknown.rhai",
            "workflow(\"research\", #{topic: \"x\", dpth: 2})",
            "takes no arg 'dpth' (did you mean 'depth'?)",
        ),
        ("unknown.lua", "return workflow(\"draft\", { notes = \"n\", extra = 1 })", "takes no arg 'extra'"),
        (
            "type.rhai",
            "workflow(\"research\", #{topic: 7})",
            "arg 'topic' of workflow 'research' must be a string, got an integer",
        ),
        (
            "type.lua",
            "return workflow(\"research\", { topic = \"x\", depth = \"deep\" })",
            "arg 'depth' of workflow 'research' must be an integer, got a string",
        ),
    ];
    for (file, source, expected) in cases {
        std::fs::write(root.join(file), source).unwrap();
        let found = rejected(root, file);
        let said = messages(&found);
        assert_eq!(found.len(), 1, "{file}: {said:?}");
        assert!(said[0].contains(expected), "{file}: {said:?}");
        // The hint names everything the child takes, so a planner can write the call whole.
        let takes = if source.contains("research") {
            "it takes depth?: integer, topic: string"
        } else {
            "it takes notes: string"
        };
        assert!(said[0].contains(takes), "{file}: {said:?}");
        assert!(found[0]["line"].as_u64().is_some() && found[0]["column"].as_u64().is_some(), "{found:?}");
    }
    // Calls that meet the declarations pass, in both dialects.
    std::fs::write(
        root.join("good.rhai"),
        "let r = workflow(\"research\", #{topic: \"tides\", depth: 1});\nworkflow(\"draft\", #{notes: r})",
    )
    .unwrap();
    std::fs::write(
        root.join("good.lua"),
        "local r = workflow(\"research\", { topic = \"tides\" })\nreturn workflow(\"draft\", { notes = r })",
    )
    .unwrap();
    for good in ["good.rhai", "good.lua"] {
        let out = run(root, &sqlite(root), &["lint", good, "--json"]);
        assert_eq!(out.status.code(), Some(0), "{good}: {}", text(&out.stdout));
    }
}

#[test]
fn run_refuses_a_call_that_breaks_a_declaration_before_any_effect() {
    let dir = project();
    let root = dir.path();
    let store = sqlite(root);
    std::fs::write(root.join("bad.rhai"), "let a = agent(\"paid\");\nworkflow(\"research\", #{subject: a})")
        .unwrap();
    std::fs::write(
        root.join("bad.lua"),
        "local a = agent(\"paid\")\nreturn workflow(\"draft\", { note = a })",
    )
    .unwrap();
    for (file, id) in [("bad.rhai", "bad-rhai"), ("bad.lua", "bad-lua")] {
        let out = run(root, &store, &["run", file, "--run-id", id, "--json", "-q"]);
        assert_eq!(out.status.code(), Some(6), "{file}: {} {}", text(&out.stdout), text(&out.stderr));
        let shown = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(shown.contains("workflow-args"), "{file}: {shown}");
        // Nothing ran: the store has no such run.
        let out = run(root, &store, &["inspect", id, "--json"]);
        assert_ne!(out.status.code(), Some(0), "{file}: the refused run was recorded: {}", text(&out.stdout));
    }
}

#[test]
fn the_card_lists_each_childs_declared_args_and_a_malformed_declaration_is_refused() {
    let dir = project();
    let root = dir.path();
    let store = sqlite(root);
    let out = run(root, &store, &["card", "--profiles"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let card = text(&out.stdout);
    let line =
        |name: &str| card.lines().find(|l| l.contains(&format!("- {name}:"))).unwrap_or_default().to_owned();
    let research = line("research");
    assert!(research.contains("Lists the facts about a topic."), "{card}");
    assert!(!research.contains("@args"), "{research}");
    assert!(
        research.contains(r#""topic":{"type":"string"}"#) && research.contains(r#""required":["topic"]"#),
        "{research}"
    );
    assert!(research.contains(r#""depth":{"type":"integer"}"#), "{research}");
    assert!(line("draft").contains(r#""required":["notes"]"#), "{card}");
    // A malformed declaration stops the config with what to write, naming the child.
    std::fs::write(root.join("workflows/draft.rhai"), "// @args notes: txt\nagent(args.notes)").unwrap();
    std::fs::write(root.join("ok.rhai"), "1").unwrap();
    let out = run(root, &store, &["lint", "ok.rhai"]);
    assert_eq!(out.status.code(), Some(2), "{} {}", text(&out.stdout), text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("workflows.draft") && stderr.contains("unknown type 'txt'"), "{stderr}");
}
