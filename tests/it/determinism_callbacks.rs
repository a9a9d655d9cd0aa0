//! Script functions that a builtin calls on the script's behalf (a `gsub` replacement or a
//! replacement table's `__index`, a captured table's own `__index` reached through a branch's
//! read-only view, a `__pairs` metamethod) raise what the script raised, in every process
//! (issue 24: no process-dependent text reaches a script).
//!
//! Before, Rust called those functions, and an error value that was not a string crossed
//! mlua as text: a table became `table: 0x...`, an address that differs from run to run. A
//! prompt built from the caught value re-keyed on every run and the run's error differed.
//! Through the `cairn` binary, each case runs twice and is replayed.

use std::path::Path;

use crate::determinism_sandbox::journal_projection;
use crate::determinism_steps::{cairn, script_dir};

/// The corpus cases (`tests/determinism/callback_error_*.lua`), the prompt each builds from
/// the values it caught, and the error each lets escape.
const CASES: [(&str, &str, &str); 3] = [
    (
        "callback_error_gsub.lua",
        "caught false a false y!",
        r#"the script threw {"code":"script_error","message":"gsub raised at b"}"#,
    ),
    ("callback_error_view_index.lua", "view x", r#"the script threw {"missing":"y"}"#),
    (
        "callback_error_pairs.lua",
        "pairs false pairs",
        r#"the script threw {"code":"script_error","message":"no pairs"}"#,
    ),
];

#[test]
fn a_value_raised_in_a_callback_a_builtin_makes_reaches_the_script_as_raised_in_every_process() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/determinism");
    for (file, prompt, error) in CASES {
        let source = std::fs::read_to_string(corpus.join(file)).unwrap();
        let mut seen = Vec::new();
        for _ in 0..2 {
            let (dir, name) = script_dir("lua", &source);
            let run = cairn(dir.path(), &["run", &name, "--run-id", "r1", "-q"]);
            assert_eq!(run.code, Some(1), "{file}: {}", run.text());
            let journal_text = std::fs::read_to_string(dir.path().join("j/r1.jsonl")).unwrap();
            assert!(!journal_text.contains("0x"), "{file}: an address reached the journal: {journal_text}");
            assert!(!run.text().contains("0x"), "{file}: an address reached the output: {}", run.text());
            assert!(
                journal_text.contains(&format!("\"prompt_head\":\"{prompt}\"")),
                "{file}: {journal_text}"
            );
            let ending = run.ending().join("\n");
            assert!(ending.ends_with(&format!("error: script_error: {error}")), "{file}: {ending}");
            let replay = cairn(dir.path(), &["replay", "r1"]);
            assert_eq!(replay.code, Some(0), "{file}: {}", replay.text());
            assert!(replay.text().contains(" 0 live, 0 orphaned"), "{file}: {}", replay.text());
            seen.push((journal_projection(&dir.path().join("j/r1.jsonl")), ending));
        }
        assert_eq!(seen[0], seen[1], "{file}");
    }
}

/// A cairn global called from a `gsub` replacement (which Rust still calls, under the raw
/// `pcall`) is refused with one message, and a captured table's `__index` or a `__pairs`
/// (called from Lua now) may call one like any other script code.
#[test]
fn cairn_globals_in_callbacks_are_refused_or_journaled_the_same_way_every_time() {
    let cases = [
        (
            "return string.gsub('ab', '%w', function(c) return agent('x' .. c) end)",
            Some("cannot be called from a callback Lua runs itself"),
        ),
        (
            "local base = setmetatable({}, {__index = function(_, k) return agent('idx ' .. k) end})\n\
             return parallel({function() return base.x end})[1]",
            None,
        ),
        (
            "local t = setmetatable({}, {__pairs = function(t) local a = agent('p')\n\
             return function(_, k) if k == nil then return 1, a end end, t, nil end})\n\
             local out = {} for _, v in pairs(t) do out[#out + 1] = v end return out",
            None,
        ),
    ];
    for (source, refused) in cases {
        let mut seen = Vec::new();
        for _ in 0..2 {
            let (dir, name) = script_dir("lua", source);
            let run = cairn(dir.path(), &["run", &name, "--run-id", "r1", "-q"]);
            match refused {
                Some(message) => {
                    assert_eq!(run.code, Some(1), "{source}: {}", run.text());
                    assert!(run.stderr.contains(message), "{source}: {}", run.text());
                }
                None => {
                    assert_eq!(run.code, Some(0), "{source}: {}", run.text());
                    assert!(run.stdout.contains("echo: "), "{source}: {}", run.text());
                    let replay = cairn(dir.path(), &["replay", "r1"]);
                    assert!(
                        replay.text().contains("1 calls replayed, 0 live"),
                        "{source}: {}",
                        replay.text()
                    );
                }
            }
            seen.push((
                journal_projection(&dir.path().join("j/r1.jsonl")),
                run.stdout.clone(),
                run.ending().join("\n"),
            ));
        }
        assert_eq!(seen[0], seen[1], "{source}");
    }
}
