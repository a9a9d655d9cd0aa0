//! Agents with real tools through the `cairn` binary: a host function and an MCP server's
//! tools in one toolset, called by a scripted model, journaled, and replayed without calling
//! either again; the same for an orchestrator's child, over streamable HTTP, and against the
//! reference server `@modelcontextprotocol/server-everything`.

use serde_json::Value;

use crate::scripted_server::{ScriptedServer, text, tool_call};
use crate::tools_support::{cairn_at, calls, process_with, python_with_mcp, tools_project};

/// The model calls the MCP tool, then the host function, then answers.
fn three_turns() -> ScriptedServer {
    ScriptedServer::start(vec![
        tool_call("w1", "docs_search", r#"{"query": "rust"}"#, 10, 5),
        tool_call("w2", "lookup", r#"{"city": "Paris"}"#, 20, 5),
        text("Paris has 2.1M people; 3 documents mention rust.", 30, 8),
    ])
}

fn agent_uses_both_tools_and_replays(script: &str, ext: &str) {
    let Some(python) = python_with_mcp() else { return };
    let server = three_turns();
    let dir = tools_project(&server.url, &python, "");
    let file = dir.path().join(format!("s.{ext}"));
    std::fs::write(&file, script).unwrap();
    // From another directory: the host function still runs beside its config.
    let elsewhere = tempfile::tempdir().unwrap();
    let mark = format!("{}-{ext}", std::process::id());
    let env = [("CAIRN_MCP_MARK", mark.as_str())];
    let (code, stdout, stderr) =
        cairn_at(dir.path(), elsewhere.path(), &env, &["run", file.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let out: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(out["value"], "Paris has 2.1M people; 3 documents mention rust.", "{stdout}");
    // The tool results reached the model.
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let sent = requests[2].to_string();
    assert!(sent.contains("3 documents mention 'rust'"), "{sent}");
    assert!(sent.contains("2102650"), "{sent}");
    assert_eq!(calls(&dir.path().join("mcp.log")), [r#"search {"query": "rust"}"#]);
    assert_eq!(calls(&dir.path().join("host.log")), [r#"{"city": "Paris"}"#]);
    // The CLI progress shows the tool calls; the server did not outlive the run.
    assert!(stderr.contains("tool docs_search ok") && stderr.contains("tool lookup ok"), "{stderr}");
    assert!(!process_with(&mark), "the MCP server outlived cairn by two seconds");

    // Replayed: no model, MCP or host-function call again.
    let id = crate::scripted_server::run_id(&stderr);
    let (code, _, stderr) = cairn_at(dir.path(), elsewhere.path(), &env, &["replay", &id]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(server.requests().len(), 3);
    assert_eq!(calls(&dir.path().join("mcp.log")).len(), 1);
    assert_eq!(calls(&dir.path().join("host.log")).len(), 1);

    // Inspect lists the tool calls under their agent call.
    let (code, stdout, stderr) = cairn_at(dir.path(), elsewhere.path(), &env, &["inspect", &id]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("tool docs_search call_1_0: ok") && stdout.contains("tool lookup call_2_0: ok"),
        "{stdout}"
    );
}

#[test]
fn a_rhai_agent_uses_a_host_function_and_an_mcp_tool_and_replays_without_calling_them() {
    agent_uses_both_tools_and_replays(r#"agent("Research Paris.", #{tools: ["research"]})"#, "rhai");
}

#[test]
fn a_lua_agent_uses_a_host_function_and_an_mcp_tool_and_replays_without_calling_them() {
    agent_uses_both_tools_and_replays(r#"return agent("Research Paris.", {tools = {"research"}})"#, "lua");
}

/// An orchestrator's child whose profile has `tools = ["research"]` uses the host function and
/// the MCP tool; the orchestration replays without calling either again.
#[test]
fn an_orchestrator_child_uses_a_host_function_and_an_mcp_tool_and_replays_without_calling_them() {
    use crate::tools_support::tool_calls;
    let Some(python) = python_with_mcp() else { return };
    let orchestrator = ScriptedServer::start(vec![
        tool_calls(&[("o1", "spawn_agent", r#"{"profile": "researcher", "prompt": "Research Paris."}"#)]),
        tool_calls(&[("o2", "await_all", r#"{"handles": ["c0"]}"#)]),
        tool_calls(&[("o3", "finish", r#"{"result": "done [c0]"}"#)]),
    ]);
    let child = three_turns();
    let extra = format!(
        "[providers.o]\nkind = \"openai-compatible\"\nbase_url = \"{}\"\nprices = {{ tiny = [1.0, 2.0] }}\n\n\
         [profiles.researcher]\ndescription = \"finds facts\"\nmodel = \"m:tiny\"\ntools = [\"research\"]\n",
        orchestrator.url
    );
    let dir = tools_project(&child.url, &python, &extra);
    let config = std::fs::read_to_string(dir.path().join("cairn.toml")).unwrap();
    let config = config.replace("default = \"m:tiny\"\n", "default = \"m:tiny\"\norchestrate = \"o:tiny\"\n");
    std::fs::write(dir.path().join("cairn.toml"), config).unwrap();
    let (code, stdout, stderr) = cairn_at(
        dir.path(),
        dir.path(),
        &[],
        &["orchestrate", "survey Paris", "--run-id", "orch", "--budget", "5", "--json"],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(child.requests().len(), 3, "{stderr}");
    assert!(child.requests()[2].to_string().contains("2102650"));
    assert_eq!(calls(&dir.path().join("mcp.log")), [r#"search {"query": "rust"}"#]);
    assert_eq!(calls(&dir.path().join("host.log")).len(), 1);
    let (code, _, stderr) = cairn_at(dir.path(), dir.path(), &[], &["replay", "orch"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(child.requests().len(), 3);
    assert_eq!(orchestrator.requests().len(), 3);
    assert_eq!(calls(&dir.path().join("mcp.log")).len(), 1);
    assert_eq!(calls(&dir.path().join("host.log")).len(), 1);
}

/// A free port on the loopback interface.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The Python test server over streamable HTTP: the header named in the config reaches it
/// from its environment variable and is never journaled; the call replays.
#[test]
fn an_mcp_server_over_streamable_http_gets_its_headers_and_replays() {
    let Some(python) = python_with_mcp() else { return };
    let port = free_port();
    let log = tempfile::tempdir().unwrap();
    let mut http = std::process::Command::new(&python)
        .arg(crate::tools_support::test_server())
        .args(["http", &port.to_string()])
        .env("CAIRN_MCP_LOG", log.path().join("http.log"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _guard = {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "the HTTP server never listened");
            assert!(http.try_wait().unwrap().is_none(), "the HTTP server exited");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Kill(http)
    };
    let server = ScriptedServer::start(vec![
        tool_call("w1", "web_header", "{}", 10, 5),
        tool_call("w2", "web_search", r#"{"query": "mcp"}"#, 10, 5),
        text("done", 30, 8),
    ]);
    let extra = format!(
        "[toolsets.remote]\nmcp = [\"web\"]\n\n[mcp.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ X-Cairn-Test = \"CAIRN_TEST_HEADER\" }}\ntimeout_ms = 5000\n"
    );
    let dir = tools_project(&server.url, &python, &extra);
    std::fs::write(dir.path().join("s.rhai"), r#"agent("Search.", #{tools: ["remote"]})"#).unwrap();
    let secret = "s3cret-header-value";
    let env = [("CAIRN_TEST_HEADER", secret)];
    let (code, stdout, stderr) = cairn_at(dir.path(), dir.path(), &env, &["run", "s.rhai", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(serde_json::from_str::<Value>(&stdout).unwrap()["value"], "done");
    let sent = server.requests()[1].to_string();
    assert!(sent.contains(&format!("header of {} characters", secret.len())), "{sent}");
    let http_log = log.path().join("http.log");
    assert_eq!(calls(&http_log).len(), 2);
    let id = crate::scripted_server::run_id(&stderr);
    let (code, inspect, _) = cairn_at(dir.path(), dir.path(), &env, &["inspect", &id, "--json"]);
    assert_eq!(code, 0);
    assert!(!inspect.contains(secret) && !stderr.contains(secret), "the header value is never shown");
    let (code, _, stderr) = cairn_at(dir.path(), dir.path(), &env, &["replay", &id]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(calls(&http_log).len(), 2);
}

/// The reference server `@modelcontextprotocol/server-everything` over stdio: its echo tool's
/// text is the result, its image is summarized by type and size, and it sees only the
/// variables its config names (no key of cairn's environment).
#[test]
fn the_reference_server_everything_answers_text_images_and_sees_a_clean_environment() {
    let Some((node, entry)) = crate::tools_support::server_everything() else { return };
    let Some(python) = python_with_mcp() else { return };
    let server = ScriptedServer::start(vec![
        crate::tools_support::tool_calls(&[
            ("w1", "every_echo", r#"{"message": "hello from cairn"}"#),
            ("w2", "every_get-tiny-image", "{}"),
            ("w3", "every_get-env", "{}"),
        ]),
        text("done", 30, 8),
    ]);
    let extra = format!(
        "[toolsets.ref]\nmcp = [\"every\"]\n\n[mcp.every]\ncommand = [{:?}, {:?}, \"stdio\"]\ntimeout_ms = 10000\n",
        node.display().to_string(),
        entry.display().to_string()
    );
    let dir = tools_project(&server.url, &python, &extra);
    std::fs::write(dir.path().join("s.rhai"), r#"agent("Try the reference server.", #{tools: ["ref"]})"#)
        .unwrap();
    let env = [("CAIRN_SECRET_TEST_KEY", "sk-never-seen")];
    let (code, stdout, stderr) = cairn_at(dir.path(), dir.path(), &env, &["run", "s.rhai", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(serde_json::from_str::<Value>(&stdout).unwrap()["value"], "done");
    let sent = crate::scripted_server::sent_text(&server.requests()[1]);
    assert!(sent.contains("Echo: hello from cairn"), "{sent}");
    assert!(sent.contains("[image: image/png,") && sent.contains(" bytes]"), "{sent}");
    assert!(sent.contains("PATH") && !sent.contains("sk-never-seen"), "{sent}");
    let id = crate::scripted_server::run_id(&stderr);
    let (code, _, stderr) = cairn_at(dir.path(), dir.path(), &env, &["replay", &id]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(server.requests().len(), 2);
}

/// The card lists each toolset's tools with their schemas, the MCP server's as it listed
/// them; lint knows the declared toolset names.
#[test]
fn the_card_lists_mcp_and_host_function_tools_and_lint_knows_the_toolsets() {
    let Some(python) = python_with_mcp() else { return };
    let dir = tools_project("http://127.0.0.1:9/v1", &python, "");
    let (code, card, stderr) = cairn_at(dir.path(), dir.path(), &[], &["card", "--profiles"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(card.contains("- research:"), "{card}");
    assert!(
        card.contains(
            "  - docs_search: Searches the test corpus for a word. | accepts: {\"properties\":{\"query\""
        ),
        "{card}"
    );
    assert!(card.contains("  - lookup: Looks a city up. | accepts: {\"properties\":{\"city\""), "{card}");
    std::fs::write(dir.path().join("good.rhai"), r#"agent("x", #{tools: ["research"]})"#).unwrap();
    std::fs::write(dir.path().join("bad.rhai"), r#"agent("x", #{tools: ["reserch"]})"#).unwrap();
    let (code, _, stderr) = cairn_at(dir.path(), dir.path(), &[], &["lint", "good.rhai"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, out, stderr) = cairn_at(dir.path(), dir.path(), &[], &["lint", "bad.rhai"]);
    assert_ne!(code, 0);
    assert!(format!("{out}{stderr}").contains("reserch"), "{out}{stderr}");
}

/// A planner goal given to `cairn serve` is planned with a card that lists the MCP server's
/// tools, as `cairn plan` and `cairn card --profiles` do: the service reaches the server first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_given_to_the_service_is_planned_with_the_mcp_tools_on_its_card() {
    let Some(python) = python_with_mcp() else { return };
    let draft = "```rhai\nagent(\"look it up\", #{tools: [\"research\"]})\n```";
    let model = std::sync::Arc::new(ScriptedServer::start(vec![text(draft, 900, 40), text("done", 10, 5)]));
    let dir = tools_project(&model.url, &python, "");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut child =
        crate::tools_support::cairn_process(dir.path(), &["serve", "--quiet", "--listen", &listen])
            .env_remove("CAIRN_SERVER_TOKEN")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
    let base = format!("http://{listen}");
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let submitted = loop {
        let sent = client
            .post(format!("{base}/v1/runs"))
            .json(&serde_json::json!({ "goal": "Look up Paris" }))
            .send();
        if let Ok(response) = sent.await {
            break response;
        }
        assert!(std::time::Instant::now() < deadline, "cairn serve did not come up");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let status = submitted.status().as_u16();
    let body = submitted.text().await.unwrap_or_default();
    let waited = tokio::task::spawn_blocking({
        let model = model.clone();
        move || std::panic::catch_unwind(|| model.wait_for_requests(1, std::time::Duration::from_secs(60)))
    })
    .await
    .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 202, "{body}");
    assert!(waited.is_ok(), "the planner was never asked");
    let planner_request = model.requests()[0].to_string();
    assert!(
        planner_request.contains("docs_search: Searches the test corpus for a word."),
        "{planner_request}"
    );
    assert!(planner_request.contains("lookup: Looks a city up."), "{planner_request}");
}
