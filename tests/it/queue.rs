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
    assert!(!queue.finish(&c2).unwrap(), "a run nobody asked to cancel was reported asked");
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

    // Cancel requests: recorded only for a run in the queue, shown to the worker that claims
    // it (and nobody else), and gone with the run.
    queue.enqueue(&run("r3")).unwrap();
    assert!(queue.request_cancel(&run("r3")).unwrap());
    assert!(queue.request_cancel(&run("r3")).unwrap(), "a second request was refused");
    assert!(!queue.request_cancel(&run("gone")).unwrap(), "a run outside the queue took a request");
    assert!(queue.cancel_requests("e").unwrap().is_empty(), "an unclaimed run's request was handed out");
    let c5 = queue.claim("e", ttl).unwrap().unwrap();
    assert_eq!(c5.run_id.as_str(), "r3");
    assert_eq!(queue.cancel_requests("e").unwrap(), vec![run("r3")]);
    assert!(queue.cancel_requests("f").unwrap().is_empty(), "another worker saw the request");
    // Withdrawn only when no live claim holds it.
    assert!(!queue.withdraw(&run("r3")).unwrap(), "a run under a live claim was withdrawn");
    clock.advance(1_001);
    assert!(queue.withdraw(&run("r3")).unwrap(), "a run whose claim expired was not withdrawn");
    assert!(matches!(queue.finish(&c5), Err(Error::LeaseHeld { .. })));
    queue.enqueue(&run("r4")).unwrap();
    assert!(queue.withdraw(&run("r4")).unwrap());
    assert!(!queue.withdraw(&run("r4")).unwrap());
    assert_eq!(queue.depth().unwrap(), 0);
    queue.enqueue(&run("r3")).unwrap();
    let c6 = queue.claim("e", ttl).unwrap().unwrap();
    assert!(queue.cancel_requests("e").unwrap().is_empty(), "a request outlived its run's time in the queue");
    assert!(queue.request_cancel(&run("r3")).unwrap());
    assert!(queue.finish(&c6).unwrap(), "finishing hid a cancel request from the worker");
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
    let engine = Engine::builder_with_stores(journal, blobs).build().unwrap();
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
    let engine = Engine::builder(store).build().unwrap();
    let err = engine.enqueue_script(&Script::rhai("s", "1"), json!({}), RunOptions::default()).unwrap_err();
    assert_eq!(err.code, cairn::ErrorCode::Config);
    assert!(Worker::new(engine, WorkerOptions::default()).is_err());
}

/// A mock OpenAI-compatible model: answers every request after `delay` (a prompt containing
/// `slow` after a minute), echoing the prompt's length, and counts the requests per prompt,
/// noting when each prompt was first asked.
struct CountingModel {
    url: String,
    asked: Arc<Mutex<HashMap<String, u32>>>,
    first_asked: Arc<Mutex<HashMap<String, Instant>>>,
}

impl CountingModel {
    fn start(delay: Duration) -> CountingModel {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let asked = Arc::new(Mutex::new(HashMap::new()));
        let first_asked = Arc::new(Mutex::new(HashMap::new()));
        let (counts, firsts) = (asked.clone(), first_asked.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let (counts, firsts) = (counts.clone(), firsts.clone());
                std::thread::spawn(move || {
                    let Some(body) = crate::scripted_server::read_request(&stream) else { return };
                    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let prompt = request["messages"]
                        .as_array()
                        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
                        .map(|m| m["content"].to_string())
                        .unwrap_or_default();
                    firsts.lock().unwrap().entry(prompt.clone()).or_insert_with(Instant::now);
                    *counts.lock().unwrap().entry(prompt.clone()).or_insert(0) += 1;
                    std::thread::sleep(if prompt.contains("slow") { Duration::from_secs(60) } else { delay });
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
        CountingModel { url, asked, first_asked }
    }

    fn calls(&self) -> usize {
        self.asked.lock().unwrap().values().map(|&n| n as usize).sum()
    }

    fn asked_for(&self, needle: &str) -> u32 {
        self.asked.lock().unwrap().iter().filter(|(prompt, _)| prompt.contains(needle)).map(|(_, &n)| n).sum()
    }
}

/// A directory with a `cairn.toml` naming `store` and the mock model as the default route.
fn project(store: Option<&str>, model: &CountingModel) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let store = store.map(|url| format!("store = \"{url}\"\n\n")).unwrap_or_default();
    std::fs::write(
        dir.path().join("cairn.toml"),
        format!(
            "{store}[providers.m]\nkind = \"openai-compatible\"\nbase_url = \"{}\"\nprices = {{ tiny = [1.0, 2.0] }}\n\n[routing]\ndefault = \"m:tiny\"\n",
            model.url
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("five.rhai"),
        "let out = []; for k in 0..5 { out.push(agent(`run ${args.i} call ${k}`)); } out.len()",
    )
    .unwrap();
    dir
}

/// `cairn` in `dir`, with short leases so a killed driver's runs are free soon.
fn cairn_in(dir: &std::path::Path) -> std::process::Command {
    let mut command = std::process::Command::new(assert_cmd::cargo::cargo_bin("cairn"));
    command
        .current_dir(dir)
        .env_remove("OPENAI_API_KEY")
        .env_remove("CAIRN_SERVER_TOKEN")
        .env("CAIRN_LEASE_TTL_MS", "1500")
        .stdin(std::process::Stdio::null());
    command
}

/// A child process killed (and reaped) on drop, so a failed assertion leaves no worker behind.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `cairn serve --workers 0` on the project's store: the HTTP API only.
fn serve(dir: &std::path::Path) -> (Reaped, std::net::SocketAddr) {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let child = cairn_in(dir)
        .args(["serve", "--quiet", "--workers", "0", "--listen", &addr.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let server = Reaped(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while http(addr, "GET", "/healthz", None).0 != 200 {
        assert!(Instant::now() < deadline, "cairn serve did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    (server, addr)
}

/// One HTTP/1.1 request (connection closed after it): the status and the body. Status 0 when
/// nothing answers.
fn http(addr: std::net::SocketAddr, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
    use std::io::Read;
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else { return (0, String::new()) };
    let body = body.map(Value::to_string).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return (0, String::new());
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    let status = response.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    (status, body)
}

/// Three `cairn worker` processes on one PostgreSQL drain 100 queued runs (five model calls
/// each, submitted over HTTP to a `cairn serve` on the same store) while one of them is
/// SIGKILLed mid-run: every run settles `ok`, the killed worker's runs are taken over and the
/// takeovers show in the server's `/metrics`, and no completed call is asked twice: the only
/// calls asked again are ones the killed worker had asked before it died (at most one per
/// slot: its in-flight calls).
#[cfg(unix)]
#[test]
fn three_workers_drain_the_queue_while_one_is_killed() {
    const RUNS: usize = 100;
    const CONCURRENCY: usize = 4;
    let started = Instant::now();
    let Some(url) = fresh_url("takeover") else { return };
    let model = CountingModel::start(Duration::from_millis(30));
    let dir = project(Some(&url), &model);
    let (_server, addr) = serve(dir.path());
    let five = std::fs::read_to_string(dir.path().join("five.rhai")).unwrap();
    for i in 0..RUNS {
        let (status, body) = http(addr, "POST", "/v1/runs", Some(&json!({"source": five, "args": {"i": i}})));
        assert_eq!(status, 202, "{body}");
    }
    // Claims lapse in 1.5 s, so the killed worker's runs are claimed soon; run leases last the
    // default 30 s: the killed worker's are taken over at once all the same (their holder is a
    // dead process on this host), while a live worker held up by the machine's load keeps its
    // runs. With 1.5 s leases a survivor starved for 1.5 s lost a run with a call in flight,
    // which its successor asked again: the re-ask of an in-flight call at a lost lease, which
    // is not what this test is about (a lapsed driver sends nothing new:
    // `lease_lapse::*`).
    let worker = || {
        let child = cairn_in(dir.path())
            .env("CAIRN_LEASE_TTL_MS", "30000")
            .args(["worker", "--quiet", "--concurrency", &CONCURRENCY.to_string(), "--claim-ttl-ms", "1500"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        Reaped(child)
    };
    // The victim starts alone, so the calls flowing are its own: with 100 runs queued and 4
    // slots it always drives 4 runs, so a kill is always mid-run.
    let mut victim = worker();
    let deadline = Instant::now() + Duration::from_secs(30);
    while model.calls() < 8 {
        assert!(Instant::now() < deadline, "no calls reached the model");
        std::thread::sleep(Duration::from_millis(5));
    }
    let survivors = [worker(), worker()];
    while model.calls() < 60 {
        assert!(Instant::now() < deadline, "the calls stopped flowing");
        std::thread::sleep(Duration::from_millis(5));
    }
    victim.0.kill().unwrap();
    victim.0.wait().unwrap();
    let killed_at = Instant::now();

    let store = PostgresStore::open(&url, PostgresOptions::new()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(45);
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
        unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    }
    for mut child in survivors {
        let status = child.0.wait().unwrap();
        let mut stderr = String::new();
        std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        assert!(status.success(), "a worker failed to drain: {stderr}");
    }

    assert_eq!(store.depth().unwrap(), 0, "runs were left in the queue");
    let takeovers = store.takeovers().unwrap();
    assert!(takeovers >= 1, "the killed worker's runs were not taken over");
    let (status, metrics) = http(addr, "GET", "/metrics", None);
    assert_eq!(status, 200, "{metrics}");
    assert!(
        metrics.lines().any(|line| line == format!("cairn_lease_takeovers_total {takeovers}")),
        "the takeovers do not show in /metrics: {metrics}"
    );
    let asked = model.asked.lock().unwrap();
    assert_eq!(asked.len(), RUNS * 5, "not every call reached the model");
    let first_asked = model.first_asked.lock().unwrap();
    let again: Vec<(&String, &u32)> = asked.iter().filter(|(_, n)| **n > 1).collect();
    for (prompt, n) in &again {
        assert!(
            **n == 2 && first_asked[*prompt] < killed_at,
            "call {prompt} was asked {n} times, first after the kill: a completed call was asked again"
        );
    }
    assert!(
        again.len() <= CONCURRENCY,
        "{} calls were asked again; only the killed worker's {CONCURRENCY} in-flight calls may be",
        again.len()
    );
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(60), "the takeover test took {elapsed:.1?}");
    println!("takeover test: {takeovers} takeovers, {} calls asked again, {elapsed:.1?}", again.len());
}

/// A run a `cairn worker` process drives (waiting on a slow model call) is cancelled from
/// other processes, by `cairn cancel` and over HTTP through a `cairn serve` on the same store:
/// the worker cancels it within a poll, the in-flight call and the settlement are journaled,
/// the run settles `cancelled` and nothing after the cancelled call runs; the worker carries on
/// with other runs. A queued run nobody claimed is cancelled at once and never driven; a
/// settled run refuses.
#[cfg(unix)]
#[test]
fn a_run_driven_by_a_worker_process_is_cancelled_from_another_process() {
    let Some(url) = fresh_url("cancel") else { return };
    let model = CountingModel::start(Duration::from_millis(10));
    let dir = project(Some(&url), &model);
    std::fs::write(dir.path().join("slow.rhai"), "let a = agent(`slow ${args.n}`); agent(`after ${args.n}`)")
        .unwrap();
    let enqueue = |file: &str, args: &str| {
        let out = cairn_in(dir.path()).args(["enqueue", file, "--args", args]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        run(String::from_utf8(out.stdout).unwrap().trim())
    };
    let store = PostgresStore::open(&url, PostgresOptions::new()).unwrap();
    let status_of = |id: &RunId| store.get_meta(id).unwrap().unwrap().status;

    // Queued and unclaimed: cancelled at once, and no worker ever drives it.
    let idle = enqueue("slow.rhai", r#"{"n": "idle"}"#);
    let out = cairn_in(dir.path()).args(["cancel", idle.as_str()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(status_of(&idle), RunStatus::Cancelled);
    assert_eq!(store.depth().unwrap(), 0, "a cancelled queued run stayed in the queue");

    let (_server, addr) = serve(dir.path());
    let _worker = Reaped(
        cairn_in(dir.path())
            .args(["worker", "--quiet", "--concurrency", "2"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let wait_asked = |needle: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while model.asked_for(needle) == 0 {
            assert!(Instant::now() < deadline, "the worker never asked {needle:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let wait_settled = |id: &RunId, bound: Duration| {
        let deadline = Instant::now() + bound;
        loop {
            let status = status_of(id);
            if !matches!(status, RunStatus::Queued | RunStatus::Running) {
                return status;
            }
            assert!(Instant::now() < deadline, "run {id} is still {status} after {bound:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    // Cancelled by `cairn cancel` in another process while the worker waits on the model.
    let first = enqueue("slow.rhai", r#"{"n": "one"}"#);
    wait_asked("slow one");
    let asked_at = Instant::now();
    let out = cairn_in(dir.path()).args(["cancel", first.as_str(), "--wait", "20"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(5), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("asked the worker"), "{stdout}");
    assert!(asked_at.elapsed() < Duration::from_secs(10), "the cancel took {:?}", asked_at.elapsed());
    assert_eq!(status_of(&first), RunStatus::Cancelled);
    let journal: Vec<String> = store.load(&first).unwrap().iter().map(|e| e.json().to_owned()).collect();
    assert!(
        journal.iter().any(|e| e.contains(r#""kind":"agent""#) && e.contains(r#""status":"cancelled""#)),
        "the severed call was not journaled: {journal:#?}"
    );
    assert!(
        journal.last().unwrap().contains("run_settled"),
        "the settlement was not journaled: {journal:#?}"
    );
    assert_eq!(model.asked_for("after one"), 0, "the cancelled run went on");

    // The worker carries on; a second driven run is cancelled over HTTP.
    let quick = enqueue("five.rhai", r#"{"i": 1}"#);
    assert_eq!(wait_settled(&quick, Duration::from_secs(30)), RunStatus::Ok);
    let second = enqueue("slow.rhai", r#"{"n": "two"}"#);
    wait_asked("slow two");
    let (code, body) = http(addr, "POST", &format!("/v1/runs/{second}/cancel"), Some(&json!({})));
    assert_eq!(code, 202, "{body}");
    assert_eq!(wait_settled(&second, Duration::from_secs(10)), RunStatus::Cancelled);
    assert_eq!(model.asked_for("after two"), 0, "the cancelled run went on");
    let again = enqueue("five.rhai", r#"{"i": 2}"#);
    assert_eq!(wait_settled(&again, Duration::from_secs(30)), RunStatus::Ok);

    // A settled run refuses, over HTTP and from the CLI.
    let (code, body) = http(addr, "POST", &format!("/v1/runs/{second}/cancel"), Some(&json!({})));
    assert_eq!(code, 409, "{body}");
    let out = cairn_in(dir.path()).args(["cancel", quick.as_str()]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("settled"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(status_of(&quick), RunStatus::Ok);
    assert_eq!(model.asked_for("slow idle"), 0, "a cancelled queued run was driven");
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
        Engine::builder(store).build().unwrap()
    };
    three_workers_drain_many_quick_runs(open, 60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sqlite_workers_drain_sixty_quick_runs_in_bounded_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let open = || {
        let store = Arc::new(SqliteStore::open(&path, SqliteOptions::new()).unwrap());
        Engine::builder(store).build().unwrap()
    };
    three_workers_drain_many_quick_runs(open, 60).await;
}
