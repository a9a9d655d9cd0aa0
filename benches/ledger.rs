//! What the money ledger costs per wire attempt (#23: "the ledger costs no more than 1 µs per
//! attempt"). One attempt is the ledger's whole part in it: open (after the turn guard), one
//! observation per stream event (ten 100-character text deltas and one running usage), then a
//! settle (every fourth attempt abandoned after a drop instead).
//!
//! ```sh
//! cargo bench --bench ledger                       # criterion, wall time per attempt
//! cargo bench --bench ledger --no-run              # then, for instruction counts:
//! valgrind --tool=callgrind target/release/deps/ledger-* --count 1000
//! valgrind --tool=callgrind target/release/deps/ledger-* --count 11000
//! ```
//!
//! With `--count N` the binary runs N attempts once, outside criterion: the difference of the
//! two callgrind totals over 10,000 attempts is the ledger's instruction count per attempt,
//! which a loaded machine cannot skew.

use std::hint::black_box;

use criterion::{Criterion, criterion_group};

fn bench(c: &mut Criterion) {
    c.bench_function("ledger/attempt_10_deltas", |b| {
        b.iter(|| black_box(cairn::__internal::bench_ledger_attempts(black_box(1), 10)));
    });
    c.bench_function("ledger/100_attempts_10_deltas", |b| {
        b.iter(|| black_box(cairn::__internal::bench_ledger_attempts(black_box(100), 10)));
    });
}

criterion_group!(benches, bench);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--count") {
        let count = args.get(at + 1).and_then(|n| n.parse().ok()).unwrap_or(1000);
        println!("{}", cairn::__internal::bench_ledger_attempts(count, 10));
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
