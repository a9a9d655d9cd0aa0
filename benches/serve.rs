//! `cairn serve`'s SSE delivery latency: the time from a journal entry's append to its event
//! reaching a client of `GET /v1/runs/{id}/events` over a loopback socket (SQLite store, the
//! service in process). Prints the median and p99 of 200 appends.
//!
//! `cargo bench --bench serve`

use std::time::{Duration, Instant};

use cairn::store::RawEntry;
use cairn::{Engine, RunOptions, Script};
use futures::StreamExt as _;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    runtime.block_on(bench());
}

async fn bench() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let opened =
        cairn::store::open(&format!("sqlite:{}", dir.path().join("c.db").display())).expect("a store");
    let journal = opened.journal.clone();
    let engine = Engine::builder(opened.journal, opened.transcripts).build().expect("an engine");
    // A queued run nobody drives: the bench appends its entries itself.
    let run = engine
        .enqueue_script(
            &Script::rhai("bench", "await_external(\"x\")"),
            serde_json::json!({}),
            RunOptions::default(),
        )
        .expect("a queued run");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let addr = listener.local_addr().expect("an address");
    let app = cairn::service::router(engine, cairn::service::ServiceOptions::default());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let response = reqwest::get(format!("http://{addr}/v1/runs/{run}/events")).await.expect("the stream");
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    let mut latencies = Vec::new();
    for seq in 1..=200u64 {
        let entry = RawEntry::new(seq, format!("{{\"seq\":{seq},\"kind\":\"bench\"}}")).expect("an entry");
        let store = journal.clone();
        let run = run.clone();
        let appended = Instant::now();
        tokio::task::spawn_blocking(move || store.append(&run, &[entry], None))
            .await
            .expect("a task")
            .expect("an append");
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
    }
    latencies.sort();
    let median = latencies[latencies.len() / 2];
    let p99 = latencies[latencies.len() * 99 / 100];
    println!("serve/sse_delivery: median {median:?}, p99 {p99:?} (target: <= 5 ms)");
}
