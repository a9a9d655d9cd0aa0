//! Store benchmarks: the append of one two-phase pair (the engine's per-call store cost)
//! on SQLite and JSONL, loading and decoding a 100,000-entry journal from each, the peak
//! memory of holding that decoded journal, and what group commit buys concurrent appenders.
//!
//! Run with `cargo bench --bench store -- --warm-up-time 1 --measurement-time 3`. The peak
//! RSS figure comes from a child process (this binary re-executed) that does nothing but
//! load and decode, so building the journal does not inflate it.

use std::cell::Cell;
use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::journal::{self, ContentKey, Entry, Kind, ScopePath, Segment, Seq, Status};
use cairn::store::{Durability, JsonlStore, SqliteOptions, SqliteStore};
use cairn::{JournalStore, LeasableStore, Lease, Money, RawEntry, RunId, Usage};
use criterion::{BatchSize, Criterion};

/// The environment variable that turns this binary into the peak-RSS probe.
const RSS_PROBE_ENV: &str = "CAIRN_BENCH_RSS_PROBE";
const JOURNAL_ENTRIES: u64 = 100_000;

fn main() {
    if let Ok(spec) = std::env::var(RSS_PROBE_ENV) {
        rss_probe(&spec);
        return;
    }
    // `CAIRN_BENCH_ONLY=append|load|cpu|group` runs one part (criterion's own filter cannot
    // skip building the 100,000-entry journals or the group-commit report).
    let only = std::env::var("CAIRN_BENCH_ONLY").ok();
    let wanted = |part: &str| only.as_deref().is_none_or(|only| only == part);
    let mut criterion = Criterion::default().configure_from_args();
    let dir = tempfile::tempdir().expect("temp dir");
    if wanted("append") {
        bench_appends(&mut criterion, dir.path());
    }
    if wanted("load") {
        bench_loads(&mut criterion, dir.path());
    }
    if wanted("cpu") {
        report_cpu(dir.path());
    }
    if wanted("group") {
        report_group_commit(dir.path());
    }
    criterion.final_summary();
}

fn key(i: u64) -> ContentKey {
    journal::content_key(&serde_json::json!({"kind": "agent", "agent_type": "reviewer", "prompt": i}))
        .expect("canonical json")
}

/// The `running` entry of an agent call, as the engine writes it at dispatch.
fn running(seq: u64, i: u64) -> Entry {
    let scope = ScopePath::root().child(&Segment::Par { site: 0, branch: (i % 16) as u32 });
    let mut entry = Entry::new(Seq(seq), Kind::Agent, Status::Running, scope, key(i), 0);
    entry.label = Some(format!("review chunk {i}"));
    entry.agent_type = Some("reviewer".into());
    entry.role = Some("worker".into());
    entry.model = Some("anthropic:claude-sonnet-4-5".into());
    entry.ts = Some(1_700_000_000_000 + i as i64);
    entry
}

/// The `ok` terminal of that call, with a small structured value, usage and cost.
fn finished(seq: u64, running_seq: u64, i: u64, value: serde_json::Value) -> Entry {
    let mut entry = running(seq, i);
    entry.status = Status::Ok;
    entry.target = Some(Seq(running_seq));
    entry.set_value(Some(&value));
    entry.usage =
        Some(Usage { input_tokens: 1_834, output_tokens: 312, cache_read_tokens: 1_024, ..Usage::default() });
    entry.cost = Some(Money::from_nano_usd(9_182_000));
    entry.served_by = Some("anthropic:claude-sonnet-4-5-20250929".into());
    entry.transcript_ref = Some(format!("run/agent/{i}"));
    entry
}

fn small_value(i: u64) -> serde_json::Value {
    serde_json::json!({"verdict": "ok", "n": i})
}

fn journal_value(i: u64) -> serde_json::Value {
    serde_json::json!({
        "summary": "The change is sound; two naming nits and one missing bounds check in the parser.",
        "issues": [{"line": 40 + i % 100, "severity": "minor"}, {"line": 212, "severity": "major"}],
        "score": 0.82,
    })
}

/// A two-phase pair at `seq` and `seq + 1`.
fn pair(seq: u64, i: u64, value: serde_json::Value) -> [RawEntry; 2] {
    let run = journal::encode(&running(seq, i)).expect("encode");
    let done = journal::encode(&finished(seq + 1, seq, i, value)).expect("encode");
    [run, done]
}

fn sqlite(path: &Path, durability: Durability, group_commit: bool) -> SqliteStore {
    let options = SqliteOptions { durability, group_commit, ..SqliteOptions::new() };
    SqliteStore::open(path, options).expect("open sqlite")
}

/// One pair per iteration, as two appends (dispatch, then completion), with the run's
/// lease when the store has leases, as the engine does over a leasable store.
fn bench_append_pair(criterion: &mut Criterion, name: &str, store: &dyn JournalStore, lease: Option<&Lease>) {
    let run = RunId::parse("bench").expect("run id");
    let next = Cell::new(1u64);
    criterion.bench_function(name, |bencher| {
        bencher.iter_batched(
            || {
                let seq = next.get();
                next.set(seq + 2);
                pair(seq, seq / 2, small_value(seq))
            },
            |[running, done]| {
                store.append(&run, std::slice::from_ref(&running), lease).expect("append running");
                store.append(&run, std::slice::from_ref(&done), lease).expect("append ok");
            },
            BatchSize::SmallInput,
        );
    });
}

fn bench_appends(criterion: &mut Criterion, dir: &Path) {
    let run = RunId::parse("bench").expect("run id");
    let sqlite = sqlite(&dir.join("append.db"), Durability::Normal, true);
    let lease = sqlite.acquire(&run, "bench", Duration::from_secs(3_600)).expect("lease");
    bench_append_pair(criterion, "sqlite/append_pair_leased", &sqlite, Some(&lease));
    let unleased = self::sqlite(&dir.join("append-unleased.db"), Durability::Normal, true);
    bench_append_pair(criterion, "sqlite/append_pair", &unleased, None);
    let jsonl = JsonlStore::open(&dir.join("append-jsonl"), Durability::Normal).expect("open jsonl");
    bench_append_pair(criterion, "jsonl/append_pair", &jsonl, None);
}

/// Fills a run with `JOURNAL_ENTRIES` realistic entries, in batches.
fn fill(store: &dyn JournalStore, run: &RunId) {
    let mut batch = Vec::with_capacity(1_000);
    let mut seq = 1;
    while seq <= JOURNAL_ENTRIES {
        batch.extend(pair(seq, seq / 2, journal_value(seq)));
        seq += 2;
        if batch.len() >= 1_000 {
            store.append(run, &batch, None).expect("fill");
            batch.clear();
        }
    }
    store.append(run, &batch, None).expect("fill");
}

fn bench_loads(criterion: &mut Criterion, dir: &Path) {
    let run = RunId::parse("big").expect("run id");
    let sqlite_path = dir.join("load.db");
    let jsonl_dir = dir.join("load-jsonl");
    let sqlite = sqlite(&sqlite_path, Durability::Normal, true);
    let jsonl = JsonlStore::open(&jsonl_dir, Durability::Normal).expect("open jsonl");
    fill(&sqlite, &run);
    fill(&jsonl, &run);
    let bytes: usize = jsonl.load(&run).expect("load").iter().map(|entry| entry.json().len() + 1).sum();
    println!("journal: {JOURNAL_ENTRIES} entries, {:.1} MB of JSONL", bytes as f64 / 1e6);

    let mut group = criterion.benchmark_group("load_decode_100k");
    group.sample_size(10);
    for (name, store) in [("sqlite", &sqlite as &dyn JournalStore), ("jsonl", &jsonl)] {
        // Freeing 100,000 decoded entries is not part of loading them.
        group.bench_function(format!("{name}/load"), |bencher| {
            bencher.iter_with_large_drop(|| store.load(&run).expect("load"));
        });
        group.bench_function(format!("{name}/load+decode"), |bencher| {
            bencher.iter_with_large_drop(|| {
                let raw = store.load(&run).expect("load");
                (journal::decode_all(&raw).expect("decode"), raw)
            });
        });
    }
    group.finish();

    for spec in [format!("sqlite:{}", sqlite_path.display()), format!("jsonl:{}", jsonl_dir.display())] {
        let exe = std::env::current_exe().expect("current exe");
        let output = Command::new(exe).env(RSS_PROBE_ENV, &spec).output().expect("run the rss probe");
        print!("{}", String::from_utf8_lossy(&output.stdout));
        if !output.status.success() {
            eprintln!("rss probe for {spec} failed: {}", String::from_utf8_lossy(&output.stderr));
        }
    }
}

/// Loads and decodes the big journal, holds it, and prints the process's peak RSS at each
/// step: the raw entries alone, then with the decoded journal beside them.
fn rss_probe(spec: &str) {
    let run = RunId::parse("big").expect("run id");
    let store: Box<dyn JournalStore> = match spec.split_once(':') {
        Some(("sqlite", path)) => Box::new(sqlite(Path::new(path), Durability::Normal, true)),
        Some(("jsonl", dir)) => {
            Box::new(JsonlStore::open(Path::new(dir), Durability::Normal).expect("open jsonl"))
        }
        _ => panic!("bad probe spec {spec}"),
    };
    let before = rss_kb("VmHWM");
    let raw = store.load(&run).expect("load");
    let loaded = rss_kb("VmHWM");
    // As resume does: each stored entry is freed as soon as it is decoded.
    let entries = journal::decode_owned(raw).expect("decode");
    let decoded = rss_kb("VmHWM");
    black_box(&entries);
    let mb = |kb: u64| kb as f64 / 1024.0;
    println!(
        "peak RSS, {} entries from {}: {:.1} MB loading and decoding as resume does (the stored entries \
         alone: {:.1} MB; at start: {:.1} MB; RSS holding only the decoded journal: {:.1} MB)",
        entries.len(),
        spec.split(':').next().unwrap_or(spec),
        mb(decoded),
        mb(loaded),
        mb(before),
        mb(rss_kb("VmRSS")),
    );
}

/// A line of `/proc/self/status` (`VmHWM` is the peak RSS), in KiB; 0 where it is missing.
fn rss_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The CPU time this thread has used, in ns (from `/proc/thread-self/schedstat`); 0 where
/// it is missing.
fn thread_cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    stat.split_whitespace().next().and_then(|ns| ns.parse().ok()).unwrap_or(0)
}

/// Wall and CPU time of `f`, for figures that hold on a shared machine: wall time there
/// includes waiting for a core, CPU time does not.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration, Duration) {
    let (wall, cpu) = (Instant::now(), thread_cpu_ns());
    let value = f();
    (value, wall.elapsed(), Duration::from_nanos(thread_cpu_ns().saturating_sub(cpu)))
}

/// The same paths as the criterion benches, timed in bulk with CPU time beside wall time.
fn report_cpu(dir: &Path) {
    const PAIRS: u64 = 20_000;
    let run = RunId::parse("cpu").expect("run id");
    let pairs: Vec<[RawEntry; 2]> = (0..PAIRS).map(|i| pair(1 + 2 * i, i, small_value(i))).collect();
    let sqlite = sqlite(&dir.join("cpu.db"), Durability::Normal, true);
    let lease = sqlite.acquire(&run, "bench", Duration::from_secs(3_600)).expect("lease");
    let jsonl = JsonlStore::open(&dir.join("cpu-jsonl"), Durability::Normal).expect("open jsonl");
    for (name, store, lease) in
        [("sqlite", &sqlite as &dyn JournalStore, Some(&lease)), ("jsonl", &jsonl, None)]
    {
        let mut each = Vec::with_capacity(pairs.len());
        let ((), wall, cpu) = timed(|| {
            for [running, done] in &pairs {
                let start = Instant::now();
                store.append(&run, std::slice::from_ref(running), lease).expect("append");
                store.append(&run, std::slice::from_ref(done), lease).expect("append");
                each.push(start.elapsed());
            }
        });
        each.sort();
        let per = |total: Duration| total.as_secs_f64() * 1e6 / PAIRS as f64;
        let at = |q: f64| each[((each.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
        println!(
            "{name} append pair ({PAIRS} pairs, two commits each): median {:.1} µs, p90 {:.1} µs, p99 {:.1} µs; mean {:.1} µs wall, {:.1} µs cpu",
            at(0.5),
            at(0.9),
            at(0.99),
            per(wall),
            per(cpu)
        );
    }

    // The engine's path for a call that completes within the deferred-flush delay: its
    // `running` entry rides in the same write as its terminal.
    let one = RunId::parse("one-commit").expect("run id");
    let lease = sqlite.acquire(&one, "bench", Duration::from_secs(3_600)).expect("lease");
    let mut each = Vec::with_capacity(pairs.len());
    let all = Instant::now();
    for pair in &pairs {
        let start = Instant::now();
        sqlite.append(&one, pair, Some(&lease)).expect("append");
        each.push(start.elapsed());
    }
    let mean = all.elapsed().as_secs_f64() * 1e6 / PAIRS as f64;
    each.sort();
    let at = |q: f64| each[((each.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    println!(
        "sqlite append pair ({PAIRS} pairs, one commit each): median {:.1} µs, p90 {:.1} µs, p99 {:.1} µs; mean {mean:.1} µs (what a sequential caller pays, checkpoints included)",
        at(0.5),
        at(0.9),
        at(0.99)
    );

    let big = RunId::parse("big").expect("run id");
    fill(&sqlite, &big);
    fill(&jsonl, &big);
    for (name, store) in [("sqlite", &sqlite as &dyn JournalStore), ("jsonl", &jsonl)] {
        let mut runs: Vec<(Duration, Duration, Duration, Duration)> = (0..5)
            .map(|_| {
                let (raw, load_wall, load_cpu) = timed(|| store.load(&big).expect("load"));
                let (decoded, decode_wall, decode_cpu) = timed(|| journal::decode_all(&raw).expect("decode"));
                black_box(decoded);
                (load_wall, load_cpu, decode_wall, decode_cpu)
            })
            .collect();
        runs.sort_by_key(|run| run.1 + run.3);
        let (load_wall, load_cpu, decode_wall, decode_cpu) = runs[runs.len() / 2];
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "{name} load 100k: {:.0} ms wall, {:.0} ms cpu; decode_all: {:.0} ms wall, {:.0} ms cpu (median of 5)",
            ms(load_wall),
            ms(load_cpu),
            ms(decode_wall),
            ms(decode_cpu)
        );
    }
}

/// Several threads appending pairs to their own runs at once, with and without group
/// commit, per durability: the mean time per append each configuration gives.
fn report_group_commit(dir: &Path) {
    const THREADS: u64 = 4;
    for durability in [Durability::Normal, Durability::Full] {
        let pairs_per_thread: u64 = if durability == Durability::Full { 50 } else { 1_000 };
        for group_commit in [false, true] {
            let path = dir.join(format!("group-{durability:?}-{group_commit}.db"));
            let store = Arc::new(sqlite(&path, durability, group_commit));
            let started = Instant::now();
            std::thread::scope(|scope| {
                for thread in 0..THREADS {
                    let store = Arc::clone(&store);
                    scope.spawn(move || {
                        let run = RunId::parse(&format!("t{thread}")).expect("run id");
                        let mut seq = 1;
                        while seq < pairs_per_thread * 2 {
                            let [running, done] = pair(seq, seq / 2, small_value(seq));
                            store.append(&run, &[running], None).expect("append");
                            store.append(&run, &[done], None).expect("append");
                            seq += 2;
                        }
                    });
                }
            });
            let per_append = started.elapsed() / (THREADS * pairs_per_thread * 2) as u32;
            println!(
                "concurrent appends ({THREADS} threads, {durability:?}, group commit {}): {:.1} µs per append",
                if group_commit { "on" } else { "off" },
                per_append.as_secs_f64() * 1e6
            );
        }
    }
}
