//! What the hand-rolled benches (`alloc_cost`, `binary`, `host_charge`) share: their command
//! line (workload names to run, `CAIRN_BENCH_ROUNDS`), the median they report, and the round
//! loop that measures one workload with a switch on and off.
//!
//! Each bench is a crate of its own that includes this module with `mod support;` and uses a
//! part of it, so what one bench leaves unused is not dead code.
#![allow(dead_code)]

/// The workload names given on the command line (every argument not starting with `-`).
pub fn names() -> Vec<String> {
    std::env::args().skip(1).filter(|arg| !arg.starts_with('-')).collect()
}

/// How many measured rounds: `CAIRN_BENCH_ROUNDS`, else `default`.
pub fn rounds(default: usize) -> usize {
    std::env::var("CAIRN_BENCH_ROUNDS").ok().and_then(|rounds| rounds.parse().ok()).unwrap_or(default)
}

/// The median of the figures (the upper one of an even count).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// One workload measured with a switch on and off: a warm-up run in each mode, then `rounds`
/// rounds of one run each way, alternating which mode goes first so that drift favours
/// neither. `run(on)` returns the figure of one run; the result is the median of each mode,
/// `(on, off)`.
pub fn on_and_off(rounds: usize, mut run: impl FnMut(bool) -> f64) -> (f64, f64) {
    run(true);
    run(false);
    let (mut on, mut off) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for round in 0..rounds {
        let order = if round % 2 == 0 { [true, false] } else { [false, true] };
        for mode in order {
            let figure = run(mode);
            if mode { on.push(figure) } else { off.push(figure) }
        }
    }
    (median(&mut on), median(&mut off))
}
