//! The cards tell the truth, through the binary: the `result: "full"` record an agent call
//! returns has exactly the fields the option's schema names (the text both cards print) and the
//! guide repeats, in both dialects, for a call that succeeds and one a budget refuses.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use super::lease::{run, text};

/// The fields the `result` option's description names: the `#{...}` after `"full" returns`.
fn documented_fields(text: &str) -> BTreeSet<String> {
    let after =
        text.split("\"full\" returns #{").nth(1).unwrap_or_else(|| panic!("no full record in {text}"));
    let fields = after.split('}').next().unwrap_or_default();
    fields.split(',').map(|f| f.trim().to_owned()).filter(|f| !f.is_empty()).collect()
}

fn record_of(dir: &Path, store: &str, file: &str, budget: &str) -> Value {
    let out = run(dir, store, &["run", file, "--json", "-q", "--budget", budget]);
    let outcome: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{file}: not JSON: {}{}", text(&out.stdout), text(&out.stderr)));
    outcome["value"].clone()
}

#[test]
fn the_full_result_record_has_the_fields_the_card_names_in_both_dialects() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("dialect/agent.schema.json")).unwrap())
            .unwrap();
    let description = schema["properties"]["result"]["description"].as_str().unwrap();
    let fields = documented_fields(description);
    assert!(fields.contains("status") && fields.contains("cost_nano_usd"), "{fields:?}");
    // The guide names the same record.
    let guide = std::fs::read_to_string(root.join("docs/guide/providers.md")).unwrap().replace('\n', " ");
    let in_guide =
        guide.split("returns `#{").nth(1).and_then(|rest| rest.split('}').next()).unwrap_or_default();
    let in_guide: BTreeSet<String> = in_guide.split(',').map(|f| f.trim().to_owned()).collect();
    assert_eq!(in_guide, fields, "docs/guide/providers.md names another record than the card");

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cairn.toml"), "[providers.echo]\nkind = \"echo\"\nprice = [1.0, 2.0]\n")
        .unwrap();
    std::fs::write(dir.path().join("full.rhai"), "agent(\"hi there\", #{result: \"full\"})").unwrap();
    std::fs::write(dir.path().join("full.lua"), "return agent(\"hi there\", {result = \"full\"})").unwrap();
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    for dialect in ["rhai", "lua"] {
        let out = run(dir.path(), &store, &["card", "--dialect", dialect]);
        assert_eq!(documented_fields(&text(&out.stdout)), fields, "cairn card --dialect {dialect}");
    }
    // A paid call, then one the budget refuses before it runs.
    for budget in ["1", "0.0000001"] {
        let rhai = record_of(dir.path(), &store, "full.rhai", budget);
        let keys: BTreeSet<String> = rhai.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, fields, "rhai at budget {budget}: {rhai}");
        // Lua has no null in a table: a field the Rhai record holds as null is absent.
        let lua = record_of(dir.path(), &store, "full.lua", budget);
        let present: BTreeSet<String> =
            rhai.as_object().unwrap().iter().filter(|(_, v)| !v.is_null()).map(|(k, _)| k.clone()).collect();
        let lua_keys: BTreeSet<String> = lua.as_object().unwrap().keys().cloned().collect();
        assert_eq!(lua_keys, present, "lua at budget {budget}: {lua}");
        assert_eq!(lua["status"], rhai["status"]);
        assert_eq!(rhai["cost_usd"].as_f64(), rhai["cost_nano_usd"].as_i64().map(|n| n as f64 / 1e9));
    }
}

/// `loop-capture` has no false positive where the closure cannot outlive its iteration (a
/// `parallel` branch, a `step` body written in place): such a script passes lint and each
/// iteration's closure sees that iteration's value; a closure kept and run after the loop is
/// still refused (exit 6). Both dialects.
#[test]
fn a_closure_run_within_its_loop_iteration_is_no_loop_capture_in_both_dialects() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    let cases = [
        (
            "in_place.rhai",
            "let out = [];\nfor q in args.questions {\n    out.push(parallel([|| agent(`pro ${q}`)]));\n    \
             out.push(step(`s ${q}`, || q));\n}\nout",
        ),
        (
            "in_place.lua",
            "local out = {}\nlocal i = 0\nwhile i < #args.questions do\n  i = i + 1\n  \
             out[#out + 1] = parallel({ function() return agent(\"pro \" .. args.questions[i]) end })\n  \
             out[#out + 1] = step(\"s \" .. i, function() return args.questions[i] end)\nend\nreturn out",
        ),
    ];
    for (file, source) in cases {
        std::fs::write(dir.path().join(file), source).unwrap();
        let out = run(dir.path(), &store, &["lint", file]);
        assert_eq!(out.status.code(), Some(0), "{file}: {}{}", text(&out.stdout), text(&out.stderr));
        let out =
            run(dir.path(), &store, &["run", file, "--args", r#"{"questions": ["a", "b"]}"#, "--json", "-q"]);
        assert_eq!(out.status.code(), Some(0), "{file}: {}", text(&out.stderr));
        let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            outcome["value"],
            serde_json::json!([["echo: pro a"], "a", ["echo: pro b"], "b"]),
            "{file}: each iteration's own value"
        );
    }
    let kept = [
        (
            "kept.rhai",
            "let fs = [];\nfor q in args.questions {\n    fs.push(|| agent(`pro ${q}`));\n}\nparallel(fs)",
        ),
        (
            "kept.lua",
            "local fs = {}\nlocal i = 0\nwhile i < #args.questions do\n  i = i + 1\n  \
             fs[#fs + 1] = function() return agent(\"pro \" .. args.questions[i]) end\nend\nreturn parallel(fs)",
        ),
    ];
    for (file, source) in kept {
        std::fs::write(dir.path().join(file), source).unwrap();
        let out = run(dir.path(), &store, &["lint", file, "--json"]);
        assert_eq!(out.status.code(), Some(6), "{file}: {}", text(&out.stdout));
        assert!(text(&out.stdout).contains("loop-capture"), "{file}: {}", text(&out.stdout));
    }
}

/// What each card says about writing a line break holds, through the binary: a quoted string's
/// `\n` is a line break; a Rhai backtick string and a Lua long string keep `\n` as a backslash
/// and an `n` (lint warns, `template-escape`) and keep a real line break written inside them.
/// And no sample script sends a literal `\n`: each lints without that warning.
#[test]
fn the_cards_newline_rules_hold_in_the_runtime_and_lint_and_no_sample_breaks_them() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cairn.toml"), "[providers.echo]\nkind = \"echo\"\n").unwrap();
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    let cases = [
        ("rhai", "strings.rhai", "[\"a\\nb\", `a\\nb`, `a\nb`]", "`\\n` stays a backslash and an `n`"),
        ("lua", "strings.lua", "return {\"a\\nb\", 'a\\nb', [[a\\nb]], [[a\nb]]}", "processes no\nescape"),
    ];
    for (dialect, file, source, card_says) in cases {
        let card = text(&run(dir.path(), &store, &["card", "--dialect", dialect]).stdout);
        assert!(card.contains(card_says), "cairn card --dialect {dialect} does not say {card_says:?}");
        std::fs::write(dir.path().join(file), source).unwrap();
        let value = record_of(dir.path(), &store, file, "1");
        let values: Vec<&str> = value.as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        let (escaped, raw, broken) = match dialect {
            "rhai" => (&values[..1], values[1], values[2]),
            _ => (&values[..2], values[2], values[3]),
        };
        assert!(escaped.iter().all(|v| *v == "a\nb"), "{dialect}: a quoted \\n is a line break: {values:?}");
        assert_eq!(raw, "a\\nb", "{dialect}: the raw string keeps a backslash and an n");
        assert_eq!(broken, "a\nb", "{dialect}: a real line break inside the raw string stays");
        let out = run(dir.path(), &store, &["lint", file, "--json"]);
        assert!(
            text(&out.stdout).contains("template-escape"),
            "{dialect}: lint says nothing: {}",
            text(&out.stdout)
        );
    }
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    let mut linted = 0;
    for entry in std::fs::read_dir(&scripts).unwrap().flatten() {
        let path = entry.path();
        if !path.extension().is_some_and(|e| e == "rhai" || e == "lua") {
            continue;
        }
        let out = run(dir.path(), &store, &["lint", path.to_str().unwrap(), "--json"]);
        let found = text(&out.stdout);
        assert!(!found.contains("template-escape"), "{}: {found}", path.display());
        linted += 1;
    }
    assert!(linted >= 14, "{linted} samples");
}
