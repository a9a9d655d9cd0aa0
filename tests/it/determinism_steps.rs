//! Determinism of steps and of edits that move calls (issue 24), through the `cairn` binary in
//! both dialects: a step body cannot write what it captured, a step's operations count the
//! same on replay, a step's body is part of its identity, and a resume whose paid calls moved
//! scope explains before paying.

use std::path::Path;

use assert_cmd::Command;

/// The `cairn` binary in `dir`, with no provider credentials in reach.
pub(crate) fn cairn_in(dir: &Path) -> Command {
    let mut cmd = Command::cargo_bin("cairn").unwrap();
    cmd.current_dir(dir)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("RHAI_HASHING_SEED");
    cmd
}

/// What a command printed and how it ended.
pub(crate) struct Ran {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Ran {
    pub(crate) fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    /// What the command said of the run's end on stderr (its `cairn: ...` lines), leaving out
    /// diagnostics a loaded machine may add (a late lease renewal, say).
    pub(crate) fn ending(&self) -> Vec<&str> {
        self.stderr.lines().filter(|line| line.starts_with("cairn: ")).collect()
    }
}

/// Runs `cairn ARGS` in `dir` on the JSONL store `j/`.
pub(crate) fn cairn(dir: &Path, args: &[&str]) -> Ran {
    let out = cairn_in(dir).args(["--store", "jsonl:j"]).args(args).output().unwrap();
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Writes `source` as `w.EXT` in a fresh directory.
pub(crate) fn script_dir(ext: &str, source: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let name = format!("w.{ext}");
    std::fs::write(dir.path().join(&name), source).unwrap();
    (dir, name)
}

/// Item 1: a step body's writes to what it captured. On replay the body does not run, so the
/// write would be lost and the prompt after the step would re-key. Lint refuses the write it
/// sees (`step-capture-assign`); the runtime refuses every route (captures are read-only in a
/// step body, as in a branch), the same way on every run, naming the step.
#[test]
fn a_step_body_cannot_write_what_it_captured_in_either_dialect() {
    let seen = [
        ("rhai", "let acc = []; let n = step(\"collect\", || { acc.push(1); 1 }); agent(`${acc}`)"),
        (
            "lua",
            "local acc = {} local n = step('collect', function() acc[#acc + 1] = 1 return 1 end) \
             return agent('acc ' .. #acc)",
        ),
    ];
    for (ext, source) in seen {
        let (dir, name) = script_dir(ext, source);
        let lint = cairn(dir.path(), &["lint", "--json", &name]);
        assert_eq!(lint.code, Some(6), "{ext}: {}", lint.text());
        assert!(lint.stdout.contains("step-capture-assign"), "{ext}: {}", lint.text());
        let run = cairn(dir.path(), &["run", &name, "--run-id", "r1", "-q"]);
        assert_eq!(run.code, Some(6), "{ext}: {}", run.text());
    }
    // Routes lint does not follow (a helper that writes a table it was given, a stored
    // closure): the runtime refuses the write at once, before the step's result is journaled.
    let hidden = [
        (
            "rhai",
            "let acc = []; let add = || acc.push(1); let n = step(\"collect\", || { add.call(); acc.len() }); \
             agent(`${acc}`)",
        ),
        (
            "lua",
            "local acc = {} local function add(t) t[#t + 1] = 1 end \
             local n = step('collect', function() add(acc) return #acc end) return agent('acc ' .. #acc)",
        ),
    ];
    for (ext, source) in hidden {
        let mut endings = Vec::new();
        for _ in 0..2 {
            let (dir, name) = script_dir(ext, source);
            let run = cairn(dir.path(), &["run", &name, "--run-id", "r1", "-q"]);
            if run.code == Some(6) {
                assert!(run.text().contains("step-capture-assign"), "{ext}: {}", run.text());
            } else {
                assert_eq!(run.code, Some(1), "{ext}: {}", run.text());
                assert!(run.text().contains("sandbox violation"), "{ext}: {}", run.text());
                assert!(run.text().contains("inside a step body"), "{ext}: {}", run.text());
                let journal = std::fs::read_to_string(dir.path().join("j/r1.jsonl")).unwrap();
                assert!(!journal.contains("\"kind\":\"agent\""), "{ext}: the agent call ran: {journal}");
            }
            endings.push((run.code, run.stdout));
        }
        assert_eq!(endings[0], endings[1], "{ext}");
    }
}

/// Item 1, the runtime's own defence with lint skipped: every route a step body could write
/// what it captured ends the run `sandbox_violation` before anything after the step runs.
#[test]
fn the_runtime_refuses_a_step_bodys_writes_when_lint_is_skipped() {
    let cases = [
        ("rhai", "let acc = []; step(\"s\", || { acc.push(1); 1 }); agent(`${acc}`)", "'acc'"),
        ("rhai", "let m = #{n: 0}; step(\"s\", || { m.n = 2; 1 }); agent(`${m.n}`)", "'m'"),
        (
            "rhai",
            "let acc = []; let add = || acc.push(1); step(\"s\", || { add.call(); 1 }); agent(`${acc}`)",
            "'acc'",
        ),
        ("lua", "local n = 0 step('s', function() n = n + 1 return 1 end) return agent('n ' .. n)", "'n'"),
        (
            "lua",
            "local t = {} step('s', function() table.insert(t, 1) return 1 end) return agent('t ' .. #t)",
            "captured table",
        ),
        ("lua", "step('s', function() counter = 1 return 1 end) return agent('c')", "'counter'"),
    ];
    for (dialect, source, names) in cases {
        let outcome = crate::determinism_sandbox::run_in_process_dialect(dialect, source);
        let error = outcome.error.clone().unwrap_or_else(|| panic!("{dialect}: {source}: {outcome:?}"));
        assert_eq!(error.code, cairn::ErrorCode::SandboxViolation, "{dialect}: {source}: {error:?}");
        assert!(error.message.contains("inside a step body"), "{dialect}: {source}: {}", error.message);
        assert!(error.message.contains(names), "{dialect}: {source}: {}", error.message);
        assert_eq!(outcome.usage.input_tokens, 0, "{dialect}: {source}: the agent after the step ran");
    }
}

/// Item 4: a value with no JSON form fails with the same message in every process. Lua's raw
/// hash order is random per process; the error used to name whichever key it visited first.
#[test]
fn a_table_with_no_json_form_fails_with_one_message_in_every_process() {
    let cases = [
        (
            "lua",
            "return {1, 2, 3, name = 'x', other = 'y', alpha = 1, zeta = 2, mid = 3}",
            "the integer key 1 and the string key \"alpha\"",
        ),
        (
            "lua",
            "local t = {} t[0.5] = 1 t[-3] = 2 t[true] = 3 t.b = 1 t.a = 2 return t",
            "the integer key -3",
        ),
        (
            "lua",
            "return step('s', function() return {10, 20, beta = 1, alpha = 2, gamma = 3} end)",
            "the string key \"alpha\"",
        ),
        ("rhai", "#{b: || 1, a: || 2, c: [|| 3]}", "closure"),
    ];
    for (ext, source, names) in cases {
        let mut messages = Vec::new();
        for _ in 0..4 {
            let (dir, name) = script_dir(ext, source);
            let run = cairn(dir.path(), &["run", &name, "--run-id", "r1", "-q"]);
            assert_ne!(run.code, Some(0), "{ext}: {source}: {}", run.text());
            // The run id differs per process; the message after it must not.
            let message = run.stderr.split_once(" error: ").map(|(_, m)| m.to_owned());
            messages.push(message.unwrap_or_else(|| panic!("{ext}: {source}: {}", run.text())));
        }
        assert!(messages[0].contains(names), "{ext}: {source}: {}", messages[0]);
        assert!(messages.iter().all(|m| m == &messages[0]), "{ext}: {source}: {messages:#?}");
    }
}

/// Item 7: a step's body is part of its identity. A step inserted with an existing step's
/// label gets its own value, never the old step's; an edited body re-keys the step and the
/// resume explains it before running anything; a step that only moved (lines above it, a
/// comment, re-indentation) keeps its identity and replays.
#[test]
fn a_step_body_is_part_of_its_identity_in_both_dialects() {
    let twins = [
        (
            "rhai",
            "let a = step(\"tally\", || 42);\nagent(`tally ${a}`)",
            "let b = step(\"tally\", || 7);\nlet a = step(\"tally\", || 42);\nagent(`tally ${a}`) + ` ${b}`",
            "// counted first\n\n    let a = step(\"tally\",   || 42);\nagent(`tally ${a}`)",
            "let a = step(\"tally\", || 43);\nagent(`tally ${a}`)",
        ),
        (
            "lua",
            "local a = step('tally', function() return 42 end)\nreturn agent('tally ' .. a)",
            "local b = step('tally', function() return 7 end)\nlocal a = step('tally', function() return 42 end)\n\
             return agent('tally ' .. a) .. ' ' .. b",
            "-- counted first\n\n    local a = step('tally',   function()\n return 42\n end)\nreturn agent('tally ' .. a)",
            "local a = step('tally', function() return 43 end)\nreturn agent('tally ' .. a)",
        ),
    ];
    for (ext, original, inserted, moved, edited) in twins {
        let (dir, name) = script_dir(ext, original);
        let path = dir.path();
        let first = cairn(path, &["run", &name, "--run-id", "r1", "-q"]);
        assert_eq!(first.code, Some(0), "{ext}: {}", first.text());
        assert!(first.stdout.contains("echo: tally 42"), "{ext}: {}", first.text());
        for (file, text) in [("inserted", inserted), ("moved", moved), ("edited", edited)] {
            std::fs::write(path.join(format!("{file}.{ext}")), text).unwrap();
        }
        let journal = || std::fs::read_to_string(path.join("j/r1.jsonl")).unwrap();
        let agents = |journal: &str| journal.lines().filter(|l| l.contains("\"kind\":\"agent\"")).count();
        let paid = agents(&journal());

        // Moved: the same identity, everything replays.
        let moved = cairn(path, &["resume", "r1", "--script", &format!("moved.{ext}"), "--json", "-q"]);
        assert_eq!(moved.code, Some(0), "{ext}: {}", moved.text());
        let done: serde_json::Value = serde_json::from_str(&moved.stdout).unwrap();
        assert_eq!(done["preview"]["misses"], 0, "{ext}: {done:#}");
        assert_eq!(agents(&journal()), paid, "{ext}: moving the step re-paid its neighbour");

        // Edited: explained before anything runs.
        let refused = cairn(path, &["resume", "r1", "--script", &format!("edited.{ext}"), "-q"]);
        assert_eq!(refused.code, Some(1), "{ext}: {}", refused.text());
        assert!(refused.stderr.contains("step 'tally'"), "{ext}: {}", refused.text());
        assert!(refused.stderr.contains("returned 42"), "{ext}: {}", refused.text());
        assert!(refused.stderr.contains("--accept-rekey"), "{ext}: {}", refused.text());
        assert_eq!(agents(&journal()), paid, "{ext}: a refused resume paid");

        // Inserted with the same label: explained, and once accepted each step has its own value.
        let refused = cairn(path, &["resume", "r1", "--script", &format!("inserted.{ext}"), "-q"]);
        assert_eq!(refused.code, Some(1), "{ext}: {}", refused.text());
        assert!(refused.stderr.contains("step 'tally'"), "{ext}: {}", refused.text());
        let accepted = cairn(
            path,
            &["resume", "r1", "--script", &format!("inserted.{ext}"), "--accept-rekey", "--json", "-q"],
        );
        assert_eq!(accepted.code, Some(0), "{ext}: {}", accepted.text());
        let done: serde_json::Value = serde_json::from_str(&accepted.stdout).unwrap();
        assert_eq!(done["value"], "echo: tally 42 7", "{ext}: {done:#}");
        assert_eq!(agents(&journal()), paid, "{ext}: the unchanged agent call was paid again");
    }
}

/// Item 6: a budget refusal reads the same live and on replay. The refused call's record
/// (`result: "full"`: status `limit`, cost 0, the message with how the reserve was reckoned),
/// a settled branch's error and a collected pipeline item's error are what the journal's
/// refusal says, so a strict replay returns the same value byte for byte.
#[test]
fn a_budget_refusal_replays_as_it_read_live_in_both_dialects() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/determinism");
    for ext in ["rhai", "lua"] {
        let source = std::fs::read_to_string(corpus.join(format!("budget_refusal_record.{ext}"))).unwrap();
        let (dir, name) = script_dir(ext, &source);
        let path = dir.path();
        std::fs::write(path.join("cairn.toml"), "[providers.echo]\nkind = \"echo\"\nprice = [1000, 1000]\n")
            .unwrap();
        let live = cairn(path, &["run", &name, "--run-id", "r1", "-q", "--json", "--budget", "0.01"]);
        assert_eq!(live.code, Some(3), "{ext}: {}", live.text());
        let live: serde_json::Value = serde_json::from_str(&live.stdout).unwrap();
        let full = &live["value"]["full"];
        assert_eq!(full["status"], "limit", "{ext}: {full:#}");
        assert_eq!(full["cost_nano_usd"], 0, "{ext}: {full:#}");
        let message = full["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("(its worst turn: "), "{ext}: {message}");
        let settled = &live["value"]["settled"][0]["error"]["message"];
        let dropped = &live["value"]["piped"]["dropped"][0]["error"]["message"];
        for other in [settled, dropped] {
            assert!(other.as_str().is_some_and(|m| m.contains("(its worst turn: ")), "{ext}: {live:#}");
        }
        // The journal's refusals say what the calls failed with.
        let journal = std::fs::read_to_string(path.join("j/r1.jsonl")).unwrap();
        let refusals: Vec<&str> = journal.lines().filter(|l| l.contains("\"verdict\":\"refused\"")).collect();
        assert_eq!(refusals.len(), 3, "{ext}: {journal}");
        assert!(refusals.iter().all(|l| l.contains("(its worst turn: ")), "{ext}: {journal}");

        let replay = cairn(path, &["replay", "r1"]);
        assert_eq!(replay.code, Some(0), "{ext}: {}", replay.text());
        assert!(replay.text().contains(" 0 live, 0 orphaned"), "{ext}: {}", replay.text());
    }
}

/// Item 2: a step's operations count the same on replay. The step's terminal entry journals
/// the operations its body ran (`ops`), and a replay that serves the step charges them: a run
/// that spent its operation budget across a step and the code after it ends the same way on
/// replay (it used to skip the body, stay under the budget and reach the agent call live), and
/// a run that fitted still fits.
#[test]
fn a_steps_operations_count_the_same_on_replay_in_both_dialects() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/determinism");
    let config = std::fs::read_to_string(corpus.join("step_operations_budget.toml")).unwrap();
    for ext in ["rhai", "lua"] {
        let source = std::fs::read_to_string(corpus.join(format!("step_operations_budget.{ext}"))).unwrap();
        // Over the budget (two spins of about 60% each), and within it (two spins of 30%).
        for (spin, fits) in [("60", false), ("30", true)] {
            let (dir, name) = script_dir(ext, &source);
            let path = dir.path();
            std::fs::write(path.join("cairn.toml"), &config).unwrap();
            let live = cairn(
                path,
                &["run", &name, "--run-id", "r1", "-q", "--json", "--args", &format!("{{\"spin\": {spin}}}")],
            );
            let journal = std::fs::read_to_string(path.join("j/r1.jsonl")).unwrap();
            if fits {
                assert_eq!(live.code, Some(0), "{ext} {spin}: {}", live.text());
            } else {
                assert_ne!(live.code, Some(0), "{ext} {spin}: {}", live.text());
                assert!(
                    live.text().contains("budget of 1000000 operations"),
                    "{ext} {spin}: {}",
                    live.text()
                );
                assert!(
                    !journal.contains("\"kind\":\"agent\""),
                    "{ext} {spin}: the agent call ran: {journal}"
                );
            }
            // The step's terminal entry says how many operations its body ran.
            let step: serde_json::Value = journal
                .lines()
                .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
                .find(|entry| entry["kind"] == "step" && entry["status"] == "ok")
                .unwrap_or_else(|| panic!("{ext} {spin}: no step result: {journal}"));
            let ops = step["ops"].as_u64().unwrap_or_default();
            let share = spin.parse::<u64>().unwrap() * 10_000;
            assert!(
                ops > share / 2 && ops < share * 2,
                "{ext} {spin}: the step ran {ops} operations: {step}"
            );

            let replay = cairn(path, &["replay", "r1"]);
            assert_eq!(replay.code, Some(0), "{ext} {spin}: {}", replay.text());
            assert!(replay.text().contains(" 0 live, 0 orphaned"), "{ext} {spin}: {}", replay.text());
        }
    }
}

/// Item 8: an unlabelled `parallel` inserted before another renumbers the later site, so its
/// calls, unchanged, come at another scope. The resume pairs each with the paid call it
/// shifted from and stops before paying it again, explaining the move (the inserted calls,
/// new, are paid); `--accept-rekey` pays them anew, as asked.
#[test]
fn a_paid_call_whose_scope_moved_is_explained_not_paid_again_in_both_dialects() {
    let cases = [
        (
            "rhai",
            "let a = parallel([|| agent(\"alpha\"), || agent(\"beta\")]);\na",
            "let z = parallel([|| agent(\"zeta\")]);\nlet a = parallel([|| agent(\"alpha\"), || agent(\"beta\")]);\na + z",
        ),
        (
            "lua",
            "local a = parallel({function() return agent('alpha') end, function() return agent('beta') end})\nreturn a",
            "local z = parallel({function() return agent('zeta') end})\n\
             local a = parallel({function() return agent('alpha') end, function() return agent('beta') end})\n\
             return {a[1], a[2], z[1]}",
        ),
    ];
    for (ext, original, inserted) in cases {
        let (dir, name) = script_dir(ext, original);
        let path = dir.path();
        let first = cairn(path, &["run", &name, "--run-id", "r1", "-q"]);
        assert_eq!(first.code, Some(0), "{ext}: {}", first.text());
        std::fs::write(path.join(format!("inserted.{ext}")), inserted).unwrap();
        let journal = || std::fs::read_to_string(path.join("j/r1.jsonl")).unwrap();
        let agents = |journal: &str| {
            journal
                .lines()
                .filter(|l| l.contains("\"kind\":\"agent\"") && l.contains("\"status\":\"ok\""))
                .count()
        };
        assert_eq!(agents(&journal()), 2, "{ext}: {}", journal());

        let script = format!("inserted.{ext}");
        let refused = cairn(path, &["resume", "r1", "--script", &script, "-q"]);
        assert_eq!(refused.code, Some(1), "{ext}: {}", refused.text());
        // The first moved call met stops the run (its sibling may be stopped before it asks).
        let moved = ["par:0:0' to 'par:1:0'", "par:0:1' to 'par:1:1'"];
        assert!(
            moved.iter().any(|m| refused.stderr.contains(&format!("scope moved from '{m}"))),
            "{ext}: {}",
            refused.text()
        );
        assert!(refused.stderr.contains("label the sites"), "{ext}: {}", refused.text());
        assert!(refused.stderr.contains("--accept-rekey"), "{ext}: {}", refused.text());
        // Only the inserted call was paid; the moved ones were not paid again.
        assert_eq!(agents(&journal()), 3, "{ext}: {}", journal());
        assert!(!journal().contains("\"scope\":\"par:1:"), "{ext}: a moved call ran: {}", journal());

        // Accepted: the moved calls are paid anew (explicitly), and the run completes.
        let accepted = cairn(path, &["resume", "r1", "--script", &script, "--accept-rekey", "-q"]);
        assert_eq!(accepted.code, Some(0), "{ext}: {}", accepted.text());
        assert_eq!(agents(&journal()), 5, "{ext}: {}", journal());
    }
}

/// Item 3: writes lint used to miss, followed through aliases, parameters and callbacks in
/// both dialects: a stored closure called through an alias or handed to `map`/`sort`, a Lua
/// local holding a captured table or one of its elements, a loop variable over one, a helper
/// writing the table passed to it. Each is refused by `cairn lint` (and so by `cairn run`)
/// with the route named, before anything runs; the corpus runs each with lint skipped, where
/// the runtime ends it the same way every time.
#[test]
fn indirect_writes_are_refused_by_lint_in_both_dialects() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/determinism");
    let mut cases: Vec<_> = std::fs::read_dir(&corpus)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.file_name().is_some_and(|name| name.to_string_lossy().starts_with("indirect_")))
        .collect();
    cases.sort();
    let dialects: std::collections::BTreeSet<_> =
        cases.iter().filter_map(|path| path.extension().map(|e| e.to_string_lossy().into_owned())).collect();
    assert_eq!(dialects.len(), 2, "{cases:?}");
    for path in cases {
        let ext = path.extension().unwrap().to_string_lossy().into_owned();
        let source = std::fs::read_to_string(&path).unwrap();
        let expect = source
            .lines()
            .next()
            .and_then(|line| line.split_once("expect: "))
            .map(|(_, expect)| expect.to_owned())
            .unwrap_or_else(|| panic!("{}: no expect line", path.display()));
        let (dir, name) = script_dir(&ext, &source);
        let lint = cairn(dir.path(), &["lint", "--json", &name]);
        assert_eq!(lint.code, Some(6), "{}: {}", path.display(), lint.text());
        assert!(lint.stdout.contains(&expect), "{}: {}", path.display(), lint.text());
        let run = cairn(dir.path(), &["run", &name, "--run-id", "r1", "-q"]);
        assert_eq!(run.code, Some(6), "{}: {}", path.display(), run.text());
        assert!(
            !dir.path().join("j/r1.jsonl").exists(),
            "{}: the refused run wrote a journal",
            path.display()
        );
    }
}

/// A fail-fast fan-out's journaled decision holds for the code it was taken for. An edit of a
/// branch (here the error it throws) makes a resume run the fan-out again, so the edited
/// script's failure is the one raised, not the old code's; a fan-out that only moved (a line
/// inserted above it) keeps its decision, and nothing in it runs again.
#[test]
fn a_fail_fast_decision_holds_only_for_the_code_it_was_taken_for_in_both_dialects() {
    let cases = [
        (
            "rhai",
            "let r = \"\";\ntry { parallel([|| { throw \"old\" }, || 2]); } catch (e) { r = e.message; }\nr",
            "let r = \"\";\ntry { parallel([|| { throw \"new\" }, || 2]); } catch (e) { r = e.message; }\nr",
            "// moved\nlet r = \"\";\ntry { parallel([|| { throw \"old\" }, || 2]); } catch (e) { r = e.message; }\nr",
        ),
        (
            "lua",
            "local ok, e = pcall(parallel, {function() error('old', 0) end, function() return 2 end})\nreturn e.message",
            "local ok, e = pcall(parallel, {function() error('new', 0) end, function() return 2 end})\nreturn e.message",
            "-- moved\nlocal ok, e = pcall(parallel, {function() error('old', 0) end, function() return 2 end})\n\
             return e.message",
        ),
    ];
    for (ext, original, edited, moved) in cases {
        let (dir, name) = script_dir(ext, original);
        let path = dir.path();
        let first = cairn(path, &["run", &name, "--run-id", "r1", "-q", "--json"]);
        assert_eq!(first.code, Some(0), "{ext}: {}", first.text());
        let decisions = || {
            std::fs::read_to_string(path.join("j/r1.jsonl"))
                .unwrap()
                .lines()
                .filter(|l| l.contains("\"type\":\"fail_fast\""))
                .count()
        };
        assert_eq!(decisions(), 1, "{ext}");
        for (file, text) in [("moved", moved), ("edited", edited)] {
            std::fs::write(path.join(format!("{file}.{ext}")), text).unwrap();
        }
        let kept = cairn(path, &["resume", "r1", "--script", &format!("moved.{ext}"), "--json", "-q"]);
        assert_eq!(kept.code, Some(0), "{ext}: {}", kept.text());
        let value: serde_json::Value = serde_json::from_str(&kept.stdout).unwrap();
        assert!(value["value"].as_str().is_some_and(|v| v.contains("old")), "{ext}: {value:#}");
        assert_eq!(decisions(), 1, "{ext}: the moved fan-out ran again");

        let rerun = cairn(path, &["resume", "r1", "--script", &format!("edited.{ext}"), "--json", "-q"]);
        assert_eq!(rerun.code, Some(0), "{ext}: {}", rerun.text());
        let value: serde_json::Value = serde_json::from_str(&rerun.stdout).unwrap();
        assert!(
            value["value"].as_str().is_some_and(|v| v.contains("new")),
            "{ext}: the old decision answered: {value:#}"
        );
        assert_eq!(decisions(), 2, "{ext}: the edited fan-out journaled no decision of its own");
    }
}
