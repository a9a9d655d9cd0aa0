//! Fan-outs at scale (#31), through the binary: what an engine call costs a Lua script's
//! operation budget is the script's own work, not the engine's allocations, so a `parallel` of
//! 10,000 branches fits the default budget (the figures at 10,000 come from
//! `cargo bench --bench fanout_scale`).

use std::path::Path;

use assert_cmd::Command;

const SEQUENTIAL: &str = r#"
local done = 0
for i = 1, args.n do
  agent("summarize item " .. i)
  done = done + 1
end
return done
"#;

const PARALLEL: &str = r#"
local items = {}
for i = 1, args.n do items[i] = i end
local out = parallel(items, function(i) return agent("question " .. i) end)
return #out
"#;

/// `cairn run` of `source` with `n` under an operation budget of `max_operations`.
fn run(dir: &Path, source: &str, n: u64, max_operations: u64) -> Result<String, String> {
    std::fs::write(
        dir.join("cairn.toml"),
        format!("max_spawns = 100000\n\n[sandbox]\nmax_operations = {max_operations}\n"),
    )
    .unwrap();
    std::fs::write(dir.join("w.lua"), source).unwrap();
    let output = Command::cargo_bin("cairn")
        .unwrap()
        .current_dir(dir)
        .env_remove("CAIRN_LOG")
        .args(["--store", "memory", "run", "-q", "w.lua", "--args", &format!("{{\"n\": {n}}}")])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// A Lua agent call used to charge its run for the engine's allocations on the script's thread
/// (its boxed future of about 11 KB, everything polling it allocated): about 3,000 operations a
/// call, 7,000 a `parallel` branch, so 10,000 branches overran the default 50,000,000. Now a
/// sequential call costs the script under 800 operations and a branch under 3,000.
#[test]
fn a_lua_agent_call_costs_the_script_its_own_work_not_the_engines_allocations() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        run(dir.path(), SEQUENTIAL, 1_000, 1_500_000),
        Ok("1000".to_owned()),
        "1,000 sequential calls"
    );
    assert_eq!(run(dir.path(), PARALLEL, 1_000, 4_000_000), Ok("1000".to_owned()), "a parallel of 1,000");
}
