//! Queue throughput: three workers (each with its own engine and its own store, as three
//! `cairn worker` processes would have) drain queued runs of five quick echo calls each;
//! prints completed runs per second. Target: ≥ 200 runs/s on PostgreSQL.
//!
//! On PostgreSQL: `CAIRN_TEST_POSTGRES_URL=postgres://cairn@127.0.0.1:55432/cairn_test`
//! (`.ci/postgres start DIR` starts one). On SQLite (one file shared by the three workers):
//! `CAIRN_BENCH_STORE=sqlite`. Run with `cargo bench --bench workers`; `CAIRN_BENCH_RUNS=N`
//! changes the number of runs (1,000 by default), `CAIRN_BENCH_CONCURRENCY=N` the slots per
//! worker (16 by default).

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::store::{PostgresOptions, PostgresStore, SqliteOptions, SqliteStore};
use cairn::{Engine, RunFilter, RunOptions, RunStatus, Script, Worker, WorkerOptions};
use tokio_util::sync::CancellationToken;

const WORKERS: usize = 3;

/// Where the bench's store is.
enum Place {
    Postgres(String),
    Sqlite(std::path::PathBuf),
}

fn main() {
    let runs: usize = env_number("CAIRN_BENCH_RUNS").unwrap_or(1_000);
    let concurrency: usize = env_number("CAIRN_BENCH_CONCURRENCY").unwrap_or(16).max(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let place = if std::env::var("CAIRN_BENCH_STORE").is_ok_and(|s| s == "sqlite") {
        Place::Sqlite(dir.path().join("bench.db"))
    } else {
        let Ok(url) = std::env::var("CAIRN_TEST_POSTGRES_URL") else {
            eprintln!(
                "workers bench: set CAIRN_TEST_POSTGRES_URL (see .ci/postgres) or CAIRN_BENCH_STORE=sqlite; \
                 nothing measured"
            );
            return;
        };
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let separator = if url.contains('?') { '&' } else { '?' };
        Place::Postgres(format!("{url}{separator}schema=bench_workers_{}_{nanos}", std::process::id()))
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(measure(&place, runs, concurrency));
}

fn env_number(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|n| n.parse().ok())
}

fn engine(place: &Place) -> Engine {
    match place {
        Place::Postgres(url) => {
            let store = Arc::new(PostgresStore::open(url, PostgresOptions::new()).expect("open postgres"));
            Engine::builder(store).build().expect("engine")
        }
        Place::Sqlite(path) => {
            let store = Arc::new(SqliteStore::open(path, SqliteOptions::new()).expect("open sqlite"));
            Engine::builder(store).build().expect("engine")
        }
    }
}

async fn measure(place: &Place, runs: usize, concurrency: usize) {
    let script = Script::rhai(
        "five",
        "let out = []; for k in 0..5 { out.push(agent(`run ${args.i} call ${k}`)); } out.len()",
    );
    let submitter = engine(place);
    {
        let submitter = submitter.clone();
        tokio::task::spawn_blocking(move || {
            for i in 0..runs {
                submitter
                    .enqueue_script(&script, serde_json::json!({"i": i}), RunOptions::default())
                    .expect("enqueue");
            }
        })
        .await
        .expect("enqueue task");
    }
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let mut drivers = Vec::new();
    for _ in 0..WORKERS {
        let worker = Worker::new(engine(place), WorkerOptions { concurrency, ..WorkerOptions::default() })
            .expect("worker");
        let shutdown = shutdown.clone();
        drivers.push(tokio::spawn(async move { worker.run_until(shutdown).await }));
    }
    // The queue's depth is one cheap count; a run leaves the queue only once it settled.
    let store = submitter.journal_store().clone();
    loop {
        let store = store.clone();
        let left =
            tokio::task::spawn_blocking(move || store.queue().expect("a queue").depth().expect("depth"))
                .await
                .expect("depth task");
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    shutdown.cancel();
    for driver in drivers {
        let _ = driver.await;
    }
    let ok = RunFilter { statuses: vec![RunStatus::Ok], ..RunFilter::default() };
    let settled = store.list_runs(&ok).expect("list").len();
    assert_eq!(settled, runs, "only {settled} of {runs} runs settled ok");
    let store_name = match place {
        Place::Postgres(_) => "postgres",
        Place::Sqlite(_) => "sqlite",
    };
    println!(
        "workers/drain ({store_name}): {WORKERS} workers x {concurrency} slots, {runs} runs of 5 echo calls in \
         {elapsed:.2?}: {:.0} runs/s",
        runs as f64 / elapsed.as_secs_f64()
    );
}
