//! The static cost bound never under-counts: scripts run through the engine with the echo
//! model, and the provider requests they really make never exceed the bound computed before
//! the run. A corpus of hand-written scripts and the samples, then generated ones.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use assert_cmd::Command;
use cairn::provider::echo::EchoProvider;
use cairn::provider::{Capabilities, ChatEvent, ChatRequest, Provider};
use cairn::{CallBound, CostBound, cost_bound};
use cairn::{Engine, MemoryStore, RunOptions, RunStatus, Script};
use futures::stream::BoxStream;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The echo model, counting every request.
#[derive(Debug)]
struct Counting {
    inner: EchoProvider,
    requests: Arc<AtomicUsize>,
}

impl Provider for Counting {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self, model: &str) -> Capabilities {
        self.inner.capabilities(model)
    }

    fn stream(&self, request: ChatRequest, cancel: CancellationToken) -> BoxStream<'static, ChatEvent> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        self.inner.stream(request, cancel)
    }
}

fn engine() -> (Engine, Arc<AtomicUsize>) {
    let requests = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::builder(store)
        .provider(Arc::new(Counting { inner: EchoProvider::new(), requests: requests.clone() }))
        .max_spawns(100_000)
        .build()
        .unwrap();
    (engine, requests)
}

/// The bound, then the run: returns (bound, requests made, status).
async fn bound_and_run(source: &str, args: Value) -> (Option<u64>, usize, RunStatus, Option<cairn::Error>) {
    let (engine, requests) = engine();
    let rhai = engine.dialect("rhai").unwrap();
    let calls = rhai.call_bound(source, &args).max_agent_calls();
    let cost = cost_bound(&engine, rhai.as_ref(), source, &args, None);
    match (&cost, calls) {
        (CostBound::Bounded { max_agent_calls, .. }, Some(n)) => assert_eq!(*max_agent_calls, n),
        (CostBound::Unbounded { .. }, None) => {}
        other => panic!("the cost bound disagrees with the call bound: {other:?}\n{source}"),
    }
    let handle = engine.run_script(&Script::rhai("bound", source), args, RunOptions::default());
    let outcome = handle.unwrap_or_else(|e| panic!("{e}\n{source}")).result().await.unwrap();
    (calls, requests.load(Ordering::SeqCst), outcome.status, outcome.error)
}

/// Every construct the bound follows, with what it must say.
const CORPUS: &[(&str, &str, Option<u64>)] = &[
    (r#"for i in 0..3 { agent(`a${i}`) }"#, "{}", Some(3)),
    (r#"for x in args.xs { for y in 0..2 { agent(`${x}${y}`) } }"#, r#"{"xs": [1, 2, 3]}"#, Some(6)),
    (r#"parallel(args.xs, |x| agent(`${x}`))"#, r#"{"xs": ["a", "b"]}"#, Some(2)),
    (r#"parallel([|| agent("a"), || agent("b"), || 1])"#, "{}", Some(2)),
    (r#"pipeline(args.xs, [|x| agent(`${x}`), |y| agent(`s2 ${y}`)])"#, r#"{"xs": [1, 2, 3]}"#, Some(6)),
    (r#"step("one", || agent("a")); phase("two", || agent("b"))"#, "{}", Some(2)),
    // One arm of a branch runs: the larger.
    (
        r#"let r = agent("q"); if r.len() > 3 { agent("long"); agent("l2") } else { agent("short") }"#,
        "{}",
        Some(3),
    ),
    (
        r#"let n = agent("q").len(); switch n % 2 { 0 => agent("even"), _ => { agent("odd"); agent("odd2") } }"#,
        "{}",
        Some(3),
    ),
    (r#"try { agent("a"); throw "no"; } catch (e) { agent("b") }"#, "{}", Some(2)),
    (
        r#"fn ask(q) { agent(q) } fn fan(xs) { xs.map(|x| ask(`${x}`)) } fan(args.xs); ask("z")"#,
        r#"{"xs": [1, 2]}"#,
        Some(3),
    ),
    (r#"let f = |x| agent(`f ${x}`); for i in 0..2 { f.call(i); } call(f, 9)"#, "{}", Some(3)),
    (r#"let f = Fn("agent"); f.call("via a pointer")"#, "{}", Some(1)),
    (
        r#"for g in args.groups { parallel(g.xs, |x| agent(`${x}`)) }"#,
        r#"{"groups": [{"xs": [1]}, {"xs": [1, 2, 3]}]}"#,
        Some(4),
    ),
    (
        r#"let topics = if args.topics == () { ["a", "b", "c"] } else { args.topics }; parallel(topics, |t| agent(t))"#,
        "{}",
        Some(3),
    ),
    (r#"let i = 0; while i < 3 { i += 1; } agent("after")"#, "{}", Some(1)),
    // Too many elements to walk one by one: one walk, times the length.
    (r#"for i in 0..100 { if i % 2 == 0 { agent(`even ${i}`) } }"#, "{}", Some(100)),
    (
        r#"let xs = if agent("q") == "y" { [1, 2] } else { [1, 2, 3] }; for x in xs { agent(`${x}`) }"#,
        "{}",
        Some(4),
    ),
    (r#"let i = 0; while i < 3 { agent(`w${i}`); i += 1; }"#, "{}", None),
    (r#"let xs = agent("list").split(" "); for x in xs { agent(x) }"#, "{}", None),
    (r#"let fs = []; fs.push(|| agent("hidden")); for f in fs { f.call() }"#, "{}", None),
];

#[tokio::test]
async fn the_corpus_never_makes_more_calls_than_its_bound() {
    for (source, args, expected) in CORPUS {
        let args: Value = serde_json::from_str(args).unwrap();
        let (bound, requests, status, error) = bound_and_run(source, args).await;
        assert_eq!(bound, *expected, "{source}");
        if let Some(bound) = bound {
            assert!(requests as u64 <= bound, "{requests} requests > bound {bound}: {source}");
        }
        assert!(matches!(status, RunStatus::Ok), "{status:?} {error:?}: {source}");
    }
}

#[tokio::test]
async fn the_samples_never_make_more_calls_than_their_bound() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    let cases = [
        ("adversarial_panel.rhai", json!({}), Some(5)),
        ("code_review.rhai", json!({}), Some(4)),
        ("deploy_approval.rhai", json!({}), Some(2)),
        ("digest.rhai", json!({}), Some(4)),
        ("digest.rhai", json!({"topics": ["a", "b", "c", "d", "e", "f"]}), Some(7)),
        ("phase_chain.rhai", json!({"subject": "cairns"}), Some(5)),
        // Built with push in a loop, then a `while` loop: no static bound.
        ("exhausted_fanout.rhai", json!({}), None),
        ("loop_until_dry.rhai", json!({}), None),
    ];
    for (file, args, expected) in cases {
        let source = std::fs::read_to_string(dir.join(file)).unwrap();
        let (bound, requests, ..) = bound_and_run(&source, args).await;
        assert_eq!(bound, expected, "{file}");
        if let Some(bound) = bound {
            assert!(requests as u64 <= bound, "{file}: {requests} requests > bound {bound}");
        }
    }
}

/// A tiny deterministic generator (xorshift), so a failure names its seed.
struct Gen {
    state: u64,
    next_id: u32,
}

impl Gen {
    fn below(&mut self, n: u64) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state % n
    }

    fn id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }

    /// A block of one to three statements. Closures never mention loop variables (lint
    /// refuses that), and branches never assign outside themselves.
    fn block(&mut self, depth: u32) -> String {
        let statements = 1 + self.below(3);
        (0..statements).map(|_| self.statement(depth)).collect::<Vec<_>>().join("\n")
    }

    fn statement(&mut self, depth: u32) -> String {
        let kinds = if depth == 0 { 1 } else { 12 };
        let id = self.id();
        match self.below(kinds) {
            0 => format!(r#"agent("p{id}");"#),
            1 => format!("for i{id} in 0..{} {{ {} }}", self.below(3), self.block(depth - 1)),
            2 => format!("for x{id} in args.xs {{ {} }}", self.block(depth - 1)),
            3 => format!("parallel(args.xs, |x{id}| {{ {} }});", self.block(depth - 1)),
            4 => {
                format!("parallel([|| {{ {} }}, || {{ {} }}]);", self.block(depth - 1), self.block(depth - 1))
            }
            5 => format!(
                r#"if agent("c{id}").len() > {} {{ {} }} else {{ {} }}"#,
                self.below(12),
                self.block(depth - 1),
                self.block(depth - 1)
            ),
            6 => format!(r#"step("s{id}", || {{ {} }});"#, self.block(depth - 1)),
            7 => format!(
                r#"try {{ {} throw "t{id}"; }} catch (e{id}) {{ {} }}"#,
                self.block(depth - 1),
                self.block(depth - 1)
            ),
            8 => format!(
                "pipeline(args.xs, [|a{id}| {{ {} a{id} }}, |b{id}| {{ {} b{id} }}]);",
                self.block(depth - 1),
                self.block(depth - 1)
            ),
            9 => format!(
                r#"let w{id} = agent("w{id}").len(); switch w{id} % 3 {{ 0 => {{ {} }}, 1 => {{ {} }}, _ => {{ {} }} }}"#,
                self.block(depth - 1),
                self.block(depth - 1),
                self.block(depth - 1)
            ),
            10 => "helper(args.xs);".to_owned(),
            // Over a literal: Rhai refuses a nested map over the same shared `args` array.
            _ => {
                let items: Vec<String> = (0..self.below(3)).map(|i| i.to_string()).collect();
                format!("[{}].map(|m{id}| {{ {} }});", items.join(", "), self.block(depth - 1))
            }
        }
    }
}

#[tokio::test]
async fn generated_scripts_never_make_more_calls_than_their_bound() {
    const HELPER: &str = "fn helper(xs) { for x in xs { agent(`h${x}`); } }\n";
    for seed in 1..=40u64 {
        let mut generator = Gen { state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, next_id: 0 };
        let body = generator.block(3);
        let source = format!("{HELPER}{body}\n()");
        let len = generator.below(4) as usize;
        let args = json!({"xs": (0..len).map(|i| format!("item{i}")).collect::<Vec<_>>()});
        let (bound, requests, status, error) = bound_and_run(&source, args.clone()).await;
        let Some(bound) = bound else {
            panic!("seed {seed}: every generated construct is bounded\n{source}")
        };
        assert!(
            requests as u64 <= bound,
            "seed {seed}: {requests} requests > bound {bound}\n{args}\n{source}"
        );
        assert!(matches!(status, RunStatus::Ok), "seed {seed}: {status:?} {error:?}\n{source}");
    }
}

#[test]
fn the_bench_script_is_bounded_by_its_args() {
    let (engine, _) = engine();
    let rhai = engine.dialect("rhai").unwrap();
    let source = include_str!("../../benches/bound.rhai");
    let args = json!({"repos": ["cairn", "rulvar", "pma-core"], "reviewers": ["ana", "bo"], "rounds": 2});
    // 3 × 3 classifications, 3 sections × 2 agent stages, 2 + 2 reviews, 2 rounds × 2,
    // 3 announcements, one `switch` case (1: its two agent cases exclude each other).
    assert_eq!(rhai.call_bound(source, &args).max_agent_calls(), Some(27));
    let args = json!({"repos": ["one"], "reviewers": [], "rounds": 5, "sections": ["fix"]});
    assert_eq!(rhai.call_bound(source, &args).max_agent_calls(), Some(1 + 2 + 2 + 10 + 3 + 1));
    // Without reviewers the fan-out over them has no size.
    let CallBound::Unbounded { reason, line, .. } = rhai.call_bound(source, &json!({"repos": ["one"]}))
    else {
        panic!("args.reviewers is missing");
    };
    assert!(reason.contains("`parallel` fan-out"), "{reason}");
    assert_eq!(line, 111);
}

#[test]
fn the_call_bound_names_the_construct_and_its_position() {
    let (engine, _) = engine();
    let rhai = engine.dialect("rhai").unwrap();
    let source =
        "agent(\"a\");\nlet n = 0;\nloop {\n  agent(\"again\");\n  n += 1;\n  if n > 2 { break; }\n}";
    let CallBound::Unbounded { reason, line, column } = rhai.call_bound(source, &json!({})) else {
        panic!("a loop that calls agents is unbounded");
    };
    assert!(reason.contains("`loop`"), "{reason}");
    assert_eq!((line, column), (3, 1));
    let source = "workflow(\"child\", #{})";
    let CallBound::Unbounded { reason, .. } = rhai.call_bound(source, &json!({})) else { panic!() };
    assert!(reason.contains("'child'"), "{reason}");
}

fn cairn_in(dir: &Path) -> Command {
    let mut cmd = Command::cargo_bin("cairn").unwrap();
    cmd.current_dir(dir)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL");
    cmd
}

#[test]
fn lint_bound_prints_the_bound_and_puts_it_in_json() {
    let dir = tempfile::tempdir().unwrap();
    // A priced echo, so the worst case is not zero: $1/M input, $10/M output.
    std::fs::write(dir.path().join("cairn.toml"), "[providers.echo]\nkind = \"echo\"\nprice = [1.0, 10.0]\n")
        .unwrap();
    let script = dir.path().join("fan.rhai");
    std::fs::write(&script, "parallel(args.xs, |x| agent(`about ${x}`, #{max_output_tokens: 100}))").unwrap();
    let out = cairn_in(dir.path())
        .args(["lint", "fan.rhai", "--bound", "--args", r#"{"xs": [1, 2, 3]}"#])
        .assert()
        .success();
    let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert_eq!(stdout, "cost bound: at most 3 agent calls, worst case $0.003009\n");
    let out = cairn_in(dir.path())
        .args(["lint", "fan.rhai", "--bound", "--json", "--args", r#"{"xs": [1, 2, 3, 4]}"#])
        .assert()
        .success();
    let printed: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(printed["diagnostics"], json!([]));
    assert_eq!(printed["cost_bound"]["max_agent_calls"], 4);
    // "about 1" is 3 input tokens (the word, the space, the digit: a tokenizer does not merge
    // a space into digits) at $1/M, 100 output tokens at $10/M: $0.000003 + $0.001.
    let worst = printed["cost_bound"]["worst_case_usd"].as_f64().unwrap();
    assert!((worst - 4.0 * 0.001_003).abs() < 1e-9, "{worst}");
    // Unbounded, with why; no args at all sizes nothing.
    std::fs::write(&script, "while true { agent(\"again\") }").unwrap();
    let out = cairn_in(dir.path()).args(["lint", "fan.rhai", "--bound", "--json"]).assert().success();
    let printed: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let reason = printed["cost_bound"]["unbounded"].as_str().unwrap();
    assert!(reason.contains("`while` loop") && reason.contains("line 1"), "{reason}");
    // Without --bound the JSON stays the diagnostics array; --args needs --bound.
    let out = cairn_in(dir.path()).args(["lint", "fan.rhai", "--json"]).assert().success();
    assert!(serde_json::from_slice::<Value>(&out.get_output().stdout).unwrap().is_array());
    cairn_in(dir.path()).args(["lint", "fan.rhai", "--args", "{}"]).assert().code(2);
    cairn_in(dir.path()).args(["lint", "fan.rhai", "--bound", "--args", "{nope"]).assert().code(2);
}

/// `cairn lint --bound` in both dialects (#29): a default (`args.x ?? [...]`, `args.x or {...}`)
/// bounds a loop over it by the args given, else by its own length; a loop over an args value
/// the run is not given, with no default, says so; a branch counts its larger arm.
#[test]
fn lint_bound_reads_defaults_and_takes_the_larger_arm_in_both_dialects() {
    let dir = tempfile::tempdir().unwrap();
    let scripts = [
        (
            "flow.rhai",
            "let topics = args.topics ?? [\"a\", \"b\", \"c\"];\nparallel(topics, |t| agent(`about ${t}`));\n\
             if agent(\"q\") == \"y\" { agent(\"a\"); agent(\"b\") } else { agent(\"c\") }\n",
            "parallel(args.topics, |t| agent(t))\n",
        ),
        (
            "flow.lua",
            "local topics = args.topics or { \"a\", \"b\", \"c\" }\n\
             parallel(topics, function(t) return agent(\"about \" .. t) end)\n\
             if agent(\"q\") == \"y\" then agent(\"a\") agent(\"b\") else agent(\"c\") end\nreturn 1\n",
            "return parallel(args.topics, function(t) return agent(t) end)\n",
        ),
    ];
    let bound = |file: &str, args: Option<&str>| -> Value {
        let mut cmd = cairn_in(dir.path());
        cmd.args(["lint", file, "--bound", "--json"]);
        if let Some(args) = args {
            cmd.args(["--args", args]);
        }
        let out = cmd.assert().success();
        serde_json::from_slice::<Value>(&out.get_output().stdout).unwrap()["cost_bound"].clone()
    };
    for (file, with_default, without) in scripts {
        std::fs::write(dir.path().join(file), with_default).unwrap();
        // No args: the default's three topics, the question, the larger arm (2).
        assert_eq!(bound(file, None)["max_agent_calls"], 6, "{file}");
        // The args give one topic: the default is not read.
        assert_eq!(bound(file, Some(r#"{"topics": ["x"]}"#))["max_agent_calls"], 4, "{file}");
        assert_eq!(
            bound(file, Some(r#"{"topics": ["x", "y", "z", "w", "v"]}"#))["max_agent_calls"],
            8,
            "{file}"
        );
        // The text form says the same.
        let out = cairn_in(dir.path()).args(["lint", file, "--bound"]).assert().success();
        let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
        assert!(text.starts_with("cost bound: at most 6 agent calls, worst case $"), "{file}: {text}");
        std::fs::write(dir.path().join(file), without).unwrap();
        let reason = bound(file, None)["unbounded"].as_str().unwrap().to_owned();
        assert!(
            reason.contains("`parallel` fan-out") && reason.contains("missing") && reason.contains("default"),
            "{file}: {reason}"
        );
        assert_eq!(bound(file, Some(r#"{"topics": ["x", "y"]}"#))["max_agent_calls"], 2, "{file}");
    }
}
