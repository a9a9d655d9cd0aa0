//! Child workflows are part of the run that calls them, so the run's bounds hold for them all
//! together (`script::run_sandbox`): before, each child script had limits of its own, so a
//! fan-out of children held a multiple of the run's memory limit, and children calling
//! children started threads until the process could map no more stacks and aborted. Through
//! the `cairn` binary, both dialects, each as parent and as child: a hostile tree of children
//! ends `sandbox_limit` within the run's memory limit plus a fixed overhead; ordinary fan-outs
//! of children still finish.

use std::path::Path;
use std::time::Duration;

use super::support::hostile::{cairn_run, run_bounded};

const MEMORY_LIMIT_MB: u64 = 64;
const OVERHEAD_MB: u64 = 128;

/// A child holding ten 2 MiB strings (20 MiB) while it counts.
const HOLDER_RHAI: &str = r#"
let s = "0123456789abcdef";
while s.len() < 2000000 { s += s; }
let a0 = s + "0"; let a1 = s + "1"; let a2 = s + "2"; let a3 = s + "3"; let a4 = s + "4";
let a5 = s + "5"; let a6 = s + "6"; let a7 = s + "7"; let a8 = s + "8"; let a9 = s + "9";
let n = 0;
while n < 100000 { n += 1; }
a0.len() + a9.len()
"#;

const HOLDER_LUA: &str = r#"
local t = {}
for i = 1, 10 do t[i] = string.rep("0123456789abcdef", 131072) .. i end
local n = 0
while n < 100000 do n = n + 1 end
return #t[1] + #t[10]
"#;

/// Calls itself from eight branches, as deep as the config lets it.
const TREE_RHAI: &str = r#"
let xs = [0, 1, 2, 3, 4, 5, 6, 7];
parallel(xs, |i| workflow("tree_rhai", #{}, #{key: `t${i}`})).len()
"#;

const TREE_LUA: &str = r#"
local xs = {1, 2, 3, 4, 5, 6, 7, 8}
return #parallel(xs, function(i) return workflow("tree_lua", {}, {key = "t" .. i}) end)
"#;

/// A work directory with the children registered (`workflows/` beside `cairn.toml`).
fn work(config: &str) -> tempfile::TempDir {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    std::fs::write(dir.join("cairn.toml"), config).unwrap();
    std::fs::create_dir(dir.join("workflows")).unwrap();
    for (name, source) in [
        ("holder_rhai.rhai", HOLDER_RHAI),
        ("holder_lua.lua", HOLDER_LUA),
        ("tree_rhai.rhai", TREE_RHAI),
        ("tree_lua.lua", TREE_LUA),
        ("small.rhai", "41 + 1\n"),
        ("big_result.rhai", "let s = \"0123456789abcdef\";\nwhile s.len() < 1000000 { s += s; }\ns\n"),
    ] {
        std::fs::write(dir.join("workflows").join(name), source).unwrap();
    }
    work
}

/// Runs `source` as `file` in `dir`; `Err` says how it did not end with exit `code` (and,
/// failing, `sandbox_limit`) within the memory bound.
fn ends(dir: &Path, file: &str, source: &str, code: i32) -> Result<(), String> {
    std::fs::write(dir.join(file), source).unwrap();
    let memory = (MEMORY_LIMIT_MB + OVERHEAD_MB) << 20;
    let ended = run_bounded(cairn_run(dir, &dir.join(file)), Duration::from_secs(120), memory);
    let stderr = &ended.stderr;
    let typed = code == 0 || stderr.contains("sandbox_limit");
    if ended.code != Some(code) || !typed || stderr.contains("panicked at") || ended.peak > memory {
        return Err(format!("{file}: exit {:?}, peak {} MiB: {stderr}", ended.code, ended.peak >> 20));
    }
    Ok(())
}

#[test]
fn a_fan_out_of_children_holds_the_runs_memory_not_a_multiple_of_it() {
    let work = work(&format!("[sandbox]\nmemory_mb = {MEMORY_LIMIT_MB}\n"));
    let dir = work.path();
    // Sixteen children of 20 MiB each: 320 MiB, five times the run's limit.
    let cases = [
        (
            "fan_rhai_of_rhai.rhai",
            "let xs = [];\nfor i in 0..16 { xs.push(i); }\nparallel(xs, |i| workflow(\"holder_rhai\", #{}, #{key: `h${i}`}))\n",
        ),
        (
            "fan_rhai_of_lua.rhai",
            "let xs = [];\nfor i in 0..16 { xs.push(i); }\nparallel(xs, |i| workflow(\"holder_lua\", #{}, #{key: `h${i}`}))\n",
        ),
        (
            "fan_lua_of_lua.lua",
            "local xs = {}\nfor i = 1, 16 do xs[i] = i end\nreturn parallel(xs, function(i) return workflow(\"holder_lua\", {}, {key = \"h\" .. i}) end)\n",
        ),
        (
            "fan_lua_of_rhai.lua",
            "local xs = {}\nfor i = 1, 16 do xs[i] = i end\nreturn parallel(xs, function(i) return workflow(\"holder_rhai\", {}, {key = \"h\" .. i}) end)\n",
        ),
    ];
    let failures: Vec<String> =
        cases.iter().filter_map(|(file, source)| ends(dir, file, source, 1).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn children_calling_children_share_the_runs_threads_and_end_typed() {
    // As deep as the config allows: 8^16 children, were each to hold the whole thread budget.
    let work = work(&format!("max_workflow_depth = 16\n[sandbox]\nmemory_mb = {MEMORY_LIMIT_MB}\n"));
    let dir = work.path();
    let cases = [
        ("tree_from_rhai.rhai", "workflow(\"tree_rhai\", #{})\n"),
        ("tree_from_lua.lua", "return workflow(\"tree_lua\", {})\n"),
        ("mixed_tree.rhai", "workflow(\"tree_lua\", #{})\n"),
    ];
    let failures: Vec<String> =
        cases.iter().filter_map(|(file, source)| ends(dir, file, source, 1).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn ordinary_fan_outs_of_children_still_finish() {
    let work = work(&format!("[sandbox]\nmemory_mb = {MEMORY_LIMIT_MB}\nmax_operations = 500000000\n"));
    let dir = work.path();
    let cases = [
        (
            "hundred.rhai",
            "let xs = [];\nfor i in 0..100 { xs.push(i); }\nparallel(xs, |i| workflow(\"small\", #{}, #{key: `s${i}`})).len()\n",
        ),
        (
            "hundred.lua",
            "local xs = {}\nfor i = 1, 100 do xs[i] = i end\nreturn #parallel(xs, function(i) return workflow(\"small\", {}, {key = \"s\" .. i}) end)\n",
        ),
        (
            "two_holders.rhai",
            "[workflow(\"holder_rhai\", #{}, #{key: \"a\"}), workflow(\"holder_lua\", #{}, #{key: \"b\"})]\n",
        ),
        // A hundred children one after another, each handing back 1 MiB (100 MiB in all, the
        // run's limit 64 MiB; the budget raised for the bytes the parent is charged for them):
        // what a finished child held is the run's no longer.
        (
            "one_after_another.rhai",
            "let n = 0;\nfor i in 0..100 { n += workflow(\"big_result\", #{}, #{key: `b${i}`}).len(); }\nn\n",
        ),
    ];
    let failures: Vec<String> =
        cases.iter().filter_map(|(file, source)| ends(dir, file, source, 0).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
