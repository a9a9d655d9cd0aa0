//! The Lua dialect end to end: every global onto the engine, the table→JSON rule, the fixed
//! `pairs` order, branches that cannot write what they share, limits that `pcall` cannot
//! swallow, and the Lua twins of the samples journaling exactly what the Rhai samples do.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use cairn::LuaDialect;
use cairn::SandboxLimits;
use cairn::{Engine, ErrorCode, MemoryStore, RunOptions, RunStatus, Script};
use serde_json::{Value, json};

/// An engine whose Lua dialect runs scripts without the lint gate: these tests hold the
/// runtime's own defences, which must stand even for what lint would refuse.
fn engine() -> Engine {
    let store = Arc::new(MemoryStore::new());
    let limits = SandboxLimits {
        max_operations: 5_000_000,
        max_wall_time: Duration::from_secs(10),
        ..SandboxLimits::STANDARD
    };
    Engine::builder(store)
        .dialect(Arc::new(LuaDialect::with_limits(limits).without_lint()))
        .host_function("add", |args: Value| async move {
            Ok(json!(args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)))
        })
        .build()
        .unwrap()
}

fn run_with(source: &str, args: Value) -> cairn::RunOutcome {
    let engine = engine();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let handle =
            engine.run_script(&Script::new("lua", "test", source), args, RunOptions::default()).unwrap();
        tokio::time::timeout(Duration::from_secs(30), handle.result()).await.expect("the run hung").unwrap()
    })
}

fn run(source: &str) -> cairn::RunOutcome {
    run_with(source, json!({}))
}

fn value(source: &str) -> Value {
    let outcome = run(source);
    assert_eq!(outcome.status, RunStatus::Ok, "{source}\n{:?}", outcome.error);
    outcome.value.unwrap_or(Value::Null)
}

fn error(source: &str) -> cairn::Error {
    let outcome = run(source);
    assert_eq!(outcome.status, RunStatus::Error, "{source}\n{:?}", outcome.value);
    outcome.error.unwrap()
}

#[test]
fn globals_bridge_onto_the_engine() {
    let outcome = run_with(
        r#"
        local a = agent("hello")
        local fan = parallel({ function() return agent("left") end, function() return agent("right") end })
        local mapped = parallel(args.items, function(x) return agent("item " .. x) end)
        local piped = pipeline(args.items, { function(x) return x * 10 end, function(y) return y + 1 end })
        local s = step("compute", function() return 40 + 2 end)
        local sum = host_call("add", { a = 2, b = 3 })
        local p = phase("draft", function() return agent("draft it") end)
        log("info", "done", { n = 1 })
        local t, r, u = now(), random("k"), uuid()
        return { a = a, fan = fan, mapped = mapped, piped = piped, s = s, sum = sum, p = p,
          t_ok = t > 0, r_ok = r >= 0 and r < 1, u_len = #u, spent = budget.spent(), spent2 = budget:spent(),
          left = budget.remaining() }
        "#,
        json!({"items": [1, 2, 3]}),
    );
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    let v = outcome.value.unwrap();
    assert_eq!(v["a"], "echo: hello");
    assert_eq!(v["fan"], json!(["echo: left", "echo: right"]));
    assert_eq!(v["mapped"], json!(["echo: item 1", "echo: item 2", "echo: item 3"]));
    assert_eq!(v["piped"], json!([11, 21, 31]));
    assert_eq!(v["s"], 42);
    assert_eq!(v["sum"], 5);
    assert_eq!(v["p"], "echo: draft it");
    assert_eq!(
        (v["t_ok"].clone(), v["r_ok"].clone(), v["u_len"].clone()),
        (json!(true), json!(true), json!(36))
    );
    assert_eq!(v["spent"], v["spent2"]);
    assert!(v.get("left").is_none(), "no ceiling: remaining is nil");
}

#[test]
fn tables_cross_as_json_by_their_keys() {
    assert_eq!(value("return {}"), json!([]));
    assert_eq!(value("return {1, 2, 3}"), json!([1, 2, 3]));
    assert_eq!(value("return {1, nil, 3}"), json!([1, null, 3]));
    assert_eq!(value("return {b = 1, a = {x = 2.5}}"), json!({"a": {"x": 2.5}, "b": 1}));
    assert_eq!(value("return {n = 3 / 1, i = 3 // 1}"), json!({"n": 3.0, "i": 3}));
    // A table that came from a JSON object stays an object, even empty.
    let outcome = run_with("return {args = args, inner = args.empty}", json!({"empty": {}}));
    assert_eq!(outcome.value.unwrap(), json!({"args": {"empty": {}}, "inner": {}}));
    // An array that came from JSON keeps its length, trailing nulls included.
    let outcome = run_with("return {a = args.a, n = #args.a}", json!({"a": [1, null, 3, null]}));
    assert_eq!(outcome.value.unwrap(), json!({"a": [1, null, 3, null], "n": 3}));
    // An empty options table is an object; so is an empty `properties` in a schema option.
    assert_eq!(value(r#"return agent("x", {})"#), json!("echo: x"));
    let v = value(r#"return agent("x", {schema = {type = "object", properties = {}}})"#);
    assert!(v.is_object(), "{v}");
    for (source, says) in [
        (r#"return {1, 2, x = 3}"#, "no JSON form"),
        (r#"return {[0] = 1}"#, "no JSON form"),
        (r#"return {[1.5] = 1}"#, "no JSON form"),
        (r#"return {f = function() end}"#, "a function is not a JSON value"),
        (r#"return {x = 0/0}"#, "not a JSON number"),
        (r#"return {x = math.huge}"#, "not a JSON number"),
    ] {
        let e = error(source);
        assert_eq!(e.code, ErrorCode::Validation, "{source}: {e:?}");
        assert!(e.message.contains(says), "{source}: {}", e.message);
    }
    // A table that contains itself nests forever: a typed limit, not a hang.
    let e = error("local t = {} t[1] = t return t");
    assert_eq!(e.code, ErrorCode::SandboxLimit, "{e:?}");
    // A sparse table cannot blow up the output.
    assert_eq!(error("return {[2^40] = 1}").code, ErrorCode::SandboxLimit);
}

#[test]
fn pairs_and_next_visit_keys_in_a_fixed_order() {
    let v = value(
        r#"
        local t = {b = 1, a = 2, [3] = 4, [1] = 5, [2.5] = 6, [true] = 7, [false] = 8, aa = 9, [-1] = 10}
        local keys = {}
        for k in pairs(t) do keys[#keys + 1] = tostring(k) end
        local first = next(t)
        local count, k = 0, nil
        repeat k = next(t, k) if k ~= nil then count = count + 1 end until k == nil
        return {keys = keys, first = first, count = count}
        "#,
    );
    assert_eq!(v["keys"], json!(["-1", "1", "2.5", "3", "a", "aa", "b", "false", "true"]));
    assert_eq!(v["first"], -1);
    assert_eq!(v["count"], 9);
    // Calls made while iterating happen in that order: the same journal in every process.
    let v = value(
        r#"local out = {} for k, v in pairs({zeta = 1, alpha = 2, mid = 3}) do out[#out + 1] = agent(k) end return out"#,
    );
    assert_eq!(v, json!(["echo: alpha", "echo: mid", "echo: zeta"]));
    let e = error("for k in pairs({[{}] = 1}) do end");
    assert!(e.message.contains("cannot order"), "{e:?}");
}

#[test]
fn branches_cannot_write_what_they_share() {
    for (source, names) in [
        ("local n = 0 parallel({function() n = n + 1 return n end})", "'n'"),
        ("local t = {} parallel({1, 2}, function(x) t[x] = true end)", "captured table"),
        ("local t = {} parallel({1}, function(x) table.insert(t, x) end)", "captured table"),
        ("local t = {} parallel({1}, function(x) rawset(t, 1, x) end)", "captured table"),
        ("parallel({function() shared_global = 1 end})", "'shared_global'"),
        (
            "local count = 0 local function bump() count = count + 1 end parallel({function() bump() end})",
            "'count'",
        ),
        ("local n = 0 pipeline({1, 2}, {function(x) n = x return agent('x' .. x) end})", "'n'"),
    ] {
        let e = error(source);
        assert_eq!(e.code, ErrorCode::SandboxViolation, "{source}: {e:?}");
        assert!(e.message.contains(names), "{source}: {}", e.message);
    }
    // Reading what was captured works, functions and nested tables included; a branch may
    // change its own item and its own tables.
    let v = value(
        r#"
        local cfg = {prefix = "p", deep = {suffix = "!"}, f = function(s) return "<" .. s .. ">" end}
        local calls = 0
        local read = parallel({1, 2}, function(i) return cfg.f(cfg.prefix .. i .. cfg.deep.suffix) end)
        local own = parallel({{a = 1}}, function(x) x.a = x.a + 1 local l = {} l[1] = x.a return l end)
        calls = calls + 1
        return {read = read, own = own, calls = calls}
        "#,
    );
    assert_eq!(v, json!({"read": ["<p1!>", "<p2!>"], "own": [[2]], "calls": 1}));
}

#[test]
fn pcall_and_coroutines_cannot_swallow_a_limit() {
    for source in [
        "pcall(function() while true do end end) return 'escaped'",
        "xpcall(function() while true do end end, function(e) return e end) return 'escaped'",
        "local co = coroutine.create(function() while true do end end) coroutine.resume(co) return 'escaped'",
        "for i = 1, 10 do pcall(function() local s = 'x' while true do s = s .. s end end) end return 'escaped'",
        "local function f() return 1 + f() end pcall(f) return 'escaped'",
        "pcall(string.rep, 'x', 1e12) return 'escaped'",
    ] {
        let e = error(source);
        assert_eq!(e.code, ErrorCode::SandboxLimit, "{source}: {e:?}");
    }
    // An ordinary error is caught as usual; a failed global's error is a table.
    let v = value(
        r#"
        local ok, e = pcall(error, "boom")
        local ok2, e2 = pcall(agent, "x", {max_turns = 0})
        local ok3, e3 = pcall(host_call, "missing", {})
        return {ok = ok, e = e, ok2 = ok2, code2 = e2.code, code3 = e3.code}
        "#,
    );
    assert_eq!(v["ok"], false);
    assert_eq!(v["e"], "boom");
    assert_eq!(v["ok2"], false);
    assert_eq!(v["code2"], "validation");
    assert!(v["code3"].is_string(), "{v}");
}

#[test]
fn the_sandbox_hides_what_reaches_outside_the_run() {
    let v = value(
        r#"
        local missing = {}
        for _, name in ipairs({"io", "os", "package", "debug", "load", "loadstring", "require", "dofile",
            "loadfile", "collectgarbage", "print", "warn"}) do
          if _G[name] ~= nil then missing[#missing + 1] = name end
        end
        if string.dump ~= nil or math.random ~= nil or math.randomseed ~= nil then missing[#missing + 1] = "lib" end
        local ro = {(pcall(function() string.rep = nil end)), (pcall(function() args.x = 1 end)),
          (pcall(function() args = {} end))}
        local gc = pcall(setmetatable, {}, {__gc = function() end})
        local mode = pcall(setmetatable, {}, {__mode = "k"})
        local mt = {} setmetatable({}, mt)
        local late = pcall(function() mt.__close = function() end end)
        local fmt = pcall(string.format, "%p", {})
        local in_co = coroutine.wrap(function() return pcall(agent, "x") end)()
        local sorted = {{k = 2, i = 1}, {k = 1, i = 2}, {k = 2, i = 3}, {k = 1, i = 4}}
        table.sort(sorted, function(a, b) return a.k < b.k end)
        local order = {}
        for _, s in ipairs(sorted) do order[#order + 1] = s.i end
        return {missing = missing, ro = ro, gc = gc, mode = mode, late = late, fmt = fmt, in_co = in_co,
          text = tostring({}) .. tostring(print) .. string.format("%s", {}), meta = getmetatable("") == nil,
          order = order}
        "#,
    );
    assert_eq!(v["missing"], json!([]));
    assert_eq!(v["ro"], json!([false, false, false]));
    assert_eq!(
        (v["gc"].clone(), v["mode"].clone(), v["late"].clone()),
        (json!(false), json!(false), json!(false))
    );
    assert_eq!(v["fmt"], false);
    assert_eq!(v["in_co"], false);
    assert_eq!(v["text"], "<table>nil<table>");
    assert_eq!(v["meta"], true);
    assert_eq!(v["order"], json!([2, 4, 1, 3]));
}

#[test]
fn a_step_replays_and_a_phase_passes_errors_through() {
    let v = value(
        r#"
        local a = step("s", function() return {x = random()} end)
        local ok, e = pcall(phase, "p", function() error({code = "x_code", why = 1}) end)
        return {a_is_table = type(a) == "table", ok = ok, code = e.code}
        "#,
    );
    assert_eq!(v, json!({"a_is_table": true, "ok": false, "code": "x_code"}));
    let e = error("local t = setmetatable({}, {__index = function(t, k) return t[k .. 'x'] end}) return t.a");
    assert_eq!(e.code, ErrorCode::SandboxLimit, "{e:?}");
}

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts")
}

fn cairn(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
    cmd.current_dir(dir)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .stdin(Stdio::null());
    cmd
}

/// The journal of a run as (scope, kind, status, content key) rows, sorted: what identity is
/// made of, without timings or ids. A step's key holds its body's identity, which is the
/// dialect's own (Rhai's parsed body, Lua's bytecode), so step keys are named by the label
/// and order of their steps, in the rows and in the scopes of their bodies.
fn journal_rows(dir: &Path, run: &str) -> Vec<(String, String, String, String)> {
    let text = std::fs::read_to_string(dir.join(format!("journal/{run}.jsonl"))).unwrap();
    let entries: Vec<Value> = text.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let mut steps: Vec<(String, String)> = Vec::new();
    for entry in &entries {
        if entry["kind"] == "step" && entry["status"] == "running" {
            let key = entry["key"].as_str().unwrap_or_default().to_owned();
            let label = entry["label"].as_str().unwrap_or_default();
            if !steps.iter().any(|(k, _)| *k == key) {
                let name = format!("step<{label}#{}>", steps.len());
                steps.push((key, name));
            }
        }
    }
    let named = |text: &str| {
        let mut text = text.to_owned();
        for (key, name) in &steps {
            text = text.replace(key.as_str(), name).replace(&key[..16.min(key.len())], name);
        }
        text
    };
    let mut rows: Vec<_> = entries
        .iter()
        .map(|entry| {
            let field = |name: &str| named(entry[name].as_str().unwrap_or_default());
            (field("scope"), field("kind"), field("status"), field("key"))
        })
        .collect();
    rows.sort();
    rows
}

/// Every sample has a Lua twin; both run offline through the binary, end the same way, return
/// the same value and journal the same entries (scope paths, kinds, statuses, content keys).
#[test]
fn the_lua_twin_of_every_sample_journals_what_the_rhai_sample_does() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("slow-echo.toml"),
        "[providers.echo]\nkind = \"echo\"\nlatency_ms = 400\n",
    )
    .unwrap();
    let mut samples: Vec<String> = std::fs::read_dir(scripts())
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            (path.extension()? == "rhai").then(|| path.file_stem().unwrap().to_string_lossy().into_owned())
        })
        .collect();
    samples.sort();
    assert!(samples.len() >= 7, "{samples:?}");
    for sample in &samples {
        assert!(scripts().join(format!("{sample}.lua")).exists(), "{sample} has no Lua twin");
        let extra: &[&str] = if sample == "exhausted_fanout" {
            &["--budget", "0.25", "--config", "slow-echo.toml"]
        } else {
            &[]
        };
        let mut outcomes = Vec::new();
        for dialect in ["rhai", "lua"] {
            let run = format!("{sample}-{dialect}");
            let out = cairn(dir.path())
                .args(["--store", "jsonl:journal", "run", "-q", "--json", "--run-id", &run])
                .arg(scripts().join(format!("{sample}.{dialect}")))
                .args(extra)
                .output()
                .unwrap();
            let outcome: Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|_| panic!("{run}: {}", String::from_utf8_lossy(&out.stderr)));
            let mut outcome = (out.status.code(), outcome["status"].clone(), outcome["value"].clone());
            if sample == "deploy_approval" {
                assert_eq!(outcome.0, Some(4), "{run} suspends");
                let resolved = cairn(dir.path())
                    .args([
                        "--store",
                        "jsonl:journal",
                        "resolve",
                        &run,
                        "deploy-approval",
                        r#"{"approved": true}"#,
                    ])
                    .output()
                    .unwrap();
                assert!(resolved.status.success(), "{}", String::from_utf8_lossy(&resolved.stderr));
                let resumed = cairn(dir.path())
                    .args(["--store", "jsonl:journal", "resume", &run, "-q", "--json"])
                    .output()
                    .unwrap();
                let value: Value = serde_json::from_slice(&resumed.stdout).unwrap();
                outcome = (resumed.status.code(), value["status"].clone(), value["value"].clone());
                assert_eq!(outcome.2["deployed"], true, "{run}");
            }
            outcomes.push((outcome, journal_rows(dir.path(), &run)));
        }
        let (rhai, lua) = (&outcomes[0], &outcomes[1]);
        assert_eq!(rhai.0, lua.0, "{sample}: the twins end differently");
        assert_eq!(rhai.1, lua.1, "{sample}: the twins journal differently");
        assert!(!lua.1.is_empty(), "{sample}");
    }
}

/// Lint and run pick the dialect from the extension or `--dialect`; the card prints.
#[test]
fn the_cli_picks_the_dialect_by_extension_or_flag() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("w.lua"), "return agent('hi')").unwrap();
    std::fs::write(dir.path().join("w.txt"), "return agent('hi')").unwrap();
    std::fs::write(dir.path().join("bad.lua"), "return agent('hi'").unwrap();
    let ok = cairn(dir.path()).args(["--store", "memory", "run", "-q", "--json", "w.lua"]).output().unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let v: Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(v["value"], "echo: hi");
    let flagged = cairn(dir.path())
        .args(["--store", "memory", "run", "-q", "--dialect", "lua", "w.txt"])
        .output()
        .unwrap();
    assert!(flagged.status.success(), "{}", String::from_utf8_lossy(&flagged.stderr));
    let lint = cairn(dir.path()).args(["lint", "--json", "bad.lua"]).output().unwrap();
    assert!(!lint.status.success());
    let diagnostics: Value = serde_json::from_slice(&lint.stdout).unwrap();
    assert_eq!(diagnostics[0]["rule_id"], "syntax", "{diagnostics}");
    assert_eq!(diagnostics[0]["line"], 1);
    let rejected = cairn(dir.path()).args(["--store", "memory", "run", "-q", "bad.lua"]).output().unwrap();
    assert!(!rejected.status.success());
    assert!(String::from_utf8_lossy(&rejected.stderr).contains("rejected"));
    let card = cairn(dir.path()).args(["card", "--dialect", "lua"]).output().unwrap();
    assert!(card.status.success(), "{}", String::from_utf8_lossy(&card.stderr));
    assert!(String::from_utf8_lossy(&card.stdout).starts_with("# cairn script dialect (Lua)"));
    let unknown = cairn(dir.path()).args(["lint", "--dialect", "cobol", "w.lua"]).output().unwrap();
    assert!(!unknown.status.success());
}

/// The script-time limit counts the time the script computes, not the time its coroutines wait
/// for model calls: six 100 ms calls pass under a 0.3 s limit, a computing loop is stopped.
#[test]
fn the_wall_clock_limit_counts_script_time_not_model_waits() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cairn.toml"),
        "[sandbox]\nwall_time_s = 0.3\nmax_operations = 1000000000000\n[providers.echo]\nkind = \"echo\"\nlatency_ms = 100\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("waits.lua"),
        "local n = 0 for i = 1, 6 do agent('q ' .. i) n = n + 1 end return n",
    )
    .unwrap();
    std::fs::write(dir.path().join("spins.lua"), "local n = 0 while true do n = n + #tostring(n) end")
        .unwrap();
    let waits = cairn(dir.path()).args(["--store", "memory", "run", "-q", "waits.lua"]).output().unwrap();
    assert!(waits.status.success(), "{}", String::from_utf8_lossy(&waits.stderr));
    let started = std::time::Instant::now();
    let spins = cairn(dir.path()).args(["--store", "memory", "run", "-q", "spins.lua"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&spins.stderr);
    assert!(stderr.contains("sandbox_limit") && stderr.contains("script-time limit"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
}
