//! PostgreSQL store benchmarks: the append of one two-phase pair (the engine's per-call store
//! cost: a `running` entry, then its terminal, each an append fenced by the run's lease; and
//! the two in one batch, as the engine writes a quick call), and what group commit buys eight
//! concurrent appenders.
//!
//! Needs a server: `CAIRN_TEST_POSTGRES_URL=postgres://cairn@127.0.0.1:55432/cairn_test`
//! (`.ci/postgres start DIR` starts one). Each run uses a fresh schema. Run with
//! `cargo bench --bench postgres -- --warm-up-time 1 --measurement-time 3`. Target: the
//! leased pair ≤ 1 ms median on loopback.

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::store::{PostgresOptions, PostgresStore};
use cairn::{JournalStore, LeasableStore, Lease, RawEntry, RunId};
use criterion::{BatchSize, Criterion};

fn main() {
    let Ok(url) = std::env::var("CAIRN_TEST_POSTGRES_URL") else {
        eprintln!("postgres bench: set CAIRN_TEST_POSTGRES_URL (see .ci/postgres); nothing measured");
        return;
    };
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let separator = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{separator}schema=bench_{}_{nanos}", std::process::id());
    let store = PostgresStore::open(&url, PostgresOptions::new()).expect("open postgres");
    let mut criterion = Criterion::default().configure_from_args();
    let run = RunId::parse("bench").expect("run id");
    let lease = store.acquire(&run, "bench", Duration::from_secs(3_600)).expect("lease");
    bench_pair(&mut criterion, "postgres/append_pair_leased", &store, &run, Some(&lease), false);
    let batched = RunId::parse("bench-batched").expect("run id");
    let lease = store.acquire(&batched, "bench", Duration::from_secs(3_600)).expect("lease");
    bench_pair(&mut criterion, "postgres/append_pair_one_batch_leased", &store, &batched, Some(&lease), true);
    let unleased = RunId::parse("bench-unleased").expect("run id");
    bench_pair(&mut criterion, "postgres/append_pair", &store, &unleased, None, false);
    report_group_commit(Arc::new(store));
    criterion.final_summary();
}

/// The entries of one agent call: its `running` entry and its `ok` terminal, of the size the
/// engine writes.
fn pair(seq: u64) -> [RawEntry; 2] {
    let running = format!(
        r#"{{"seq":{seq},"kind":"agent","status":"running","scope":"/par:0.{}","key":"{:064x}","label":"review chunk {seq}","agent_type":"reviewer","role":"worker","model":"anthropic:claude-sonnet-4-5","ts":{}}}"#,
        seq % 16,
        seq,
        1_700_000_000_000u64 + seq
    );
    let done = format!(
        r#"{{"seq":{},"kind":"agent","status":"ok","target":{seq},"key":"{:064x}","value":{{"verdict":"ok","n":{seq}}},"usage":{{"input_tokens":1834,"output_tokens":312,"cache_read_tokens":1024}},"cost":9182000,"served_by":"anthropic:claude-sonnet-4-5-20250929","transcript_ref":"run/agent/{seq}"}}"#,
        seq + 1,
        seq
    );
    [RawEntry::new(seq, running).expect("entry"), RawEntry::new(seq + 1, done).expect("entry")]
}

fn bench_pair(
    criterion: &mut Criterion,
    name: &str,
    store: &PostgresStore,
    run: &RunId,
    lease: Option<&Lease>,
    one_batch: bool,
) {
    let next = Cell::new(1u64);
    criterion.bench_function(name, |bencher| {
        bencher.iter_batched(
            || {
                let seq = next.get();
                next.set(seq + 2);
                pair(seq)
            },
            |entries| {
                if one_batch {
                    store.append(run, &entries, lease).expect("append pair");
                } else {
                    for entry in &entries {
                        store.append(run, std::slice::from_ref(entry), lease).expect("append");
                    }
                }
            },
            BatchSize::SmallInput,
        );
    });
}

/// Eight threads, each appending 500 pairs to its own run: appends per second with group
/// commit (they share transactions).
fn report_group_commit(store: Arc<PostgresStore>) {
    const THREADS: usize = 8;
    const PAIRS: u64 = 500;
    let started = Instant::now();
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let store = store.clone();
            scope.spawn(move || {
                let run = RunId::parse(&format!("group-{thread}")).expect("run id");
                for i in 0..PAIRS {
                    store.append(&run, &pair(1 + 2 * i), None).expect("append");
                }
            });
        }
    });
    let elapsed = started.elapsed();
    let appends = THREADS as f64 * PAIRS as f64;
    println!(
        "postgres/group_commit: {THREADS} threads, {appends} pair appends in {elapsed:.2?}: {:.0} appends/s",
        appends / elapsed.as_secs_f64()
    );
}
