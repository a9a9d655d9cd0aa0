//! One run at scale (issue #31), through the `cairn` binary: a long run of sequential calls,
//! its resume (every call replayed), its strict replay and its inspection; a wide `parallel`;
//! and the `/metrics` scrape of a store holding many runs. Each process runs under
//! `/usr/bin/time`, whose peak resident memory (`%M`) is the process's own, whatever else the
//! machine runs; wall times need a quiet machine.
//!
//! ```sh
//! cargo bench --bench scale                        # 10,000 and 100,000 calls, 1,000 branches, 1,000 runs
//! CAIRN_BENCH_SCALE=1 cargo bench --bench scale    # the issue's sizes: 10,000, 100,000 and 1,000,000 calls, 10,000 branches, 10,000 runs
//! CAIRN_BENCH_ONLY=seq|parallel|metrics cargo bench --bench scale
//! CAIRN_BENCH_CALLS=20000,200000 cargo bench --bench scale   # other run lengths
//! ```
//!
//! Workloads (echo model at latency 0 unless said, SQLite store):
//! - `seq`: `cairn run` of n sequential `agent` calls for each n; then `cairn resume` of the
//!   settled run (every call replayed), `cairn replay`, `cairn inspect` and `cairn inspect
//!   --json`, and `cairn serve` reading the run's journal to its end through `GET
//!   /v1/runs/{id}/journal` (pages of 1,000 by `after`), its SSE backlog (`GET
//!   /v1/runs/{id}/events`) and `GET /v1/runs/{id}`: per call, the wall time and the CPU time
//!   (user + system, which load skews less), process start subtracted (the same script with
//!   n = 0), and every process's peak RSS; the server's peak (`VmHWM` in `/proc/PID/status`)
//!   after it starts, after the journal pages and after the event stream. The resident
//!   memory per call is `(peak(n) − peak(0)) / n`. Goals: at most 300 B per call in the run
//!   and its resume; the 1,000,000-call run and its resume in at most 400 MB each; readers'
//!   peaks independent of n; the per-call time at the largest n within 20 % of the smallest.
//! - `parallel`: `parallel` over n items, each branch one `agent` call of 50 ms at
//!   concurrency 1,000, and the same with branches that keep their thread: wall time and peak
//!   RSS (goal at 10,000 branches: at most 500 MB).
//! - `metrics`: a store holding n settled runs (written through the library, as the engine
//!   writes them: meta, a journal, the append's tally), served by `cairn serve`; the median
//!   of 50 scrapes of `GET /metrics` (goal at 10,000 runs: at most 20 ms), on SQLite and, with
//!   `CAIRN_TEST_POSTGRES_URL`, on PostgreSQL.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cairn::Money;
use cairn::store::{JournalStore, RawEntry, RunId, RunMeta, RunStatus, Tally};

const SEQ: &str = r#"
let n = args.n;
let done = 0;
for i in 0..n {
    agent(`summarize item ${i}`);
    done += 1;
}
done
"#;

const PARALLEL: &str = r#"
let items = [];
for i in 0..args.n { items.push(i); }
let out = parallel(items, |i| agent(`question ${i}`));
out.len()
"#;

const PARALLEL_THREADED: &str = r#"
let items = [];
for i in 0..args.n { items.push(i); }
let out = parallel(items, |i| { let answer = agent(`question ${i}`); answer });
out.len()
"#;

/// The bench's `cairn.toml`. The sandbox's limits are raised: the run's memory account charges
/// every journal entry as if the host kept it (`script::host::ENTRY_BYTES`, 2 KiB, and its
/// payload twice), so the default 256 MiB ends a script after about 60,000 agent calls whatever
/// the process holds, and a million calls take more than the default operation budget and
/// script time. What the process holds is what this bench measures.
fn config(latency_ms: u64) -> String {
    format!(
        "concurrency = 1000\nmax_spawns = 100000000\n\n[routing]\ndefault = \"echo:default\"\n\n[providers.echo]\nkind = \"echo\"\nlatency_ms = {latency_ms}\n\n\
         [sandbox]\nmemory_mb = 16384\nmax_operations = 100000000000\nwall_time_s = 86400\n"
    )
}

/// Sizes: the quick default, or the issue's with `CAIRN_BENCH_SCALE=1`.
struct Sizes {
    seq: Vec<u64>,
    parallel: u64,
    runs: u64,
}

fn sizes() -> Sizes {
    let full = std::env::var("CAIRN_BENCH_SCALE").is_ok_and(|s| !s.is_empty() && s != "0");
    let mut sizes = if full {
        Sizes { seq: vec![10_000, 100_000, 1_000_000], parallel: 10_000, runs: 10_000 }
    } else {
        Sizes { seq: vec![10_000, 100_000], parallel: 1_000, runs: 1_000 }
    };
    if let Ok(calls) = std::env::var("CAIRN_BENCH_CALLS") {
        sizes.seq = calls.split(',').filter_map(|n| n.trim().replace('_', "").parse().ok()).collect();
    }
    sizes
}

/// What one process took: its wall time, CPU time (user + system) and peak RSS.
#[derive(Debug, Clone, Copy)]
struct Took {
    wall: Duration,
    cpu: f64,
    peak_mb: f64,
}

/// Runs `cairn ARGS` in `dir` under `/usr/bin/time`; stdout is discarded.
fn cairn(dir: &Path, args: &[&str]) -> Took {
    let report = dir.join(".time");
    let started = Instant::now();
    let output = Command::new("/usr/bin/time")
        .current_dir(dir)
        .arg("-o")
        .arg(&report)
        .args(["-f", "%M %U %S"])
        .arg(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("spawn /usr/bin/time cairn");
    let wall = started.elapsed();
    assert!(
        output.status.success(),
        "cairn {args:?} failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&report).expect("time's report");
    let fields: Vec<f64> = text
        .lines()
        .last()
        .map(|l| l.split_whitespace().filter_map(|f| f.parse().ok()).collect())
        .unwrap_or_default();
    let [kb, user, system] = fields[..] else { panic!("time's report: {text}") };
    Took { wall, cpu: user + system, peak_mb: kb / 1024.0 }
}

fn fresh(dir: &Path, latency_ms: u64, script: &str) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("bench dir");
    std::fs::write(dir.join("cairn.toml"), config(latency_ms)).expect("config");
    std::fs::write(dir.join("w.rhai"), script).expect("script");
}

fn run_args(run: &str, n: u64) -> Vec<String> {
    [
        "--store",
        "sqlite:bench.db",
        "run",
        "-q",
        "w.rhai",
        "--run-id",
        run,
        "--args",
        &format!("{{\"n\": {n}}}"),
    ]
    .map(str::to_owned)
    .to_vec()
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Wall and CPU microseconds per call, process start subtracted.
fn per_call(took: Took, base: Took, n: u64) -> (f64, f64) {
    let n = n.max(1) as f64;
    (took.wall.saturating_sub(base.wall).as_secs_f64() * 1e6 / n, (took.cpu - base.cpu).max(0.0) * 1e6 / n)
}

/// Resident bytes per call: the peak above the empty run's, over the calls.
fn per_call_bytes(took: Took, base: Took, n: u64) -> f64 {
    (took.peak_mb - base.peak_mb).max(0.0) * 1048576.0 / n.max(1) as f64
}

fn seq(root: &Path, sizes: &Sizes) {
    let base_dir = root.join("seq-0");
    fresh(&base_dir, 0, SEQ);
    let base = cairn(&base_dir, &strs(&run_args("r", 0)));
    let store = ["--store", "sqlite:bench.db"];
    let base_resume = cairn(&base_dir, &[&store[..], &["resume", "-q", "r"]].concat());
    println!(
        "seq n=0: run {:.0} ms, {:.0} ms CPU, peak {:.1} MB | resume {:.0} ms, peak {:.1} MB",
        base.wall.as_secs_f64() * 1e3,
        base.cpu * 1e3,
        base.peak_mb,
        base_resume.wall.as_secs_f64() * 1e3,
        base_resume.peak_mb
    );
    let _ = std::fs::remove_dir_all(&base_dir);
    let mut per = Vec::new();
    for &n in &sizes.seq {
        let dir = root.join(format!("seq-{n}"));
        fresh(&dir, 0, SEQ);
        let run = cairn(&dir, &strs(&run_args("r", n)));
        let resume = cairn(&dir, &[&store[..], &["resume", "-q", "r"]].concat());
        let replay = cairn(&dir, &[&store[..], &["replay", "r"]].concat());
        let inspect = cairn(&dir, &[&store[..], &["inspect", "r"]].concat());
        let inspect_json = cairn(&dir, &[&store[..], &["inspect", "--json", "r"]].concat());
        let served = serve_journal(&dir, 2 * n);
        let db = std::fs::metadata(dir.join("bench.db")).map_or(0, |m| m.len());
        let (wall, cpu) = per_call(run, base, n);
        let (resume_wall, resume_cpu) = per_call(resume, base_resume, n);
        per.push((wall, cpu));
        println!(
            "seq n={n}: run {:.1} s ({wall:.1} µs/call wall, {cpu:.1} µs/call CPU), peak {:.0} MB ({:.0} B/call) | \
             resume {:.1} s ({resume_wall:.1} µs/call wall, {resume_cpu:.1} µs/call CPU), peak {:.0} MB ({:.0} B/call) | \
             replay {:.1} s, peak {:.0} MB | inspect {:.1} s, peak {:.0} MB | inspect --json {:.1} s, peak {:.0} MB | \
             serve: started {:.0} MB, after the journal in pages ({:.1} s) {:.0} MB, after the event stream ({:.1} s) {:.0} MB, \
             after GET /v1/runs/r {:.0} MB | store {:.0} MB",
            run.wall.as_secs_f64(),
            run.peak_mb,
            per_call_bytes(run, base, n),
            resume.wall.as_secs_f64(),
            resume.peak_mb,
            per_call_bytes(resume, base_resume, n),
            replay.wall.as_secs_f64(),
            replay.peak_mb,
            inspect.wall.as_secs_f64(),
            inspect.peak_mb,
            inspect_json.wall.as_secs_f64(),
            inspect_json.peak_mb,
            served.started_mb,
            served.pages.as_secs_f64(),
            served.after_pages_mb,
            served.events.as_secs_f64(),
            served.after_events_mb,
            served.after_show_mb,
            db as f64 / 1048576.0,
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
    if let (Some(first), Some(last)) = (per.first(), per.last()) {
        println!(
            "seq: per-call time at n={} is {:.0} % (wall) and {:.0} % (CPU) of n={}'s (goal: within 20 %)",
            sizes.seq.last().copied().unwrap_or(0),
            last.0 / first.0 * 100.0,
            last.1 / first.1 * 100.0,
            sizes.seq[0],
        );
    }
}

/// What `cairn serve` held while it served one run's journal.
struct Served {
    started_mb: f64,
    pages: Duration,
    after_pages_mb: f64,
    events: Duration,
    after_events_mb: f64,
    after_show_mb: f64,
}

/// A process's peak resident memory so far (`VmHWM`), in MB.
fn high_water_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server's status");
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kb / 1024.0
}

/// `cairn serve` on the bench's store, listening on a free loopback port; its address.
fn serve(dir: &Path, url: &str) -> (std::process::Child, String) {
    let mut server = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .current_dir(dir)
        .args(["--store", url, "serve", "--listen", "127.0.0.1:0", "--workers", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cairn serve");
    let mut stderr = BufReader::new(server.stderr.take().expect("stderr"));
    let mut line = String::new();
    let addr = loop {
        line.clear();
        if stderr.read_line(&mut line).expect("serve's stderr") == 0 {
            panic!("cairn serve ended before listening");
        }
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split_whitespace().next().expect("an address").to_owned();
        }
    };
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    (server, addr)
}

/// `GET path` on a fresh connection: the status line's code and the body, de-chunked.
fn get(addr: &str, path: &str) -> (u16, Vec<u8>) {
    let stream = TcpStream::connect(addr).expect("connect");
    let mut writer = stream.try_clone().expect("a second handle");
    write!(writer, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("request");
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).expect("status line");
    let code = line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).expect("a status code");
    let mut chunked = false;
    loop {
        line.clear();
        reader.read_line(&mut line).expect("a header");
        if line.trim().is_empty() {
            break;
        }
        chunked |= line.to_ascii_lowercase().starts_with("transfer-encoding: chunked");
    }
    let mut body = Vec::new();
    if !chunked {
        reader.read_to_end(&mut body).expect("the body");
        return (code, body);
    }
    loop {
        line.clear();
        if reader.read_line(&mut line).expect("a chunk size") == 0 {
            break;
        }
        let size = usize::from_str_radix(line.trim(), 16).expect("a chunk size");
        if size == 0 {
            break;
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..]).expect("a chunk");
        line.clear();
        reader.read_line(&mut line).expect("the chunk's end");
    }
    (code, body)
}

/// Serves the bench's store and reads run `r`'s journal to its end three ways, each checked
/// to hold at least `at_least` entries: the journal route page by page, the event stream's
/// backlog, and the run's digest.
fn serve_journal(dir: &Path, at_least: u64) -> Served {
    let (mut server, addr) = serve(dir, "sqlite:bench.db");
    let pid = server.id();
    let started_mb = high_water_mb(pid);
    let clock = Instant::now();
    let (mut after, mut read) = (0u64, 0u64);
    loop {
        let (code, body) = get(&addr, &format!("/v1/runs/r/journal?after={after}&limit=1000"));
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
        let page: serde_json::Value = serde_json::from_slice(&body).expect("a journal page");
        read += page["entries"].as_array().map_or(0, Vec::len) as u64;
        match page["next_after"].as_u64() {
            Some(next) => after = next,
            None => break,
        }
    }
    assert!(read >= at_least, "the journal route gave {read} entries, fewer than {at_least}");
    let pages = clock.elapsed();
    let after_pages_mb = high_water_mb(pid);
    let clock = Instant::now();
    let (code, body) = get(&addr, "/v1/runs/r/events");
    assert_eq!(code, 200);
    let streamed =
        body.split(|&b| b == b'\n').filter(|line| line.starts_with(b"event: entry")).count() as u64;
    assert!(streamed >= at_least, "the event stream gave {streamed} entries, fewer than {at_least}");
    let events = clock.elapsed();
    let after_events_mb = high_water_mb(pid);
    let (code, body) = get(&addr, "/v1/runs/r");
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let after_show_mb = high_water_mb(pid);
    let _ = server.kill();
    let _ = server.wait();
    Served { started_mb, pages, after_pages_mb, events, after_events_mb, after_show_mb }
}

fn parallel(root: &Path, sizes: &Sizes) {
    let n = sizes.parallel;
    for (name, script) in [("parallel", PARALLEL), ("parallel_threaded", PARALLEL_THREADED)] {
        let dir = root.join(name);
        fresh(&dir, 50, script);
        let took = cairn(&dir, &strs(&run_args("r", n)));
        println!(
            "{name} n={n} (50 ms calls, concurrency 1,000): {:.2} s, peak {:.0} MB",
            took.wall.as_secs_f64(),
            took.peak_mb
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Writes `n` settled runs into the store at `url`, as the engine writes them.
fn populate(url: &str, n: u64) {
    let opened = cairn::store::open(url).expect("a store");
    let store: &dyn JournalStore = opened.journal.as_ref();
    for i in 0..n {
        let run = RunId::parse(&format!("run-{i:06}")).expect("a run id");
        let meta = RunMeta {
            run_id: run.clone(),
            status: if i % 10 == 0 { RunStatus::Error } else { RunStatus::Ok },
            name: Some("bench".into()),
            tags: Vec::new(),
            created_at_ms: 1_700_000_000_000 + i as i64,
            updated_at_ms: 1_700_000_000_000 + i as i64,
            hash_version: 1,
            budget_ceiling: None,
            dialect: Some("rhai".into()),
            source_ref: None,
            source_hash: None,
            args_hash: None,
            segments: 1,
            extra: serde_json::Map::new(),
        };
        store.put_meta(&meta, None).expect("meta");
        let entries: Vec<RawEntry> = (1..=3)
            .map(|seq| {
                let json = format!(
                    r#"{{"seq":{seq},"hash_version":1,"kind":"agent","status":"ok","scope":"","key":"{:064x}","ordinal":0,"cost_nano_usd":1000}}"#,
                    seq
                );
                RawEntry::new(seq, json).expect("an entry")
            })
            .collect();
        let tally = Tally { calls: 3, spend: Money::from_nano_usd(3_000) };
        store.append_tallied(&run, &entries, None, tally).expect("append");
    }
}

/// Serves `url` with `cairn serve` and times `GET /metrics`.
fn scrape(dir: &Path, label: &str, url: &str, runs: u64) {
    let (mut server, addr) = serve(dir, url);
    let timed = || {
        let started = Instant::now();
        let (code, body) = get(&addr, "/metrics");
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
        (started.elapsed(), String::from_utf8_lossy(&body).into_owned())
    };
    let (_, body) = timed();
    let listed = body.lines().find(|l| l.starts_with("cairn_runs{status=\"ok\"}")).unwrap_or("?").to_owned();
    let mut samples: Vec<Duration> = (0..50).map(|_| timed().0).collect();
    samples.sort();
    let _ = server.kill();
    let _ = server.wait();
    println!(
        "metrics {label} with {runs} runs: median {:.2} ms, p90 {:.2} ms (goal: ≤ 20 ms) [{listed}]",
        samples[25].as_secs_f64() * 1e3,
        samples[45].as_secs_f64() * 1e3,
    );
}

fn metrics(root: &Path, sizes: &Sizes) {
    let dir = root.join("metrics");
    fresh(&dir, 0, "1");
    let sqlite = format!("sqlite:{}", dir.join("bench.db").display());
    populate(&sqlite, sizes.runs);
    scrape(&dir, "sqlite", &sqlite, sizes.runs);
    match std::env::var("CAIRN_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let separator = if url.contains('?') { '&' } else { '?' };
            let url = format!("{url}{separator}schema=bench_scale_{}_{nanos}", std::process::id());
            populate(&url, sizes.runs);
            scrape(&dir, "postgres", &url, sizes.runs);
        }
        _ => eprintln!("scale bench: set CAIRN_TEST_POSTGRES_URL for the PostgreSQL scrape"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("seq: bench\nparallel: bench\nmetrics: bench");
        return;
    }
    let sizes = sizes();
    let only = std::env::var("CAIRN_BENCH_ONLY").ok();
    let wanted = |name: &str| only.as_deref().is_none_or(|o| o == name);
    // Beside the target directory rather than in /tmp: a million calls' store is most of a gigabyte.
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("scale-bench");
    if wanted("seq") {
        seq(&root, &sizes);
    }
    if wanted("parallel") {
        parallel(&root, &sizes);
    }
    if wanted("metrics") {
        metrics(&root, &sizes);
    }
}
