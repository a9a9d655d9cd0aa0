//! One driver per run, through the binary: two `cairn resume` at once (one drives, the other
//! is refused at once), a killed driver whose lease expires, and `cairn resolve` reaching a run
//! another process is driving. Every case runs on the SQLite and the JSONL store.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub(crate) fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("cairn")
}

pub(crate) fn cairn(dir: &Path, store: &str) -> Command {
    let mut cmd = Command::new(bin());
    cmd.current_dir(dir)
        .arg("--store")
        .arg(store)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("CAIRN_LEASE_TTL_MS")
        .stdin(Stdio::null());
    cmd
}

pub(crate) fn run(dir: &Path, store: &str, args: &[&str]) -> Output {
    cairn(dir, store).args(args).output().unwrap()
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The run id a `cairn run` printed in its suspension hint or error line.
pub(crate) fn run_id_of(out: &Output) -> String {
    let stderr = text(&out.stderr);
    stderr
        .split_whitespace()
        .skip_while(|w| *w != "run")
        .nth(1)
        .map(|w| w.trim_end_matches(':').to_owned())
        .unwrap_or_else(|| panic!("no run id in {stderr}"))
}

/// The run's journal, as `cairn inspect --json` shows it.
pub(crate) fn entries(dir: &Path, store: &str, id: &str) -> Vec<Value> {
    let out = run(dir, store, &["inspect", id, "--json"]);
    assert!(out.status.success(), "inspect failed: {}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["entries"].as_array().cloned().unwrap_or_default()
}

fn count(entries: &[Value], kind: &str, status: &str) -> usize {
    entries.iter().filter(|e| e["kind"] == kind && e["status"] == status).count()
}

fn stores(dir: &Path) -> [String; 2] {
    [format!("sqlite:{}", dir.join("c.db").display()), format!("jsonl:{}", dir.join("runs").display())]
}

fn setup(latency_ms: u64, script: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cairn.toml"),
        format!("[providers.echo]\nkind = \"echo\"\nlatency_ms = {latency_ms}\n"),
    )
    .unwrap();
    std::fs::write(dir.path().join("flow.rhai"), script).unwrap();
    dir
}

/// A suspended run whose next call, once `go` is resolved, is slow.
fn suspended_before_a_slow_call(dir: &Path, store: &str) -> String {
    let out = run(dir, store, &["run", "flow.rhai", "-q"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let id = run_id_of(&out);
    let resolved = run(dir, store, &["resolve", &id, "go", "\"x\""]);
    assert!(resolved.status.success(), "{}", text(&resolved.stderr));
    id
}

fn wait_with_deadline(mut child: Child, limit: Duration) -> Output {
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("a cairn process did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn two_resumes_at_once_one_drives_the_other_is_refused_at_once() {
    for which in 0..2 {
        let dir = setup(3_000, "let k = await_external(\"go\"); agent(\"slow \" + k)");
        let store = stores(dir.path())[which].clone();
        let id = suspended_before_a_slow_call(dir.path(), &store);
        let spawn = || {
            cairn(dir.path(), &store)
                .args(["resume", &id, "-q"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let started = Instant::now();
        let (a, b) = (spawn(), spawn());
        let outs =
            [wait_with_deadline(a, Duration::from_secs(30)), wait_with_deadline(b, Duration::from_secs(30))];
        let codes: Vec<Option<i32>> = outs.iter().map(|o| o.status.code()).collect();
        let winners = codes.iter().filter(|c| **c == Some(0)).count();
        assert_eq!(
            winners,
            1,
            "{store}: exit codes {codes:?}: {:?}",
            outs.iter().map(|o| text(&o.stderr)).collect::<Vec<_>>()
        );
        let loser = outs.iter().find(|o| o.status.code() != Some(0)).unwrap();
        assert_eq!(loser.status.code(), Some(1), "{store}: {}", text(&loser.stderr));
        let message = text(&loser.stderr);
        assert!(
            message.contains(&format!("run {id} is being driven by another process")),
            "{store}: {message}"
        );
        assert!(message.contains("pid "), "{store}: the holder is named: {message}");
        assert!(started.elapsed() >= Duration::from_millis(3_000));
        // Exactly one dispatch of the slow call, and it completed.
        let journal = entries(dir.path(), &store, &id);
        assert_eq!(count(&journal, "agent", "running"), 1, "{store}: {journal:#?}");
        assert_eq!(count(&journal, "agent", "ok"), 1, "{store}: {journal:#?}");
    }
}

#[test]
fn resume_wait_waits_for_the_driver_and_then_replays() {
    let dir = setup(3_000, "let k = await_external(\"go\"); agent(\"slow \" + k)");
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    let id = suspended_before_a_slow_call(dir.path(), &store);
    let first = cairn(dir.path(), &store).args(["resume", &id, "-q"]).stdout(Stdio::piped()).spawn().unwrap();
    // Once the first drives the run (its slow call is dispatched), the second asks to wait.
    let started = Instant::now();
    while count(&entries(dir.path(), &store, &id), "agent", "running") == 0 {
        assert!(started.elapsed() < Duration::from_secs(20), "the driver never dispatched its call");
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = run(dir.path(), &store, &["resume", &id, "--wait"]);
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    assert!(text(&second.stderr).contains("waiting for it"), "{}", text(&second.stderr));
    let first = wait_with_deadline(first, Duration::from_secs(30));
    assert_eq!(first.status.code(), Some(0));
    let journal = entries(dir.path(), &store, &id);
    assert_eq!(count(&journal, "agent", "running"), 1, "the waiter replayed: {journal:#?}");
}

#[test]
fn a_killed_driver_frees_the_run_for_a_resume_at_once() {
    for jsonl in [false, true] {
        let dir = setup(5_000, "let k = await_external(\"go\"); agent(\"slow \" + k)");
        let store = if jsonl {
            format!("jsonl:{}", dir.path().join("runs").display())
        } else {
            format!("sqlite:{}", dir.path().join("c.db").display())
        };
        let id = suspended_before_a_slow_call(dir.path(), &store);
        let mut driver = cairn(dir.path(), &store).args(["resume", &id, "-q"]).spawn().unwrap();
        // Once it drives the run (its slow call is dispatched), kill it.
        let started = Instant::now();
        while count(&entries(dir.path(), &store, &id), "agent", "running") == 0 {
            assert!(started.elapsed() < Duration::from_secs(10), "the driver never dispatched its call");
            std::thread::sleep(Duration::from_millis(50));
        }
        let refused = run(dir.path(), &store, &["resume", &id, "-q"]);
        assert_eq!(refused.status.code(), Some(1), "jsonl={jsonl}: {}", text(&refused.stderr));
        driver.kill().unwrap(); // SIGKILL: its lease is never released
        driver.wait().unwrap();
        // Its lease (30 s) has not expired, but its process is gone: the run is free now.
        std::fs::write(dir.path().join("cairn.toml"), "[providers.echo]\nkind = \"echo\"\nlatency_ms = 10\n")
            .unwrap();
        let out = run(dir.path(), &store, &["resume", &id, "-q"]);
        assert_eq!(out.status.code(), Some(0), "jsonl={jsonl}: {}", text(&out.stderr));
    }
}

#[test]
fn resolve_reaches_a_run_another_process_is_driving() {
    for jsonl in [false, true] {
        let dir = setup(2_500, "let r = parallel([|| await_external(\"k\"), || agent(\"slow\")]); r[0]");
        let store = if jsonl {
            format!("jsonl:{}", dir.path().join("runs").display())
        } else {
            format!("sqlite:{}", dir.path().join("c.db").display())
        };
        let driver = cairn(dir.path(), &store)
            .args(["run", "flow.rhai", "--run-id", "live-1", "-q"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Once the wait is journaled, resolve it from this (another) process.
        let started = Instant::now();
        loop {
            let out = run(dir.path(), &store, &["resolve", "live-1", "k", "\"from outside\""]);
            if out.status.success() {
                assert!(text(&out.stdout).contains("handed to it"), "{}", text(&out.stdout));
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "resolve kept failing: {}",
                text(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = wait_with_deadline(driver, Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(0), "jsonl={jsonl}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout).trim(), "\"from outside\"");
        let journal = entries(dir.path(), &store, "live-1");
        assert_eq!(count(&journal, "resolution", "ok"), 1, "{journal:#?}");
    }
}

/// A file's bytes and modification time.
fn snapshot(path: &Path) -> (Vec<u8>, std::time::SystemTime) {
    (std::fs::read(path).unwrap(), std::fs::metadata(path).unwrap().modified().unwrap())
}

#[test]
fn inspect_leaves_a_torn_jsonl_tail_to_its_writer() {
    let dir = setup(0, "agent(\"one\")");
    let store = format!("jsonl:{}", dir.path().join("runs").display());
    let out = run(dir.path(), &store, &["run", "flow.rhai", "--run-id", "torn", "-q"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Another process's append in progress, as a reader sees it.
    let journal = dir.path().join("runs/torn.jsonl");
    let mut file = std::fs::OpenOptions::new().append(true).open(&journal).unwrap();
    std::io::Write::write_all(&mut file, b"{\"seq\":99,\"kind\":\"ag").unwrap();
    drop(file);
    let before = snapshot(&journal);
    for args in [&["inspect", "torn"][..], &["inspect", "torn", "--json"], &["runs"], &["replay", "torn"]] {
        let out = run(dir.path(), &store, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    assert_eq!(snapshot(&journal), before, "a reader changed the journal");
}

#[test]
fn read_commands_refuse_a_foreign_sqlite_file_and_leave_it_unchanged() {
    let dir = setup(0, "agent(\"one\")");
    let path = dir.path().join("other.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('ada');").unwrap();
    drop(conn);
    std::thread::sleep(Duration::from_millis(20));
    let before = snapshot(&path);
    let store = format!("sqlite:{}", path.display());
    for args in [&["runs"][..], &["inspect", "x"], &["replay", "x"], &["run", "flow.rhai"], &["resume", "x"]]
    {
        let out = run(dir.path(), &store, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("is not a cairn store"), "{args:?}: {}", text(&out.stderr));
    }
    assert_eq!(snapshot(&path), before, "the foreign database changed");
    assert!(!dir.path().join("other.db-wal").exists());
}

#[test]
fn read_commands_read_a_read_only_cairn_store_without_writing() {
    let dir = setup(0, "agent(\"one\")");
    let path = dir.path().join("c.db");
    let store = format!("sqlite:{}", path.display());
    let out = run(dir.path(), &store, &["run", "flow.rhai", "--run-id", "ro", "-q"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::thread::sleep(Duration::from_millis(20));
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&path, perms).unwrap();
    let before = snapshot(&path);
    for args in [&["runs"][..], &["inspect", "ro", "--json"], &["replay", "ro"]] {
        let out = run(dir.path(), &store, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    assert_eq!(snapshot(&path), before, "a read command changed the store");
    // Nor does a read create a store where there is none.
    let missing = format!("sqlite:{}", dir.path().join("nothing/here.db").display());
    assert!(run(dir.path(), &missing, &["runs"]).status.success());
    assert_eq!(run(dir.path(), &missing, &["inspect", "ro"]).status.code(), Some(2));
    assert_eq!(run(dir.path(), &missing, &["replay", "ro"]).status.code(), Some(2));
    assert!(!dir.path().join("nothing").exists(), "a read command created a store");
}

#[test]
fn a_file_size_limit_ends_the_run_with_a_typed_store_error_and_a_resume_finishes_it() {
    for jsonl in [false, true] {
        let dir = setup(0, "let out = []; for i in 0..300 { out.push(agent(\"call \" + i)); } out.len()");
        let store = if jsonl {
            format!("jsonl:{}", dir.path().join("runs").display())
        } else {
            format!("sqlite:{}", dir.path().join("c.db").display())
        };
        // SIGXFSZ ignored, so a write past the limit fails with EFBIG instead of killing.
        let script = format!(
            "trap '' XFSZ; ulimit -f {}; exec {} --store {store} run flow.rhai --run-id full -q",
            if jsonl { 48 } else { 256 },
            bin().display()
        );
        let out = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .current_dir(dir.path())
            .env_remove("CAIRN_LEASE_TTL_MS")
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "jsonl={jsonl}: {stderr}");
        assert!(stderr.contains("store_io"), "jsonl={jsonl}: {stderr}");
        assert!(stderr.contains("file-size limit"), "jsonl={jsonl}: {stderr}");
        assert!(stderr.contains("cairn resume full"), "jsonl={jsonl}: {stderr}");
        let out = cairn(dir.path(), &store)
            .args(["resume", "full", "--wait", "--json", "-q"])
            .env_remove("CAIRN_LEASE_TTL_MS")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "jsonl={jsonl}: {}", text(&out.stderr));
        let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(outcome["value"], 300);
        assert!(outcome["preview"]["hits"].as_u64().unwrap() > 0, "earlier calls replay: {outcome:#}");
        assert_eq!(outcome["preview"]["orphaned"], 0, "{outcome:#}");
    }
}

/// A driver whose lease expired and was taken by another holder stops: nothing it writes
/// afterwards lands, and it does not settle `ok`.
#[test]
fn a_driver_that_lost_its_lease_writes_nothing_more() {
    use cairn::store::MemoryStore;
    use cairn::{
        AgentOptions, CallOptions, Engine, JournalStore, LeasableStore, ManualClock, RunOptions, RunStatus,
        Workflow,
    };
    use std::sync::Arc;

    let clock = ManualClock::new(1_000_000);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    // The nap lasts until the run was taken (a timed nap raced the theft: a test thread kept
    // waiting past it let the driver write before it lost anything).
    let (napping, woken) = (Arc::new(tokio::sync::Notify::new()), Arc::new(tokio::sync::Notify::new()));
    let (napping_here, woken_here) = (napping.clone(), woken.clone());
    let engine = Engine::builder(store.clone())
        .host_function("nap", move |_| {
            let (napping, woken) = (napping_here.clone(), woken_here.clone());
            async move {
                napping.notify_one();
                woken.notified().await;
                Ok(Value::Null)
            }
        })
        .lease_ttl(Duration::from_millis(90))
        .build()
        .unwrap();
    let workflow = Workflow::new("lost", |ctx, _| async move {
        ctx.call("nap", Value::Null, CallOptions::default()).await?;
        ctx.agent("after the nap", AgentOptions::default()).await
    });
    let run = cairn::RunId::parse("lost").unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let outcome = rt.block_on(async {
        let options = RunOptions { run_id: Some(run.clone()), ..RunOptions::default() };
        let handle = engine.run(&workflow, json_null(), options).unwrap();
        napping.notified().await;
        // The lease expires (by the store's clock) and someone else takes the run.
        clock.advance(10_000);
        let thief = store.acquire(&run, "thief", Duration::from_secs(600)).unwrap();
        woken.notify_one();
        let outcome = handle.result().await.unwrap();
        (outcome, thief)
    });
    let (outcome, _thief) = outcome;
    assert_ne!(outcome.status, RunStatus::Ok, "{outcome:?}");
    let journal = cairn::journal::decode_all(&store.load(&run).unwrap()).unwrap();
    assert!(
        !journal.iter().any(|e| e.kind == cairn::journal::Kind::Agent),
        "the driver kept writing after losing its lease: {journal:#?}"
    );
}

fn json_null() -> Value {
    Value::Null
}

/// A run whose task is dropped before it settles (its runtime shut down under it, its handle
/// leaked: an in-process "crash") stops renewing its lease, which runs out as a dead driver's
/// does. Renewed on its own thread until the segment's state dropped, it was kept for as long
/// as the process lived, and every later driver was refused `run_busy`
/// (`money::each_paid_turn_is_charged_once_across_a_failure_a_crash_and_resumes` failed so).
#[test]
fn a_run_dropped_with_its_runtime_stops_renewing_its_lease() {
    use cairn::store::MemoryStore;
    use cairn::{Engine, LeasableStore, RunOptions, Workflow};
    use std::sync::Arc;

    let store = Arc::new(MemoryStore::new());
    let engine = Engine::builder(store.clone()).lease_ttl(Duration::from_millis(90)).build().unwrap();
    let workflow = Workflow::new("dropped", |_ctx, _| async {
        std::future::pending::<()>().await;
        Ok(Value::Null)
    });
    let run = cairn::RunId::parse("dropped").unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let options = RunOptions { run_id: Some(run.clone()), ..RunOptions::default() };
        std::mem::forget(engine.run(&workflow, Value::Null, options).unwrap());
    });
    drop(runtime);
    // Renewed every 30 ms while it was kept: it outlives this wait only if it still is.
    let deadline = Instant::now() + Duration::from_secs(60);
    while store.holder(&run).unwrap().is_some() {
        assert!(Instant::now() < deadline, "the dropped run's lease is still renewed");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Free for the next driver.
    store.acquire(&run, "next", Duration::from_secs(30)).unwrap();
}

/// A journal store that counts the renewals of its leases (the rest is a [`MemoryStore`]'s).
/// With `slow_reads` set, each page read waits (up to 30 s) for a renewal to land, as a long
/// journal's read outlasts a lease's ttl, and counts the reads no renewal reached.
#[derive(Debug)]
struct CountingRenewals {
    inner: std::sync::Arc<cairn::store::MemoryStore>,
    renewals: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    slow_reads: std::sync::atomic::AtomicBool,
    unrenewed_reads: std::sync::atomic::AtomicUsize,
}

impl CountingRenewals {
    fn over(inner: std::sync::Arc<cairn::store::MemoryStore>) -> CountingRenewals {
        CountingRenewals {
            inner,
            renewals: Default::default(),
            slow_reads: Default::default(),
            unrenewed_reads: Default::default(),
        }
    }
}

impl cairn::JournalStore for CountingRenewals {
    fn append_tallied(
        &self,
        run: &cairn::RunId,
        entries: &[cairn::RawEntry],
        lease: Option<&cairn::Lease>,
        tally: cairn::Tally,
    ) -> cairn::store::Result<()> {
        self.inner.append_tallied(run, entries, lease, tally)
    }
    fn load(&self, run: &cairn::RunId) -> cairn::store::Result<Vec<cairn::RawEntry>> {
        self.inner.load(run)
    }
    fn load_page(
        &self,
        run: &cairn::RunId,
        after: u64,
        limit: usize,
    ) -> cairn::store::Result<Vec<cairn::RawEntry>> {
        use std::sync::atomic::Ordering;
        if self.slow_reads.load(Ordering::SeqCst) {
            let before = self.renewals.load(Ordering::SeqCst);
            let give_up = Instant::now() + Duration::from_secs(30);
            while self.renewals.load(Ordering::SeqCst) == before && Instant::now() < give_up {
                std::thread::sleep(Duration::from_millis(5));
            }
            if self.renewals.load(Ordering::SeqCst) == before {
                self.unrenewed_reads.fetch_add(1, Ordering::SeqCst);
            }
        }
        self.inner.load_page(run, after, limit)
    }
    fn put_meta(&self, meta: &cairn::RunMeta, lease: Option<&cairn::Lease>) -> cairn::store::Result<()> {
        self.inner.put_meta(meta, lease)
    }
    fn get_meta(&self, run: &cairn::RunId) -> cairn::store::Result<Option<cairn::RunMeta>> {
        self.inner.get_meta(run)
    }
    fn list_runs(&self, filter: &cairn::RunFilter) -> cairn::store::Result<Vec<cairn::RunMeta>> {
        self.inner.list_runs(filter)
    }
    fn delete(&self, run: &cairn::RunId, lease: Option<&cairn::Lease>) -> cairn::store::Result<()> {
        cairn::JournalStore::delete(&*self.inner, run, lease)
    }
    fn leases(&self) -> Option<&dyn cairn::LeasableStore> {
        Some(self)
    }
}

impl cairn::LeasableStore for CountingRenewals {
    fn acquire(&self, run: &cairn::RunId, owner: &str, ttl: Duration) -> cairn::store::Result<cairn::Lease> {
        self.inner.acquire(run, owner, ttl)
    }
    fn renew(&self, lease: &cairn::Lease, ttl: Duration) -> cairn::store::Result<()> {
        self.renewals.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.renew(lease, ttl)
    }
    fn release(&self, lease: &cairn::Lease) -> cairn::store::Result<()> {
        self.inner.release(lease)
    }
}

/// The lease of a run whose async runtime is held up is still renewed: here the runtime has
/// one worker, and the workflow blocks it (as a blocking call in async code, or a host that
/// blocks its own runtime, does) until three renewals have landed. A renewal that ran as a
/// task of that runtime never ran while it was blocked, and under load a `cairn resume` found
/// its lease expired (`agent_contract::an_unanswered_ask_past_its_deadline_is_denied`). The
/// store's clock stands still, so the lease cannot expire here: what is tested is that renewals
/// happen, however slowly a loaded machine runs the renewal thread (30 s at most).
#[test]
fn a_lease_is_renewed_while_every_worker_of_the_runtime_is_blocked() {
    use cairn::store::MemoryStore;
    use cairn::{Engine, ManualClock, RunOptions, RunStatus, Workflow};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let memory = Arc::new(MemoryStore::with_clock(Arc::new(ManualClock::new(1_000_000))));
    let renewals = Arc::new(AtomicUsize::new(0));
    let store =
        Arc::new(CountingRenewals { renewals: renewals.clone(), ..CountingRenewals::over(memory.clone()) });
    let engine =
        Engine::builder_with_stores(store, memory).lease_ttl(Duration::from_millis(90)).build().unwrap();
    let workflow = Workflow::new("blocked", move |_ctx, _| {
        let renewals = renewals.clone();
        async move {
            let before = renewals.load(Ordering::SeqCst);
            let give_up = Instant::now() + Duration::from_secs(30);
            while renewals.load(Ordering::SeqCst) < before + 3 && Instant::now() < give_up {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(Value::from(renewals.load(Ordering::SeqCst) - before))
        }
    });
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let outcome = runtime.block_on(async {
        let handle = engine.run(&workflow, Value::Null, RunOptions::default()).unwrap();
        handle.result().await.unwrap()
    });
    assert_eq!(outcome.status, RunStatus::Ok, "{outcome:?}");
    let renewed = outcome.value.as_ref().and_then(Value::as_u64).unwrap_or(0);
    assert!(renewed >= 3, "the lease was renewed {renewed} times while the runtime was blocked");
}

/// A resume keeps its lease while it reads the journal back: the lease is renewed from the
/// moment it is taken, not from the segment's launch. A million-call journal took longer than
/// the 30 s ttl to read on a loaded machine, and the resume then lost the run it had just
/// indexed (`run_busy`). Here every page read of the resume waits for a renewal; the store's
/// clock stands still, so what is tested is that renewals happen during the read.
#[test]
fn a_resume_renews_its_lease_while_it_reads_the_journal_back() {
    use cairn::store::MemoryStore;
    use cairn::{AgentOptions, Engine, ManualClock, ResumeOptions, RunOptions, RunStatus, Workflow};
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    let memory = Arc::new(MemoryStore::with_clock(Arc::new(ManualClock::new(1_000_000))));
    let store = Arc::new(CountingRenewals::over(memory.clone()));
    let engine = Engine::builder_with_stores(store.clone(), memory)
        .lease_ttl(Duration::from_millis(90))
        .build()
        .unwrap();
    let workflow = Workflow::new("read back", |ctx, _| async move {
        ctx.agent("first", AgentOptions::default()).await?;
        ctx.agent("second", AgentOptions::default()).await
    });
    let run = cairn::RunId::parse("read-back").unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let outcome = runtime.block_on(async {
        let options = RunOptions { run_id: Some(run.clone()), ..RunOptions::default() };
        engine.run(&workflow, Value::Null, options).unwrap().result().await.unwrap();
        store.slow_reads.store(true, Ordering::SeqCst);
        let options = ResumeOptions { workflow: Some(workflow.clone()), ..ResumeOptions::default() };
        engine.resume(&run, options).unwrap().result().await.unwrap()
    });
    assert_eq!(outcome.status, RunStatus::Ok, "{outcome:?}");
    assert_eq!(outcome.preview.hits, 2, "{outcome:?}");
    assert_eq!(
        store.unrenewed_reads.load(Ordering::SeqCst),
        0,
        "journal pages were read with the lease unrenewed"
    );
}
