//! The journal's identity and the engine's determinism, through the real `cairn` binary:
//! what a resume or a replay must never pay twice or diverge on (step bodies in their own
//! scope, journaled budget reads, durable unpaid effects before host calls, fail-fast
//! decisions, the strict replay gate, labelled sites, wait timeouts, ordered admission).

use std::path::Path;

use assert_cmd::Command;
use serde_json::{Value, json};

fn cairn_in(dir: &Path) -> Command {
    let mut cmd = Command::cargo_bin("cairn").unwrap();
    cmd.current_dir(dir)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL");
    cmd
}

/// A priced echo model, so spend is not zero.
const PRICED_ECHO: &str = r#"
[routing]
default = "echo:default"
[providers.echo]
kind = "echo"
prices = { default = [1.0, 2.0] }
"#;

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

/// `cairn <args> --json` → (exit code, outcome JSON).
fn run_json(dir: &Path, args: &[&str]) -> (i32, Value) {
    let out = cairn_in(dir).args(args).args(["--json", "--quiet"]).output().unwrap();
    let code = out.status.code().unwrap_or(-1);
    let value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "{args:?}: no JSON on stdout (exit {code}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, value)
}

fn replay(dir: &Path, run: &str) -> (i32, String) {
    let out = cairn_in(dir).args(["replay", run]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

fn resolve(dir: &Path, run: &str, key: &str, value: &str) {
    cairn_in(dir).args(["resolve", run, key, value]).assert().success();
}

/// Runs `script` until it suspends on `go`, resolves it and resumes: the resume's outcome.
fn suspend_resolve_resume(dir: &Path, script: &str, extra: &[&str]) -> Value {
    write(dir, "s.rhai", script);
    let mut args = vec!["run", "s.rhai", "--run-id", "r1"];
    args.extend_from_slice(extra);
    let (code, first) = run_json(dir, &args);
    assert_eq!(first["status"], "suspended", "exit {code}: {first}");
    resolve(dir, "r1", "go", "1");
    let (code, resumed) = run_json(dir, &["resume", "r1"]);
    assert_eq!(code, 0, "{resumed}");
    assert_eq!(resumed["status"], "ok", "{resumed}");
    assert_eq!(resumed["preview"]["orphaned"], 0, "{resumed}");
    resumed
}

// ---- 1. a step body has its own scope ----------------------------------------------------------

#[test]
fn effects_inside_a_step_do_not_shift_the_parallel_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let resumed = suspend_resolve_resume(
        dir.path(),
        r#"
        let x = step("s", || parallel([|| agent("a")]));
        let y = parallel([|| agent("b")]);
        let r = await_external("go");
        [x, y, r]
        "#,
        &[],
    );
    assert_eq!(resumed["value"], json!([["echo: a"], ["echo: b"], 1]));
    // `b` was paid once, in the first run: the resume serves it from the journal.
    assert_eq!(resumed["preview"]["misses"], 0, "b was paid again: {resumed}");
    assert_eq!(resumed["preview"]["reruns"], 0, "{resumed}");
    let (code, text) = replay(dir.path(), "r1");
    assert_eq!(code, 0, "{text}");
}

#[test]
fn a_random_inside_a_step_does_not_shift_the_one_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let resumed = suspend_resolve_resume(
        dir.path(),
        r#"
        let a = step("s", || random());
        let b = random();
        let r = await_external("go");
        [a, b]
        "#,
        &[],
    );
    let value = resumed["value"].as_array().unwrap().clone();
    assert_ne!(value[0], value[1], "b replayed a's value: {resumed}");
    assert_eq!(resumed["preview"]["misses"], 0, "{resumed}");
    let (code, text) = replay(dir.path(), "r1");
    assert_eq!(code, 0, "{text}");
}

// ---- 2. budget reads are journaled -------------------------------------------------------------

#[test]
fn a_prompt_built_from_budget_spent_replays_after_a_resume() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "cairn.toml", PRICED_ECHO);
    let resumed = suspend_resolve_resume(
        dir.path(),
        r#"
        let a = agent("first");
        let spent = budget.spent();
        let left = budget.remaining();
        let b = agent(`spent ${spent}, left ${left}`);
        let r = await_external("go");
        [spent, left, b]
        "#,
        &["--budget", "5"],
    );
    let value = &resumed["value"];
    assert!(value[0].as_f64().unwrap() > 0.0, "the model is priced: {resumed}");
    // The values seen the first time are the ones served: the prompt built from them
    // matches its journaled call.
    assert_eq!(resumed["preview"]["misses"], 0, "the budget-built prompt was paid again: {resumed}");
    assert_eq!(resumed["preview"]["reruns"], 0, "{resumed}");
    let (code, text) = replay(dir.path(), "r1");
    assert_eq!(code, 0, "{text}");
}

// ---- 4. unpaid effects are durable before a host call is dispatched ----------------------------

mod host_crash {
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::Arc;
    use std::time::Duration;

    use cairn::store::{SqliteOptions, SqliteStore};
    use cairn::{
        CallOptions, Engine, JournalStore, Lease, RawEntry, ResumeOptions, RunFilter, RunId, RunMeta,
        RunOptions, RunStatus, Workflow,
    };
    use serde_json::{Value, json};

    const CHILD_ENV: &str = "CAIRN_HOST_CRASH_CHILD";

    /// A store whose appends take a while (a slow disk): a write queued just before a crash
    /// is not durable unless someone waited for it.
    #[derive(Debug)]
    struct SlowStore(Arc<SqliteStore>);

    impl JournalStore for SlowStore {
        fn append_tallied(
            &self,
            run: &RunId,
            entries: &[RawEntry],
            lease: Option<&Lease>,
            tally: cairn::Tally,
        ) -> cairn::store::Result<()> {
            std::thread::sleep(Duration::from_millis(30));
            self.0.append_tallied(run, entries, lease, tally)
        }
        fn load(&self, run: &RunId) -> cairn::store::Result<Vec<RawEntry>> {
            self.0.load(run)
        }
        fn put_meta(&self, meta: &RunMeta, lease: Option<&Lease>) -> cairn::store::Result<()> {
            self.0.put_meta(meta, lease)
        }
        fn get_meta(&self, run: &RunId) -> cairn::store::Result<Option<RunMeta>> {
            self.0.get_meta(run)
        }
        fn list_runs(&self, filter: &RunFilter) -> cairn::store::Result<Vec<RunMeta>> {
            self.0.list_runs(filter)
        }
        fn delete(&self, run: &RunId, lease: Option<&Lease>) -> cairn::store::Result<()> {
            self.0.delete(run, lease)
        }
    }

    fn workflow() -> Workflow {
        Workflow::new("sidey", |ctx, _| async move {
            let id = ctx.uuid().await?;
            let side = ctx.call("side", json!(id), CallOptions::default()).await?;
            let die = ctx.call("die", json!(1), CallOptions::default()).await?;
            Ok(json!([id, side, die]))
        })
    }

    fn engine(dir: &Path) -> Engine {
        let store = Arc::new(SqliteStore::open(&dir.join("cairn.db"), SqliteOptions::new()).unwrap());
        let side_log = dir.join("side.log");
        let marker = dir.join("died");
        Engine::builder_with_stores(Arc::new(SlowStore(store.clone())), store)
            .host_function("side", move |args: Value| {
                // The side effect: one line per execution, fsynced (it survives the kill).
                use std::io::Write;
                let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&side_log).unwrap();
                writeln!(file, "{}", args.as_str().unwrap_or_default()).unwrap();
                file.sync_all().unwrap();
                async { Ok(json!("done")) }
            })
            .host_function("die", move |_| {
                if !marker.exists() {
                    std::fs::write(&marker, "").unwrap();
                    let pid = std::process::id().to_string();
                    let _ = Command::new("kill").args(["-9", &pid]).status();
                    std::process::abort();
                }
                async { Ok(json!("alive")) }
            })
            .workflow(workflow())
            .build()
            .unwrap()
    }

    #[test]
    fn host_crash_child() {
        let Ok(mode) = std::env::var(CHILD_ENV) else { return };
        let dir = PathBuf::from(std::env::var("CAIRN_HOST_CRASH_DIR").unwrap());
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async {
            let engine = engine(&dir);
            let run_id = RunId::parse("host-crash").unwrap();
            let handle = if mode == "run" {
                engine.run(&workflow(), json!({}), RunOptions { run_id: Some(run_id), ..Default::default() })
            } else {
                engine.resume(&run_id, ResumeOptions::default())
            };
            let outcome = handle.unwrap().result().await.unwrap();
            std::fs::write(dir.join(format!("{mode}.json")), serde_json::to_vec(&outcome).unwrap()).unwrap();
        });
    }

    fn spawn(dir: &Path, mode: &str) -> std::process::ExitStatus {
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "determinism_journal::host_crash::host_crash_child", "--nocapture"])
            .env(CHILD_ENV, mode)
            .env("CAIRN_HOST_CRASH_DIR", dir)
            .status()
            .unwrap()
    }

    #[test]
    fn a_crash_right_after_a_host_call_neither_remakes_the_uuid_nor_repeats_the_side_effect() {
        let dir = tempfile::tempdir().unwrap();
        use std::os::unix::process::ExitStatusExt;
        let status = spawn(dir.path(), "run");
        assert_eq!(status.signal(), Some(9), "the run was not killed: {status:?}");
        let status = spawn(dir.path(), "resume");
        assert!(status.success(), "{status:?}");
        let outcome: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("resume.json")).unwrap()).unwrap();
        assert_eq!(outcome["status"], json!(RunStatus::Ok), "{outcome}");
        let side = std::fs::read_to_string(dir.path().join("side.log")).unwrap();
        let lines: Vec<&str> = side.lines().collect();
        assert_eq!(lines.len(), 1, "the side effect ran again: {lines:?}");
        // The id the side effect saw is the one the resumed run holds.
        assert_eq!(outcome["value"][0], json!(lines[0]), "a new uuid was made: {outcome}");
        assert_eq!(outcome["value"][1], "done");
        assert_eq!(outcome["value"][2], "alive");
    }
}

// ---- 6a. a fail-fast parallel journals which branch failed and which it cancelled --------------

const SLOW_ECHO: &str = r#"
[routing]
default = "echo:default"
[providers.echo]
kind = "echo"
latency_ms = 300
"#;

#[test]
fn a_caught_fail_fast_error_replays_with_nothing_live() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "cairn.toml", SLOW_ECHO);
    write(
        dir.path(),
        "s.rhai",
        r#"
        let caught = "";
        try {
            parallel([|| agent("a"), || agent("b"), || { throw "boom"; }, || agent("c"), || agent("d")]);
        } catch (e) {
            caught = "caught";
        }
        let after = agent("after");
        [caught, after]
        "#,
    );
    let (code, first) = run_json(dir.path(), &["run", "s.rhai", "--run-id", "r1"]);
    assert_eq!(code, 0, "{first}");
    assert_eq!(first["value"], json!(["caught", "echo: after"]));
    let (code, text) = replay(dir.path(), "r1");
    assert_eq!(code, 0, "the cancelled siblings went live on replay: {text}");
    // A resume of the finished run pays for nothing: the cancelled siblings are served as
    // cancelled, the failure as journaled.
    let (code, resumed) = run_json(dir.path(), &["resume", "r1"]);
    assert_eq!(code, 0, "{resumed}");
    assert_eq!(resumed["value"], first["value"]);
    assert_eq!(resumed["preview"]["misses"], 0, "{resumed}");
    assert_eq!(resumed["preview"]["reruns"], 0, "{resumed}");
    assert_eq!(resumed["preview"]["orphaned"], 0, "{resumed}");
}

// ---- 7. `cairn replay` is a strict gate ---------------------------------------------------------

/// Replaces the stored source of run `run` in a JSONL store (and its hash in the run's meta),
/// as an edit of the script would.
fn edit_stored_source(runs: &Path, run: &str, source: &str) {
    std::fs::write(runs.join(format!("{run}.blobs/source")), source).unwrap();
    let meta_path = runs.join(format!("{run}.meta.json"));
    let mut meta: Value = serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
    meta["source_hash"] = json!(cairn::journal::content_key_of_canonical(source).to_hex());
    std::fs::write(&meta_path, serde_json::to_vec(&meta).unwrap()).unwrap();
}

#[test]
fn replay_fails_on_an_orphaned_call_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = ["--store", "jsonl:runs"];
    write(
        dir.path(),
        "s.rhai",
        r#"let a = agent("first"); let b = agent("second", #{label: "second"}); [a, b]"#,
    );
    let (code, first) = run_json(dir.path(), &[&store[..], &["run", "s.rhai", "--run-id", "r1"]].concat());
    assert_eq!(code, 0, "{first}");
    let out = cairn_in(dir.path()).args(store).args(["replay", "r1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // The edit drops the second call (its value is written in by hand): its journaled entry
    // is reached by nothing.
    edit_stored_source(&dir.path().join("runs"), "r1", r#"let a = agent("first"); [a, "echo: second"]"#);
    let out = cairn_in(dir.path()).args(store).args(["replay", "r1"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "an orphaned call passed the gate: {stderr}");
    assert!(stderr.contains("1 journaled calls were not reached"), "{stderr}");
    assert!(stderr.contains("the agent at seq 3") && stderr.contains("\"second\""), "{stderr}");
}

#[test]
fn replay_fails_on_a_different_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let store = ["--store", "jsonl:runs"];
    write(dir.path(), "s.rhai", r#"let a = agent("first"); [a, 1]"#);
    let (code, first) = run_json(dir.path(), &[&store[..], &["run", "s.rhai", "--run-id", "r1"]].concat());
    assert_eq!(code, 0, "{first}");
    edit_stored_source(&dir.path().join("runs"), "r1", r#"let a = agent("first"); [a, 2]"#);
    let out = cairn_in(dir.path()).args(store).args(["replay", "r1"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "a different value passed the gate: {stderr}");
    assert!(stderr.contains("different value"), "{stderr}");
    edit_stored_source(&dir.path().join("runs"), "r1", r#"let a = agent("first"); throw "late""#);
    let out = cairn_in(dir.path()).args(store).args(["replay", "r1"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "a different status passed the gate: {stderr}");
    assert!(stderr.contains("the run settled ok, its replay settles error"), "{stderr}");
}

// ---- 3. a label pins a parallel's site ----------------------------------------------------------

#[test]
fn inserting_a_parallel_before_a_labelled_one_does_not_rekey_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = ["--store", "jsonl:runs"];
    write(
        dir.path(),
        "s.rhai",
        r#"
        let x = parallel([|| agent("x1"), || agent("x2")], #{label: "fixed"});
        let p = pipeline([1, 2], [|n| agent(`p${n}`)], #{label: "pipe"});
        [x, p]
        "#,
    );
    let (code, first) = run_json(dir.path(), &[&store[..], &["run", "s.rhai", "--run-id", "r1"]].concat());
    assert_eq!(code, 0, "{first}");
    edit_stored_source(
        &dir.path().join("runs"),
        "r1",
        r#"
        let inserted = parallel([|| agent("new")]);
        let x = parallel([|| agent("x1"), || agent("x2")], #{label: "fixed"});
        let q = pipeline([1], [|n| agent(`p${n}`)]);
        let p = pipeline([1, 2], [|n| agent(`p${n}`)], #{label: "pipe"});
        [x, p]
        "#,
    );
    let (code, resumed) = run_json(dir.path(), &[&store[..], &["resume", "r1"]].concat());
    assert_eq!(code, 0, "{resumed}");
    assert_eq!(resumed["value"], first["value"]);
    // Only the inserted calls run live; every labelled call replays.
    assert_eq!(resumed["preview"]["misses"], 2, "{resumed}");
    assert_eq!(resumed["preview"]["hits"], 4, "{resumed}");
    assert_eq!(resumed["preview"]["orphaned"], 0, "{resumed}");
}

#[test]
fn a_label_with_a_separator_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "s.rhai", r#"parallel([|| 1], #{label: "a/b"})"#);
    let out = cairn_in(dir.path()).args(["run", "s.rhai", "-q"]).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("label"), "{stderr}");
}

// ---- 5. await_external takes a timeout ----------------------------------------------------------

#[test]
fn a_wait_past_its_timeout_resumes_with_a_journaled_timeout_value() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "s.rhai",
        r#"
        let v = await_external("go", #{timeout_ms: 50, schema: #{type: "integer"}});
        let after = if type_of(v) == "map" && v.timed_out { agent("timed out") } else { agent("answered") };
        [v, after]
        "#,
    );
    // Not held in process (--hold-timers 0): the run suspends, and a resume past the deadline
    // delivers the timeout.
    let (_, first) = run_json(dir.path(), &["run", "s.rhai", "--run-id", "r1", "--hold-timers", "0"]);
    assert_eq!(first["status"], "suspended", "{first}");
    std::thread::sleep(std::time::Duration::from_millis(80));
    let (code, resumed) = run_json(dir.path(), &["resume", "r1"]);
    assert_eq!(code, 0, "{resumed}");
    assert_eq!(resumed["value"][0]["timed_out"], true, "{resumed}");
    assert_eq!(resumed["value"][0]["key"], "go");
    assert_eq!(resumed["value"][1], "echo: timed out");
    // The timeout is the wait's resolution: a late answer is recorded and not applied, and
    // every replay takes the same path.
    let out = cairn_in(dir.path()).args(["resolve", "r1", "go", "7"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "a resolution not applied is not a success: {out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("already resolved"), "{out:?}");
    let (code, text) = replay(dir.path(), "r1");
    assert_eq!(code, 0, "{text}");
}

#[test]
fn a_wait_answered_before_its_timeout_gets_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "s.rhai", r#"await_external("go", #{timeout_ms: 600000})"#);
    let (_, first) = run_json(dir.path(), &["run", "s.rhai", "--run-id", "r1"]);
    assert_eq!(first["status"], "suspended", "{first}");
    resolve(dir.path(), "r1", "go", "5");
    let (code, resumed) = run_json(dir.path(), &["resume", "r1"]);
    assert_eq!(code, 0, "{resumed}");
    assert_eq!(resumed["value"], 5);
}

// ---- 6b. a ceiling admits in branch order ------------------------------------------------------

/// The journal of run `run` in a JSONL store, as sorted `scope kind status key` lines: what
/// was journaled, whatever order the branches' writes interleaved in.
fn journal_shape(runs: &Path, run: &str) -> Vec<String> {
    let text = std::fs::read_to_string(runs.join(format!("{run}.jsonl"))).unwrap();
    let mut lines: Vec<String> = text
        .lines()
        .map(|line| {
            let entry: Value = serde_json::from_str(line).unwrap();
            format!("{} {} {} {}", entry["scope"], entry["kind"], entry["status"], entry["key"])
        })
        .collect();
    lines.sort();
    lines
}

#[test]
fn a_ceiling_admits_the_same_shards_on_every_run() {
    let dir = tempfile::tempdir().unwrap();
    let script =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/exhausted_fanout.rhai"))
            .unwrap();
    write(dir.path(), "fanout.rhai", &script);
    let store = ["--store", "jsonl:runs"];
    let mut shapes = Vec::new();
    for n in 0..5 {
        let run = format!("r{n}");
        let (_, outcome) = run_json(
            dir.path(),
            &[&store[..], &["run", "fanout.rhai", "--budget", "0.25", "--run-id", &run]].concat(),
        );
        assert_eq!(outcome["status"], "exhausted", "{outcome}");
        let admitted: Vec<usize> = outcome["value"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, v)| !v.is_null())
            .map(|(i, _)| i)
            .collect();
        assert_eq!(admitted, [0, 1, 2, 3, 4], "run {n} admitted other shards: {outcome}");
        shapes.push(journal_shape(&dir.path().join("runs"), &run));
        // The refusals are journaled decisions: a strict replay serves them, nothing live.
        let out = cairn_in(dir.path()).args(store).args(["replay", &run]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    }
    for (n, shape) in shapes.iter().enumerate().skip(1) {
        assert_eq!(shape, &shapes[0], "run {n}'s journal differs from run 0's");
    }
}

#[test]
fn a_caught_fail_fast_pipeline_error_replays_with_nothing_live() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "cairn.toml", SLOW_ECHO);
    write(
        dir.path(),
        "s.rhai",
        r#"
        let caught = "";
        try {
            pipeline([1, 2, 3, 4], [|n| if n == 1 { throw "boom"; } else { agent(`p${n}`) }], #{on_item_error: "throw"});
        } catch (e) {
            caught = "caught";
        }
        [caught, agent("after")]
        "#,
    );
    let (code, first) = run_json(dir.path(), &["run", "s.rhai", "--run-id", "r1"]);
    assert_eq!(code, 0, "{first}");
    assert_eq!(first["value"], json!(["caught", "echo: after"]));
    let (code, text) = replay(dir.path(), "r1");
    assert_eq!(code, 0, "{text}");
    let (code, resumed) = run_json(dir.path(), &["resume", "r1"]);
    assert_eq!(code, 0, "{resumed}");
    assert_eq!(resumed["value"], first["value"]);
    assert_eq!(resumed["preview"]["misses"], 0, "{resumed}");
    assert_eq!(resumed["preview"]["reruns"], 0, "{resumed}");
    assert_eq!(resumed["preview"]["orphaned"], 0, "{resumed}");
}
