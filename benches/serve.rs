//! `cairn serve`'s SSE delivery latency: the time from a journal entry's append returning to
//! its event reaching a client of `GET /v1/runs/{id}/events` over a loopback socket (the
//! service in process, the client reqwest). Prints the median and p99 of 200 appends, in
//! four modes:
//!
//! - `sqlite/same-store`: the appends go through the server's own store, as when the server's
//!   in-process workers drive the run (the stream is woken by the store's notification);
//! - `sqlite/other-store`: through a second store over the same file, as when a `cairn worker`
//!   process drives it (no notification crosses processes on SQLite: the bounded poll);
//! - `postgres/same-store` and `postgres/other-store` (with `CAIRN_TEST_POSTGRES_URL`): the
//!   same on PostgreSQL, where the other store's writes arrive by `LISTEN`/`NOTIFY`, as from
//!   a worker on another host (the real deployment).
//!
//! `cargo bench --bench serve`

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::store::{JournalStore, RawEntry};
use cairn::{Engine, RunOptions, Script};
use futures::StreamExt as _;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    runtime.block_on(bench());
}

async fn bench() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let sqlite = format!("sqlite:{}", dir.path().join("c.db").display());
    measure("sqlite/same-store", &sqlite, false).await;
    measure("sqlite/other-store", &sqlite, true).await;
    match std::env::var("CAIRN_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let separator = if url.contains('?') { '&' } else { '?' };
            let url = format!("{url}{separator}schema=bench_serve_{}_{nanos}", std::process::id());
            measure("postgres/same-store", &url, false).await;
            measure("postgres/other-store", &url, true).await;
        }
        _ => eprintln!("serve bench: set CAIRN_TEST_POSTGRES_URL for the postgres modes"),
    }
}

/// Serves a store at `url`, follows a queued run's events, and appends 200 entries to it
/// (through the server's store, or through another store over the same data).
async fn measure(label: &str, url: &str, other_store: bool) {
    let opened = cairn::store::open(url).expect("a store");
    let own: Arc<dyn JournalStore> = opened.journal.clone();
    let engine = Engine::builder_with_stores(opened.journal, opened.transcripts).build().expect("an engine");
    // A queued run nobody drives: the bench appends its entries itself.
    let run = engine
        .enqueue_script(
            &Script::rhai("bench", "await_external(\"x\")"),
            serde_json::json!({}),
            RunOptions::default(),
        )
        .expect("a queued run");
    let journal = if other_store { cairn::store::open(url).expect("a second store").journal } else { own };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let addr = listener.local_addr().expect("an address");
    let app = cairn::service::router(engine, cairn::service::ServiceOptions::default());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let response = reqwest::get(format!("http://{addr}/v1/runs/{run}/events")).await.expect("the stream");
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    let mut latencies = Vec::new();
    // The stream is open once its first (status) event arrived.
    while !buffer.contains("\n\n") {
        let chunk = stream.next().await.expect("an open stream").expect("a chunk");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }
    for seq in 1..=200u64 {
        let entry = RawEntry::new(seq, format!("{{\"seq\":{seq},\"kind\":\"bench\"}}")).expect("an entry");
        let store = journal.clone();
        let run = run.clone();
        let appended = tokio::task::spawn_blocking(move || {
            store.append(&run, &[entry], None).expect("an append");
            Instant::now()
        })
        .await
        .expect("a task");
        let wanted = format!("id: {seq}\n");
        loop {
            if let Some(at) = buffer.find(&wanted) {
                buffer.drain(..at + wanted.len());
                break;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(5), stream.next())
                .await
                .expect("an event within 5 s")
                .expect("an open stream")
                .expect("a chunk");
            buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
        latencies.push(appended.elapsed());
        // Spaced out, as a run's entries are: each append finds the stream waiting.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    server.abort();
    latencies.sort();
    let median = latencies[latencies.len() / 2];
    let p99 = latencies[latencies.len() * 99 / 100];
    println!("serve/sse_delivery/{label}: median {median:?}, p99 {p99:?} (target: <= 5 ms)");
}
