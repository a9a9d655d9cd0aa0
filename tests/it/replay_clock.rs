//! The script-time limit is the one bound of a script that timing decides, so a replay must not
//! decide it again (`engine::script_clock`): a run the limit stopped journals so, and its
//! replay on a slower machine (here: a lower limit) serves every journaled call before the
//! limit may stop it, and on a faster one (a higher limit) stops at the first call the run never
//! made; a run the limit did not stop replays under ten times its limit. Each is `cairn
//! replay`'s "same outcome", through the binary.

use std::path::Path;

use super::lease::{entries, run, text};

/// Compares two distinct equal 1 MiB strings in a loop, asking `now()` (a journaled call)
/// every 20 comparisons: calls all along, and work between them the operation budget cannot
/// see.
const LOOP_RHAI: &str = r#"
let a = "0123456789abcdef";
while a.len() < 1000000 { a += a; }
let b = "0123456789abcdef";
while b.len() < 1000000 { b += b; }
let n = 0;
loop { if a == b { n += 1; } if n % 20 == 0 { now(); } }
"#;

const LOOP_LUA: &str = r#"
local a = string.rep("0123456789", 100000)
local b = string.rep("0123456789", 100000)
local n = 0
while true do
  if a == b then n = n + 1 end
  if n % 20 == 0 then now() end
end
"#;

fn config(dir: &Path, seconds: f64) {
    std::fs::write(dir.join("cairn.toml"), format!("[sandbox]\nwall_time_s = {seconds}\n")).unwrap();
}

fn store(dir: &Path) -> String {
    format!("sqlite:{}", dir.join("c.db").display())
}

/// `cairn replay ID` with the limit at `seconds`: its exit code and stderr and stdout.
fn replay(dir: &Path, id: &str, seconds: f64) -> (Option<i32>, String) {
    config(dir, seconds);
    let out = run(dir, &store(dir), &["replay", id]);
    (out.status.code(), format!("{}{}", text(&out.stderr), text(&out.stdout)))
}

#[test]
fn a_run_its_script_time_stopped_replays_to_the_same_outcome_slower_or_faster() {
    for (file, source) in [("loop.rhai", LOOP_RHAI), ("loop.lua", LOOP_LUA)] {
        let work = tempfile::tempdir().unwrap();
        let dir = work.path();
        std::fs::write(dir.join(file), source).unwrap();
        config(dir, 1.5);
        let out = run(dir, &store(dir), &["run", file, "--run-id", "clocked", "-q"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{file}: {stderr}");
        assert!(stderr.contains("sandbox_limit") && stderr.contains("script-time limit"), "{file}: {stderr}");
        let journal = entries(dir, &store(dir), "clocked");
        let settled = journal.iter().rev().find(|e| e["value"]["type"] == "run_settled").unwrap();
        assert_eq!(settled["value"]["stopped_by"], "script_time", "{file}: {settled}");
        let calls = journal.iter().filter(|e| e["kind"] == "rand").count();
        assert!(calls > 3, "{file}: the run made {calls} calls");

        // A machine four times slower, then one forty times faster: the same outcome.
        for seconds in [0.375, 60.0] {
            let (code, said) = replay(dir, "clocked", seconds);
            assert_eq!(code, Some(0), "{file} replayed under {seconds} s: {said}");
            assert!(said.contains("same outcome") && said.contains("0 orphaned"), "{file}: {said}");
        }
    }
}

#[test]
fn a_run_the_limit_did_not_stop_replays_under_ten_times_its_limit() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    // About 0.3 s of comparisons around a journaled call, then a value.
    let source = r#"
let a = "0123456789abcdef";
while a.len() < 1000000 { a += a; }
let b = "0123456789abcdef";
while b.len() < 1000000 { b += b; }
let n = 0;
let t = now();
while n < 3000 { if a == b { n += 1; } }
#{ n: n, t: t }
"#;
    std::fs::write(dir.join("work.rhai"), source).unwrap();
    config(dir, 60.0);
    let out = run(dir, &store(dir), &["run", "work.rhai", "--run-id", "fits", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Replayed where the limit is a third of the work: the run fit its own limit, and its
    // reproduction has ten times the one it is given.
    let (code, said) = replay(dir, "fits", 0.1);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("same outcome"), "{said}");
}
