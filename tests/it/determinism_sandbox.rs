//! Determinism of what the sandbox shows a script: the same script gives the same journal in
//! every process, however branches interleave (issue 17 §1–2, issue 10 §3).
//!
//! Scripts run through the `cairn` binary twice, each in its own process with a JSONL store,
//! and the journals are compared on what identifies and answers each entry (kind, status,
//! scope, content key, ordinal, value, error, a step's operations), never on timestamps.

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
            let mut entry: Value = serde_json::from_str(line).unwrap();
            without_timing_choices(&mut entry);
            let keep = ["kind", "status", "scope", "key", "ordinal", "value", "error", "ops"];
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

/// Drops from a fail-fast decision which branch failed first and which siblings it cancelled:
/// a fresh run's timing decides them, and the journal records them so a replay serves the
/// same ones (they are journaled, not reproduced). Drops from a settlement the `seq` of the
/// entry its error came from: entries of concurrent branches take seqs in the order they
/// finish, and the entry is named by its scope beside it. Everything else must match.
fn without_timing_choices(entry: &mut Value) {
    if entry.get("kind").and_then(Value::as_str) != Some("decision") {
        return;
    }
    let Some(value) = entry.get_mut("value").and_then(Value::as_object_mut) else { return };
    if value.contains_key("cancelled") {
        value.remove("cancelled");
        value.remove("failed");
    }
    if let Some(place) =
        value.get_mut("error").and_then(|e| e.get_mut("where")).and_then(Value::as_object_mut)
    {
        place.remove("seq");
    }
}

/// Runs `source` in a fresh process with a JSONL store and returns the journal's projection
/// and the process's stdout and exit code.
pub(crate) fn run_once(source: &str, args: &[&str]) -> (Vec<String>, String, Option<i32>) {
    let (journal, stdout, code, _dir) = run_kept(source, args);
    (journal, stdout, code)
}

/// [`run_once`], keeping the directory (its `j/` store holds run `r1`).
fn run_kept(source: &str, args: &[&str]) -> (Vec<String>, String, Option<i32>, tempfile::TempDir) {
    run_kept_as("rhai", source, args, None)
}

/// [`run_kept`] of a script in the dialect of the extension `ext` (`rhai` or `lua`).
fn run_kept_as(
    ext: &str,
    source: &str,
    args: &[&str],
    config: Option<&str>,
) -> (Vec<String>, String, Option<i32>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let name = format!("w.{ext}");
    std::fs::write(dir.path().join(&name), source).unwrap();
    if let Some(config) = config {
        std::fs::write(dir.path().join("cairn.toml"), config).unwrap();
    }
    let out = cairn_in(dir.path())
        .args(["--store", "jsonl:j", "run", &name, "--run-id", "r1", "-q"])
        .args(args)
        .output()
        .unwrap();
    let journal = journal_projection(&dir.path().join("j/r1.jsonl"));
    (journal, String::from_utf8_lossy(&out.stdout).into_owned(), out.status.code(), dir)
}

/// The determinism corpus (`tests/determinism/*.{rhai,lua}`), every divergence found so far: each
/// script, run twice through the binary, gives identical journals and results, and a strict
/// replay of the run finds nothing live or orphaned.
#[test]
fn the_determinism_corpus_gives_identical_journals_and_replays_with_nothing_live() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/determinism");
    let mut scripts: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rhai" || ext == "lua"))
        .collect();
    scripts.sort();
    assert!(scripts.len() >= 7, "{scripts:?}");
    for path in scripts {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let ext = path.extension().unwrap().to_string_lossy().into_owned();
        let source = std::fs::read_to_string(&path).unwrap();
        // A divergence the linter has since learned to refuse: the binary rejects it before
        // anything runs, and the runtime's own defence still ends it the same way every time.
        let lint = cairn_in(&dir).args(["lint", &name]).output().unwrap();
        if lint.status.code() == Some(6) {
            let endings: Vec<_> = (0..2).map(|_| ending(&run_in_process_dialect(&ext, &source))).collect();
            assert_eq!(endings[0], endings[1], "{name}");
            continue;
        }
        assert_eq!(lint.status.code(), Some(0), "{name}: {}", String::from_utf8_lossy(&lint.stderr));
        // A script's `NAME.toml` beside it, if any, is the `cairn.toml` it runs under.
        let config = std::fs::read_to_string(path.with_extension("toml")).ok();
        let (first, out1, code1, kept) = run_kept_as(&ext, &source, &[], config.as_deref());
        let (second, out2, code2, _) = run_kept_as(&ext, &source, &[], config.as_deref());
        assert!(!first.is_empty(), "{name}: empty journal");
        assert_eq!((&first, &out1, code1), (&second, &out2, code2), "{name}");
        let replay = cairn_in(kept.path()).args(["--store", "jsonl:j", "replay", "r1"]).output().unwrap();
        let text =
            format!("{}{}", String::from_utf8_lossy(&replay.stdout), String::from_utf8_lossy(&replay.stderr));
        assert_eq!(replay.status.code(), Some(0), "{name}: {text}");
        assert!(text.contains(" 0 live, 0 orphaned"), "{name}: {text}");
    }
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
let p = agent(`closure ${f} ${f.to_debug()} ${[f]} ${#{f: f}} caught ${caught} q ${q} s ${s}`);
#{p: p, q: q, s: s}
"#;
    let (first, out1, code1) = run_once(source, &[]);
    let (second, out2, code2) = run_once(source, &[]);
    assert_eq!(code1, Some(0), "{out1}");
    assert_eq!((&first, &out1, code1), (&second, &out2, code2));
    assert!(!out1.contains("anon$"), "a closure's internal name reached the script: {out1}");
    assert!(out1.contains("closure <closure> <closure> [<closure>]"), "{out1}");

    // `name()` is refused by lint (a closure has no name to dispatch on); the runtime still
    // answers `<closure>` in every process when lint is skipped.
    let named = "let f = |x| x + 1; `${f.name()} ${f.name}`";
    let engine = engine(false);
    let endings: Vec<_> = (0..2).map(|_| ending(&run_in_process(&engine, named))).collect();
    assert_eq!(endings[0], endings[1]);
    assert_eq!(endings[0].3, Some(Value::String("<closure> <closure>".into())), "{:?}", endings[0]);
}

/// The error map a `catch` binds names no closure: Rhai puts a failed closure's internal name
/// (`anon$<hash>`) in the map's `function` and `message` (a closure called with the wrong
/// number of arguments, a closure that fails, a closure in a map), and a prompt built from the
/// map would carry it (DESIGN: no closure name reaches a script). Also inside a function, in a
/// closure that captured the error, and in a branch.
#[test]
fn a_caught_error_map_names_no_closure() {
    let source = r#"
let out = [];
let f = |x| x;
try { f.call(1, 2, 3); } catch (e) { out.push(e); }
let o = #{g: |x| x / 0};
try { o.g.call(1); } catch (err) { out.push(`${err}`); out.push(err.function); }
try { curry(f, 1, 2).call(); } catch (e) { let later = || e.message; out.push(later.call()); }
fn caught(h) { try { h.call(); } catch (inner) { return inner; } }
out.push(caught(|| f.call()));
out.push(parallel([|| { try { f.call(1, 2); } catch (e) { e.message } }]));
out.push(agent(`${out}`));
out
"#;
    let (first, out1, code1) = run_once(source, &[]);
    let (second, out2, code2) = run_once(source, &[]);
    assert_eq!(code1, Some(0), "{out1}");
    assert_eq!((&first, &out1, code1), (&second, &out2, code2));
    assert!(!out1.contains("anon$"), "a closure's internal name reached the script: {out1}");
    assert!(!first.iter().any(|entry| entry.contains("anon$")), "{first:#?}");
    assert!(out1.contains("Function not found: <closure> (i64, i64, i64)"), "{out1}");
    assert!(out1.contains(r#""function": "<closure>""#) || out1.contains("\"<closure>\""), "{out1}");
}

// ---- in-process runs -------------------------------------------------------------------------

use std::sync::Arc;
use std::time::Duration;

use cairn::RhaiDialect;
use cairn::{Engine, ErrorCode, MemoryStore, RunOptions, RunOutcome, RunStatus, Script};

/// An engine on the memory store whose Rhai dialect skips lint when `lint` is false, so the
/// runtime's own defences are tried on what lint would refuse.
pub(crate) fn engine(lint: bool) -> Engine {
    let store = Arc::new(MemoryStore::new());
    let dialect = if lint { RhaiDialect::new() } else { RhaiDialect::new().without_lint() };
    Engine::builder(store).dialect(Arc::new(dialect)).max_spawns(10_000).build().unwrap()
}

pub(crate) fn run_in_process(engine: &Engine, source: &str) -> RunOutcome {
    drive(engine, &Script::rhai("t", source))
}

/// Runs `script` on `engine` on a runtime of its own, to its outcome.
fn drive(engine: &Engine, script: &Script) -> RunOutcome {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let handle = engine.run_script(script, serde_json::json!({}), RunOptions::default()).unwrap();
        // A hang, not a slow run: the thread-cap test's 65,536 branches take over a minute
        // on a loaded 2-core machine.
        tokio::time::timeout(Duration::from_secs(180), handle.result()).await.expect("the run hung").unwrap()
    })
}

/// Runs `source` in `dialect` (`rhai` or `lua`) in process with lint skipped.
pub(crate) fn run_in_process_dialect(dialect: &str, source: &str) -> RunOutcome {
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::builder(store)
        .dialect(Arc::new(RhaiDialect::new().without_lint()))
        .dialect(Arc::new(cairn::LuaDialect::new().without_lint()))
        .build()
        .unwrap();
    drive(&engine, &Script::new(dialect, "t", source))
}

/// What a run's ending shows, for comparing runs.
fn ending(outcome: &RunOutcome) -> (RunStatus, Option<ErrorCode>, Option<String>, Option<Value>) {
    (
        outcome.status,
        outcome.error.as_ref().map(|e| e.code),
        outcome.error.as_ref().map(|e| e.message.clone()),
        outcome.value.clone(),
    )
}

/// Every route by which a branch could write a value it shares with its siblings is refused
/// at the write, the same way on every run, naming the variable and saying what to do.
#[test]
fn every_route_to_a_shared_write_fails_the_same_way_on_every_run() {
    let routes: [(&str, &str, &str); 8] = [
        (
            "a closure stored in a variable, called in the branch",
            "let seen = []; let note = |x| seen.push(x);
             parallel([1, 2, 3, 4, 5, 6, 7, 8], |i| { note.call(i); agent(`item ${i}`) }); seen",
            "'seen'",
        ),
        (
            "a user method changing this, on a captured value",
            "fn remember(x) { this.push(x) } let log = [];
             parallel([1, 2, 3, 4, 5, 6], |i| { log.remember(i); i }); log",
            "'log'",
        ),
        (
            "for_each assigning this on a captured array",
            "let arr = [1, 2, 3]; parallel([1, 2, 3, 4], |i| { arr.for_each(|| this = this + i); i }); arr",
            "'arr'",
        ),
        (
            "a branch function that is a map property",
            "let seen = []; let worker = #{run: |i| { seen.push(i); i }}; parallel([1, 2, 3, 4], worker.run); seen",
            "'seen'",
        ),
        (
            "closures pushed into an array",
            "let seen = []; let branches = [];
             for x in [1, 2, 3, 4] { let j = x; branches.push(|| { seen.push(j); j }); }
             parallel(branches); seen",
            "'seen'",
        ),
        (
            "parallel reached through a computed Fn name",
            "let total = 0; let p = Fn(\"para\" + \"llel\"); p.call([1, 2, 3], |i| { total += i; i }); total",
            "'total'",
        ),
        (
            "an assignment into a captured map, in a pipeline stage",
            "let state = #{n: 0}; pipeline([1, 2, 3], [|x| { state.n = x; x }]); state",
            "'state'",
        ),
        (
            "a write inside a step inside a branch",
            "let seen = []; parallel([1, 2, 3], |i| step(`s${i}`, || { seen.push(i); i })); seen",
            "'seen'",
        ),
    ];
    let engine = engine(false);
    for (route, source, variable) in routes {
        let first = ending(&run_in_process(&engine, source));
        assert_eq!(first.0, RunStatus::Error, "{route}: {first:?}");
        assert_eq!(first.1, Some(ErrorCode::SandboxViolation), "{route}: {first:?}");
        let message = first.2.clone().unwrap_or_default();
        assert!(message.contains("sandbox violation") && message.contains(variable), "{route}: {message}");
        // A step inside a branch says so: its body is both.
        assert!(
            message.contains("return values from the branch") || message.contains("inside a step body"),
            "{route}: {message}"
        );
        for _ in 0..4 {
            assert_eq!(ending(&run_in_process(&engine, source)), first, "{route}");
        }
    }
}

/// Branches that only read what they captured never meet a data race, however many run at
/// once; a branch may change its own copy (a local, an argument).
#[test]
fn branches_read_captured_values_without_races() {
    let source = "
        let base = []; for i in 0..64 { base.push(i); }
        let table = #{k: base};
        let items = []; for i in 0..128 { items.push(i); }
        let out = parallel(items, |i| {
            let n = 0;
            for r in 0..200 { n += base.len() + table.k[r % 64]; }
            let mine = base; mine.push(i);
            i.to_string() + \":\" + n + \":\" + mine.len()
        });
        #{out: out.len(), first: out[0], base: base.len()}";
    let engine = engine(true);
    let first = ending(&run_in_process(&engine, source));
    assert_eq!(first.0, RunStatus::Ok, "{first:?}");
    for _ in 0..2 {
        assert_eq!(ending(&run_in_process(&engine, source)), first);
    }
}

/// Whether nested fan-outs fit the run's branch threads depends on the script alone: the same
/// script ends the same way on every run, whichever branches happen to overlap.
#[test]
fn nested_fan_outs_near_the_thread_cap_end_the_same_way_every_run() {
    // 8 branches each fanning out 200 agent calls: more than 1,024 threads if every fan-out
    // got all it wants at once; each inner fan-out gets its share and queues the rest.
    let fits = "
        let outer = []; for i in 0..8 { outer.push(i); }
        let inner = []; for j in 0..200 { inner.push(j); }
        let out = parallel(outer, |i| parallel(inner, |j| agent(`${i}/${j}`)).len());
        out";
    // Three levels of 256: the third level's threads hold no share, on every run.
    let too_deep = "
        let xs = []; for i in 0..256 { xs.push(i); }
        parallel(xs, |i| parallel(xs, |j| parallel([1, 2], |k| agent(`${i}/${j}/${k}`)).len()).len())";
    // This test is about the thread cap alone. The 65,536 second-level branches each copy the
    // 256 items they capture, and the host's copying is charged to the operation budget and the
    // memory account: under the standard limits one of those can end a branch first, and which
    // of several failing branches' errors a fail-fast fan-out raises depends on timing (that is
    // journaled, not promised). So the other budgets are set out of the thread cap's way.
    let limits = cairn::SandboxLimits {
        max_operations: 1 << 40,
        max_memory: 1 << 36,
        max_allocations: 1 << 40,
        ..cairn::SandboxLimits::STANDARD
    };
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::builder(store)
        .dialect(Arc::new(RhaiDialect::with_limits(limits)))
        .max_spawns(10_000)
        .build()
        .unwrap();
    for (source, expect_ok) in [(fits, true), (too_deep, false)] {
        let first = ending(&run_in_process(&engine, source));
        assert_eq!(first.0 == RunStatus::Ok, expect_ok, "{first:?}");
        if !expect_ok {
            assert_eq!(first.1, Some(ErrorCode::SandboxLimit), "{first:?}");
        }
        for _ in 0..4 {
            assert_eq!(ending(&run_in_process(&engine, source)), first);
        }
    }
}

// ---- generated scripts -------------------------------------------------------------------------

use proptest::prelude::*;

/// One statement of the grammar: globals, closures, captured arrays and maps, methods,
/// `parallel`, `step` and try/catch, combined the ways a planner combines them.
fn statement() -> impl Strategy<Value = String> {
    let index = 0..4usize;
    prop_oneof![
        index.clone().prop_map(|i| format!("let v{i} = agent(`q{i} ${{xs.len()}}`);")),
        Just("xs.push(xs.len());".to_owned()),
        Just("m.n += 1;".to_owned()),
        Just("let note = |x| log_lines.push(x);".to_owned()),
        Just("log_lines.remember(\"r\");".to_owned()),
        Just("let r = parallel(xs, |i| agent(`item ${i} of ${m.n}`));".to_owned()),
        Just("let r = parallel(xs, |i| { note.call(i); i });".to_owned()),
        Just("let r = parallel(xs, |i| { log_lines.remember(i); i });".to_owned()),
        Just("let r = parallel(xs, |i| { let mine = xs; mine.push(i); mine.len() });".to_owned()),
        Just("let r = parallel(xs, |i| { m.n = i; i });".to_owned()),
        Just("let w = #{run: |i| { xs.push(i); i }}; let r = parallel([1, 2, 3], w.run);".to_owned()),
        Just("let s = step(`s${m.n}`, || { xs.push(1); xs.len() });".to_owned()),
        Just(
            "try { parallel([|| { let z = 1 / 0; z }, || 2]); } catch (e) { log_lines.push(e.message); }"
                .to_owned()
        ),
        Just("let f = |x| x * 2; log_lines.push(`${f}`);".to_owned()),
        Just("try { step(\"bad\", || { throw \"no\" }); } catch (e) { log_lines.push(`${e}`); }".to_owned()),
    ]
}

fn script(statements: Vec<String>) -> String {
    format!(
        "fn remember(x) {{ this.push(x) }}\nlet xs = [1, 2, 3];\nlet m = #{{n: 0}};\nlet log_lines = [];\n{}\nagent(`end ${{xs}} ${{m.n}} ${{log_lines}}`)",
        statements.join("\n")
    )
}

/// The journal of an in-process run, projected like [`journal_projection`].
fn memory_journal(store: &MemoryStore, run: &cairn::RunId) -> Vec<String> {
    use cairn::JournalStore;
    let mut lines: Vec<String> = store
        .load(run)
        .unwrap()
        .iter()
        .map(|entry| {
            let mut entry: Value = serde_json::from_str(entry.json()).unwrap();
            without_timing_choices(&mut entry);
            let keep = ["kind", "status", "scope", "key", "ordinal", "value", "error"];
            let projected: serde_json::Map<String, Value> = keep
                .iter()
                .filter_map(|field| entry.get(*field).map(|v| ((*field).to_owned(), v.clone())))
                .collect();
            Value::Object(projected).to_string()
        })
        .collect();
    lines.sort();
    lines
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Every generated script is refused by lint, or gives the same journal and ending on two
    /// runs.
    #[test]
    fn generated_scripts_are_refused_or_deterministic(statements in prop::collection::vec(statement(), 1..6)) {
        let source = script(statements);
        let store = Arc::new(MemoryStore::new());
        let engine = Engine::builder(store.clone()).build().unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let mut runs = Vec::new();
        for _ in 0..2 {
            let outcome = runtime.block_on(async {
                let handle = match engine.run_script(&Script::rhai("p", &source), serde_json::json!({}), RunOptions::default()) {
                    Ok(handle) => handle,
                    Err(error) => return Err(error),
                };
                let run = handle.run_id().clone();
                let outcome = tokio::time::timeout(Duration::from_secs(60), handle.result()).await.expect("hung").unwrap();
                Ok((run, outcome))
            });
            match outcome {
                Err(error) => {
                    prop_assert_eq!(error.code, ErrorCode::Validation, "{}", error.message);
                    return Ok(());
                }
                Ok((run, outcome)) => runs.push((memory_journal(&store, &run), ending(&outcome))),
            }
        }
        prop_assert_eq!(&runs[0], &runs[1], "{}", source);
    }
}
