//! #23, the next round: money under fault schedules and kill points the first round did not
//! draw, through the real `cairn` binary against the fake provider on the wire
//! ([`crate::wire_server`]) that keeps the bill of what it served.

use std::time::Duration;

use serde_json::Value;

use crate::money_wire::{anthropic, openai, project, spent};
use crate::scripted_server::{Reply, cairn_in};
use crate::wire_server::*;

/// `cairn run s.rhai` as run `id` with `args`, SIGKILLed once `wire` has received `requests`
/// requests.
fn run_killed(dir: &std::path::Path, id: &str, args: &[&str], wire: &WireServer, requests: usize) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .current_dir(dir)
        .env("CAIRN_WIRE_KEY", "k")
        .env("CAIRN_LEASE_TTL_MS", "30000")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .args(["run", "s.rhai", "-q", "--run-id", id])
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wire.server.wait_for_requests(requests, Duration::from_secs(60));
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Points `cairn.toml` in `dir` at another server: every `from` becomes `to`.
fn repoint(dir: &std::path::Path, from: &str, to: &str) {
    let path = dir.join("cairn.toml");
    let config = std::fs::read_to_string(&path).unwrap().replace(from, to);
    std::fs::write(path, config).unwrap();
}

/// `cairn resume ID --json` with `args`: the outcome.
fn resume(dir: &std::path::Path, id: &str, args: &[&str]) -> Value {
    crate::money_wire::outcome_of(dir, &[&["resume", id, "--json", "-q"], args].concat())
}

/// The provider table of `dialect` (`openai` or `anthropic`) at `wire`, model at `[input,
/// output]` $/M, routed by default; and the URL a later [`repoint`] replaces.
fn provider(dialect: &str, wire: &WireServer, input: f64, output: f64) -> (String, String) {
    match dialect {
        "openai" => (openai(wire.url(), input, output), wire.url().to_owned()),
        _ => (
            format!("{}[routing]\ndefault = \"a:big\"\n", anthropic(&wire.root_url(), input, output)),
            wire.root_url(),
        ),
    }
}

/// A stream of `tokens` output tokens that then drops, on `dialect`'s wire.
fn dropped(dialect: &str, tokens: u64) -> Served {
    if dialect == "openai" { openai_drop(0, tokens) } else { anthropic_drop(0, tokens) }
}

/// A finished text answer of `tokens` output tokens, on `dialect`'s wire.
fn answered(dialect: &str, tokens: u64) -> Served {
    if dialect == "openai" { openai_text("fine", 0, tokens) } else { anthropic_text("fine", 0, tokens) }
}

/// Two attempts of a turn stream 400 tokens each ($0.40 at $1000/M) and drop; the third is on
/// the wire (stalled, nothing billed) when the process is SIGKILLed, under a $1.00 ceiling.
/// The dropped attempts were paid: the resumed run must know it. It forgot them (they were
/// charged only in the dead process's ledger, never journaled nor checkpointed), so its
/// budget started from zero and its calls were granted the whole ceiling again: the provider
/// billed $1.10 under $1.00 and cairn charged $0.30 of it. A failed attempt's charge is now
/// checkpointed when it ends, so a resume counts it spent and its call's charge holds it. In
/// both wire formats.
#[test]
fn dropped_attempts_before_a_kill_are_counted_by_the_resume() {
    for dialect in ["openai", "anthropic"] {
        let wire = WireServer::start(vec![
            dropped(dialect, 400),
            dropped(dialect, 400),
            Served { reply: Reply::Stall, bill: (0, 0) },
        ]);
        let second = WireServer::start(vec![dropped(dialect, 200), answered(dialect, 100)]);
        let (providers, url) = provider(dialect, &wire, 0.0, 1000.0);
        let dir = project(&providers, r#"agent("write at length", #{max_output_tokens: 400})"#);
        run_killed(dir.path(), "dropped", &["--budget", "1.0"], &wire, 3);
        let first_bill = wire.billed_usd(0.0, 1000.0);
        assert!((first_bill - 0.8).abs() < 1e-9, "{dialect}: {first_bill}");
        repoint(dir.path(), &url, &provider(dialect, &second, 0.0, 1000.0).1);
        let outcome = resume(dir.path(), "dropped", &[]);
        let billed = first_bill + second.billed_usd(0.0, 1000.0);
        // The attempt on the wire at the kill billed nothing: no slack is due.
        assert!(billed <= 1.0 + 1e-9, "{dialect}: billed {billed} under a $1.00 ceiling: {outcome}");
        assert!(
            (spent(&outcome) - billed).abs() < 1e-6,
            "{dialect}: charged {} for a bill of {billed}: {outcome}",
            spent(&outcome)
        );
    }
}

/// A refusal before any stream byte on `dialect`'s wire (billed nothing, fails over once the
/// retries are spent).
fn refused(dialect: &str) -> Served {
    if dialect == "openai" { openai_status(503) } else { anthropic_status(529) }
}

/// A tool call listing the directory, `output` tokens, on `dialect`'s wire.
fn listed(dialect: &str, n: usize, output: u64) -> Served {
    let id = format!("call_{n}");
    if dialect == "openai" {
        openai_tool_call(&id, "list_dir", r#"{"path": "."}"#, 0, output)
    } else {
        anthropic_tool_call(&id, "list_dir", r#"{"path": "."}"#, 0, output)
    }
}

/// A cheap primary ($1/M) refuses every attempt (nothing billed) and its call fails over to an
/// expensive fallback ($1000/M), whose tool loop completes three checkpointed turns of 100
/// tokens ($0.30) before the process is SIGKILLed, under a $0.50 ceiling; the resume fails
/// over again and goes on. The checkpoint held usage alone, and the resume priced it at the
/// requested model: it counted $0.0003 spent, handed the ceiling out again and the provider
/// billed $0.80; the call was charged $0.50 of it, all under the fallback. A checkpoint now
/// carries what its turns cost, each attempt at the model that served it. From each wire
/// format to the other.
#[test]
fn checkpointed_turns_of_a_failed_over_call_are_carried_at_the_price_that_served_them() {
    for (primary, fallback) in [("anthropic", "openai"), ("openai", "anthropic")] {
        let serve = |turns: std::ops::Range<usize>, tail: Option<Served>| {
            let mut script: Vec<Served> = (0..4).map(|_| refused(primary)).collect();
            script.extend(turns.map(|n| listed(fallback, n, 100)));
            script.extend(tail);
            WireServer::start(script)
        };
        let wire = serve(0..3, Some(Served { reply: Reply::Stall, bill: (0, 0) }));
        let second = serve(3..20, None);
        let price_of = |dialect: &str, w: &WireServer, price: f64| match dialect {
            "openai" => openai(w.url(), 0.0, price).replace("[routing]\ndefault = \"o:small\"\n", ""),
            _ => anthropic(&w.root_url(), 0.0, price),
        };
        let (requested, served) =
            if primary == "openai" { ("o:small", "a:big") } else { ("a:big", "o:small") };
        let providers = format!(
            "{}{}[routing]\ndefault = \"{requested}\"\n\n[fallbacks]\n\"{requested}\" = [\"{served}\"]\n",
            price_of(primary, &wire, 1.0),
            price_of(fallback, &wire, 1000.0),
        );
        let dir = project(
            &providers,
            r#"agent("list forever", #{tools: ["files"], max_output_tokens: 100, max_turns: 20, max_tool_calls: 20})"#,
        );
        run_killed(dir.path(), "failover", &["--budget", "0.5"], &wire, 8);
        let first_bill = wire.billed_usd(0.0, 1000.0);
        assert!((first_bill - 0.3).abs() < 1e-9, "{primary}: {first_bill}");
        repoint(dir.path(), &wire.root_url(), &second.root_url());
        let outcome = resume(dir.path(), "failover", &[]);
        let billed = first_bill + second.billed_usd(0.0, 1000.0);
        assert!(billed <= 0.5 + 1e-9, "{primary}: billed {billed} under a $0.50 ceiling: {outcome}");
        assert!(
            (spent(&outcome) - billed).abs() < 1e-6,
            "{primary}: charged {} for a bill of {billed}: {outcome}",
            spent(&outcome)
        );
        let by_model = &outcome["cost"]["by_model"];
        let on_fallback = crate::money_wire::usd(&by_model[served]["cost_nano_usd"]);
        assert!((on_fallback - billed).abs() < 1e-6, "{primary}: {on_fallback} under {served}: {by_model}");
    }
}

/// A priced primary ($1000/M) drops four attempts of 100 tokens ($0.40) and the call fails
/// over to a declared fallback with no price, under a $0.50 ceiling and without
/// `allow_unpriced`; a second call follows. The failover went to the unpriced model unguarded
/// (no grant, no cut: its spend cannot be bounded), and its unpriced usage made the call's
/// cost unknown, so the run's books settled it at $0: the $0.40 the primary billed vanished and
/// the second call was granted the whole ceiling again. The provider billed $0.85 under
/// $0.50. A fallback that cannot be priced is not failed over to under a finite ceiling unless
/// unpriced models are allowed (the primary's error ends the call), and a call's priced
/// attempts are spent whatever else served it. From each wire format to the other.
#[test]
fn a_failover_to_an_unpriced_model_never_crosses_the_ceiling_nor_hides_the_priced_spend() {
    for (primary, fallback) in [("anthropic", "openai"), ("openai", "anthropic")] {
        let mut script: Vec<Served> = (0..4).map(|_| dropped(primary, 100)).collect();
        // The fallback's answer: its price is unknown to cairn (billed nothing here, so the
        // bill below is the primary's alone).
        script.push(Served { bill: (0, 0), ..answered(fallback, 100) });
        script.push(answered(primary, 450));
        let wire = WireServer::start(script);
        let unpriced = |dialect: &str| match dialect {
            "openai" => openai(wire.url(), 0.0, 1000.0)
                .replace("prices = { small = [0, 1000] }\n", "")
                .replace("[routing]\ndefault = \"o:small\"\n", ""),
            _ => anthropic(&wire.root_url(), 0.0, 1000.0).replace("prices = { big = [0, 1000] }\n", ""),
        };
        let priced = |dialect: &str| match dialect {
            "openai" => openai(wire.url(), 0.0, 1000.0).replace("[routing]\ndefault = \"o:small\"\n", ""),
            _ => anthropic(&wire.root_url(), 0.0, 1000.0),
        };
        let (requested, served) =
            if primary == "openai" { ("o:small", "a:big") } else { ("a:big", "o:small") };
        let providers = format!(
            "{}{}[routing]\ndefault = \"{requested}\"\n\n[fallbacks]\n\"{requested}\" = [\"{served}\"]\n",
            priced(primary),
            unpriced(fallback),
        );
        assert!(
            !providers.contains(&format!("{} = [0, 1000]", served.split(':').nth(1).unwrap())),
            "{providers}"
        );
        let dir = project(
            &providers,
            "try { agent(\"first\", #{max_output_tokens: 450}) } catch { }\nagent(\"second\", #{max_output_tokens: 450})",
        );
        let outcome = crate::money_wire::run(dir.path(), &["--budget", "0.5"]);
        let billed = wire.billed_usd(0.0, 1000.0);
        // One streamed delta of slack (docs/money.md): 25 tokens at $1000/M.
        assert!(
            billed <= 0.5 + 0.025 + 1e-9,
            "{primary}: the primary billed {billed} under $0.50: {outcome}"
        );
        assert!(
            spent(&outcome) + 1e-9 >= billed,
            "{primary}: charged {} for a priced bill of {billed}: {outcome}",
            spent(&outcome)
        );
    }
}

/// A tool loop is SIGKILLed after three checkpointed turns of 100 tokens ($0.30 at $1000/M)
/// under a $1.00 ceiling, then resumed with `--budget 0.2`. The override was judged against
/// the spend the journal had settled alone ($0: the call never settled), so it was accepted:
/// the resumed run counted the checkpointed turns spent ($0.30) under a $0.20 ceiling and
/// ended with cairn's own books past the ceiling it had just agreed to. The checkpointed
/// turns of calls a killed segment left are now spent for the override too: it is refused
/// (`config`, exit 2) with nothing sent, and `--budget 0.3` is accepted. In both wire
/// formats.
#[test]
fn a_lowered_budget_is_judged_against_the_checkpointed_turns_of_a_killed_call() {
    for dialect in ["openai", "anthropic"] {
        let mut script: Vec<Served> = (0..3).map(|n| listed(dialect, n, 100)).collect();
        script.push(Served { reply: Reply::Stall, bill: (0, 0) });
        let wire = WireServer::start(script);
        let second = WireServer::start((3..6).map(|n| listed(dialect, n, 100)).collect());
        let (providers, url) = provider(dialect, &wire, 0.0, 1000.0);
        let dir = project(
            &providers,
            r#"agent("list forever", #{tools: ["files"], max_output_tokens: 100, max_turns: 20, max_tool_calls: 20})"#,
        );
        run_killed(dir.path(), "lowered", &["--budget", "1.0"], &wire, 4);
        repoint(dir.path(), &url, &provider(dialect, &second, 0.0, 1000.0).1);
        let out = cairn_in(dir.path())
            .env("CAIRN_WIRE_KEY", "k")
            .env("CAIRN_LEASE_TTL_MS", "30000")
            .args(["resume", "lowered", "--json", "-q", "--budget", "0.2"])
            .output()
            .unwrap();
        let said =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if out.status.code() != Some(2) {
            let outcome: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            panic!(
                "{dialect}: a $0.20 ceiling after $0.30 was spent was accepted: spent {}: {said}",
                spent(&outcome)
            );
        }
        assert!(said.contains("below"), "{dialect}: {said}");
        assert_eq!(second.requests().len(), 0, "{dialect}: nothing was sent");
        let outcome = resume(dir.path(), "lowered", &["--budget", "0.3"]);
        let billed = wire.billed_usd(0.0, 1000.0) + second.billed_usd(0.0, 1000.0);
        assert!(billed <= 0.3 + 1e-9, "{dialect}: billed {billed} under $0.30: {outcome}");
        assert!((spent(&outcome) - billed).abs() < 1e-6, "{dialect}: {outcome}");
    }
}

/// A provider answers 200 and sends its headers, then nothing (a hung upstream behind a proxy
/// that already flushed them). The idle timeout (300 ms) ends the attempt, which is charged
/// only what was observed: its prompt, estimated (the provider began it), and no output; the
/// retry's answer is charged exactly its bill. Nothing waits for the hung connection. In both
/// wire formats.
#[test]
fn a_provider_that_hangs_after_its_headers_is_cut_by_the_idle_timeout_and_charged_what_was_observed() {
    for dialect in ["openai", "anthropic"] {
        let hung = Served { reply: Reply::HeadersThenStall, bill: (0, 0) };
        let answer =
            if dialect == "openai" { openai_text("fine", 10, 100) } else { anthropic_text("fine", 10, 100) };
        let wire = WireServer::start(vec![hung, answer]);
        let (providers, _) = provider(dialect, &wire, 1000.0, 1000.0);
        let providers = providers.replace("base_url = ", "idle_timeout_ms = 300\nbase_url = ");
        let dir = project(&providers, r#"agent("say fine", #{max_output_tokens: 200})"#);
        let began = std::time::Instant::now();
        let outcome = crate::money_wire::run(dir.path(), &["--budget", "1.0"]);
        assert!(began.elapsed() < Duration::from_secs(30), "{dialect}: waited {:?}", began.elapsed());
        assert_eq!(outcome["status"], "ok", "{dialect}: {outcome}");
        assert_eq!(wire.requests().len(), 2, "{dialect}: one hung attempt, one retry");
        let usage = &outcome["cost"]["total"]["usage"];
        // The hung attempt streamed no output: all of it is the retry's.
        assert_eq!(usage["output_tokens"], 100, "{dialect}: {outcome}");
        let input = usage["input_tokens"].as_u64().unwrap();
        assert!(input > 10, "{dialect}: the hung attempt's prompt is charged: {outcome}");
        assert_eq!(usage["approximate"], true, "{dialect}: {outcome}");
        let expected = (input + 100) as f64 * 1000.0 / 1e6;
        assert!((spent(&outcome) - expected).abs() < 1e-9, "{dialect}: {expected}: {outcome}");
        assert!(spent(&outcome) >= wire.billed_usd(1000.0, 1000.0), "{dialect}: {outcome}");
    }
}

/// A provider that accepts the request, runs it whole and bills it (its prompt, "say fine", two
/// tokens, and all 200 output tokens of its cap: $0.202 at $1000/M), but sends its headers only after the client's
/// idle timeout (300 ms) fired. The client never saw a response status: it cannot tell this
/// from a refusal by the server's word, only by its own (the request went out and nothing came
/// back). It was taken for a refusal and charged nothing, and the retry was granted the whole
/// ceiling again ($0.30: a 200-token cap), so a provider that bills such attempts could take a
/// run past its ceiling. An unanswered attempt is now charged its whole grant (the input
/// estimate plus the 200-token cap), marked approximate, the moment it ends: the retry is
/// granted only what is left, the run stays within its ceiling, the charge is at least the
/// bill, and the cost report counts it in `unanswered_attempts` (not `refused_attempts`). In
/// both wire formats.
#[test]
fn an_attempt_whose_headers_come_after_the_idle_timeout_is_charged_its_grant() {
    for dialect in ["openai", "anthropic"] {
        let late = Served { reply: Reply::Stall, bill: (2, 200) };
        let answer =
            if dialect == "openai" { openai_text("fine", 10, 5) } else { anthropic_text("fine", 10, 5) };
        let wire = WireServer::start(vec![late, answer]);
        let (providers, _) = provider(dialect, &wire, 1000.0, 1000.0);
        let providers = providers.replace("base_url = ", "idle_timeout_ms = 300\nbase_url = ");
        let dir = project(&providers, r#"agent("say fine", #{max_output_tokens: 200})"#);
        let outcome = crate::money_wire::run(dir.path(), &["--budget", "0.30"]);
        assert_eq!(outcome["status"], "ok", "{dialect}: {outcome}");
        let requests = wire.requests();
        assert_eq!(requests.len(), 2, "{dialect}: one unanswered attempt, one retry");
        let cap = |r: &Value| r["max_tokens"].as_u64().or(r["max_completion_tokens"].as_u64()).unwrap_or(0);
        assert_eq!(cap(&requests[0]), 200, "{dialect}");
        // The retry is granted what the unanswered attempt's grant left: under $0.10 of output.
        assert!(cap(&requests[1]) < 100, "{dialect}: the retry was granted {}", cap(&requests[1]));
        let billed = wire.billed_usd(1000.0, 1000.0);
        assert!(billed > 0.2, "{dialect}: {billed}");
        assert!(
            spent(&outcome) + 1e-9 >= billed,
            "{dialect}: charged {} for {billed}: {outcome}",
            spent(&outcome)
        );
        assert!(spent(&outcome) <= 0.30 + 1e-9, "{dialect}: {outcome}");
        assert!(billed <= 0.30, "{dialect}: {billed}");
        let usage = &outcome["cost"]["total"]["usage"];
        // The unanswered attempt's whole cap and the answer's 5 tokens.
        assert_eq!(usage["output_tokens"], 205, "{dialect}: {outcome}");
        assert_eq!(usage["approximate"], true, "{dialect}: {outcome}");
        assert_eq!(outcome["cost"]["unanswered_attempts"], 1, "{dialect}: {outcome}");
        assert_eq!(outcome["cost"]["refused_attempts"].as_u64().unwrap_or(0), 0, "{dialect}: {outcome}");
    }
}
