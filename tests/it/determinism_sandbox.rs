//! Determinism of what the sandbox shows a script: the same script gives the same journal in
//! every process, however branches interleave (issue 17 §1–2, issue 10 §3).
//!
//! Scripts run through the `cairn` binary twice, each in its own process with a JSONL store,
//! and the journals are compared on what identifies and answers each entry (kind, status,
//! scope, content key, ordinal, value, error), never on timestamps.

use std::path::Path;

use assert_cmd::Command;
use serde_json::Value;

fn cairn_in(dir: &Path) -> Command {
    let mut cmd = Command::cargo_bin("cairn").unwrap();
    cmd.current_dir(dir)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("RHAI_HASHING_SEED");
    cmd
}

/// A journal as the fields that must not depend on the process: one line per entry.
pub(crate) fn journal_projection(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines: Vec<String> = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let entry: Value = serde_json::from_str(line).unwrap();
            let keep = ["kind", "status", "scope", "key", "ordinal", "value", "error"];
            let projected: serde_json::Map<String, Value> = keep
                .iter()
                .filter_map(|field| entry.get(*field).map(|v| ((*field).to_owned(), v.clone())))
                .collect();
            Value::Object(projected).to_string()
        })
        .collect();
    // Entries of concurrent branches are queued in the order they finish; the journal's
    // identity is (scope, key, ordinal), so compare as a set.
    lines.sort();
    lines
}

/// Runs `source` in a fresh process with a JSONL store and returns the journal's projection
/// and the process's stdout and exit code.
pub(crate) fn run_once(source: &str, args: &[&str]) -> (Vec<String>, String, Option<i32>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("w.rhai"), source).unwrap();
    let out = cairn_in(dir.path())
        .args(["--store", "jsonl:j", "run", "w.rhai", "--run-id", "r1", "-q"])
        .args(args)
        .output()
        .unwrap();
    let journal = journal_projection(&dir.path().join("j/r1.jsonl"));
    (journal, String::from_utf8_lossy(&out.stdout).into_owned(), out.status.code())
}

/// Closures shown to a script, and errors that passed through one, read the same in every
/// process: a prompt built from them keys the same way.
#[test]
fn closure_text_and_closure_errors_are_the_same_in_every_process() {
    let source = r#"
let f = |x| x + 1;
let g = || { let z = 1 / 0; z };
let caught = "";
try { g.call(); } catch (e) { caught = `${e.message}`; }
let q = "";
try { parallel([|| { let z = 1 / 0; z }, || 2]); } catch (e) { q = e.message; }
let s = "";
try { step("s", || { let z = 1 / 0; z }); } catch (e) { s = e.message; }
let p = agent(`closure ${f} ${f.name()} ${f.name} ${f.to_debug()} ${[f]} ${#{f: f}} caught ${caught} q ${q} s ${s}`);
#{p: p, q: q, s: s}
"#;
    let (first, out1, code1) = run_once(source, &[]);
    let (second, out2, code2) = run_once(source, &[]);
    assert_eq!(code1, Some(0), "{out1}");
    assert_eq!((&first, &out1, code1), (&second, &out2, code2));
    assert!(!out1.contains("anon$"), "a closure's internal name reached the script: {out1}");
    assert!(out1.contains("closure <closure> <closure> <closure> <closure> [<closure>]"), "{out1}");
}
