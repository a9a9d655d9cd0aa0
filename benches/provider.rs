//! The provider layer's own cost: a local HTTP/1.1 server streams 1,000 small chat-completion
//! SSE events, read once through the OpenAI-compatible adapter (connect, SSE parsing, JSON
//! decoding, canonical events) and once as raw bytes with reqwest. Measured: time to first
//! token and total time. Goals: at most 1 ms added to time to first token and 5 % to total.
//!
//! Both readers run as tasks on the runtime's workers, as the engine's agent loops do. (Read
//! from the `block_on` thread instead, every wait is a cross-thread park and unpark, and any
//! extra future in the wait, such as the idle timer, multiplies that cost.)
//!
//! Run with `cargo bench --bench provider`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use cairn::provider::openai_compatible::OpenAiCompatibleProvider;
use cairn::provider::{ChatEvent, ChatRequest, Message, Provider};
use criterion::{Criterion, criterion_group, criterion_main};
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const EVENTS: usize = 1_000;

/// The body: 1,000 one-token content chunks, a finish chunk, a usage chunk, `[DONE]`; each SSE
/// event is its own HTTP chunk, as a real server flushes them.
fn events() -> Vec<String> {
    let mut events = Vec::with_capacity(EVENTS + 3);
    for i in 0..EVENTS {
        events.push(format!(
            "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"tok{i} \"}},\"finish_reason\":null}}]}}\n\n"
        ));
    }
    events.push("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n".to_owned());
    events.push("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1000,\"total_tokens\":1010}}\n\n".to_owned());
    events.push("data: [DONE]\n\n".to_owned());
    events
}

/// Serves every request on every (keep-alive) connection with the same streamed body.
async fn serve(listener: TcpListener, events: Vec<String>) {
    let mut body = Vec::new();
    for event in &events {
        body.extend_from_slice(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes());
    }
    body.extend_from_slice(b"0\r\n\r\n");
    let body = std::sync::Arc::new(body);
    loop {
        let Ok((socket, _)) = listener.accept().await else { return };
        let body = body.clone();
        tokio::spawn(async move {
            let _ = connection(socket, &body).await;
        });
    }
}

async fn connection(mut socket: TcpStream, body: &[u8]) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    let mut pending = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        // Read one request: headers, then content-length bytes.
        let (head_end, length) = loop {
            if let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&pending[..end]).to_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                break (end + 4, length);
            }
            let n = socket.read(&mut buf).await?;
            if n == 0 {
                return Ok(());
            }
            pending.extend_from_slice(&buf[..n]);
        };
        while pending.len() < head_end + length {
            let n = socket.read(&mut buf).await?;
            if n == 0 {
                return Ok(());
            }
            pending.extend_from_slice(&buf[..n]);
        }
        pending.drain(..head_end + length);
        socket
            .write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
            )
            .await?;
        // Write event by event, so the client sees a stream rather than one buffer.
        let mut offset = 0;
        while offset < body.len() {
            let end = (offset + 512).min(body.len());
            socket.write_all(&body[offset..end]).await?;
            offset = end;
        }
    }
}

/// Time to the first text delta and to the terminal event, through the adapter.
async fn through_adapter(provider: &OpenAiCompatibleProvider) -> (Duration, Duration) {
    let started = Instant::now();
    let request = ChatRequest::new("m", vec![Message::user("count")]);
    let mut stream = provider.stream(request, CancellationToken::new());
    let mut first = None;
    let mut deltas = 0;
    while let Some(event) = stream.next().await {
        match event {
            ChatEvent::TextDelta(text) => {
                first.get_or_insert_with(|| started.elapsed());
                deltas += 1;
                black_box(text);
            }
            ChatEvent::Finish { usage, .. } => {
                black_box(usage);
                break;
            }
            ChatEvent::Error(error) => panic!("{error}"),
            _ => {}
        }
    }
    assert_eq!(deltas, EVENTS);
    (first.unwrap_or_default(), started.elapsed())
}

/// The same request read as raw bytes: time to the first body chunk and to the end.
async fn raw_reqwest(client: &reqwest::Client, url: &str) -> (Duration, Duration) {
    let started = Instant::now();
    let body =
        serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "count"}], "stream": true});
    let mut response = client.post(url).json(&body).send().await.unwrap();
    let mut first = None;
    let mut bytes = 0;
    while let Some(chunk) = response.chunk().await.unwrap() {
        first.get_or_insert_with(|| started.elapsed());
        bytes += chunk.len();
    }
    black_box(bytes);
    (first.unwrap_or_default(), started.elapsed())
}

/// Runs `work` as a task on the runtime's workers and waits for it.
fn on_worker(
    runtime: &tokio::runtime::Runtime,
    work: impl std::future::Future<Output = Duration> + Send + 'static,
) -> Duration {
    runtime.block_on(async move { tokio::spawn(work).await.unwrap() })
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    runtime.spawn(serve(listener, events()));
    let provider = OpenAiCompatibleProvider::new("bench", &format!("{base}/v1")).unwrap();
    let client = reqwest::Client::new();
    let url = format!("{base}/v1/chat/completions");

    let mut group = c.benchmark_group("provider_stream_1000_events");
    group.sample_size(30).measurement_time(Duration::from_secs(8));
    for (name, first_token) in [("ttft", true), ("total", false)] {
        let adapter = provider.clone();
        group.bench_function(format!("adapter_{name}"), |b| {
            b.iter_custom(|iters| {
                let adapter = adapter.clone();
                on_worker(&runtime, async move {
                    let mut sum = Duration::ZERO;
                    for _ in 0..iters {
                        let (ttft, total) = through_adapter(&adapter).await;
                        sum += if first_token { ttft } else { total };
                    }
                    sum
                })
            })
        });
        let (raw_client, raw_url) = (client.clone(), url.clone());
        group.bench_function(format!("raw_reqwest_{name}"), |b| {
            b.iter_custom(|iters| {
                let (raw_client, raw_url) = (raw_client.clone(), raw_url.clone());
                on_worker(&runtime, async move {
                    let mut sum = Duration::ZERO;
                    for _ in 0..iters {
                        let (ttft, total) = raw_reqwest(&raw_client, &raw_url).await;
                        sum += if first_token { ttft } else { total };
                    }
                    sum
                })
            })
        });
    }
    group.finish();

    // The CPU part alone: SSE framing and JSON decoding of the same body, no IO.
    let body: String = events().concat();
    c.bench_function("decode_only_1000_events", |b| {
        b.iter(|| {
            let mut decoder = provider.decoder(10);
            black_box(cairn::provider::decode_sse(&mut decoder, body.as_bytes()))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
