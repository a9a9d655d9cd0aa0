//! #23: money holds whatever the wire does. Each of the seven breaks, through the real `cairn`
//! binary against a fake provider on the wire ([`crate::wire_server`]) that streams exactly
//! chosen usage in the Anthropic or the OpenAI format and keeps the bill of what it served.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::scripted_server::{Reply, cairn_in};
use crate::wire_server::*;

/// USD from a journaled nano-USD amount.
pub(crate) fn usd(nanos: &Value) -> f64 {
    nanos.as_i64().unwrap_or(0) as f64 / 1e9
}

/// A project: `cairn.toml` with `providers`, retries of 4 attempts 1 ms apart, and `script`.
pub(crate) fn project(providers: &str, script: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{providers}\n[retry]\nmax_attempts = 4\ninitial_backoff_ms = 1\nmax_backoff_ms = 2\n\n[toolsets.files]\nkind = \"fs-read\"\nroot = \".\"\n"
    );
    std::fs::write(dir.path().join("cairn.toml"), config).unwrap();
    std::fs::write(dir.path().join("s.rhai"), script).unwrap();
    dir
}

/// An OpenAI-compatible provider `o` at `url` with model `small` at `[input, output]` $/M,
/// the default route.
pub(crate) fn openai(url: &str, input: f64, output: f64) -> String {
    format!(
        "[providers.o]\nkind = \"openai-compatible\"\nbase_url = \"{url}\"\nprices = {{ small = [{input}, {output}] }}\n\n[routing]\ndefault = \"o:small\"\n"
    )
}

/// An Anthropic provider `a` at `url` with model `big` at `[input, output]` $/M.
pub(crate) fn anthropic(url: &str, input: f64, output: f64) -> String {
    format!(
        "[providers.a]\nkind = \"anthropic\"\napi_key_env = \"CAIRN_WIRE_KEY\"\nbase_url = \"{url}\"\nprices = {{ big = [{input}, {output}] }}\n"
    )
}

/// `cairn run s.rhai --json` with `args`: the outcome.
pub(crate) fn run(dir: &std::path::Path, args: &[&str]) -> Value {
    outcome_of(dir, &[&["run", "s.rhai", "-q", "--json"], args].concat())
}

/// `cairn ARGS` against the wire servers (key set, a 30 s lease): its JSON outcome.
pub(crate) fn outcome_of(dir: &std::path::Path, args: &[&str]) -> Value {
    let out = cairn_in(dir)
        .env("CAIRN_WIRE_KEY", "k")
        .env("CAIRN_LEASE_TTL_MS", "30000")
        .args(args)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "no JSON outcome: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

pub(crate) fn spent(outcome: &Value) -> f64 {
    usd(&outcome["cost"]["total"]["cost_nano_usd"])
}

/// #23.1: four attempts each stream 400 tokens ($0.40 at $1000/M) and drop, under a $0.50
/// ceiling. Each failed attempt is spent when it drops, so the retry is granted only what is
/// left (its `max_tokens` shrinks) and its stream is cut at the ceiling: the run spends at
/// most the ceiling plus one streamed delta (it spent $1.60, every retry sent with the full
/// allowance again). In both wire formats.
#[test]
fn retries_of_dropped_streams_stay_under_the_ceiling() {
    for dialect in ["openai", "anthropic"] {
        let drop = |_| if dialect == "openai" { openai_drop(0, 400) } else { anthropic_drop(0, 400) };
        let wire = WireServer::start((0..4).map(drop).collect());
        let providers = match dialect {
            "openai" => openai(wire.url(), 0.0, 1000.0),
            _ => format!("{}[routing]\ndefault = \"a:big\"\n", anthropic(&wire.root_url(), 0.0, 1000.0)),
        };
        let dir = project(&providers, r#"agent("write at length", #{max_output_tokens: 450})"#);
        let outcome = run(dir.path(), &["--budget", "0.5"]);
        let delta = DELTA_CHARS as f64 / 4.0 * 1000.0 / 1e6;
        assert!(
            spent(&outcome) <= 0.5 + delta + 1e-9,
            "{dialect}: spent {} under $0.50: {outcome}",
            spent(&outcome)
        );
        assert!(spent(&outcome) >= 0.4, "{dialect}: the dropped attempt is charged: {outcome}");
        let requests = wire.requests();
        assert!(requests.len() >= 2, "{dialect}: {} requests", requests.len());
        // The retry was granted what the first attempt left: at most 100 tokens of output.
        let cap = |r: &Value| r["max_tokens"].as_u64().or(r["max_completion_tokens"].as_u64()).unwrap_or(0);
        assert!(cap(&requests[1]) <= 100, "{dialect}: the retry asked for {}", cap(&requests[1]));
    }
}

/// #23.3: Anthropic answers 529 three times, then serves a $0.06 call under a $0.10 ceiling;
/// OpenAI-style servers answer 429, 500 and 503. No provider bills a refused request: the
/// call costs exactly its billed $0.06, its usage is exact (not approximate), it ends `ok`,
/// and the three refusals are counted (it charged each the prompt's estimated input).
#[test]
fn refused_requests_cost_nothing_and_are_counted() {
    // 4,000 characters of prompt: estimated 1,000 input tokens, $0.01 at $10/M.
    let script = format!(r#"agent("{}", #{{max_output_tokens: 600}})"#, "word ".repeat(800));
    for dialect in ["anthropic", "openai"] {
        let (refusals, answer, providers) = if dialect == "anthropic" {
            let wire = WireServer::start(vec![
                anthropic_status(529),
                anthropic_status(529),
                anthropic_status(529),
                anthropic_text("fine", 1000, 500),
            ]);
            let providers =
                format!("{}[routing]\ndefault = \"a:big\"\n", anthropic(&wire.root_url(), 10.0, 100.0));
            (3, wire, providers)
        } else {
            let wire = WireServer::start(vec![
                openai_status(429),
                openai_status(500),
                openai_status(503),
                openai_text("fine", 1000, 500),
            ]);
            let providers = openai(wire.url(), 10.0, 100.0);
            (3, wire, providers)
        };
        let dir = project(&providers, &script);
        let outcome = run(dir.path(), &["--budget", "0.10"]);
        assert_eq!(outcome["status"], "ok", "{dialect}: {outcome}");
        assert_eq!(answer.requests().len(), 4, "{dialect}");
        let billed = answer.billed_usd(10.0, 100.0);
        assert!((billed - 0.06).abs() < 1e-9, "{dialect}: billed {billed}");
        assert!(
            (spent(&outcome) - billed).abs() < 1e-9,
            "{dialect}: charged {} for {billed}: {outcome}",
            spent(&outcome)
        );
        assert_eq!(outcome["cost"]["approximate"], false, "{dialect}: {outcome}");
        assert_eq!(outcome["cost"]["refused_attempts"], refusals, "{dialect}: {outcome}");
    }
}

/// An OpenAI stream that fails right after its role chunk (a success status, one chunk that
/// decodes to nothing, then the connection drops): the provider ran the prompt and bills it
/// (1,000 tokens, $0.01 at $10/M). The attempt began when its response did, so it is charged
/// the prompt (it was taken for a refusal and charged $0, under the bill).
#[test]
fn an_openai_stream_that_fails_after_its_role_chunk_is_charged_its_prompt() {
    // 4,000 characters of prompt: 1,000 tokens.
    let script = format!(r#"agent("{}", #{{max_output_tokens: 100}})"#, "word ".repeat(800));
    let wire = WireServer::start(vec![openai_drop(1000, 0), openai_text("fine", 1000, 10)]);
    let dir = project(&openai(wire.url(), 10.0, 100.0), &script);
    let outcome = run(dir.path(), &["--budget", "1"]);
    assert_eq!(outcome["status"], "ok", "{outcome}");
    assert_eq!(wire.requests().len(), 2);
    let billed = wire.billed_usd(10.0, 100.0);
    assert!((billed - 0.021).abs() < 1e-9, "billed {billed}");
    // Never below the bill; above it by at most the broken attempt's estimate slack (the
    // request body at four characters a token, plus four output tokens).
    let charged = spent(&outcome);
    assert!(charged >= billed - 1e-9, "charged {charged} for {billed}: {outcome}");
    assert!(charged <= billed + 0.002, "charged {charged} for {billed}: {outcome}");
    // It is not counted as a refusal.
    assert_eq!(outcome["cost"]["refused_attempts"].as_u64().unwrap_or(0), 0, "{outcome}");
}

/// A text answer on one wire, and the provider table that points at its server.
type Answer = fn(&str, u64, u64) -> Served;
type Providers = fn(&WireServer) -> String;

/// A text answer and a provider config in `dialect`'s wire format, $100/M input and output.
fn at_100_per_million(dialect: &str) -> (Answer, Providers) {
    if dialect == "openai" {
        (openai_text, |w| openai(w.url(), 100.0, 100.0))
    } else {
        (anthropic_text, |w| {
            format!("{}[routing]\ndefault = \"a:big\"\n", anthropic(&w.root_url(), 100.0, 100.0))
        })
    }
}

/// #23.4: a 4,000-character Japanese prompt, billed 4,000 tokens ($0.40 at $100/M), was
/// reserved at four characters a token ($0.10) and admitted under $0.20. The estimate counts
/// non-ASCII text by its UTF-8 bytes, an upper bound for every supported tokenizer, so the
/// call is refused before dispatch; an English prompt of the same length is still estimated
/// at about four characters a token and admitted.
#[test]
fn a_japanese_prompt_is_never_reserved_below_its_bill() {
    for dialect in ["openai", "anthropic"] {
        let (reply, providers) = at_100_per_million(dialect);
        let wire = WireServer::start(vec![reply("はい", 4000, 10)]);
        let japanese = "日本語の文章です。".repeat(445);
        assert!(japanese.chars().count() >= 4000);
        let dir = project(&providers(&wire), &format!(r#"agent("{japanese}", #{{max_output_tokens: 100}})"#));
        let outcome = run(dir.path(), &["--budget", "0.20"]);
        assert!(spent(&outcome) <= 0.20, "{dialect}: spent {} under $0.20: {outcome}", spent(&outcome));
        assert_eq!(outcome["error"]["code"], "budget_exhausted", "{dialect}: {outcome}");
        assert!(wire.requests().is_empty(), "{dialect}: the call was dispatched");
        // English prose of 4,000 characters: about 1,000 tokens, $0.10 + $0.01 of output.
        let wire = WireServer::start(vec![reply("yes", 1000, 10)]);
        let dir = project(
            &providers(&wire),
            &format!(r#"agent("{}", #{{max_output_tokens: 100}})"#, "word ".repeat(800)),
        );
        let english = run(dir.path(), &["--budget", "0.20"]);
        assert_eq!(english["status"], "ok", "{dialect}: {english}");
        assert_eq!(wire.requests().len(), 1, "{dialect}");
    }
}

/// #23.4, beyond prose: four characters a token is no bound for JSON, code or numbers. A
/// 3,928-character JSON array (ids, hex skus, quantities) that the OpenAI tokenizers count at
/// 1,687 tokens (`tiktoken-rs` 0.12, `o200k_base` and `cl100k_base`) was reserved at 982 and
/// dispatched under a $0.15 ceiling it then crossed; its reservation is now at least its bill,
/// so it is refused unsent. In both wire formats.
#[test]
fn a_json_prompt_is_never_reserved_below_its_bill() {
    let rows: Vec<String> = (0..100u64)
        .map(|i| {
            format!(
                r#"{{"id":{},"sku":"{:x}","qty":{}}}"#,
                100_000 + i * 7_919,
                (i * 2_654_435_761) % (1 << 32),
                i % 17
            )
        })
        .collect();
    let json = format!("[{}]", rows.join(","));
    assert_eq!(json.len(), 3_928);
    for dialect in ["openai", "anthropic"] {
        let (reply, providers) = at_100_per_million(dialect);
        let wire = WireServer::start(vec![reply("ok", 1_687, 10)]);
        let dir = project(&providers(&wire), &format!("agent(`{json}`, #{{max_output_tokens: 100}})"));
        let outcome = run(dir.path(), &["--budget", "0.15"]);
        assert!(spent(&outcome) <= 0.15, "{dialect}: spent {} under $0.15: {outcome}", spent(&outcome));
        assert_eq!(outcome["error"]["code"], "budget_exhausted", "{dialect}: {outcome}");
        assert!(wire.requests().is_empty(), "{dialect}: the call was dispatched");
    }
}

/// #23.6: with `max_context_tokens = 3000` a model passes a 20 KB path on each of six tool
/// calls. The bound elides the model's own tool-call arguments as it elides results, so no
/// turn goes out above it (they went out at 5k, 10k … 30k tokens); a prompt the bound cannot
/// hold is `context_overflow`, never sent. In both wire formats.
#[test]
fn the_context_bound_counts_the_models_own_tool_calls() {
    for dialect in ["openai", "anthropic"] {
        let path = format!(r#"{{"path": "{}"}}"#, "d/".repeat(10_000));
        let call = |i: usize| {
            let id = format!("call_{i}");
            if dialect == "openai" {
                openai_tool_call(&id, "read_file", &path, 100, 5000)
            } else {
                anthropic_tool_call(&id, "read_file", &path, 100, 5000)
            }
        };
        let mut script: Vec<Served> = (0..6).map(call).collect();
        script.push(if dialect == "openai" {
            openai_text("done", 100, 5)
        } else {
            anthropic_text("done", 100, 5)
        });
        let wire = WireServer::start(script);
        let providers = match dialect {
            "openai" => openai(wire.url(), 0.0, 0.0),
            _ => format!("{}[routing]\ndefault = \"a:big\"\n", anthropic(&wire.root_url(), 0.0, 0.0)),
        };
        let dir = project(
            &providers,
            r#"agent("read the file", #{tools: ["files"], max_context_tokens: 3000, max_tool_calls: 10})"#,
        );
        let outcome = run(dir.path(), &[]);
        assert_eq!(outcome["status"], "ok", "{dialect}: {outcome}");
        let requests = wire.requests();
        assert_eq!(requests.len(), 7, "{dialect}");
        for (i, request) in requests.iter().enumerate() {
            // Estimated at four characters a token, the conversation stays within 3,000 tokens.
            let size = request["messages"].to_string().len();
            // (The wire's JSON adds some framing to what the estimate counts.)
            assert!(size <= 3000 * 4 + 4000, "{dialect}: turn {i} sent {size} characters of conversation");
        }
        std::fs::write(
            dir.path().join("s.rhai"),
            format!(r#"agent("{}", #{{max_context_tokens: 3000}})"#, "word ".repeat(4000)),
        )
        .unwrap();
        let overflow = run(dir.path(), &[]);
        assert_eq!(overflow["error"]["code"], "context_overflow", "{dialect}: {overflow}");
        assert_eq!(wire.requests().len(), 7, "{dialect}: the overflowing prompt was sent");
    }
}

/// #23.7: an Anthropic primary at $1000/M drops four attempts after 100 tokens each ($0.40);
/// the call fails over to an OpenAI fallback at $10/M. Each attempt is priced and attributed
/// by the model that served it: `by_model` puts $0.40 under the primary (it put all of it
/// under the fallback), and the split sums to the total.
#[test]
fn failover_cost_lands_on_the_model_that_served_each_attempt() {
    let wire = WireServer::start(vec![
        anthropic_drop(0, 100),
        anthropic_drop(0, 100),
        anthropic_drop(0, 100),
        anthropic_drop(0, 100),
        openai_text("fine", 0, 100),
    ]);
    let providers = format!(
        "{}{}[fallbacks]\n\"a:big\" = [\"o:small\"]\n",
        anthropic(&wire.root_url(), 0.0, 1000.0),
        openai(wire.url(), 0.0, 10.0).replace("default = \"o:small\"", "default = \"a:big\"")
    );
    let dir = project(&providers, r#"agent("hello", #{max_output_tokens: 200})"#);
    let outcome = run(dir.path(), &["--budget", "10"]);
    assert_eq!(outcome["status"], "ok", "{outcome}");
    assert_eq!(wire.requests().len(), 5);
    let by_model = &outcome["cost"]["by_model"];
    let primary = usd(&by_model["a:big"]["cost_nano_usd"]);
    let fallback = usd(&by_model["o:small"]["cost_nano_usd"]);
    assert!((primary - 0.4).abs() < 0.001, "the primary's attempts: {primary}: {by_model}");
    assert!((fallback - 0.001).abs() < 0.0001, "the fallback's: {fallback}: {by_model}");
    assert!((primary + fallback - spent(&outcome)).abs() < 1e-9, "{outcome}");
    assert_eq!(outcome["cost"]["total"]["usage"]["output_tokens"], 500, "{outcome}");
}

/// #23.2: a tool loop killed (SIGKILL) after five checkpointed turns ($0.50), then `cairn
/// resume`, under a $1.00 ceiling. The resumed budget counts the checkpointed turns of the
/// unsettled call as spent, so the bill stays within the ceiling (it reached $1.378: the
/// resume started from the journal alone). In both wire formats.
#[test]
fn a_crash_in_an_agent_loop_then_a_resume_stays_under_the_ceiling() {
    for dialect in ["openai", "anthropic"] {
        // Each turn lists the directory: 100 output tokens at $1000/M, $0.10, its worst case.
        let turn = |i: usize| {
            let id = format!("call_{i}");
            if dialect == "openai" {
                openai_tool_call(&id, "list_dir", r#"{"path": "."}"#, 0, 100)
            } else {
                anthropic_tool_call(&id, "list_dir", r#"{"path": "."}"#, 0, 100)
            }
        };
        let mut first: Vec<Served> = (0..5).map(turn).collect();
        first.push(Served { reply: Reply::Stall, bill: (0, 0) });
        let wire = WireServer::start(first);
        let second = WireServer::start((5..40).map(turn).collect());
        let providers = |url: &str| match dialect {
            "openai" => openai(url, 0.0, 1000.0),
            _ => format!("{}[routing]\ndefault = \"a:big\"\n", anthropic(url, 0.0, 1000.0)),
        };
        let url = |w: &WireServer| if dialect == "openai" { w.url().to_owned() } else { w.root_url() };
        let dir = project(
            &providers(&url(&wire)),
            r#"agent("list forever", #{tools: ["files"], max_output_tokens: 100, max_turns: 40, max_tool_calls: 40})"#,
        );
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
            .current_dir(dir.path())
            .env("CAIRN_WIRE_KEY", "k")
            .env("CAIRN_LEASE_TTL_MS", "30000")
            .args(["run", "s.rhai", "-q", "--budget", "1.0", "--run-id", "killed"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        wire.server.wait_for_requests(6, Duration::from_secs(60));
        child.kill().unwrap();
        child.wait().unwrap();
        let id = "killed";
        let first_bill = wire.billed_usd(0.0, 1000.0);
        assert!((first_bill - 0.5).abs() < 1e-9, "{dialect}: {first_bill}");
        std::fs::write(
            dir.path().join("cairn.toml"),
            std::fs::read_to_string(dir.path().join("cairn.toml"))
                .unwrap()
                .replace(&url(&wire), &url(&second)),
        )
        .unwrap();
        let began = Instant::now();
        let resumed = cairn_in(dir.path())
            .env("CAIRN_WIRE_KEY", "k")
            .env("CAIRN_LEASE_TTL_MS", "30000")
            .args(["resume", id, "--json", "-q"])
            .output()
            .unwrap();
        assert!(began.elapsed() < Duration::from_secs(60));
        let outcome: Value = serde_json::from_slice(&resumed.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&resumed.stderr)));
        let billed = first_bill + second.billed_usd(0.0, 1000.0);
        assert!(billed <= 1.0 + 1e-9, "{dialect}: billed {billed} under a $1.00 ceiling: {outcome}");
        assert!(second.requests().len() >= 3, "{dialect}: the resume went on: {}", second.requests().len());
        assert!(
            (spent(&outcome) - billed).abs() < 1e-6,
            "{dialect}: charged {} for {billed}",
            spent(&outcome)
        );
    }
}

/// The orchestrator's next move after `turns` answered turns: spawn six children at once, wait
/// for them, finish.
fn orchestrator_move(turns: usize) -> (&'static str, Value) {
    match turns {
        0 => {
            let children: Vec<Value> = (0..6)
                .map(|i| serde_json::json!({"profile": "researcher", "prompt": format!("fact {i}")}))
                .collect();
            ("parallel_agents", serde_json::json!({ "children": children }))
        }
        1 => ("await_all", serde_json::json!({"handles": ["c0", "c1", "c2", "c3", "c4", "c5"]})),
        _ => ("finish", serde_json::json!({"result": "done"})),
    }
}

fn assistant_turns(body: &Value) -> usize {
    body["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count())
}

/// An orchestration on the OpenAI wire; children answer at once.
fn openai_orchestration(body: &Value) -> String {
    let is_orchestrator = body["tools"]
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["function"]["name"] == "spawn_agent"));
    if !is_orchestrator {
        return openai_text_sse("a fact");
    }
    let (tool, arguments) = orchestrator_move(assistant_turns(body));
    openai_tool_sse(tool, &arguments)
}

/// The same orchestration on the Anthropic wire (tools are `{name, input_schema}`).
fn anthropic_orchestration(body: &Value) -> String {
    let is_orchestrator =
        body["tools"].as_array().is_some_and(|tools| tools.iter().any(|t| t["name"] == "spawn_agent"));
    if !is_orchestrator {
        return anthropic_text_sse("a fact");
    }
    let (tool, arguments) = orchestrator_move(assistant_turns(body));
    anthropic_tool_sse(tool, &arguments)
}

/// #23.5: `parallel_agents` asks for six children estimated at $0.30 each under a $0.94
/// ceiling. An admission holds what it admits, so at most three are admitted (six were, each
/// judged against the same free money); after the run settles `cairn inspect` lists no child
/// `running` (children refused at dispatch stayed `running`), and the run spends at most its
/// ceiling. On both wires.
#[test]
fn orchestrator_admissions_hold_what_they_admit_and_every_child_ends() {
    for dialect in ["openai", "anthropic"] {
        let providers = if dialect == "openai" {
            openai(&DynamicServer::start(openai_orchestration).url, 0.0, 10.0)
        } else {
            let root = DynamicServer::start(anthropic_orchestration).root_url();
            format!("{}[routing]\ndefault = \"a:big\"\n", anthropic(&root, 0.0, 10.0))
        };
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "{providers}\n[profiles.researcher]\ndescription = \"finds facts\"\nest_cost_usd = 0.3\n"
        );
        std::fs::write(dir.path().join("cairn.toml"), config).unwrap();
        let out = cairn_in(dir.path())
            .env("CAIRN_LEASE_TTL_MS", "30000")
            .env("CAIRN_WIRE_KEY", "k")
            .args(["orchestrate", "find facts", "--profiles", "researcher", "--budget", "0.94"])
            .args(["--run-id", "orch", "--json", "-q"])
            .output()
            .unwrap();
        let outcome: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
            panic!(
                "{dialect}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert!(spent(&outcome) <= 0.94, "{dialect}: spent {}: {outcome}", spent(&outcome));
        let inspect = cairn_in(dir.path()).args(["inspect", "orch", "--json"]).output().unwrap();
        let report: Value = serde_json::from_slice(&inspect.stdout)
            .unwrap_or_else(|_| panic!("{dialect}: {}", String::from_utf8_lossy(&inspect.stderr)));
        let children = report["orchestrations"][0]["children"].as_array().cloned().unwrap_or_default();
        assert!(!children.is_empty(), "{dialect}: {report}");
        assert!(
            children.len() <= 3,
            "{dialect}: {} children admitted at $0.30 each under $0.94: {children:?}",
            children.len()
        );
        for child in &children {
            assert_ne!(child["status"], "running", "{dialect}: {children:?}");
        }
    }
}
