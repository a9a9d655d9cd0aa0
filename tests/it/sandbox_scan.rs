//! Builtins that scan a long string and allocate nothing are charged by the bytes they scan
//! (#25): a generated corpus composes them over large inputs in both dialects, and each run,
//! through the `cairn` binary, ends with its value or a typed error within bounded processor
//! time and memory. And Lua's string buffers count only live memory: a script that churns big
//! strings under its limit succeeds.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use proptest::prelude::*;

use super::support::hostile::{cairn_run, run_bounded};

/// The run's memory limit in these tests and the overhead allowed above it.
const MEMORY_MB: u64 = 64;
const OVERHEAD_MB: u64 = 128;

/// Writes `cairn.toml` with a 64 MiB memory limit and `max_operations`.
fn configure(work: &Path, max_operations: u64) {
    std::fs::write(
        work.join("cairn.toml"),
        format!("[sandbox]\nmemory_mb = {MEMORY_MB}\nmax_operations = {max_operations}\n"),
    )
    .unwrap();
}

/// `cairn run --json` of `source` saved as `name`: the exit code and the outcome's JSON.
fn run_json(work: &Path, name: &str, source: &str) -> (Option<i32>, serde_json::Value) {
    let script = work.join(name);
    std::fs::write(&script, source).unwrap();
    let mut command = cairn_run(work, &script);
    command.arg("--json");
    let output = command.stdout(Stdio::piped()).stderr(Stdio::null()).output().unwrap();
    let outcome = serde_json::from_slice(&output.stdout).unwrap_or(serde_json::Value::Null);
    (output.status.code(), outcome)
}

/// A live value of 4 MiB, then a turn that holds 40 MiB and lets it go, then a 20 MiB
/// `table.concat`, a 4 MiB `string.rep` and a 12 MiB `string.format`, six times: never more
/// than about 54 MiB live. After the first turn's
/// collection the collector waits for the heap to double, so the garbage of the held turn is
/// still there when the concatenation's buffer grows.
const CHURN: &str = r#"
local piece = string.rep("p", 4 * 1024 * 1024)
local function hold(n)
  local t = {}
  for i = 1, n do t[i] = piece .. string.char(64 + i) end
  return #t
end
local total = 0
for turn = 1, 6 do
  total = total + hold(HELD)
  total = total + #table.concat({ piece, piece, piece, piece, piece })
  total = total + #string.rep("q", 4 * 1024 * 1024)
  total = total + #string.format("%s%s%s", piece, piece, piece)
end
return total
"#;

#[test]
fn a_lua_script_churning_big_strings_under_its_memory_limit_succeeds() {
    let work = tempfile::tempdir().unwrap();
    // The bytes built are charged as operations; this test is about memory.
    configure(work.path(), 1_000_000_000);
    let (code, outcome) = run_json(work.path(), "churn.lua", &CHURN.replace("HELD", "10"));
    assert_eq!(code, Some(0), "{outcome}");
    let built = 6 * (10 + 20 * (1 << 20) + 4 * (1 << 20) + 12 * (1 << 20));
    assert_eq!(outcome["value"], serde_json::json!(built), "{outcome}");
}

#[test]
fn a_lua_script_holding_more_than_its_memory_limit_still_ends_at_it() {
    let work = tempfile::tempdir().unwrap();
    configure(work.path(), 1_000_000_000);
    // 18 strings of 4 MiB held at once: 72 MiB live, over the 64 MiB limit.
    let (code, outcome) = run_json(work.path(), "held.lua", &CHURN.replace("HELD", "18"));
    assert_eq!(code, Some(1), "{outcome}");
    assert_eq!(outcome["error"]["code"], "sandbox_limit", "{outcome}");
    let message = outcome["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("memory limit"), "{outcome}");
}

#[test]
fn scanning_builtins_in_a_loop_end_at_the_operation_budget_with_a_typed_error_in_json() {
    let work = tempfile::tempdir().unwrap();
    configure(work.path(), 50_000_000);
    let cases = [
        (
            "len.rhai",
            "let s = \"0123456789abcdef\"; while s.bytes < 4000000 { s += s; } let n = 0; loop { n += s.len; }",
        ),
        (
            "key.rhai",
            "let k = \"ab\"; while k.bytes < 4000000 { k += k; } let q = \"ab\"; while q.bytes < 4000000 { q += q; } \
             let m = #{}; m[k] = 1; let n = 0; loop { if m.get(q) == 1 { n += 1; } }",
        ),
        (
            "utf8_len.lua",
            "local s = string.rep(\"ab\", 2000000) local n = 0 while true do n = n + utf8.len(s) end",
        ),
        (
            "tonumber.lua",
            "local s = string.rep(\"7\", 4000000) local n = 0 while true do if tonumber(s) then n = n + 1 end end",
        ),
    ];
    for (name, source) in cases {
        let (code, outcome) = run_json(work.path(), name, source);
        assert_eq!(code, Some(1), "{name}: {outcome}");
        assert_eq!(outcome["status"], "error", "{name}: {outcome}");
        assert_eq!(outcome["error"]["code"], "sandbox_limit", "{name}: {outcome}");
        let message = outcome["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("budget of 50000000 operations"), "{name}: {outcome}");
    }
}

/// A builtin that scans a string, applied in a loop.
#[derive(Debug, Clone, Copy)]
enum Scan {
    Len,
    GetLast,
    IndexFrom,
    StartsWith,
    MapKey,
    Contains,
    Utf8Len,
    Utf8Offset,
    ToNumber,
    Arithmetic,
    FindPlain,
    UnpackZ,
}

fn rhai_scan() -> impl Strategy<Value = Scan> {
    prop_oneof![
        Just(Scan::Len),
        Just(Scan::GetLast),
        Just(Scan::IndexFrom),
        Just(Scan::StartsWith),
        Just(Scan::MapKey),
        Just(Scan::Contains),
    ]
}

fn lua_scan() -> impl Strategy<Value = Scan> {
    prop_oneof![
        Just(Scan::Utf8Len),
        Just(Scan::Utf8Offset),
        Just(Scan::ToNumber),
        Just(Scan::Arithmetic),
        Just(Scan::FindPlain),
        Just(Scan::UnpackZ),
    ]
}

/// One scan over a string of `2^doublings` digits (and a distinct equal copy), `count` times.
fn rhai(scan: Scan, doublings: u32, count: u32, i: usize) -> String {
    let body = match scan {
        Scan::Len => format!("n{i} += a{i}.len();"),
        Scan::GetLast => {
            format!("if a{i}.get(-1) != () {{ n{i} += 1; }} if a{i}.get(a{i}.bytes) == () {{ n{i} += 1; }}")
        }
        Scan::IndexFrom => format!("n{i} += a{i}.index_of(\"x\", 1);"),
        Scan::StartsWith => format!("if a{i}.starts_with(b{i}) && a{i}.ends_with(b{i}) {{ n{i} += 1; }}"),
        Scan::MapKey => format!("if m{i}.contains(b{i}) {{ n{i} += m{i}.get(b{i}); }}"),
        Scan::Contains => format!("if a{i}.contains(\"x\") {{ n{i} += 1; }}"),
        _ => unreachable!("a Lua scan"),
    };
    format!(
        "let a{i} = \"12\"; for j in 0..{doublings} {{ a{i} += a{i}; }}\n\
         let b{i} = \"12\"; for j in 0..{doublings} {{ b{i} += b{i}; }}\n\
         let m{i} = #{{}}; m{i}[a{i}] = 1; let n{i} = 0;\n\
         for j in 0..{count} {{ {body} }}\n"
    )
}

fn lua(scan: Scan, doublings: u32, count: u32, i: usize) -> String {
    let body = match scan {
        Scan::Utf8Len => format!("n{i} = n{i} + utf8.len(a{i})"),
        Scan::Utf8Offset => format!("n{i} = n{i} + (utf8.offset(a{i}, #a{i}) or 0)"),
        Scan::ToNumber => format!("if tonumber(a{i}) then n{i} = n{i} + 1 end"),
        Scan::Arithmetic => format!("if a{i} + 0 > 0 then n{i} = n{i} + 1 end"),
        Scan::FindPlain => format!("n{i} = n{i} + (a{i}:find(\"x\", 1, true) or 1)"),
        Scan::UnpackZ => format!("n{i} = n{i} + #string.unpack(\"z\", z{i})"),
        _ => unreachable!("a Rhai scan"),
    };
    format!(
        "local a{i} = \"12\" for j = 1, {doublings} do a{i} = a{i} .. a{i} end\n\
         local z{i} = a{i} .. \"\\0\" local n{i} = 0\n\
         for j = 1, {count} do {body} end\n"
    )
}

/// Runs `source` as `name` through the binary: it must end with its value or a typed error
/// within 20 s of processor time and the memory bound.
fn ends_typed_within_bounds(name: &str, source: &str) -> Result<(), TestCaseError> {
    let work = tempfile::tempdir().unwrap();
    configure(work.path(), 50_000_000);
    let script = work.path().join(name);
    std::fs::write(&script, source).unwrap();
    let budget = (MEMORY_MB + OVERHEAD_MB) << 20;
    let ended = run_bounded(cairn_run(work.path(), &script), Duration::from_secs(90), budget);
    ended.typed_within(budget, false).map_err(|why| TestCaseError::fail(format!("{why}\n{source}")))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    #[test]
    fn composed_rhai_scans_over_large_inputs_end_typed_within_bounds(
        scans in prop::collection::vec((rhai_scan(), 10u32..22, 1u32..200_000), 1..4)
    ) {
        let mut source: Vec<String> =
            scans.iter().enumerate().map(|(i, &(scan, doublings, count))| rhai(scan, doublings, count, i)).collect();
        source.push("\"done\"".to_owned());
        ends_typed_within_bounds("scans.rhai", &source.join("\n"))?;
    }

    #[test]
    fn composed_lua_scans_over_large_inputs_end_typed_within_bounds(
        scans in prop::collection::vec((lua_scan(), 10u32..22, 1u32..200_000), 1..4)
    ) {
        let mut source: Vec<String> =
            scans.iter().enumerate().map(|(i, &(scan, doublings, count))| lua(scan, doublings, count, i)).collect();
        source.push("return \"done\"".to_owned());
        ends_typed_within_bounds("scans.lua", &source.join("\n"))?;
    }
}
