//! Queue throughput: three workers (each with its own engine and its own PostgreSQL store,
//! as three `cairn worker` processes would have) drain queued runs of five quick echo calls
//! each; prints completed runs per second. Target: ≥ 200 runs/s.
//!
//! Needs a server: `CAIRN_TEST_POSTGRES_URL=postgres://cairn@127.0.0.1:55432/cairn_test`
//! (`.ci/postgres start DIR` starts one). Run with `cargo bench --bench workers`
//! (`CAIRN_BENCH_RUNS=N` changes the number of runs, 1,000 by default).

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::store::{PostgresOptions, PostgresStore};
use cairn::{Engine, RunFilter, RunOptions, RunStatus, Script, Worker, WorkerOptions};
use tokio_util::sync::CancellationToken;

const WORKERS: usize = 3;
const CONCURRENCY: usize = 16;

fn main() {
    let Ok(url) = std::env::var("CAIRN_TEST_POSTGRES_URL") else {
        eprintln!("workers bench: set CAIRN_TEST_POSTGRES_URL (see .ci/postgres); nothing measured");
        return;
    };
    let runs: usize = std::env::var("CAIRN_BENCH_RUNS").ok().and_then(|n| n.parse().ok()).unwrap_or(1_000);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let separator = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{separator}schema=bench_workers_{}_{nanos}", std::process::id());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(measure(&url, runs));
}

fn engine(url: &str) -> Engine {
    let store = Arc::new(PostgresStore::open(url, PostgresOptions::new()).expect("open postgres"));
    Engine::builder(store.clone(), store).build().expect("engine")
}

async fn measure(url: &str, runs: usize) {
    let script = Script::rhai(
        "five",
        "let out = []; for k in 0..5 { out.push(agent(`run ${args.i} call ${k}`)); } out.len()",
    );
    let submitter = engine(url);
    for i in 0..runs {
        submitter
            .enqueue_script(&script, serde_json::json!({"i": i}), RunOptions::default())
            .expect("enqueue");
    }
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let mut drivers = Vec::new();
    for _ in 0..WORKERS {
        let worker =
            Worker::new(engine(url), WorkerOptions { concurrency: CONCURRENCY, ..WorkerOptions::default() })
                .expect("worker");
        let shutdown = shutdown.clone();
        drivers.push(tokio::spawn(async move { worker.run_until(shutdown).await }));
    }
    let ok = RunFilter { statuses: vec![RunStatus::Ok], ..RunFilter::default() };
    loop {
        let done = submitter.journal_store().list_runs(&ok).expect("list").len();
        if done >= runs {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    shutdown.cancel();
    for driver in drivers {
        let _ = driver.await;
    }
    println!(
        "workers/drain: {WORKERS} workers x {CONCURRENCY} slots, {runs} runs of 5 echo calls in {elapsed:.2?}: {:.0} runs/s",
        runs as f64 / elapsed.as_secs_f64()
    );
}
