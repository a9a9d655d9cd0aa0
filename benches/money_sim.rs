//! The fault simulator at scale (#23): thousands of seeds of `tests/it/money_sim.rs`'s property
//! (the same scenarios, faults, kills and checks), in-process. Plain harness.
//!
//! ```sh
//! cargo bench --bench money_sim                       # 2,000 seeds
//! CAIRN_BENCH_SCALE=5 cargo bench --bench money_sim   # 10,000
//! CAIRN_BENCH_SEED=1000000 cargo bench --bench money_sim   # start elsewhere
//! ```
//!
//! Prints seeds per second and every failing seed with what broke; exits 1 when any failed.
//! Keep a failing seed in `tests/money-regressions/seeds.txt`.

use std::time::Instant;

#[allow(dead_code, unused_imports)]
#[path = "../tests/it/money_sim.rs"]
mod money_sim;

fn main() {
    let scale: u64 = std::env::var("CAIRN_BENCH_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let start: u64 = std::env::var("CAIRN_BENCH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1 << 32);
    let seeds = 2000 * scale.max(1);
    let began = Instant::now();
    let mut failures = Vec::new();
    for seed in start..start + seeds {
        if let Err(broken) = money_sim::run_seed(seed, true) {
            eprintln!("{broken}\n");
            failures.push(seed);
        }
    }
    let elapsed = began.elapsed();
    println!(
        "money_sim: {seeds} seeds in {:.1} s ({:.1} seeds/s), {} failed{}",
        elapsed.as_secs_f64(),
        seeds as f64 / elapsed.as_secs_f64(),
        failures.len(),
        if failures.is_empty() { String::new() } else { format!(": {failures:?}") }
    );
    if !failures.is_empty() {
        std::process::exit(1);
    }
}
