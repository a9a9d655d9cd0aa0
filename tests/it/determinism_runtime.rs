//! Issue 24 item 3, the runtime's half: a write to captured state that lint cannot see ends
//! the same way, with the same journal, on every run, and replays with nothing live.
//!
//! The scripts are generated: each route by which a branch can reach a captured value that
//! lint does not follow (Rhai: a closure that writes `this`, called with a captured value
//! bound as `this`; Lua: a table a helper returns, a writer kept in a table, an alias through
//! `select`, a captured local written by a function kept in a table), placed in each shape of
//! fan-out (fail-fast, settle, `on_error: null`, a pipeline stage, a nested fan-out, a step in
//! a branch; before the branch's first call, between calls, in one branch or in all). The
//! runtime refuses such a write where it happens; before, it also stopped the run at once, so
//! which of the siblings' paid calls were journaled depended on timing and `cairn replay`
//! found journaled calls it never reached (exit 7). Now the write ends its branch only, the
//! siblings run to their own ends and the fan-out raises the first violation in branch order.
//!
//! CI runs a selection in which every route and every shape appears (`CAIRN_DET_SEEDS=all`, or
//! any value, runs every combination).

use crate::determinism_sandbox::journal_projection;
use crate::determinism_steps::{cairn, script_dir};

/// A route to a captured value that lint does not follow: what the script declares first, and
/// the write (of the item `i`) a branch makes through it.
struct Route {
    name: &'static str,
    prelude: &'static str,
    write: &'static str,
}

const RHAI_ROUTES: &[Route] = &[
    Route {
        name: "this-bound closure",
        prelude: "let seen = []; let f = |v| this.push(v);",
        write: "seen.call(f, i);",
    },
    Route {
        name: "this-bound closure on a map",
        prelude: "let m = #{n: 0}; let f = |v| { this.n = v; };",
        write: "m.call(f, i);",
    },
    Route {
        name: "a function reached through Fn, this bound",
        prelude: "fn put(x) { this.push(x) } let seen = []; let g = Fn(\"put\");",
        write: "seen.call(g, i);",
    },
    Route {
        name: "a closure kept in an array, this bound",
        prelude: "let state = #{log: []}; let fs = [|v| { this.log.push(v); }];",
        write: "state.call(fs[0], i);",
    },
];

const LUA_ROUTES: &[Route] = &[
    Route {
        name: "a table a helper returns",
        prelude: "local seen = {}\nlocal function holder() return seen end",
        write: "local t = holder() t[#t + 1] = i",
    },
    Route {
        name: "a writer kept in a table",
        prelude: "local seen = {}\nlocal ops = {}\nops.add = function(x) seen[#seen + 1] = x end",
        write: "ops.add(i)",
    },
    Route {
        name: "an alias through select",
        prelude: "local seen = {}",
        write: "local t = select(1, seen) t[1] = i",
    },
    Route {
        name: "a captured local written by a function kept in a table",
        prelude: "local n = 0\nlocal ops = {}\nops.bump = function() n = n + 1 end",
        write: "ops.bump()",
    },
];

/// The fan-out shapes, as `(name, rhai, lua)` templates: `PRELUDE` is the route's prelude,
/// `WRITE` its write, `K` the branch that writes (`-1`: every branch), and the branch's item
/// is `i` (0 to 7).
const SHAPES: &[(&str, &str, &str)] = &[
    (
        "fail-fast, between two calls",
        "PRELUDE\nlet r = parallel([0, 1, 2, 3, 4, 5, 6, 7], |i| {\n  let a = agent(`first ${i}`);\n  if i == K || K < 0 { WRITE }\n  let b = agent(`second ${i}`);\n  a + b\n});\nr",
        "PRELUDE\nreturn parallel({0, 1, 2, 3, 4, 5, 6, 7}, function(i)\n  local a = agent('first ' .. i)\n  if i == K or K < 0 then WRITE end\n  local b = agent('second ' .. i)\n  return a .. b\nend)",
    ),
    (
        "fail-fast, before the branch's first call",
        "PRELUDE\nparallel([0, 1, 2, 3, 4, 5, 6, 7], |i| {\n  if i == K || K < 0 { WRITE }\n  agent(`only ${i}`)\n})",
        "PRELUDE\nreturn parallel({0, 1, 2, 3, 4, 5, 6, 7}, function(i)\n  if i == K or K < 0 then WRITE end\n  return agent('only ' .. i)\nend)",
    ),
    (
        "settle",
        "PRELUDE\nparallel([0, 1, 2, 3, 4, 5, 6, 7], |i| {\n  let a = agent(`first ${i}`);\n  if i == K || K < 0 { WRITE }\n  a + agent(`second ${i}`)\n}, #{settle: true})",
        "PRELUDE\nreturn parallel({0, 1, 2, 3, 4, 5, 6, 7}, function(i)\n  local a = agent('first ' .. i)\n  if i == K or K < 0 then WRITE end\n  return a .. agent('second ' .. i)\nend, {settle = true})",
    ),
    (
        "on_error null",
        "PRELUDE\nparallel([0, 1, 2, 3, 4, 5, 6, 7], |i| {\n  let a = agent(`first ${i}`);\n  if i == K || K < 0 { WRITE }\n  a + agent(`second ${i}`)\n}, #{on_error: \"null\"})",
        "PRELUDE\nreturn parallel({0, 1, 2, 3, 4, 5, 6, 7}, function(i)\n  local a = agent('first ' .. i)\n  if i == K or K < 0 then WRITE end\n  return a .. agent('second ' .. i)\nend, {on_error = 'null'})",
    ),
    (
        "a pipeline's middle stage",
        "PRELUDE\npipeline([0, 1, 2, 3, 4, 5, 6, 7], [\n  |i| { agent(`a ${i}`); i },\n  |i| { if i == K || K < 0 { WRITE } i },\n  |i| agent(`c ${i}`)\n])",
        "PRELUDE\nreturn pipeline({0, 1, 2, 3, 4, 5, 6, 7}, {\n  function(i) agent('a ' .. i) return i end,\n  function(i) if i == K or K < 0 then WRITE end return i end,\n  function(i) return agent('c ' .. i) end,\n})",
    ),
    (
        "a nested fan-out",
        "PRELUDE\nparallel([0, 1], |o| parallel([0, 1, 2, 3, 4, 5, 6, 7], |i| {\n  let a = agent(`first ${o} ${i}`);\n  if o == 1 && (i == K || K < 0) { WRITE }\n  a + agent(`second ${o} ${i}`)\n}).len())",
        "PRELUDE\nreturn parallel({0, 1}, function(o)\n  return #parallel({0, 1, 2, 3, 4, 5, 6, 7}, function(i)\n    local a = agent('first ' .. o .. ' ' .. i)\n    if o == 1 and (i == K or K < 0) then WRITE end\n    return a .. agent('second ' .. o .. ' ' .. i)\n  end)\nend)",
    ),
    (
        "a step in a branch",
        "PRELUDE\nparallel([0, 1, 2, 3, 4, 5, 6, 7], |i| {\n  let a = agent(`first ${i}`);\n  let s = step(`s${i}`, || { if i == K || K < 0 { WRITE } 1 });\n  a + s + agent(`second ${i}`)\n})",
        "PRELUDE\nreturn parallel({0, 1, 2, 3, 4, 5, 6, 7}, function(i)\n  local a = agent('first ' .. i)\n  local s = step('s' .. i, function() if i == K or K < 0 then WRITE end return 1 end)\n  return a .. s .. agent('second ' .. i)\nend)",
    ),
];

/// Which branch writes: the first, one in the middle, the last, or every branch.
const WRITERS: [i32; 4] = [0, 3, 7, -1];

/// One generated case: the dialect's extension, a name, the script.
fn case(ext: &str, route: &Route, shape: usize, writer: i32) -> (String, String) {
    let (shape_name, rhai, lua) = SHAPES[shape];
    let template = if ext == "rhai" { rhai } else { lua };
    let source = template
        .replace("PRELUDE", route.prelude)
        .replace("WRITE", route.write)
        .replace("K < 0", &format!("{writer} < 0"))
        .replace("== K", &format!("== {writer}"));
    (format!("{ext}: {} / {shape_name} / writer {writer}", route.name), source)
}

/// Every case, or (without `CAIRN_DET_SEEDS`) a selection in which each route, shape and
/// writer appears: case `n` of each dialect takes shape `n`, route `n mod routes` and writer
/// `n mod 4`.
fn cases() -> Vec<(String, String, String)> {
    let all = std::env::var("CAIRN_DET_SEEDS").is_ok();
    let mut out = Vec::new();
    for (ext, routes) in [("rhai", RHAI_ROUTES), ("lua", LUA_ROUTES)] {
        for shape in 0..SHAPES.len() {
            for (r, route) in routes.iter().enumerate() {
                for (w, writer) in WRITERS.iter().enumerate() {
                    if all || (r == shape % routes.len() && w == shape % WRITERS.len()) {
                        let (name, source) = case(ext, route, shape, *writer);
                        out.push((ext.to_owned(), name, source));
                    }
                }
            }
        }
        // The selection misses a route when there are more routes than shapes.
        assert!(routes.len() <= SHAPES.len());
    }
    out
}

/// Each generated hostile case passes lint (lint cannot see the write), and through the
/// binary ends `sandbox_violation` with the same journal, output and exit on two runs, and a
/// strict replay reaches every journaled call and nothing live.
#[test]
fn writes_lint_cannot_see_end_the_same_way_with_the_same_journal_and_replay() {
    let mut reached_runtime = std::collections::BTreeMap::<String, usize>::new();
    for (ext, name, source) in cases() {
        let mut runs = Vec::new();
        let mut kept = None;
        for _ in 0..2 {
            let (dir, file) = script_dir(&ext, &source);
            if runs.is_empty() {
                let lint = cairn(dir.path(), &["lint", &file]);
                if lint.code == Some(6) {
                    // Lint learned this route: the runtime is not what decides it any more.
                    break;
                }
                assert_eq!(lint.code, Some(0), "{name}: {}\n{source}", lint.text());
            }
            let run = cairn(dir.path(), &["run", &file, "--run-id", "r1", "-q"]);
            assert_eq!(run.code, Some(1), "{name}: {}\n{source}", run.text());
            assert!(
                run.stderr.contains("sandbox_violation: sandbox violation"),
                "{name}: {}\n{source}",
                run.text()
            );
            let journal = journal_projection(&dir.path().join("j/r1.jsonl"));
            runs.push((journal, run.stdout.clone(), run.ending().join("\n")));
            kept = Some(dir);
        }
        let Some(kept) = kept else { continue };
        *reached_runtime.entry(ext.clone()).or_default() += 1;
        assert_eq!(runs[0], runs[1], "{name}: two runs differ\n{source}");
        let replay = cairn(kept.path(), &["replay", "r1"]);
        assert_eq!(replay.code, Some(0), "{name}: {}\n{source}", replay.text());
        assert!(replay.text().contains(" 0 live, 0 orphaned"), "{name}: {}", replay.text());
    }
    // The test is about the runtime: in each dialect, cases must still get past lint.
    for ext in ["rhai", "lua"] {
        assert!(reached_runtime.get(ext).copied().unwrap_or(0) >= 3, "{ext}: {reached_runtime:?}");
    }
}

/// A fail-fast fan-out whose branch fails (a script error, catchable) after its siblings' calls
/// were paid: the decision is journaled and a strict replay raises it again without running
/// the fan-out, so it reaches nothing live and leaves nothing orphaned. Before, a run that
/// ended in that error dropped the decision on replay (it read as a failure a resume retries),
/// ran the fan-out again and stopped its siblings at other points (exit 7).
#[test]
fn a_fail_fast_error_after_paid_siblings_replays_with_nothing_live_in_both_dialects() {
    let cases = [
        (
            "rhai",
            "let r = parallel([0, 1, 2, 3, 4, 5, 6, 7], |i| {\n  let a = agent(`first ${i}`);\n  if i == 5 { throw `no ${i}`; }\n  a + agent(`second ${i}`)\n});\nr",
        ),
        (
            "lua",
            "return parallel({0, 1, 2, 3, 4, 5, 6, 7}, function(i)\n  local a = agent('first ' .. i)\n  if i == 5 then error('no ' .. i) end\n  return a .. agent('second ' .. i)\nend)",
        ),
        (
            "rhai",
            "pipeline([0, 1, 2, 3, 4, 5, 6, 7], [|i| { agent(`a ${i}`); i }, |i| { if i == 2 { throw `no ${i}`; } agent(`b ${i}`) }], #{on_item_error: \"throw\"})",
        ),
        (
            "lua",
            "return pipeline({0, 1, 2, 3, 4, 5, 6, 7}, {function(i) agent('a ' .. i) return i end, \
             function(i) if i == 2 then error('no ' .. i) end return agent('b ' .. i) end}, {on_item_error = 'throw'})",
        ),
    ];
    for (ext, source) in cases {
        let mut endings = Vec::new();
        for _ in 0..2 {
            let (dir, file) = script_dir(ext, source);
            let run = cairn(dir.path(), &["run", &file, "--run-id", "r1", "-q"]);
            assert_eq!(run.code, Some(1), "{ext}: {}\n{source}", run.text());
            assert!(run.stderr.contains("script_error"), "{ext}: {}", run.text());
            let journal = std::fs::read_to_string(dir.path().join("j/r1.jsonl")).unwrap();
            assert!(journal.contains("\"type\":\"fail_fast\""), "{ext}: {journal}");
            let replay = cairn(dir.path(), &["replay", "r1"]);
            assert_eq!(replay.code, Some(0), "{ext}: {}\n{source}", replay.text());
            assert!(replay.text().contains(" 0 live, 0 orphaned"), "{ext}: {}", replay.text());
            endings.push((run.stdout.clone(), run.ending().join("\n")));
        }
        assert_eq!(endings[0], endings[1], "{ext}: {source}");
    }
}
