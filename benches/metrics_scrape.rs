//! `GET /metrics` of a real `cairn serve` over a store holding 10,000 runs (issue #31; goal: a
//! scrape takes ≤ 20 ms), on SQLite and, with `CAIRN_TEST_POSTGRES_URL`, on PostgreSQL
//! (`.ci/postgres start DIR 55510` starts one).
//!
//! ```sh
//! cargo bench --bench metrics_scrape
//! CAIRN_TEST_POSTGRES_URL=postgres://cairn@127.0.0.1:55510/cairn_test cargo bench --bench metrics_scrape
//! CAIRN_BENCH_SCALE=100000 cargo bench --bench metrics_scrape   # runs in the store
//! CAIRN_BENCH_BIN=target/dist/cairn cargo bench --bench metrics_scrape   # another build
//! ```
//!
//! The store is filled in process through the engine: each run a Rust-closure workflow making
//! two echo calls, 16 runs at a time, so its meta, journal and counters are what a real run
//! leaves; a few hundred runs are left suspended or queued, so every status and the queue have
//! something to count. Then `cairn serve --workers 0` (the release binary) opens the store and
//! the bench scrapes `/metrics` 200 times, one connection each, as Prometheus does, and prints
//! the median, p90 and p99 of a scrape, connect to the last byte.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::provider::echo::EchoProvider;
use cairn::{AgentOptions, Engine, RunOptions, Script, Workflow};
use futures::StreamExt;
use serde_json::{Value, json};

const SCRAPES: usize = 200;
const AT_ONCE: usize = 16;

fn main() {
    let runs: usize = std::env::var("CAIRN_BENCH_SCALE").ok().and_then(|n| n.parse().ok()).unwrap_or(10_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let sqlite = format!("sqlite:{}", dir.path().join("bench.db").display());
    bench("sqlite", &sqlite, runs, &runtime, dir.path());
    match std::env::var("CAIRN_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let separator = if url.contains('?') { '&' } else { '?' };
            let url = format!("{url}{separator}schema=bench_metrics_{}_{nanos}", std::process::id());
            bench("postgres", &url, runs, &runtime, dir.path());
        }
        _ => eprintln!("metrics_scrape: set CAIRN_TEST_POSTGRES_URL for the PostgreSQL figure"),
    }
}

fn bench(label: &str, url: &str, runs: usize, runtime: &tokio::runtime::Runtime, dir: &std::path::Path) {
    let started = Instant::now();
    runtime.block_on(fill(url, runs));
    eprintln!("{label}: {runs} runs stored in {:.1} s", started.elapsed().as_secs_f64());
    let port = free_port();
    let mut server = serve(url, port, dir);
    wait_healthy(port, &mut server);
    let body = scrape(port).1;
    let total: u64 = body
        .lines()
        .filter(|l| l.starts_with("cairn_runs{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(total, runs as u64, "/metrics counts every run:\n{body}");
    let mut times: Vec<Duration> = (0..SCRAPES).map(|_| scrape(port).0).collect();
    let _ = server.kill();
    let _ = server.wait();
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
    println!(
        "metrics_scrape/{label}: {runs} runs, {SCRAPES} scrapes: median {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    );
}

/// Stores `runs` runs: most of two echo calls, every 50th suspended on an external wait,
/// every 40th queued.
async fn fill(url: &str, runs: usize) {
    let opened = cairn::store::open(url).expect("open the store");
    let engine = Arc::new(
        Engine::builder_with_stores(opened.journal, opened.transcripts)
            .provider(Arc::new(EchoProvider::new()))
            .default_model(cairn::ModelRef::parse("echo:default").expect("model"))
            .build()
            .expect("engine"),
    );
    let calls = Workflow::new("calls", |ctx, args: Value| async move {
        let n = args["n"].as_u64().unwrap_or(0);
        ctx.agent(&format!("first question {n}"), AgentOptions::default()).await?;
        ctx.agent(&format!("second question {n}"), AgentOptions::default()).await
    });
    let waits =
        Workflow::new(
            "waits",
            |ctx, _| async move { ctx.await_external("approval", Default::default()).await },
        );
    futures::stream::iter(0..runs)
        .map(|n| {
            let engine = engine.clone();
            let (calls, waits) = (calls.clone(), waits.clone());
            async move {
                if n % 40 == 39 {
                    engine
                        .enqueue_script(
                            &Script::rhai("queued", "agent(\"later\")"),
                            json!({}),
                            RunOptions::default(),
                        )
                        .expect("enqueue");
                    return;
                }
                let workflow = if n % 50 == 49 { waits } else { calls };
                let handle = engine.run(&workflow, json!({ "n": n }), RunOptions::default()).expect("run");
                handle.result().await.expect("outcome");
            }
        })
        .buffer_unordered(AT_ONCE)
        .collect::<Vec<()>>()
        .await;
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

fn serve(url: &str, port: u16, dir: &std::path::Path) -> Child {
    Command::new(cairn_bin())
        .current_dir(dir)
        .args(["--store", url, "serve", "--workers", "0", "-q", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .env_remove("CAIRN_SERVER_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn cairn serve")
}

fn wait_healthy(port: u16, server: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = server.try_wait() {
            panic!("cairn serve exited: {status}");
        }
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("cairn serve did not listen within 60 s");
}

/// One scrape on a fresh connection: its time, connect to the last byte, and its body.
fn scrape(port: u16) -> (Duration, String) {
    let started = Instant::now();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    stream
        .write_all(
            format!("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .expect("request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response");
    let elapsed = started.elapsed();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (elapsed, body)
}

/// The binary measured: `CAIRN_BENCH_BIN` (an installed or `dist` build), else the one cargo
/// built for this bench.
fn cairn_bin() -> std::path::PathBuf {
    std::env::var_os("CAIRN_BENCH_BIN").map_or_else(|| env!("CARGO_BIN_EXE_cairn").into(), Into::into)
}
