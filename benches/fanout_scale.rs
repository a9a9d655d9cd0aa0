//! Fan-outs at scale through the `cairn` binary (issue #31): a `parallel` of 10,000 branches
//! (Rhai one-call branches, Rhai branches on threads, Lua) and an orchestration of 10,000
//! children (`cairn orchestrate` with its orchestrator on a scripted model), each a fresh
//! process and a fresh SQLite database, measured by `/usr/bin/time -v`: peak RSS (goal ≤ 500 MB,
//! which load does not skew), wall time and CPU time (user + system; steadier than wall time on
//! a shared machine).
//!
//! ```sh
//! cargo bench --bench fanout_scale
//! CAIRN_BENCH_SCALE=20000 cargo bench --bench fanout_scale   # the large fan-out's size
//! cargo bench --bench fanout_scale -- lua orchestrate          # some workloads only
//! CAIRN_BENCH_BIN=target/dist/cairn cargo bench --bench fanout_scale   # another build
//! ```
//!
//! Each workload runs `CAIRN_BENCH_ROUNDS` times (default 3; the median time, the largest peak
//! RSS) at 0 (process start, the script, the config), 1,000 and
//! `CAIRN_BENCH_SCALE` (default 10,000) branches; the per-branch cost is `(t(n) − t(0)) / n`,
//! and time stays linear when the figure at 10,000 is within 20 % of the one at 1,000 (goal).
//! Children and branches call the echo model with latency 0, so the figures are the engine's
//! own cost. The orchestration's per-child overhead is its per-child time less the one-call
//! Rhai `parallel`'s at the same size (what `benches/orchestrator.rs` measures in process).
//!
//! The orchestrator's model is a scripted OpenAI-compatible server in this process: each turn
//! asks for sixteen `parallel_agents` calls of 32 children and one `await_all` of the children
//! the turn before spawned, then `finish` (10,000 children take 22 of the orchestrator's
//! default 32 turns).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

const SMALL: u64 = 1_000;
const BATCH: u64 = 32;
const CALLS_PER_TURN: u64 = 16;

const RHAI_PARALLEL: &str = r#"
let items = [];
for i in 0..args.n { items.push(i); }
let out = parallel(items, |i| agent(`question ${i}`));
out.len()
"#;

const RHAI_PARALLEL_THREADED: &str = r#"
let items = [];
for i in 0..args.n { items.push(i); }
let out = parallel(items, |i| { let answer = agent(`question ${i}`); answer });
out.len()
"#;

const LUA_PARALLEL: &str = r#"
local items = {}
for i = 0, args.n - 1 do items[#items + 1] = i end
local out = parallel(items, function(i) return agent("question " .. i) end)
return #out
"#;

/// What one process took.
#[derive(Debug, Clone, Copy, Default)]
struct Measured {
    wall: f64,
    cpu: f64,
    rss_mb: f64,
}

/// One run of `cairn` under `/usr/bin/time -v` in `dir`.
fn measure(dir: &Path, args: &[String]) -> Measured {
    let report = dir.join("time.txt");
    let started = Instant::now();
    let output = Command::new("/usr/bin/time")
        .arg("-v")
        .arg("-o")
        .arg(&report)
        .arg(cairn_bin())
        .args(args)
        .current_dir(dir)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("spawn /usr/bin/time (install GNU time)");
    let wall = started.elapsed().as_secs_f64();
    assert!(
        output.status.success(),
        "cairn {args:?} failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&report).expect("the time report");
    let field = |name: &str| -> f64 {
        text.lines()
            .find_map(|line| line.trim().strip_prefix(name))
            .and_then(|rest| rest.trim().parse().ok())
            .unwrap_or(0.0)
    };
    Measured {
        wall,
        cpu: field("User time (seconds):") + field("System time (seconds):"),
        rss_mb: field("Maximum resident set size (kbytes):") / 1024.0,
    }
}

fn config(extra: &str) -> String {
    format!(
        "concurrency = 1000\nmax_spawns = 1000000\n\n[routing]\ndefault = \"echo:default\"\n\n\
         [providers.echo]\nkind = \"echo\"\nlatency_ms = 0\n\n{extra}"
    )
}

/// A fresh project directory with `cairn.toml` and the script.
fn project(root: &Path, name: &str, extra: &str, script: Option<(&str, &str)>) -> std::path::PathBuf {
    let dir = root.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("bench dir");
    std::fs::write(dir.join("cairn.toml"), config(extra)).expect("config");
    if let Some((file, source)) = script {
        std::fs::write(dir.join(file), source).expect("script");
    }
    dir
}

/// How to run a workload at size `n` in a fresh directory under a root.
type RunAt = Box<dyn Fn(&Path, u64) -> Measured>;

/// A workload.
struct Workload {
    name: &'static str,
    run: RunAt,
}

fn script_workload(name: &'static str, file: &'static str, source: &'static str) -> Workload {
    Workload {
        name,
        run: Box::new(move |root, n| {
            let dir = project(root, name, "", Some((file, source)));
            let args = ["--store", "sqlite:bench.db", "run", "-q", file, "--args"].map(String::from);
            let mut args = args.to_vec();
            args.push(format!("{{\"n\": {n}}}"));
            measure(&dir, &args)
        }),
    }
}

fn orchestrate_workload(server: Arc<ScriptedServer>) -> Workload {
    Workload {
        name: "orchestrate",
        run: Box::new(move |root, n| {
            let extra = format!(
                "[providers.scripted]\nkind = \"openai-compatible\"\nbase_url = \"{}\"\n\n\
                 [profiles.echoer]\ndescription = \"echoes\"\nmodel = \"echo:default\"\n",
                server.url
            );
            let dir = project(root, "orchestrate", &extra, None);
            // The goal names the size, so the scripted server knows how many to spawn.
            let args = [
                "--store",
                "sqlite:bench.db",
                "orchestrate",
                &format!("spawn {n}"),
                "--max-spawns",
                &n.max(1).to_string(),
                "--model",
                "scripted:orchestrator",
                "--profiles",
                "echoer",
                "-q",
            ]
            .map(String::from);
            measure(&dir, &args)
        }),
    }
}

// ---- the scripted orchestrator model ----------------------------------------------------------

/// An OpenAI-compatible chat-completions server answering an orchestrator's turns: turn `t`
/// (the request's assistant messages) of a goal `spawn N` gets its tool calls.
struct ScriptedServer {
    url: String,
}

impl ScriptedServer {
    fn start() -> ScriptedServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let _ = serve(stream);
                });
            }
        });
        ScriptedServer { url }
    }
}

fn serve(stream: TcpStream) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let sse = answer(&request);
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
            sse.len()
        );
        writer.write_all(head.as_bytes())?;
        writer.write_all(sse.as_bytes())?;
        writer.flush()?;
    }
}

/// The tool calls of the orchestrator's next turn.
fn answer(request: &Value) -> String {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let turn = messages.iter().filter(|m| m["role"] == "assistant").count() as u64;
    let goal =
        messages.iter().find(|m| m["role"] == "user").map(|m| m["content"].to_string()).unwrap_or_default();
    let n: u64 = goal
        .split("spawn ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or(0);
    // Turn t spawns its batches and awaits the previous turn's, so the conversation holds
    // at most two turns of digests beyond what the context bound elides (one `await_all` of
    // 10,000 digests is about 200,000 tokens, past a model's context).
    let per_turn = BATCH * CALLS_PER_TURN;
    let spawn_turns = n.div_ceil(per_turn);
    let range = |t: u64| (t * per_turn)..((t + 1) * per_turn).min(n);
    let mut calls: Vec<(String, Value)> = Vec::new();
    if turn < spawn_turns {
        let spawned = range(turn);
        let end = spawned.end;
        for from in spawned.step_by(BATCH as usize) {
            let children: Vec<Value> = (from..(from + BATCH).min(end))
                .map(|i| json!({"profile": "echoer", "prompt": format!("item {i}")}))
                .collect();
            calls.push(("parallel_agents".to_owned(), json!({ "children": children })));
        }
    }
    if turn >= 1 && turn <= spawn_turns {
        let handles: Vec<String> = range(turn - 1).map(|i| format!("c{i}")).collect();
        calls.push(("await_all".to_owned(), json!({ "handles": handles })));
    }
    if calls.is_empty() {
        calls.push(("finish".to_owned(), json!({ "result": format!("{n} children done") })));
    }
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "orchestrator",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": null}), Value::Null)];
    for (index, (name, arguments)) in calls.iter().enumerate() {
        events.push(chunk(
            json!({"tool_calls": [{"index": index, "id": format!("t{turn}_{index}"), "type": "function",
                   "function": {"name": name, "arguments": arguments.to_string()}}]}),
            Value::Null,
        ));
    }
    events.push(chunk(json!({}), json!("tool_calls")));
    events.push(json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "orchestrator",
                       "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}));
    let mut sse: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    sse.push_str("data: [DONE]\n\n");
    sse
}

// ---- the driver -------------------------------------------------------------------------------

fn per_branch(at: Measured, base: Measured, n: u64, pick: fn(Measured) -> f64) -> f64 {
    (pick(at) - pick(base)).max(0.0) / n as f64 * 1e6
}

/// The median of `rounds` runs, field by field (peak RSS: the largest).
fn median_of(rounds: usize, mut once: impl FnMut() -> Measured) -> Measured {
    let runs: Vec<Measured> = (0..rounds).map(|_| once()).collect();
    let median = |pick: fn(&Measured) -> f64| {
        let mut values: Vec<f64> = runs.iter().map(pick).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    Measured {
        wall: median(|m| m.wall),
        cpu: median(|m| m.cpu),
        rss_mb: runs.iter().map(|m| m.rss_mb).fold(0.0, f64::max),
    }
}

fn main() {
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let large: u64 = std::env::var("CAIRN_BENCH_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let rounds: usize =
        std::env::var("CAIRN_BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(3).max(1);
    let root = tempfile::tempdir().expect("tempdir");
    let server = Arc::new(ScriptedServer::start());
    let workloads = [
        script_workload("rhai_parallel", "w.rhai", RHAI_PARALLEL),
        script_workload("rhai_parallel_threaded", "w.rhai", RHAI_PARALLEL_THREADED),
        script_workload("lua_parallel", "w.lua", LUA_PARALLEL),
        orchestrate_workload(server),
    ];
    let mut parallel_at: Option<(Measured, Measured, Measured)> = None;
    for workload in &workloads {
        if !filter.is_empty() && !filter.iter().any(|f| workload.name.contains(f.as_str())) {
            continue;
        }
        // Warm-up: the page cache, the binary, the dynamic loader.
        let _ = (workload.run)(root.path(), 0);
        let base = median_of(rounds, || (workload.run)(root.path(), 0));
        let small = median_of(rounds, || (workload.run)(root.path(), SMALL));
        let big = median_of(rounds, || (workload.run)(root.path(), large));
        let wall = |m: Measured| m.wall;
        let cpu = |m: Measured| m.cpu;
        let (wall_small, wall_big) =
            (per_branch(small, base, SMALL, wall), per_branch(big, base, large, wall));
        let (cpu_small, cpu_big) = (per_branch(small, base, SMALL, cpu), per_branch(big, base, large, cpu));
        println!(
            "{:<24} peak RSS {:>6.1} MB at {large} ({:.1} MB at {SMALL}, {:.1} MB at 0); per branch: wall {wall_small:.1} µs at {SMALL}, \
             {wall_big:.1} µs at {large} ({:+.0} %); CPU {cpu_small:.1} µs at {SMALL}, {cpu_big:.1} µs at {large} ({:+.0} %); \
             total wall {:.2} s at {large}",
            workload.name,
            big.rss_mb,
            small.rss_mb,
            base.rss_mb,
            (wall_big / wall_small - 1.0) * 100.0,
            (cpu_big / cpu_small - 1.0) * 100.0,
            big.wall,
        );
        if workload.name == "rhai_parallel" {
            parallel_at = Some((base, small, big));
        }
        if workload.name == "orchestrate"
            && let Some((p_base, p_small, p_big)) = parallel_at
        {
            let overhead = |orch: Measured, par: Measured, n: u64, pick: fn(Measured) -> f64| {
                (per_branch(orch, base, n, pick) - per_branch(par, p_base, n, pick)).max(0.0)
            };
            println!(
                "{:<24} per-child overhead over the one-call parallel: wall {:.1} µs at {SMALL}, {:.1} µs at {large}; \
                 CPU {:.1} µs at {SMALL}, {:.1} µs at {large}",
                "",
                overhead(small, p_small, SMALL, wall),
                overhead(big, p_big, large, wall),
                overhead(small, p_small, SMALL, cpu),
                overhead(big, p_big, large, cpu),
            );
        }
    }
}

/// The binary measured: `CAIRN_BENCH_BIN` (an installed or `dist` build), else the one cargo
/// built for this bench.
fn cairn_bin() -> std::path::PathBuf {
    std::env::var_os("CAIRN_BENCH_BIN").map_or_else(|| env!("CARGO_BIN_EXE_cairn").into(), Into::into)
}
