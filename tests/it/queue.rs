//! The run queue: its store semantics on SQLite and PostgreSQL (enqueue, exclusive claims,
//! expiry takeover counted, stale claims refused, defer), workers draining it in process
//! (suspended runs leave the queue and return when resolved), and three `cairn worker`
//! processes on one PostgreSQL draining queued runs against a counting mock model while one
//! of them is SIGKILLed mid-run.

use std::collections::HashMap;
use std::io::Write;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn::store::{Error, PostgresOptions, PostgresStore, SqliteOptions, SqliteStore};
use cairn::{
    Engine, JournalStore, ManualClock, RunFilter, RunId, RunOptions, RunQueue, RunStatus, Script,
    TranscriptStore, Worker, WorkerOptions,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::postgres::fresh_url;

fn run(id: &str) -> RunId {
    RunId::parse(id).unwrap()
}

/// The queue's promises, against a store reading time from `clock`.
fn queue_semantics(queue: &dyn RunQueue, clock: &ManualClock) {
    let ttl = Duration::from_secs(1);
    assert_eq!(queue.depth().unwrap(), 0);
    assert!(queue.claim("a", ttl).unwrap().is_none(), "an empty queue handed out a claim");
    queue.enqueue(&run("r1")).unwrap();
    clock.advance(1);
    queue.enqueue(&run("r2")).unwrap();
    queue.enqueue(&run("r1")).unwrap();
    assert_eq!(queue.depth().unwrap(), 2, "a second enqueue of a queued run duplicated it");

    // Oldest first, one claimant per run.
    let c1 = queue.claim("a", ttl).unwrap().unwrap();
    assert_eq!((c1.run_id.as_str(), c1.takeover, c1.attempts), ("r1", false, 1));
    let c2 = queue.claim("b", ttl).unwrap().unwrap();
    assert_eq!(c2.run_id.as_str(), "r2");
    assert!(queue.claim("c", ttl).unwrap().is_none(), "a claimed run was claimed again");
    queue.renew(&c1, ttl).unwrap();
    queue.finish(&c2).unwrap();
    assert_eq!(queue.depth().unwrap(), 1);
    assert_eq!(queue.takeovers().unwrap(), 0);

    // A claim whose worker stopped renewing expires; the next claim takes the run over, at a
    // higher epoch, and the old claim can neither renew nor finish.
    clock.advance(500);
    assert!(queue.claim("c", ttl).unwrap().is_none(), "a live claim was taken over");
    clock.advance(600);
    let c3 = queue.claim("c", ttl).unwrap().unwrap();
    assert_eq!((c3.run_id.as_str(), c3.takeover, c3.attempts), ("r1", true, 2));
    assert!(c3.epoch > c1.epoch);
    assert_eq!(queue.takeovers().unwrap(), 1);
    assert!(matches!(queue.renew(&c1, ttl), Err(Error::LeaseHeld { .. })));
    assert!(matches!(queue.finish(&c1), Err(Error::LeaseHeld { .. })));
    assert!(matches!(queue.defer(&c1, ttl), Err(Error::LeaseHeld { .. })));

    // Deferred: ready again only after the delay, and not a takeover then.
    queue.defer(&c3, Duration::from_secs(5)).unwrap();
    assert!(queue.claim("d", ttl).unwrap().is_none(), "a deferred run was claimed early");
    clock.advance(5_000);
    let c4 = queue.claim("d", ttl).unwrap().unwrap();
    assert_eq!((c4.run_id.as_str(), c4.takeover), ("r1", false));
    queue.finish(&c4).unwrap();
    assert_eq!(queue.depth().unwrap(), 0);
    assert_eq!(queue.takeovers().unwrap(), 1);
}

#[test]
fn the_sqlite_queue_keeps_its_promises() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_700_000_000_000);
    let options = SqliteOptions { clock: Arc::new(clock.clone()), ..SqliteOptions::new() };
    let store = SqliteStore::open(&dir.path().join("q.db"), options).unwrap();
    queue_semantics(&store, &clock);
}

#[test]
fn the_postgres_queue_keeps_its_promises() {
    let Some(url) = fresh_url("queue") else { return };
    let clock = ManualClock::new(1_700_000_000_000);
    let options = PostgresOptions { clock: Arc::new(clock.clone()), ..PostgresOptions::new() };
    let store = PostgresStore::open(&url, options).unwrap();
    queue_semantics(&store, &clock);
}

#[test]
fn concurrent_claims_on_postgres_never_share_a_run() {
    let Some(url) = fresh_url("claims") else { return };
    let store = PostgresStore::open(&url, PostgresOptions::new()).unwrap();
    for n in 0..40 {
        store.enqueue(&run(&format!("r{n:02}"))).unwrap();
    }
    let claimed: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let store = &store;
                scope.spawn(move || {
                    let mut mine = Vec::new();
                    while let Some(claim) = store.claim(&format!("w{w}"), Duration::from_secs(30)).unwrap() {
                        mine.push(claim.run_id.to_string());
                    }
                    mine
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    let mut sorted = claimed.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!((claimed.len(), sorted.len()), (40, 40), "a run was claimed twice or not at all");
}

/// Runs workers over `engine` until every run in `runs` is in a status of `until`.
async fn drain(engine: &Engine, workers: usize, runs: &[RunId], until: &[RunStatus]) -> cairn::WorkerReport {
    let worker =
        Worker::new(engine.clone(), WorkerOptions { concurrency: workers, ..WorkerOptions::default() })
            .unwrap();
    let shutdown = CancellationToken::new();
    let driving = {
        let shutdown = shutdown.clone();
        tokio::spawn(async move { worker.run_until(shutdown).await })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let statuses: Vec<RunStatus> =
            runs.iter().map(|run| engine.journal_store().get_meta(run).unwrap().unwrap().status).collect();
        if statuses.iter().all(|status| until.contains(status)) {
            break;
        }
        assert!(Instant::now() < deadline, "the workers did not drain the queue: {statuses:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    driving.await.unwrap()
}

/// Enqueued runs are driven by workers; a suspended one leaves the queue and returns when
/// resolved, continuing from its journal.
async fn workers_drain_and_suspended_runs_return(
    journal: Arc<dyn JournalStore>,
    blobs: Arc<dyn TranscriptStore>,
) {
    let engine = Engine::builder(journal, blobs).build().unwrap();
    let queue = || engine.journal_store().queue().unwrap();
    let quick = Script::rhai(
        "quick",
        "let out = []; for k in 0..3 { out.push(agent(`run ${args.i} call ${k}`)); } out.len()",
    );
    let runs: Vec<RunId> = (0..6)
        .map(|i| engine.enqueue_script(&quick, json!({"i": i}), RunOptions::default()).unwrap())
        .collect();
    assert_eq!(engine.journal_store().get_meta(&runs[0]).unwrap().unwrap().status, RunStatus::Queued);
    let listed = engine
        .journal_store()
        .list_runs(&RunFilter { statuses: vec![RunStatus::Queued], ..RunFilter::default() })
        .unwrap();
    assert_eq!(listed.len(), 6);
    assert_eq!(queue().depth().unwrap(), 6);
    let report = drain(&engine, 3, &runs, &[RunStatus::Ok]).await;
    assert_eq!(report.settled, 6, "{report:?}");
    assert_eq!(queue().depth().unwrap(), 0);

    let waits = Script::rhai(
        "waits",
        r#"let first = agent("before the wait"); let answer = await_external("go"); agent(`after ${answer}`)"#,
    );
    let parked = engine.enqueue_script(&waits, json!({}), RunOptions::default()).unwrap();
    let report = drain(&engine, 2, std::slice::from_ref(&parked), &[RunStatus::Suspended]).await;
    assert_eq!(report.suspended, 1, "{report:?}");
    assert_eq!(queue().depth().unwrap(), 0, "a suspended run stayed in the queue");
    engine.resolve(&parked, "go", json!("yes")).unwrap();
    assert_eq!(queue().depth().unwrap(), 1, "a resolved queued run did not return to the queue");
    let report = drain(&engine, 2, std::slice::from_ref(&parked), &[RunStatus::Ok]).await;
    assert_eq!(report.settled, 1, "{report:?}");
    let journal = engine.journal_store().load(&parked).unwrap();
    let text: Vec<&str> = journal.iter().map(|entry| entry.json()).collect();
    assert_eq!(
        text.iter().filter(|t| t.contains(r#""kind":"agent""#) && t.contains(r#""status":"ok""#)).count(),
        2,
        "the resumed run did not replay its first call: {text:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_workers_drain_the_queue_and_suspended_runs_return() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("q.db"), SqliteOptions::new()).unwrap());
    workers_drain_and_suspended_runs_return(store.clone(), store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_workers_drain_the_queue_and_suspended_runs_return() {
    let Some(url) = fresh_url("drain") else { return };
    let store = Arc::new(PostgresStore::open(&url, PostgresOptions::new()).unwrap());
    workers_drain_and_suspended_runs_return(store.clone(), store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_without_a_queue_refuses_to_enqueue() {
    let store = Arc::new(cairn::MemoryStore::new());
    let engine = Engine::builder(store.clone(), store).build().unwrap();
    let err = engine.enqueue_script(&Script::rhai("s", "1"), json!({}), RunOptions::default()).unwrap_err();
    assert_eq!(err.code, cairn::ErrorCode::Config);
    assert!(Worker::new(engine, WorkerOptions::default()).is_err());
}

/// A mock OpenAI-compatible model: answers every request after `delay`, echoing the prompt,
/// and counts the requests per prompt.
struct CountingModel {
    url: String,
    asked: Arc<Mutex<HashMap<String, u32>>>,
}

impl CountingModel {
    fn start(delay: Duration) -> CountingModel {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let asked = Arc::new(Mutex::new(HashMap::new()));
        let counts = asked.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let counts = counts.clone();
                std::thread::spawn(move || {
                    let Some(body) = crate::scripted_server::read_request(&stream) else { return };
                    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let prompt = request["messages"]
                        .as_array()
                        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
                        .map(|m| m["content"].to_string())
                        .unwrap_or_default();
                    *counts.lock().unwrap().entry(prompt.clone()).or_insert(0) += 1;
                    std::thread::sleep(delay);
                    let text = crate::scripted_server::data_lines(&[
                        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": format!("seen {}", prompt.len())}, "finish_reason": null}]}),
                        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
                        json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}),
                    ]);
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        text.len()
                    );
                    let _ = stream.write_all(head.as_bytes());
                    let _ = stream.write_all(text.as_bytes());
                });
            }
        });
        CountingModel { url, asked }
    }
}

/// Three `cairn worker` processes on one PostgreSQL drain queued runs (five model calls
/// each) while one of them is SIGKILLed mid-run: every run settles `ok`, the killed worker's
/// runs are taken over (counted by the store), and no call is asked twice except those the
/// killed worker had in flight.
#[cfg(unix)]
#[test]
fn three_workers_drain_the_queue_while_one_is_killed() {
    const RUNS: usize = 30;
    const CONCURRENCY: usize = 4;
    let Some(url) = fresh_url("takeover") else { return };
    let model = CountingModel::start(Duration::from_millis(30));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cairn.toml"),
        format!(
            "store = \"{url}\"\n\n[providers.m]\nkind = \"openai-compatible\"\nbase_url = \"{}\"\nprices = {{ tiny = [1.0, 2.0] }}\n\n[routing]\ndefault = \"m:tiny\"\n",
            model.url
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("five.rhai"),
        "let out = []; for k in 0..5 { out.push(agent(`run ${args.i} call ${k}`)); } out.len()",
    )
    .unwrap();
    let cairn = assert_cmd::cargo::cargo_bin("cairn");
    let command = || {
        let mut command = std::process::Command::new(&cairn);
        command
            .current_dir(dir.path())
            .env_remove("OPENAI_API_KEY")
            .env("CAIRN_LEASE_TTL_MS", "1500")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        command
    };
    for i in 0..RUNS {
        let out =
            command().args(["enqueue", "five.rhai", "--args", &format!("{{\"i\": {i}}}")]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let spawn = || {
        command()
            .args(["worker", "--concurrency", &CONCURRENCY.to_string(), "--claim-ttl-ms", "1500"])
            .spawn()
            .unwrap()
    };
    let mut victim = spawn();
    let mut survivors = vec![spawn(), spawn()];
    // Kill one worker once calls are flowing: it has runs in flight.
    let deadline = Instant::now() + Duration::from_secs(30);
    while model.asked.lock().unwrap().len() < 20 {
        assert!(Instant::now() < deadline, "no calls reached the model");
        std::thread::sleep(Duration::from_millis(10));
    }
    victim.kill().unwrap();
    victim.wait().unwrap();

    let store = PostgresStore::open(&url, PostgresOptions::new()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let metas = store.list_runs(&RunFilter::default()).unwrap();
        let settled = metas.iter().filter(|m| m.status == RunStatus::Ok).count();
        if settled == RUNS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {settled} of {RUNS} runs settled: {:?}",
            metas.iter().map(|m| m.status).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // SIGTERM drains: the survivors exit cleanly.
    for child in &survivors {
        // SAFETY: signalling a child process this test started and has not reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    }
    for child in survivors.drain(..) {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "a worker failed to drain: {}", String::from_utf8_lossy(&out.stderr));
    }

    assert_eq!(store.depth().unwrap(), 0, "runs were left in the queue");
    let takeovers = store.takeovers().unwrap();
    assert!(takeovers >= 1, "the killed worker's runs were not taken over");
    let asked = model.asked.lock().unwrap();
    assert_eq!(asked.len(), RUNS * 5, "not every call reached the model");
    let repeated: u32 = asked.values().map(|n| n - 1).sum();
    assert!(
        repeated as usize <= CONCURRENCY,
        "{repeated} calls were asked again; only the killed worker's {CONCURRENCY} in-flight calls may be"
    );
    println!("takeover test: {takeovers} takeovers, {repeated} calls asked again");
}

/// `cairn worker` on SIGTERM finishes the run it is driving and claims nothing new; `cairn
/// enqueue` queues without running; `cairn runs --status queued` lists what waits.
#[cfg(unix)]
#[test]
fn sigterm_drains_a_worker_it_finishes_in_flight_work_and_claims_nothing_new() {
    let model = CountingModel::start(Duration::from_millis(150));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cairn.toml"),
        format!(
            "[providers.m]\nkind = \"openai-compatible\"\nbase_url = \"{}\"\nprices = {{ tiny = [1.0, 2.0] }}\n\n[routing]\ndefault = \"m:tiny\"\n",
            model.url
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("five.rhai"),
        "let out = []; for k in 0..5 { out.push(agent(`run ${args.i} call ${k}`)); } out.len()",
    )
    .unwrap();
    let cairn = assert_cmd::cargo::cargo_bin("cairn");
    let command = || {
        let mut command = std::process::Command::new(&cairn);
        command.current_dir(dir.path()).env_remove("OPENAI_API_KEY").stdin(std::process::Stdio::null());
        command
    };
    let mut ids = Vec::new();
    for i in 0..2 {
        let out =
            command().args(["enqueue", "five.rhai", "--args", &format!("{{\"i\": {i}}}")]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        ids.push(String::from_utf8(out.stdout).unwrap().trim().to_owned());
    }
    assert!(model.asked.lock().unwrap().is_empty(), "enqueue ran something");
    let listed = command().args(["runs", "--status", "queued", "--json"]).output().unwrap();
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");

    let worker = command()
        .args(["worker", "--concurrency", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while model.asked.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the worker drove nothing");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: signalling a child process this test started and has not reaped.
    unsafe { libc::kill(worker.id() as i32, libc::SIGTERM) };
    let out = worker.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("1 settled"), "{stderr}");

    let store = SqliteStore::open(&dir.path().join(".cairn/cairn.db"), SqliteOptions::new()).unwrap();
    let statuses: Vec<RunStatus> =
        ids.iter().map(|id| store.get_meta(&run(id)).unwrap().unwrap().status).collect();
    assert_eq!(
        statuses,
        [RunStatus::Ok, RunStatus::Queued],
        "in-flight work was not finished, or new work claimed"
    );
    assert_eq!(store.depth().unwrap(), 1);
    assert_eq!(model.asked.lock().unwrap().len(), 5);
}

/// Three workers, each with its own engine and store (as three processes would have), 16
/// slots each, drain `runs` queued runs of five quick echo calls within a bound: many runs in
/// flight on few threads must neither hang nor crawl.
async fn three_workers_drain_many_quick_runs(open: impl Fn() -> Engine, runs: usize) {
    let submitter = open();
    let five = Script::rhai(
        "five",
        "let out = []; for k in 0..5 { out.push(agent(`run ${args.i} call ${k}`)); } out.len()",
    );
    for i in 0..runs {
        submitter.enqueue_script(&five, json!({"i": i}), RunOptions::default()).unwrap();
    }
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let drivers: Vec<_> = (0..3)
        .map(|_| {
            let worker =
                Worker::new(open(), WorkerOptions { concurrency: 16, ..WorkerOptions::default() }).unwrap();
            let shutdown = shutdown.clone();
            tokio::spawn(async move { worker.run_until(shutdown).await })
        })
        .collect();
    let ok = RunFilter { statuses: vec![RunStatus::Ok], ..RunFilter::default() };
    let deadline = started + Duration::from_secs(30);
    loop {
        let store = submitter.journal_store().clone();
        let filter = ok.clone();
        let done =
            tokio::task::spawn_blocking(move || store.list_runs(&filter).unwrap().len()).await.unwrap();
        if done == runs {
            break;
        }
        assert!(Instant::now() < deadline, "three workers settled only {done} of {runs} runs in 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed();
    shutdown.cancel();
    let mut settled = 0;
    for driver in drivers {
        let report = tokio::time::timeout(Duration::from_secs(20), driver)
            .await
            .expect("a worker did not stop after its shutdown")
            .unwrap();
        assert_eq!((report.failed, report.deferred), (0, 0), "{report:?}");
        settled += report.settled;
    }
    assert_eq!(settled, runs as u64);
    assert_eq!(submitter.journal_store().queue().unwrap().depth().unwrap(), 0);
    println!("{runs} runs drained by three workers in {elapsed:.2?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_postgres_workers_drain_sixty_quick_runs_in_bounded_time() {
    let Some(url) = fresh_url("many") else { return };
    let open = || {
        let store = Arc::new(PostgresStore::open(&url, PostgresOptions::new()).unwrap());
        Engine::builder(store.clone(), store).build().unwrap()
    };
    three_workers_drain_many_quick_runs(open, 60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sqlite_workers_drain_sixty_quick_runs_in_bounded_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let open = || {
        let store = Arc::new(SqliteStore::open(&path, SqliteOptions::new()).unwrap());
        Engine::builder(store.clone(), store).build().unwrap()
    };
    three_workers_drain_many_quick_runs(open, 60).await;
}
