//! The static cost bound of a realistic 200-line workflow script (`benches/bound.rhai`): the
//! planner computes it for every accepted draft and `cairn lint --bound` on demand, so it must
//! stay far below a model turn (goal: under 5 ms, parse included).
//!
//! Run with `cargo bench --bench bound`.

use std::hint::black_box;
use std::sync::Arc;

use cairn::cost_bound;
use cairn::{Engine, MemoryStore};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

/// Phases, fan-outs in both forms nested two deep, a three-stage pipeline, steps, functions,
/// an `if` expression over args, a loop over an args-sized range and a `switch`: 28 agent calls
/// with the args below.
const SCRIPT: &str = include_str!("bound.rhai");

fn bench(c: &mut Criterion) {
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::builder(store).build().expect("engine");
    let rhai = engine.dialect("rhai").expect("rhai");
    let args = json!({"repos": ["cairn", "rulvar", "pma-core"], "reviewers": ["ana", "bo"], "rounds": 2});
    assert_eq!(
        rhai.call_bound(SCRIPT, &args).max_agent_calls(),
        Some(28),
        "the bench measures a bounded script"
    );
    c.bench_function("bound/call_bound_200_lines", |b| {
        b.iter(|| black_box(rhai.call_bound(black_box(SCRIPT), &args)));
    });
    c.bench_function("bound/cost_bound_200_lines", |b| {
        b.iter(|| black_box(cost_bound(&engine, rhai.as_ref(), black_box(SCRIPT), &args, None)));
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
