//! The edges, through the binary: text that cannot hijack a terminal, signals, config that
//! says no early, host functions and tools that cannot hang or escape, URLs that keep secrets.

use std::path::Path;

use assert_cmd::Command;

fn cairn_in(dir: &Path) -> Command {
    let mut cmd = Command::cargo_bin("cairn").unwrap();
    cmd.current_dir(dir)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("CAIRN_LOG")
        .env("NO_COLOR", "1");
    cmd
}

fn out_err(assert: &assert_cmd::assert::Assert) -> (String, String) {
    let output = assert.get_output();
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

const HIJACK: &str = "\u{1b}]0;pwned\u{7}";

#[test]
fn escape_sequences_from_a_script_reach_the_terminal_escaped_and_json_exact() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("evil.rhai"),
        "log(\"info\", \"title \\u001b]0;pwned\\u0007\");\n\
         let r = parallel([|| { throw \"bad \\u001b[2J\" }, || 1], #{on_error: \"null\"});\n\
         \"\\u001b]0;pwned\\u0007\"",
    )
    .unwrap();
    let run = cairn_in(dir.path()).args(["run", "evil.rhai", "--run-id", "evil"]).assert();
    let (stdout, stderr) = out_err(&run);
    assert!(
        !stderr.contains('\u{1b}') && !stderr.contains('\u{7}'),
        "raw control bytes on stderr: {stderr:?}"
    );
    assert!(stderr.contains("title \\u{1b}]0;pwned\\u{7}"), "{stderr}");
    assert!(!stdout.contains('\u{1b}'), "{stdout:?}");
    assert!(stderr.contains("dropped branch 0: ") && !stderr.contains("branch branch"), "{stderr}");
    // --json stays exact: the value decodes to the very string the script returned.
    let json = cairn_in(dir.path()).args(["run", "evil.rhai", "--json", "-q"]).assert().success();
    let (stdout, _) = out_err(&json);
    let value: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(value["value"], HIJACK, "{stdout}");
    let human = cairn_in(dir.path()).args(["inspect", "evil"]).assert().success();
    let (stdout, _) = out_err(&human);
    assert!(!stdout.contains('\u{1b}'), "{stdout:?}");
}

/// Starts `cairn ARGS` in `dir` with stderr piped and waits until stderr shows `ready`.
fn spawn_until(dir: &Path, args: &[&str], ready: &str) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cairn"))
        .current_dir(dir)
        .args(args)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains(ready) {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "{args:?} ended before {ready:?}: {seen}");
        seen.push_str(&line);
    }
    // Keep draining so the child never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    (child, seen)
}

fn signal(child: &std::process::Child, name: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

fn wait_with_deadline(child: &mut std::process::Child, secs: u64) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("cairn did not exit within {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn sigterm_is_the_first_ctrl_c_the_run_settles_cancelled_and_resumable() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cairn.toml"), "[providers.echo]\nkind = \"echo\"\nlatency_ms = 200\n")
        .unwrap();
    std::fs::write(dir.path().join("slow.rhai"), "let n = 0; for i in 0..50 { agent(`q ${i}`); n += 1; } n")
        .unwrap();
    let (mut child, _) = spawn_until(dir.path(), &["run", "slow.rhai", "--run-id", "slow"], "running slow");
    std::thread::sleep(std::time::Duration::from_millis(300));
    signal(&child, "TERM");
    let status = wait_with_deadline(&mut child, 20);
    assert_eq!(status.code(), Some(5), "{status:?}");
    let listed = cairn_in(dir.path()).args(["runs", "--json"]).assert().success();
    let runs: serde_json::Value = serde_json::from_str(&out_err(&listed).0).unwrap();
    assert_eq!(runs[0]["status"], "cancelled", "{runs}");
    // Resumable: the calls made before the signal replay, the rest run live (fast now).
    std::fs::write(dir.path().join("cairn.toml"), "[providers.echo]\nkind = \"echo\"\n").unwrap();
    let resumed = cairn_in(dir.path()).args(["resume", "slow", "--json", "-q"]).assert().success();
    let outcome: serde_json::Value = serde_json::from_str(&out_err(&resumed).0).unwrap();
    assert_eq!(outcome["value"], 50, "{outcome}");
}

#[test]
fn echo_latency_zero_does_not_sleep() {
    use cairn::provider::echo::EchoProvider;
    use cairn::provider::{ChatRequest, Message, Provider};
    use futures::{FutureExt, StreamExt};
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let _guard = runtime.enter();
    let echo = EchoProvider::new().with_latency(std::time::Duration::ZERO);
    let mut stream = echo.stream(
        ChatRequest::new("default", vec![Message::user("hi")]),
        tokio_util::sync::CancellationToken::new(),
    );
    // Zero latency answers on the first poll: no timer, no tick.
    assert!(stream.next().now_or_never().is_some(), "latency 0 waited for a timer");
}

#[test]
fn a_closed_stdout_ends_printing_commands_quietly() {
    let dir = tempfile::tempdir().unwrap();
    // Enough journal that `inspect --json` is larger than a pipe's buffer.
    std::fs::write(
        dir.path().join("many.rhai"),
        "let xs = []; for i in 0..300 { xs.push(i); } parallel(xs, |i| agent(`item ${i}`)).len()",
    )
    .unwrap();
    cairn_in(dir.path()).args(["run", "many.rhai", "--run-id", "many", "-q"]).assert().success();
    for args in [&["inspect", "many", "--json"][..], &["inspect", "many"], &["runs", "--json"], &["card"]] {
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cairn"))
            .current_dir(dir.path())
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Read one byte, then hang up, as `| head -c1` does.
        use std::io::Read;
        let mut one = [0u8; 1];
        let _ = child.stdout.take().unwrap().read(&mut one);
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_ne!(output.status.code(), Some(101), "{args:?}: {stderr}");
    }
}

fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, text).unwrap();
}

#[test]
fn an_unwritable_record_path_fails_before_the_run_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "hi.rhai", "agent(\"hi\")");
    let out = cairn_in(dir.path())
        .args(["run", "hi.rhai", "--record", "no/such/dir/tape.jsonl", "--store", "jsonl:runs"])
        .assert()
        .code(2);
    let (_, stderr) = out_err(&out);
    assert!(stderr.contains("no/such/dir/tape.jsonl"), "{stderr}");
    assert!(
        !dir.path().join("runs").exists() || std::fs::read_dir(dir.path().join("runs")).unwrap().count() == 0
    );
}

#[test]
fn config_values_are_validated_at_load_with_file_key_and_value() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "hi.rhai", "agent(\"hi\")");
    let cases = [
        (
            "[providers.local]\nkind = \"openai-compatible\"\nbase_url = \"127.0.0.1:8080/v1\"\n",
            "providers.local.base_url",
        ),
        (
            "[providers.local]\nkind = \"openai-compatible\"\nbase_url = \"ftp://host/v1\"\n",
            "providers.local.base_url",
        ),
        (
            "[providers.local]\nkind = \"openai-compatible\"\nbase_url = \"http://h/v1\"\nidle_timeout_ms = 0\n",
            "idle_timeout_ms = 0",
        ),
        ("concurrency = 9223372036854775807\n", "concurrency = 9223372036854775807"),
        ("concurrency = 0\n", "concurrency = 0"),
        ("[host_functions.f]\ncommand = [\"true\"]\ntimeout_ms = 0\n", "host_functions.f.timeout_ms = 0"),
    ];
    for (toml, fragment) in cases {
        write(dir.path(), "cairn.toml", toml);
        let out = cairn_in(dir.path()).args(["run", "hi.rhai"]).assert().code(2);
        let (_, stderr) = out_err(&out);
        assert!(stderr.contains("cairn.toml") && stderr.contains(fragment), "{toml}: {stderr}");
        assert!(!stderr.contains("panicked"), "{toml}: {stderr}");
    }
}

#[test]
fn relative_paths_in_the_config_resolve_against_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "conf/cairn.toml",
        "store = \"jsonl:runs\"\n[host_functions.hello]\ncommand = [\"./hello.sh\"]\n",
    );
    write(dir.path(), "conf/hello.sh", "#!/bin/sh\necho '\"hello\"'\n");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path().join("conf/hello.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    write(dir.path(), "elsewhere/hi.rhai", "host_call(\"hello\", #{})");
    let out = cairn_in(&dir.path().join("elsewhere"))
        .args(["--config", "../conf/cairn.toml", "run", "hi.rhai", "--json", "-q"])
        .assert()
        .success();
    let outcome: serde_json::Value = serde_json::from_str(&out_err(&out).0).unwrap();
    assert_eq!(outcome["value"], "hello");
    assert!(dir.path().join("conf/runs").is_dir(), "the store is beside the config");
    assert!(!dir.path().join("elsewhere/runs").exists());
}

#[test]
fn providers_without_a_default_route_say_which_model_serves_unnamed_calls() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "cairn.toml",
        "[providers.local]\nkind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:9/v1\"\n",
    );
    write(dir.path(), "hi.rhai", "agent(\"hi\")");
    let out = cairn_in(dir.path()).args(["run", "hi.rhai", "--store", "memory"]).assert().success();
    let (_, stderr) = out_err(&out);
    assert!(!stderr.contains("no model provider is configured"), "{stderr}");
    assert!(stderr.contains("routing.default is not set") && stderr.contains("echo:default"), "{stderr}");
}

fn host_config(dir: &Path, extra: &str, command: &str) {
    let toml = format!("[host_functions.f]\ncommand = [\"sh\", \"-c\", {command:?}]\n{extra}");
    write(dir, "cairn.toml", &toml);
}

#[test]
fn a_host_function_that_prints_without_reading_a_large_argument_finishes() {
    let dir = tempfile::tempdir().unwrap();
    host_config(
        dir.path(),
        "timeout_ms = 20000\n",
        "printf '\"'; head -c 300000 /dev/zero | tr '\\0' a; printf '\"'",
    );
    // A 256 KiB argument the command never reads.
    write(
        dir.path(),
        "big.rhai",
        "let s = \"x\"; for i in 0..18 { s += s; } host_call(\"f\", #{s: s}).len()",
    );
    let out = cairn_in(dir.path())
        .args(["run", "big.rhai", "--json", "-q", "--store", "memory"])
        .timeout(std::time::Duration::from_secs(30))
        .assert()
        .success();
    let outcome: serde_json::Value = serde_json::from_str(&out_err(&out).0).unwrap();
    assert_eq!(outcome["value"], 300_000, "{outcome}");
}

#[test]
fn a_host_function_past_its_output_cap_fails_typed() {
    let dir = tempfile::tempdir().unwrap();
    host_config(dir.path(), "max_output_bytes = 1000\n", "head -c 300000 /dev/zero");
    write(dir.path(), "big.rhai", "host_call(\"f\", #{})");
    let out = cairn_in(dir.path())
        .args(["run", "big.rhai", "--store", "memory"])
        .timeout(std::time::Duration::from_secs(30))
        .assert()
        .code(1);
    let (_, stderr) = out_err(&out);
    assert!(stderr.contains("tool_failed") && stderr.contains("max_output_bytes"), "{stderr}");
}

#[test]
fn a_sleeping_host_function_is_killed_at_its_timeout_with_its_children() {
    let dir = tempfile::tempdir().unwrap();
    host_config(dir.path(), "timeout_ms = 300\n", "sleep 30 & echo $! > child.pid; wait");
    write(dir.path(), "nap.rhai", "host_call(\"f\", #{})");
    let started = std::time::Instant::now();
    let out = cairn_in(dir.path())
        .args(["run", "nap.rhai", "--store", "memory"])
        .timeout(std::time::Duration::from_secs(20))
        .assert()
        .code(1);
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
    let (_, stderr) = out_err(&out);
    assert!(stderr.contains("timed out after 300 ms"), "{stderr}");
    let pid = std::fs::read_to_string(dir.path().join("child.pid")).unwrap();
    let alive = || {
        std::process::Command::new("kill")
            .args(["-0", pid.trim()])
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
            .success()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!alive(), "the command's child {pid} outlived its timeout");
}

#[test]
fn a_host_function_sees_only_its_allowed_environment() {
    let dir = tempfile::tempdir().unwrap();
    let command =
        "printf '\"%s|%s|%s\"' \"${ANTHROPIC_API_KEY:-none}\" \"${CAIRN_EDGE_VAR:-none}\" \"${PATH:+path}\"";
    host_config(dir.path(), "env = [\"PATH\", \"CAIRN_EDGE_VAR\"]\n", command);
    write(dir.path(), "env.rhai", "host_call(\"f\", #{})");
    let out = cairn_in(dir.path())
        .env("ANTHROPIC_API_KEY", "sk-ant-secret-edge")
        .env("CAIRN_EDGE_VAR", "yes")
        .args(["run", "env.rhai", "--json", "-q", "--store", "memory"])
        .assert()
        .success();
    let outcome: serde_json::Value = serde_json::from_str(&out_err(&out).0).unwrap();
    assert_eq!(outcome["value"], "none|yes|path", "{outcome}");
    // The default passes PATH only.
    host_config(dir.path(), "", command);
    let out = cairn_in(dir.path())
        .env("ANTHROPIC_API_KEY", "sk-ant-secret-edge")
        .env("CAIRN_EDGE_VAR", "yes")
        .args(["run", "env.rhai", "--json", "-q", "--store", "memory"])
        .assert()
        .success();
    let outcome: serde_json::Value = serde_json::from_str(&out_err(&out).0).unwrap();
    assert_eq!(outcome["value"], "none|none|path", "{outcome}");
}

const URL_SECRET: &str = "sekrit-query-123";

/// Every file under `dir`, read as text.
fn all_text_under(dir: &Path) -> String {
    let mut text = String::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                text.push_str(&all_text_under(&path));
            } else {
                text.push_str(&String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default()));
            }
        }
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_in_base_url_query_is_sent_but_never_shown_journaled_or_recorded() {
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let server = MockServer::start().await;
    // A gateway that echoes the URL it was asked for in its error body.
    let echoed = format!("no such model at {}/v1/chat/completions?key={URL_SECRET}&x=1", server.uri());
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(400).set_body_json(serde_json::json!({
            "error": { "message": echoed, "type": "invalid_request_error" }
        })))
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "cairn.toml",
        &format!(
            "store = \"jsonl:runs\"\n[routing]\ndefault = \"gw:m\"\n[providers.gw]\nkind = \"openai-compatible\"\nbase_url = \"{}/v1?key={URL_SECRET}\"\n",
            server.uri()
        ),
    );
    write(dir.path(), "hi.rhai", "agent(\"hi\")");
    let root = dir.path().to_owned();
    let (stdout, stderr, inspect) = tokio::task::spawn_blocking(move || {
        let run = cairn_in(&root)
            .args(["run", "hi.rhai", "--run-id", "gw", "--record", "tape.jsonl"])
            .assert()
            .code(1);
        let (stdout, stderr) = out_err(&run);
        let inspect = cairn_in(&root).args(["inspect", "gw", "--json"]).assert().success();
        (stdout, stderr, out_err(&inspect).0)
    })
    .await
    .unwrap();
    let requests = server.received_requests().await.unwrap();
    assert!(!requests.is_empty());
    for request in &requests {
        assert_eq!(request.url.path(), "/v1/chat/completions", "{}", request.url);
        assert_eq!(request.url.query(), Some(format!("key={URL_SECRET}").as_str()), "{}", request.url);
    }
    assert!(stderr.contains("no such model at"), "{stderr}");
    for (what, text) in [
        ("stdout", stdout),
        ("stderr", stderr),
        ("inspect", inspect),
        ("store", all_text_under(&dir.path().join("runs"))),
        ("cassette", std::fs::read_to_string(dir.path().join("tape.jsonl")).unwrap_or_default()),
    ] {
        assert!(!text.contains(URL_SECRET), "the secret is in the {what}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_sends_a_newline_gets_a_typed_error_not_an_unbounded_buffer() {
    use cairn::provider::openai_compatible::OpenAiCompatibleProvider;
    use cairn::provider::{ChatEvent, ChatRequest, Message, Provider};
    use futures::StreamExt;
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let server = MockServer::start().await;
    let mut body = b"data: ".to_vec();
    body.resize(17 * 1024 * 1024, b'a');
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
        .mount(&server)
        .await;
    let provider = OpenAiCompatibleProvider::new("gw", &format!("{}/v1", server.uri())).unwrap();
    let events: Vec<ChatEvent> = provider
        .stream(ChatRequest::new("m", vec![Message::user("hi")]), tokio_util::sync::CancellationToken::new())
        .collect()
        .await;
    match events.last() {
        Some(ChatEvent::Error(error)) => {
            assert_eq!(error.code, cairn::ErrorCode::Transport, "{error}");
            assert!(error.message.contains("exceeds 16 MiB"), "{error}");
        }
        other => panic!("expected a typed error, got {other:?}"),
    }
}

/// A directory inside the root and a link to a directory outside it trade places in a loop
/// (`renameat2(RENAME_EXCHANGE)`, atomic) while the fs-read tools list, read and search that
/// very path: nothing from outside the root ever appears.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fs_read_never_shows_anything_outside_its_root_while_a_link_is_swapped() {
    use std::ffi::CString;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path();
    write(base, "root/swap/f.txt", "needle inside\n");
    write(base, "outside/f.txt", "TOPSECRET needle outside\n");
    write(base, "outside/TOPSECRET-name.txt", "TOPSECRET\n");
    std::os::unix::fs::symlink(base.join("outside"), base.join("root/alt")).unwrap();
    let tools = cairn::fs_read_toolset(&base.join("root")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        let a = CString::new(base.join("root/swap").to_str().unwrap()).unwrap();
        let b = CString::new(base.join("root/alt").to_str().unwrap()).unwrap();
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: two valid NUL-terminated paths; an exchange touches nothing else.
                let rc = unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        b.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                assert_eq!(rc, 0, "renameat2: {}", std::io::Error::last_os_error());
                swaps += 1;
            }
            swaps
        })
    };
    let calls = [
        ("list_dir", serde_json::json!({"path": "swap"})),
        ("read_file", serde_json::json!({"path": "swap/f.txt"})),
        ("search_text", serde_json::json!({"pattern": "needle|TOPSECRET", "path": "swap"})),
        ("search_text", serde_json::json!({"pattern": "needle|TOPSECRET"})),
        ("list_dir", serde_json::json!({})),
    ];
    let mut answered = 0;
    for _ in 0..400 {
        for (name, args) in &calls {
            let tool = tools.tools().iter().find(|t| t.name() == *name).unwrap().clone();
            let text = match tool.call(args.clone()).await {
                Ok(text) => {
                    answered += 1;
                    text
                }
                Err(error) => error.message,
            };
            assert!(!text.contains("TOPSECRET"), "{name} {args} showed the outside: {text}");
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 100 && answered > 100, "the race ran: {swaps} swaps, {answered} answers");
}

#[test]
fn replay_serves_host_functions_from_the_tape_and_a_missing_call_is_a_typed_miss() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "cairn.toml",
        "[host_functions.f]\ncommand = [\"sh\", \"-c\", \"echo call >> calls.log; echo '\\\"live\\\"'\"]\n",
    );
    write(dir.path(), "one.rhai", "host_call(\"f\", #{n: 1})");
    write(dir.path(), "two.rhai", "host_call(\"f\", #{n: 2})");
    let calls = || std::fs::read_to_string(dir.path().join("calls.log")).unwrap_or_default().lines().count();
    let recorded = cairn_in(dir.path())
        .args(["run", "one.rhai", "--json", "-q", "--store", "memory", "--record", "tape.jsonl"])
        .assert()
        .success();
    assert_eq!(serde_json::from_str::<serde_json::Value>(&out_err(&recorded).0).unwrap()["value"], "live");
    assert_eq!(calls(), 1);
    let replayed = cairn_in(dir.path())
        .args(["run", "one.rhai", "--json", "-q", "--store", "memory", "--replay", "tape.jsonl"])
        .assert()
        .success();
    assert_eq!(serde_json::from_str::<serde_json::Value>(&out_err(&replayed).0).unwrap()["value"], "live");
    assert_eq!(calls(), 1, "the replay ran the command");
    let missed = cairn_in(dir.path())
        .args(["run", "two.rhai", "--store", "memory", "--replay", "tape.jsonl"])
        .assert()
        .failure();
    let (_, stderr) = out_err(&missed);
    assert!(stderr.contains("cassette miss") && stderr.contains("host function f"), "{stderr}");
    assert_eq!(calls(), 1, "a miss ran the command");
}

#[test]
fn a_second_interrupt_ends_the_process_at_once_with_130() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cairn.toml"), "[providers.echo]\nkind = \"echo\"\nlatency_ms = 50\n")
        .unwrap();
    std::fs::write(dir.path().join("slow.rhai"), "let n = 0; for i in 0..500 { agent(`q ${i}`); n += 1; } n")
        .unwrap();
    let (mut child, _) = spawn_until(
        dir.path(),
        &["run", "slow.rhai", "--run-id", "twice", "--store", "sqlite:db.sqlite"],
        "running slow",
    );
    // Another process holds the store's write lock: the run cannot finish settling after the
    // first interrupt, so the second one arrives while it is still being handled.
    let db = rusqlite::Connection::open(dir.path().join("db.sqlite")).unwrap();
    db.execute_batch("BEGIN IMMEDIATE").unwrap();
    signal(&child, "TERM");
    std::thread::sleep(std::time::Duration::from_millis(300));
    if let Some(status) = child.try_wait().unwrap() {
        panic!("the run settled while the store was locked: {status:?}");
    }
    signal(&child, "INT");
    let status = wait_with_deadline(&mut child, 20);
    assert_eq!(status.code(), Some(130), "{status:?}");
    db.execute_batch("ROLLBACK").unwrap();
}
