//! Hostile shapes composed: a script made of a few of the corpus's shapes (floods of host calls,
//! big keys, deep nesting, huge strings, closure chains, JSON across the boundary), each sized
//! at random and in any order, in both dialects, run through the `cairn` binary. Whatever the
//! mix, the run ends with its value or a typed error (`sandbox_limit`, `script_error`, or a lint
//! refusal), never a crash, a panic or a hang, within the corpus's bounds: 20 s of processor
//! time and the run's memory limit (64 MiB) plus 128 MiB of peak resident memory.

use std::time::Duration;

use proptest::prelude::*;

use super::support::hostile::{cairn_run, run_bounded};

/// One hostile shape and its size.
#[derive(Debug, Clone)]
enum Shape {
    /// `count` calls of one engine call, each journaled.
    Flood(Call, u32),
    /// A key of `2^doublings` bytes handed to `random`.
    BigKey(u32),
    /// A value nested `depth` levels, returned from a step.
    Deep(u32),
    /// A string doubled `doublings` times.
    HugeString(u32),
    /// `links` closures each capturing the previous one.
    Closures(u32),
    /// A map of `keys` entries returned from a step (it crosses the JSON boundary).
    Json(u32),
}

/// The engine calls a flood repeats.
#[derive(Debug, Clone, Copy)]
enum Call {
    Now,
    Random,
    Uuid,
    Log,
    Step,
}

fn shape() -> impl Strategy<Value = Shape> {
    let call =
        prop_oneof![Just(Call::Now), Just(Call::Random), Just(Call::Uuid), Just(Call::Log), Just(Call::Step)];
    prop_oneof![
        (call, 1u32..400_000).prop_map(|(call, count)| Shape::Flood(call, count)),
        (10u32..26).prop_map(Shape::BigKey),
        (1u32..2_000).prop_map(Shape::Deep),
        (10u32..30).prop_map(Shape::HugeString),
        (1u32..60_000).prop_map(Shape::Closures),
        (1u32..300_000).prop_map(Shape::Json),
    ]
}

/// The shape as Rhai statements; `i` keeps each shape's names and step names apart.
fn rhai(shape: &Shape, i: usize) -> String {
    match shape {
        Shape::Flood(call, count) => {
            let body = match call {
                Call::Now => "now();".to_owned(),
                Call::Random => "random(`k${j}`);".to_owned(),
                Call::Uuid => "uuid();".to_owned(),
                Call::Log => "log(\"info\", `m${j}`, #{j: j});".to_owned(),
                Call::Step => format!("step(`s{i}_${{j}}`, || j);"),
            };
            format!("for j in 0..{count} {{ {body} }}")
        }
        Shape::BigKey(doublings) => {
            format!("let k{i} = \"k\"; for j in 0..{doublings} {{ k{i} += k{i}; }} random(k{i});")
        }
        Shape::Deep(depth) => {
            format!("let d{i} = []; for j in 0..{depth} {{ d{i} = [d{i}]; }} step(\"d{i}\", || d{i});")
        }
        Shape::HugeString(doublings) => {
            format!("let s{i} = \"ab\"; for j in 0..{doublings} {{ s{i} += s{i}; }}")
        }
        Shape::Closures(links) => {
            format!("let f{i} = || 0; for j in 0..{links} {{ let g = f{i}; f{i} = || g.call(); }}")
        }
        Shape::Json(keys) => {
            format!(
                "let m{i} = #{{}}; for j in 0..{keys} {{ m{i}[`k${{j}}`] = j; }} step(\"m{i}\", || m{i});"
            )
        }
    }
}

/// The shape as Lua statements.
fn lua(shape: &Shape, i: usize) -> String {
    match shape {
        Shape::Flood(call, count) => {
            let body = match call {
                Call::Now => "now()".to_owned(),
                Call::Random => "random(\"k\" .. j)".to_owned(),
                Call::Uuid => "uuid()".to_owned(),
                Call::Log => "log(\"info\", \"m\" .. j, { j = j })".to_owned(),
                Call::Step => format!("step(\"s{i}_\" .. j, function() return j end)"),
            };
            format!("for j = 1, {count} do {body} end")
        }
        Shape::BigKey(doublings) => {
            format!("local k{i} = \"k\" for j = 1, {doublings} do k{i} = k{i} .. k{i} end random(k{i})")
        }
        Shape::Deep(depth) => format!(
            "local d{i} = {{}} for j = 1, {depth} do d{i} = {{ d{i} }} end step(\"d{i}\", function() return d{i} end)"
        ),
        Shape::HugeString(doublings) => {
            format!("local s{i} = \"ab\" for j = 1, {doublings} do s{i} = s{i} .. s{i} end")
        }
        Shape::Closures(links) => format!(
            "local f{i} = function() return 0 end for j = 1, {links} do local g = f{i} f{i} = function() return g() end end"
        ),
        Shape::Json(keys) => format!(
            "local m{i} = {{}} for j = 1, {keys} do m{i}[\"k\" .. j] = j end step(\"m{i}\", function() return m{i} end)"
        ),
    }
}

/// Runs `source` as `name` through the binary and checks how it ended.
fn ends_typed_within_bounds(name: &str, source: &str) -> Result<(), TestCaseError> {
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("cairn.toml"), "[sandbox]\nmemory_mb = 64\nmax_operations = 10000000\n")
        .unwrap();
    let script = work.path().join(name);
    std::fs::write(&script, source).unwrap();
    let budget = (64 + 128) << 20;
    let ended = run_bounded(cairn_run(work.path(), &script), Duration::from_secs(60), budget);
    ended.typed_within(budget, true).map_err(|why| TestCaseError::fail(format!("{why}\n{source}")))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]

    #[test]
    fn composed_hostile_rhai_shapes_end_typed_within_bounds(shapes in prop::collection::vec(shape(), 1..5)) {
        let mut source: Vec<String> = shapes.iter().enumerate().map(|(i, shape)| rhai(shape, i)).collect();
        source.push("\"done\"".to_owned());
        ends_typed_within_bounds("composed.rhai", &source.join("\n"))?;
    }

    #[test]
    fn composed_hostile_lua_shapes_end_typed_within_bounds(shapes in prop::collection::vec(shape(), 1..5)) {
        let mut source: Vec<String> = shapes.iter().enumerate().map(|(i, shape)| lua(shape, i)).collect();
        source.push("return \"done\"".to_owned());
        ends_typed_within_bounds("composed.lua", &source.join("\n"))?;
    }
}
