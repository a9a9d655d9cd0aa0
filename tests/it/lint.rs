//! The lint rule folders: every `lint/<rule>/bad*.rhai` must produce exactly the diagnostics in
//! its `bad*.expected.json` (one of them from the folder's rule), and every `good*.rhai` must
//! produce no error; the same for the Lua twins, `bad*.lua` against `bad*.lua.expected.json`.
//! `UPDATE_EXPECT=1 cargo test` rewrites the expected files from the output.
//!
//! The folders use the registrations in `lint/context.json`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use cairn::__internal::RULES;
use cairn::__internal::rhai::{compile, lint};
use cairn::{Diagnostic, LintContext};
use proptest::prelude::*;

fn lint_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("lint")
}

/// The registrations the folders lint against.
fn context() -> LintContext {
    let text = fs::read_to_string(lint_dir().join("context.json")).expect("lint/context.json");
    let value: serde_json::Value = serde_json::from_str(&text).expect("lint/context.json is JSON");
    let names = |key: &str| -> BTreeSet<String> {
        value[key].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_owned)).collect()
    };
    let mut ctx = LintContext::empty();
    ctx.profiles = names("profiles");
    ctx.toolsets = names("toolsets");
    ctx.host_functions = names("host_functions");
    ctx.child_workflows = names("child_workflows");
    ctx.models = Some(names("models"));
    if let Some(schemas) = value["workflow_args"].as_object() {
        ctx.workflow_args = schemas.iter().map(|(name, schema)| (name.clone(), schema.clone())).collect();
    }
    ctx
}

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> =
        fs::read_dir(dir).expect("readable dir").map(|entry| entry.expect("dir entry").path()).collect();
    entries.sort();
    entries
}

#[test]
fn every_rule_folder_matches_its_expected_diagnostics() {
    let ctx = context();
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut failures = Vec::new();
    let mut folders = BTreeSet::new();
    for dir in sorted_entries(&lint_dir()).into_iter().filter(|path| path.is_dir()) {
        let rule = dir.file_name().and_then(|name| name.to_str()).expect("utf-8 folder name").to_owned();
        let (mut bad, mut good) = (0, 0);
        let (mut lua_bad, mut lua_good) = (0, 0);
        for path in sorted_entries(&dir) {
            let file = path.file_name().and_then(|name| name.to_str()).unwrap_or_default().to_owned();
            if let Some(stem) = file.strip_suffix(".expected.json") {
                let script = if stem.ends_with(".lua") { stem.to_owned() } else { format!("{stem}.rhai") };
                if !path.with_file_name(&script).exists() {
                    failures.push(format!("{rule}/{file}: no matching {script}"));
                }
                continue;
            }
            let is_lua = file.ends_with(".lua");
            if !file.ends_with(".rhai") && !is_lua {
                failures.push(format!("{rule}/{file}: unexpected file"));
                continue;
            }
            let source = fs::read_to_string(&path).expect("readable script");
            let diagnostics =
                if is_lua { cairn::__internal::lua::lint(&source, &ctx) } else { lint(&source, &ctx) };
            let has_error = diagnostics.iter().any(Diagnostic::is_error);
            if !is_lua && compile(&source, &ctx).is_ok() == has_error {
                failures.push(format!("{rule}/{file}: compile and lint disagree on acceptance"));
            }
            if is_lua {
                if file.starts_with("bad") {
                    lua_bad += 1;
                } else if file.starts_with("good") {
                    lua_good += 1;
                }
            }
            let expected_name = if is_lua {
                format!("{file}.expected.json")
            } else {
                file.replace(".rhai", ".expected.json")
            };
            if file.starts_with("bad") {
                bad += usize::from(!is_lua);
                if !diagnostics.iter().any(|d| d.rule_id == rule) {
                    failures.push(format!("{rule}/{file}: no '{rule}' diagnostic in {diagnostics:#?}"));
                }
                let actual = serde_json::to_string_pretty(&diagnostics).expect("serializable") + "\n";
                let expected_path = path.with_file_name(&expected_name);
                if update {
                    fs::write(&expected_path, &actual).expect("writable expected file");
                } else {
                    let expected = fs::read_to_string(&expected_path).unwrap_or_default();
                    if expected != actual {
                        failures.push(format!(
                            "{rule}/{file}: diagnostics differ\nexpected: {expected}\nactual: {actual}"
                        ));
                    }
                }
            } else if file.starts_with("good") {
                good += usize::from(!is_lua);
                let errors: Vec<&Diagnostic> = diagnostics.iter().filter(|d| d.is_error()).collect();
                if !errors.is_empty() {
                    failures.push(format!("{rule}/{file}: errors in a good script: {errors:#?}"));
                }
            } else {
                failures.push(format!("{rule}/{file}: name must start with bad or good"));
            }
        }
        if bad < 2 || good < 1 {
            failures
                .push(format!("{rule}: needs at least two bad and one good script, has {bad} and {good}"));
        }
        if lua_bad < 2 || lua_good < 1 {
            failures.push(format!(
                "{rule}: needs at least two bad and one good Lua script, has {lua_bad} and {lua_good}"
            ));
        }
        folders.insert(rule);
    }
    let rules: BTreeSet<String> = RULES.iter().map(|(id, _)| (*id).to_owned()).collect();
    if folders != rules {
        failures.push(format!("rule folders {folders:?} differ from the rules {rules:?}"));
    }
    assert!(failures.is_empty(), "{} lint folder failures:\n{}", failures.len(), failures.join("\n"));
}

/// A script exercising most rules' good paths, cut up by the property tests below.
const SAMPLE: &str = include_str!("../../lint/parallel-capture-assign/good.rhai");

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Lint never fails on arbitrary text: it returns diagnostics with real positions, and the
    /// `internal` backstop never fires.
    #[test]
    fn lint_returns_diagnostics_for_any_text(source in "\\PC{0,120}") {
        let diagnostics = lint(&source, &context());
        prop_assert!(diagnostics.iter().all(|d| d.line >= 1 && d.column >= 1 && d.rule_id != "internal"));
    }

    /// The same for a real script with a slice cut out or a fragment spliced in, which reaches
    /// far deeper into the walker than random text does.
    #[test]
    fn lint_returns_diagnostics_for_damaged_scripts(
        at in 0usize..SAMPLE.len(),
        cut in 0usize..24,
        splice in prop::sample::select(vec!["", "|| ", "(", "}", "#{", "agent(", "for x in y {", "let ", "\"", "parallel(["]),
    ) {
        let mut source: String = SAMPLE.chars().take(at).collect();
        source.push_str(splice);
        source.extend(SAMPLE.chars().skip(at + cut));
        let diagnostics = lint(&source, &context());
        prop_assert!(diagnostics.iter().all(|d| d.line >= 1 && d.rule_id != "internal"), "{:?}", diagnostics);
    }

    /// Lua lint never fails on arbitrary text either: no panic, no `internal`, real positions.
    #[test]
    fn lua_lint_returns_diagnostics_for_any_text(source in "\\PC{0,120}") {
        let diagnostics = cairn::__internal::lua::lint(&source, &context());
        prop_assert!(diagnostics.iter().all(|d| d.line >= 1 && d.column >= 1 && d.rule_id != "internal"));
    }

    /// The Lua workload with a slice cut out or a fragment spliced in.
    #[test]
    fn lua_lint_returns_diagnostics_for_damaged_scripts(
        at in 0usize..LUA_SAMPLE.len(),
        cut in 0usize..24,
        splice in prop::sample::select(vec![
            "", "function() ", "(", "end", "{", "agent(", "for i = 1, 3 do ", "local ", "\"", "parallel({",
            "[[", "--[[", "`", "=>", "!=", "|x| ", "#{", "::", "goto ", "<const>",
        ]),
    ) {
        let mut source: String = LUA_SAMPLE.chars().take(at).collect();
        source.push_str(splice);
        source.extend(LUA_SAMPLE.chars().skip(at + cut));
        let diagnostics = cairn::__internal::lua::lint(&source, &context());
        prop_assert!(diagnostics.iter().all(|d| d.line >= 1 && d.rule_id != "internal"), "{:?}", diagnostics);
    }
}

/// The Lua workload, cut up by the property tests above.
const LUA_SAMPLE: &str = include_str!("../../lint/parallel-capture-assign/good_release_notes.lua");

/// A backquote where full_moon's lexer starts a token (here after `0E`, which full_moon lexes
/// apart from Lua) is a syntax diagnostic, not a panic in the parser (found by the proptest above).
#[test]
fn a_backquote_where_the_lua_parser_starts_a_token_is_a_syntax_error() {
    for source in ["0E' \"\"`", "0E'`", "return 1 `x`", "x = 0e`"] {
        let diagnostics = cairn::__internal::lua::lint(source, &context());
        assert!(!diagnostics.is_empty(), "{source:?}");
        assert!(
            diagnostics.iter().all(|d| d.rule_id != "internal" && d.line >= 1),
            "{source:?}: {diagnostics:?}"
        );
        // The cost analysis parses the same text: it answers instead of panicking.
        let _ = cairn::__internal::lua::call_bound(source, &serde_json::Value::Null);
    }
}
