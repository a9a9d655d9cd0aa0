//! Promises tried from outside, as a new user meets them: the real `cairn` binary in a scratch
//! directory with a `cairn.toml`, ordinary scripts, a second terminal, a real file-size limit.
//! Each test here failed on the code it was written against, and none is ignored: a defect
//! found this way is fixed before its test lands.

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::scripted_server::{data_lines, run};

/// A scratch project: `cairn.toml` and the named scripts.
fn project(config: &str, scripts: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cairn.toml"), config).unwrap();
    for (name, source) in scripts {
        std::fs::write(dir.path().join(name), source).unwrap();
    }
    dir
}

/// `cairn inspect RUN --json`.
fn inspect(dir: &Path, run_id: &str) -> Value {
    let (code, stdout, stderr) = run(dir, &["inspect", run_id, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    serde_json::from_str(&stdout).unwrap()
}

/// How many agent calls of a run were dispatched (their `running` entries).
fn dispatched(dir: &Path, run_id: &str) -> usize {
    let meta = inspect(dir, run_id);
    meta["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "agent" && e["status"] == "running")
        .count()
}

/// A one-request-at-a-time OpenAI-compatible model, like llama.cpp's server: each answer takes
/// `busy`; it records the most requests it ever had in flight at once.
struct OneAtATime {
    url: String,
    most_in_flight: Arc<AtomicUsize>,
}

impl OneAtATime {
    fn start(busy: Duration) -> OneAtATime {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let in_flight = Arc::new(AtomicUsize::new(0));
        let most_in_flight = Arc::new(AtomicUsize::new(0));
        let most = most_in_flight.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let (in_flight, most) = (in_flight.clone(), most.clone());
                std::thread::spawn(move || {
                    if super::scripted_server::read_request(&stream).is_none() {
                        return;
                    }
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(busy);
                    let text = data_lines(&[
                        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "fine"}, "finish_reason": null}]}),
                        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
                    ]);
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        text.len()
                    );
                    let _ = stream.write_all(head.as_bytes());
                    let _ = stream.write_all(text.as_bytes());
                });
            }
        });
        OneAtATime { url, most_in_flight }
    }
}

/// A llama.cpp server serves one request at a time and interrupts the one in flight when
/// another arrives (live: two concurrent 96-token calls kept interrupting each other's retries
/// and the run failed `provider_unavailable`). `concurrency = 1` in the provider's table keeps
/// a run's calls to it one at a time, whatever the script fans out.
#[test]
fn a_provider_table_concurrency_limits_calls_to_that_provider() {
    let server = OneAtATime::start(Duration::from_millis(150));
    let config = format!(
        "[providers.local]\nkind = \"openai-compatible\"\nbase_url = \"{}\"\nconcurrency = 1\n\n[routing]\ndefault = \"local:m\"\n",
        server.url
    );
    let dir = project(&config, &[("s.rhai", "parallel([1, 2, 3], |i| agent(`q${i}`))")]);
    let (code, stdout, stderr) = run(dir.path(), &["run", "s.rhai", "-q"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("fine"), "{stdout}");
    assert_eq!(server.most_in_flight.load(Ordering::SeqCst), 1, "calls overlapped at the server");

    // Out of range: refused at load, naming the key.
    let dir = project(
        "[providers.local]\nkind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:9/v1\"\nconcurrency = 0\n",
        &[("s.rhai", "agent(\"x\")")],
    );
    let (code, _, stderr) = run(dir.path(), &["run", "s.rhai"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("providers.local.concurrency = 0"), "{stderr}");
}

/// `ulimit -f` as a user types it (no `trap '' XFSZ`): a write past the limit must be a typed
/// `store_io` error that names the cause and the resume command, not SIGXFSZ killing the
/// process (exit 153) mid-write. Nothing acknowledged is lost: the resume finishes.
#[cfg(unix)]
#[test]
fn a_file_size_limit_ends_the_run_with_a_typed_store_error_not_a_signal() {
    let script = "let out = [];\nfor i in 0..300 { out.push(agent(`call number ${i} with a longer prompt to grow the journal ${i}`)); }\nout.len()";
    let dir = project("[providers.echo]\nkind = \"echo\"\nlatency_ms = 0\n", &[("big.rhai", script)]);
    std::fs::create_dir(dir.path().join(".cairn")).unwrap();
    let cairn = assert_cmd::cargo::cargo_bin("cairn");
    let out = std::process::Command::new("sh")
        .current_dir(dir.path())
        .arg("-c")
        .arg(format!("ulimit -f 400; exec '{}' run big.rhai --run-id full -q", cairn.display()))
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        // The failed driver cannot write its lease's release either: the resume takes the run
        // over from the process that exited.
        .env_remove("CAIRN_LEASE_TTL_MS")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "killed by a signal? {:?} {stderr}", out.status);
    assert!(stderr.contains("store_io") && stderr.contains("ulimit -f"), "{stderr}");
    assert!(stderr.contains("cairn resume full"), "{stderr}");
    let (code, stdout, stderr) = run(dir.path(), &["resume", "full", "--wait", "-q"]);
    assert_eq!((code, stdout.trim()), (0, "300"), "{stderr}");
}

/// A profile's limits are checked when the config loads, as a script's agent options are
/// (exit 2, the key and the value): not accepted and then failing the run (`max_turns = 0`
/// ended every call `turn_limit`, exit 1; an unknown toolset failed at the first call).
#[test]
fn profile_limits_and_toolsets_are_checked_when_the_config_loads() {
    let cases = [
        ("max_turns = 0", "profiles.a.max_turns = 0"),
        ("max_turns = 100000", "profiles.a.max_turns = 100000"),
        ("max_output_tokens = 0", "profiles.a.max_output_tokens = 0"),
        ("max_context_tokens = 0", "profiles.a.max_context_tokens = 0"),
        ("tools = [\"nosuch\"]", "profiles.a.tools: unknown toolset \"nosuch\""),
    ];
    for (line, expected) in cases {
        let dir =
            project(&format!("[profiles.a]\n{line}\n"), &[("p.rhai", "agent(\"hi\", #{profile: \"a\"})")]);
        let (code, _, stderr) = run(dir.path(), &["run", "p.rhai", "--store", "memory"]);
        assert_eq!(code, 2, "{line}: {stderr}");
        assert!(stderr.contains(expected), "{line}: {stderr}");
        assert!(!stderr.contains("running p"), "{line}: the run started: {stderr}");
    }
    // A toolset that is configured is accepted.
    let docs = tempfile::tempdir().unwrap();
    let dir = project(
        &format!("[profiles.a]\ntools = [\"fs-read\"]\n\n[toolsets.fs-read]\nroot = {:?}\n", docs.path()),
        &[("p.rhai", "agent(\"hi\", #{profile: \"a\"})")],
    );
    let (code, _, stderr) = run(dir.path(), &["run", "p.rhai", "--store", "memory", "-q"]);
    assert_eq!(code, 0, "{stderr}");
}

/// A huge echo latency was accepted and slept for ever (`latency_ms = 18446744073709551615`).
#[test]
fn an_echo_latency_past_an_hour_is_refused_at_load() {
    let dir = project(
        "[providers.echo]\nkind = \"echo\"\nlatency_ms = 18446744073709551615\n",
        &[("s.rhai", "agent(\"hi\")")],
    );
    let started = Instant::now();
    let out = super::scripted_server::cairn_in(dir.path())
        .args(["run", "s.rhai", "--store", "memory"])
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("providers.echo.latency_ms"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(20));
}

// ---- Still failing: owned by areas still being changed (engine, journal, store, script). ----

/// Never pay twice across an edit. `cairn resume RUN --script` with a call inserted before
/// others replays its neighbours (one live call, as the README says), but the *next* resume of
/// the finished run pays the calls after the inserted one again and re-asks a wait that was
/// already resolved: the run goes from `ok` back to `suspended`, and `cairn replay` exits 7.
/// The inserted call's record is appended at the journal's end, so once it replays the scope's
/// cursor is past every record journaled before it (`src/journal/replay.rs`).
#[test]
fn an_inserted_call_keeps_its_neighbours_replaying_on_every_later_resume() {
    let before = "let x1 = agent(\"one\");\nlet x2 = agent(\"two\");\nlet g = await_external(\"go\");\nlet x3 = agent(\"three\");\n[x1, x2, x3]";
    let after = "let x1 = agent(\"one\");\nlet x15 = agent(\"one and a half\");\nlet x2 = agent(\"two\");\nlet g = await_external(\"go\");\nlet x3 = agent(\"three\");\n[x1, x15, x2, x3]";
    let dir = project(
        "[providers.echo]\nkind = \"echo\"\nlatency_ms = 0\nprice = [1.0, 1.0]\n",
        &[("a.rhai", before), ("b.rhai", after)],
    );
    let d = dir.path();
    assert_eq!(run(d, &["run", "a.rhai", "--run-id", "i1", "-q"]).0, 4);
    assert_eq!(run(d, &["resolve", "i1", "go", "1"]).0, 0);
    let (code, _, stderr) = run(d, &["resume", "i1", "--script", "b.rhai", "-q"]);
    assert_eq!(code, 0, "{stderr}");
    let paid = dispatched(d, "i1");
    assert_eq!(paid, 4, "one, two, then the inserted call and three");

    let (code, _, stderr) = run(d, &["replay", "i1"]);
    assert_eq!(code, 0, "replay of the finished run: {stderr}");
    let (code, stdout, stderr) = run(d, &["resume", "i1", "-q"]);
    assert_eq!(code, 0, "the finished run asks again: {stderr}");
    assert!(stdout.contains("echo: three"), "{stdout}");
    assert_eq!(dispatched(d, "i1"), paid, "a second resume paid again");
}

/// `cairn replay` of a run that ended `exhausted` because its first call did not fit the
/// ceiling said "a call would run live" and exited 7, though replaying makes no call (the
/// admission refuses it again). Holds since main journals admission refusals as decisions.
#[test]
fn replay_of_a_run_exhausted_at_admission_is_the_same_outcome() {
    let dir = project(
        "[providers.echo]\nkind = \"echo\"\nlatency_ms = 0\nprice = [100.0, 100.0]\n",
        &[("one.rhai", "let a = agent(\"x\"); a")],
    );
    let d = dir.path();
    let (code, _, stderr) = run(d, &["run", "one.rhai", "--budget", "0.001", "--run-id", "x1", "-q"]);
    assert_eq!(code, 3, "{stderr}");
    let (code, stdout, stderr) = run(d, &["replay", "x1"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
}

/// Read commands on a read-only copy of a cairn database (another user's, a read-only mount):
/// `cairn runs` fails "store_io: the store cannot be written" (it needs to create the WAL's
/// `-shm`/`-wal` files beside it; as root it creates them in the read-only directory).
#[cfg(unix)]
#[test]
fn read_commands_work_on_a_read_only_copy() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let dir = project("", &[("s.rhai", "agent(\"x\")")]);
    let d = dir.path();
    std::fs::create_dir(d.join("ro")).unwrap();
    let (code, _, stderr) = run(d, &["--store", "sqlite:ro/c.db", "run", "s.rhai", "--run-id", "r1", "-q"]);
    assert_eq!(code, 0, "{stderr}");
    let db = d.join("ro/c.db");
    let bytes = std::fs::read(&db).unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::set_permissions(d.join("ro"), std::fs::Permissions::from_mode(0o555)).unwrap();
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A copy of the binary beside the project, so another user can run it wherever the build
    // directory lives (a checkout under /root is closed to other users).
    let binary = d.join("cairn-copy");
    std::fs::copy(assert_cmd::cargo::cargo_bin("cairn"), &binary).unwrap();
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = std::process::Command::new(&binary);
    cmd.current_dir(d).args(["--store", "sqlite:ro/c.db", "runs"]);
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        // Root writes anywhere: read as nobody, as another user would.
        cmd.uid(65534).gid(65534);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    std::fs::set_permissions(d.join("ro"), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("r1"), "{stdout}");
    assert_eq!(std::fs::read(&db).unwrap(), bytes);
    let extra: Vec<_> = std::fs::read_dir(d.join("ro")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(extra.len(), 1, "files created beside a read-only copy: {extra:?}");
}

/// A two-line script that nests an array in itself ran 15 s (release; 54 s in a debug
/// build) before the array-size limit stopped it, with almost no memory: each wrap copies and
/// re-measures the whole nest, so the time grows with the square of the depth and the
/// operation budget never sees it. The sandbox counts the allocations copies make and ends
/// the run with `sandbox_limit` (about 0.2 s in release).
///
/// Measured in processor time (`wait4`), which a loaded machine does not stretch: the wall
/// clock took 44-92 s for the same run at a load average of 25-90 (2 s of processor time).
#[test]
fn a_self_nesting_array_ends_quickly() {
    let dir = project("", &[("deep.rhai", "let a = []; for i in 0..100000 { a = [a]; }\n1")]);
    let ended = super::support::hostile::run_bounded(
        super::support::hostile::cairn_run(dir.path(), Path::new("deep.rhai")),
        Duration::from_secs(600),
        u64::MAX,
    );
    assert_eq!(ended.code, Some(1), "{}", ended.stderr);
    // 0.2 s in release and about 2 s in a debug build; the defect took 54 s in a debug build.
    assert!(ended.cpu < Duration::from_secs(20), "took {:?} of processor time", ended.cpu);
    assert!(
        ended.stderr.contains("sandbox_limit") && ended.stderr.contains("allocations"),
        "{}",
        ended.stderr
    );
}

/// What the linter should see (issue 17, "The linter sees what it can"): a user method that
/// writes `this` called on a captured value in a branch, `for_each` assigning `this` on a
/// captured array and `Fn(...)` with a computed name are refused, and so are closures that
/// write captured state pushed into an array that `parallel` runs (any closure that writes a
/// captured variable and goes where lint cannot follow it) and a closure's `.name()` (always
/// `<closure>`, so whatever dispatches or labels on it is wrong on every run).
#[test]
fn the_linter_refuses_indirect_writes_and_dynamic_dispatch() {
    let cases = [
        "fn remember(x) { this.push(x); }\nlet log = [];\nparallel([1, 2], |i| { log.remember(i); agent(`q${i}`) });\nlog",
        "let seen = [];\nlet fs = [];\nfor i in 0..2 { let j = i; fs.push(|| { seen.push(j); agent(`b${j}`) }); }\nparallel(fs);\nseen",
        "let arr = [1, 2];\nparallel([1, 2], |i| { arr.for_each(|| this = this + i); agent(`z${i}`) });\narr",
        "let f = Fn(\"para\" + \"llel\");\nf.call([|| agent(\"x\"), || agent(\"y\")])",
        "let f = |x| x + 1;\nf.name()",
    ];
    for source in cases {
        let dir = project("", &[("s.rhai", source)]);
        let (code, _, stderr) = run(dir.path(), &["lint", "s.rhai"]);
        assert_eq!(code, 6, "lint accepted:\n{source}\n{stderr}");
    }
}

/// `cairn resume RUN --invalidate SEQ` with a seq the journal does not hold, or one that is
/// not a call (a wait, a decision), did nothing and exited 0: the user believed a call was
/// rerun. It is a usage error (exit 2) that says what the seq is, and nothing is written.
#[test]
fn invalidating_a_seq_that_is_not_a_call_is_a_usage_error() {
    let dir = project(
        "[providers.echo]\nkind = \"echo\"\nlatency_ms = 0\n",
        &[("a.rhai", "let x = agent(\"one\");\nlet g = await_external(\"go\");\n[x, g]")],
    );
    let d = dir.path();
    assert_eq!(run(d, &["run", "a.rhai", "--run-id", "v1", "-q"]).0, 4);
    assert_eq!(run(d, &["resolve", "v1", "go", "1"]).0, 0);
    assert_eq!(run(d, &["resume", "v1", "-q"]).0, 0);
    let entries = inspect(d, "v1")["entries"].as_array().unwrap().len();
    let external = inspect(d, "v1")["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "external")
        .unwrap()["seq"]
        .to_string();
    for (seq, expected) in
        [("999", "no journal entry at seq 999"), (external.as_str(), "is not a call (kind `external`)")]
    {
        let (code, _, stderr) = run(d, &["resume", "v1", "--invalidate", seq]);
        assert_eq!(code, 2, "{seq}: {stderr}");
        assert!(stderr.contains(expected), "{seq}: {stderr}");
    }
    assert_eq!(inspect(d, "v1")["entries"].as_array().unwrap().len(), entries, "a refused resume wrote");
    // The call's own result seq reruns it.
    let (code, stdout, stderr) = run(d, &["resume", "v1", "--invalidate", "2"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("echo: one"), "{stdout}");
    assert_eq!(dispatched(d, "v1"), 2);
}

/// A config error found after the file parsed (a negative budget, an unknown provider kind, a
/// bad model ref) named the key but not the file, unlike the errors found while parsing; and
/// a bad `--model` flag was blamed on `routing.default`.
#[test]
fn config_errors_name_the_file_and_flag_errors_name_the_flag() {
    let cases = [
        ("[budget]\ndefault_usd = -1\n", "other.toml: budget.default_usd: amount -1 is negative"),
        ("[providers.x]\nkind = \"ehco\"\n", "other.toml: providers.x: unknown kind \"ehco\""),
        ("[routing]\ndefault = \"echo\"\n", "other.toml: routing.default: invalid model ref \"echo\""),
    ];
    for (config, expected) in cases {
        let dir = project("", &[("s.rhai", "agent(\"hi\")"), ("other.toml", config)]);
        let (code, _, stderr) =
            run(dir.path(), &["--config", "other.toml", "run", "s.rhai", "--store", "memory"]);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
    let dir = project("[routing]\ndefault = \"echo:default\"\n", &[("s.rhai", "agent(\"hi\")")]);
    let (code, _, stderr) = run(dir.path(), &["run", "s.rhai", "--store", "memory", "--model", "nope"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("invalid --model") && !stderr.contains("routing.default"), "{stderr}");
}

/// Through the binary, with `result: "full"`: an agent whose deadline passes during its second
/// turn keeps the usage and cost of its first, paid turn (issue 16: a timed-out agent used to
/// report $0), and the run's cost report agrees.
#[test]
fn a_timed_out_agent_keeps_the_cost_of_its_completed_turns() {
    use super::scripted_server::{Reply, ScriptedServer, project as priced_project, tool_call};
    let docs = tempfile::tempdir().unwrap();
    std::fs::write(docs.path().join("a.txt"), "alpha").unwrap();
    let server = ScriptedServer::start(vec![
        tool_call("c1", "list_dir", "{\"path\": \".\"}", 100_000, 1_000),
        Reply::Stall,
    ]);
    let dir = priced_project(
        &server.url,
        &format!("[toolsets.fs-read]\nroot = {:?}\n", docs.path()),
        "agent(\"list the files\", #{tools: [\"fs-read\"], timeout_ms: 1500, result: \"full\"})",
    );
    let (code, stdout, stderr) = run(dir.path(), &["run", "s.rhai", "--json", "-q"]);
    assert_eq!(code, 0, "{stderr}");
    let outcome: Value = serde_json::from_str(&stdout).unwrap();
    let full = &outcome["value"];
    assert_ne!(full["status"], "ok", "{full}");
    // 100k input at $1/M + 1k output at $2/M = $0.102 for the completed turn.
    let cost = full["cost_usd"].as_f64().unwrap_or(0.0);
    assert!(cost >= 0.102, "the paid turn's cost was dropped: {full}");
    let total = outcome["cost"]["total"]["cost_nano_usd"].as_i64().unwrap_or(0);
    assert!(total >= 102_000_000, "cost report: {}", outcome["cost"]);
}

/// `cairn replay` of a run that ended `cancelled` (Ctrl-C after three of six calls) exits 7
/// "a call would run live": the journaled cancelled call is re-dispatched instead of served as
/// cancelled, so the replay of a run stopped by a person never matches its outcome.
#[cfg(unix)]
#[test]
fn replay_of_a_cancelled_run_is_the_same_outcome() {
    let script = "let out = [];\nfor i in 0..6 { out.push(agent(`call ${i}`)); }\nout";
    let dir = project("[providers.echo]\nkind = \"echo\"\nlatency_ms = 300\n", &[("s.rhai", script)]);
    let d = dir.path();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cairn"))
        .current_dir(d)
        .args(["run", "s.rhai", "--run-id", "c1", "-q"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    // SAFETY: signalling our own child process by its pid.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    assert_eq!(child.wait().unwrap().code(), Some(5));
    let (code, stdout, stderr) = run(d, &["replay", "c1"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
}

/// A run cancelled between two quick calls (or inside one) replays to the same point: the
/// strict replay serves every journaled call and stops where the cancellation came, which
/// is the run's own outcome. It exited 7 ("a call would run live", or "settled cancelled,
/// its replay settles error") whenever the interrupt did not land inside a slow call.
#[test]
fn replay_of_a_run_cancelled_between_quick_calls_is_the_same_outcome() {
    let script = "let out = [];\nfor i in 0..400 { out.push(agent(`call ${i}`)); }\nout.len()";
    let dir = project("[providers.echo]\nkind = \"echo\"\nlatency_ms = 2\n", &[("q.rhai", script)]);
    let d = dir.path();
    for (n, wait_ms) in [450u64, 620, 790, 960].into_iter().enumerate() {
        let id = format!("q{n}");
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cairn"))
            .current_dir(d)
            .args(["run", "q.rhai", "--run-id", &id, "-q"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(wait_ms));
        // SAFETY: signalling our own child process by its pid.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGINT);
        }
        let code = child.wait().unwrap().code();
        if code != Some(5) {
            // The run finished (or had not started its calls) before the interrupt.
            continue;
        }
        let (code, stdout, stderr) = run(d, &["replay", &id]);
        assert_eq!(code, 0, "{id} after {wait_ms} ms: {stdout}{stderr}");
    }
}

/// The record `result: "full"` returns is the same on replay: it carried `replayed` (false
/// live, true from the journal), so a run whose value holds it "settled with a different value
/// than its replay returns", and a script branching on it paid for a call only on resume.
#[test]
fn a_full_result_record_is_the_same_when_it_replays() {
    let script = "let r = agent(\"one\", #{result: \"full\"});\nif r.replayed == true { agent(\"only on resume\"); }\nlet g = await_external(\"go\");\n[r, g]";
    let dir = project("[providers.echo]\nkind = \"echo\"\nlatency_ms = 0\n", &[("r.rhai", script)]);
    let d = dir.path();
    assert_eq!(run(d, &["run", "r.rhai", "--run-id", "r1", "-q"]).0, 4);
    assert_eq!(run(d, &["resolve", "r1", "go", "1"]).0, 0);
    let (code, stdout, stderr) = run(d, &["resume", "r1", "--json"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let out: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(out["value"][0]["value"], "echo: one", "{out}");
    assert!(out["value"][0].get("replayed").is_none(), "{out}");
    let (code, stdout, stderr) = run(d, &["replay", "r1"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(dispatched(d, "r1"), 1, "a call was paid only on resume");
}

/// `cairn replay` of a run that failed because a `step` threw exits 7 "dry run reached a call
/// the journal does not hold", though the journal holds the failed step and replaying it
/// fails the same way (a run that failed in an agent call replays "same outcome", exit 0).
#[test]
fn replay_of_a_run_failed_by_a_step_is_the_same_outcome() {
    let script = "let a = agent(\"one\");\nlet b = step(\"boom\", || { throw \"bad thing\"; });\n[a, b]";
    let dir = project("[providers.echo]\nkind = \"echo\"\nlatency_ms = 0\n", &[("f.rhai", script)]);
    let d = dir.path();
    assert_eq!(run(d, &["run", "f.rhai", "--run-id", "f1", "-q"]).0, 1);
    let (code, stdout, stderr) = run(d, &["replay", "f1"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
}

/// A resume refused because it would re-key paid calls ("nothing was dispatched") still
/// settles the run `error`: `cairn runs` lists a suspended run as failed, and the refused
/// resume's summary says "1 live" though no call ran.
#[test]
fn a_refused_rekey_leaves_the_run_as_it_was() {
    let script = "let a = agent(\"one\");\nlet g = await_external(\"go\");\n[a, g]";
    let dir = project("[providers.echo]\nkind = \"echo\"\nlatency_ms = 0\n", &[("m.rhai", script)]);
    let d = dir.path();
    assert_eq!(run(d, &["run", "m.rhai", "--model", "echo:alt", "--run-id", "k1", "-q"]).0, 4);
    assert_eq!(run(d, &["resolve", "k1", "go", "1"]).0, 0);
    let (code, _, stderr) = run(d, &["resume", "k1", "--model", "echo:other"]);
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("rekey_refused"), "{stderr}");
    assert!(!stderr.contains("1 live"), "{stderr}");
    assert_eq!(inspect(d, "k1")["meta"]["status"], "suspended", "{}", inspect(d, "k1")["meta"]);
}

/// Two agents of one `parallel` each ask to use a tool: the run suspends with both `approve:`
/// keys pending; a person answers them from a second terminal, one approved and one refused,
/// and one resume finishes both without asking the model again for their first turns.
#[test]
fn two_parallel_asks_are_answered_separately_and_one_resume_finishes_both() {
    use super::scripted_server::{ScriptedServer, project as priced_project, sent_text, text, tool_call};
    let docs = tempfile::tempdir().unwrap();
    std::fs::write(docs.path().join("notes.txt"), "the secret is 42").unwrap();
    let read = "{\"path\": \"notes.txt\"}";
    let server = ScriptedServer::start(vec![
        tool_call("c1", "read_file", read, 10, 5),
        tool_call("c2", "read_file", read, 10, 5),
        text("done", 20, 2),
        text("done", 20, 2),
    ]);
    let dir = priced_project(
        &server.url,
        &format!(
            "[toolsets.files]\nkind = \"fs-read\"\nroot = {:?}\n\n[permissions]\nask = [\"read_*\"]\n",
            docs.path()
        ),
        "parallel([1, 2], |i| agent(`read the notes ${i}`, #{tools: [\"files\"]}))",
    );
    let d = dir.path();
    let (code, _, stderr) = run(d, &["run", "s.rhai", "--run-id", "a1"]);
    assert_eq!(code, 4, "{stderr}");
    let pending = inspect(d, "a1")["pending"].clone();
    let keys: Vec<String> = pending
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["key"].as_str().unwrap().to_owned())
        .filter(|k| k.starts_with("approve:"))
        .collect();
    assert_eq!(keys.len(), 2, "{pending}");
    assert_eq!(run(d, &["resolve", "a1", &keys[0], "{\"approved\": true}"]).0, 0);
    assert_eq!(run(d, &["resolve", "a1", &keys[1], "{\"approved\": false}"]).0, 0);
    let (code, stdout, stderr) = run(d, &["resume", "a1", "-q"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.matches("done").count(), 2, "{stdout}");
    let requests = server.requests();
    assert_eq!(requests.len(), 4, "a first turn was asked again");
    let follow_ups: Vec<String> = requests[2..].iter().map(sent_text).collect();
    assert_eq!(follow_ups.iter().filter(|t| t.contains("secret is 42")).count(), 1, "{follow_ups:?}");
    assert_eq!(follow_ups.iter().filter(|t| t.contains("denied")).count(), 1, "{follow_ups:?}");
    let (code, _, stderr) = run(d, &["replay", "a1"]);
    assert_eq!(code, 0, "{stderr}");
}
