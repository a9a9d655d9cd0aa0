//! #23: the fault simulator through the real `cairn` binary. A seed draws the same workflow as
//! [`crate::money_sim`] (sequential calls, fan-outs, tool loops, schema repairs, phases, on the
//! Anthropic, OpenAI Chat and OpenAI Responses wires, sometimes with a failover), writes it as a
//! script (Rhai or Lua, some calls inside a `step`) or as a `cairn orchestrate` goal whose
//! orchestrator spawns children (a fifth of the seeds), serves every request from the simulator
//! over HTTP, SIGKILLs the `cairn` process at drawn points (once a number of requests has
//! arrived, or after a drawn delay), releases the dead driver's lease (its death would free it
//! after the ttl), then `cairn resume`s it (killed again, for some seeds)
//! until the run settles, and holds the SQLite journal and the `--json` outcome against the
//! simulator's bill with the same checks as the in-process property ([`money_sim::check`]):
//! spent ≤ ceiling + the documented slack, cairn's charge = the bill per call, no completed call
//! paid twice, every run settles with no call left `running`, the splits sum to the total.
//! The binary's printed cost report must also equal the one its journal folds to.
//!
//! CI runs [`DEFAULT_SEEDS`] drawn seeds and every seed in
//! `tests/money-regressions/binary-seeds.txt`; `CAIRN_SIM_BINARY_SEEDS=N` runs N drawn seeds,
//! `SIM_SEED=<seed>` or `SIM_SEED=<from>..<to>` with `money_sim_binary::one_seed` replays some.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cairn::journal::Entry;
use cairn::testing::sim::{Directive, Simulator};
use cairn::{CostReport, JournalStore, LeasableStore, Money, RunId, RunStatus, SqliteOptions, SqliteStore};
use proptest::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::money_sim::{
    CallSpec, MODELS, Scenario, Settled, StepSpec, check, prompt, regression_seeds_in, schema, simulator,
};

/// Drawn seeds a CI run drives through the binary (each is one to three processes).
const DEFAULT_SEEDS: u32 = 12;

/// The script dialect a seed is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Rhai,
    Lua,
    /// `cairn orchestrate`: the orchestrator (journal label `orchestrator`) spawns children
    /// `c0..` of profile `worker` in one `parallel_agents` call, awaits them, finishes.
    Orchestrator,
}

/// When a segment's process is killed.
#[derive(Debug, Clone, Copy)]
enum Kill {
    /// Once this many requests of the segment have reached the simulator.
    Requests(usize),
    /// This long after the process started.
    After(Duration),
}

/// What a binary seed draws beside its [`Scenario`] (from a stream of its own, so the
/// scenario is the in-process one for the same seed).
#[derive(Debug)]
struct BinaryScenario {
    scenario: Scenario,
    dialect: Dialect,
    /// The tags of the sequential calls that run inside a `step`.
    stepped: BTreeSet<String>,
    kills: Vec<Kill>,
}

impl BinaryScenario {
    fn draw(seed: u64) -> BinaryScenario {
        let mut scenario = Scenario::draw(seed, false);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xB1_0A_27);
        let mut below = |n: u32| rng.next_u32() % n;
        let dialect = match below(5) {
            0 | 1 => Dialect::Rhai,
            2 | 3 => Dialect::Lua,
            _ => Dialect::Orchestrator,
        };
        if dialect == Dialect::Orchestrator {
            // The drawn calls' first is the orchestrator's model and answer length, the
            // first fan-out's (or two) the children's.
            let calls = scenario.calls().into_iter().cloned().collect::<Vec<_>>();
            let first = &calls[0];
            let orchestrator = CallSpec {
                tag: "orchestrator".into(),
                tools: 0,
                json: false,
                repair: false,
                phase: None,
                ..first.clone()
            };
            let model = calls.get(1).map_or(first.model, |c| c.model);
            let children = (0..2 + below(4))
                .map(|i| CallSpec {
                    tag: format!("c{i}"),
                    model,
                    tools: 0,
                    json: false,
                    repair: false,
                    phase: None,
                    ..first.clone()
                })
                .collect();
            scenario.steps = vec![StepSpec::Call(orchestrator), StepSpec::FanOut(children)];
            // The orchestrator's own turns draw on a fifth of the ceiling.
            scenario.ceiling *= 5.0;
        }
        let stepped = scenario
            .steps
            .iter()
            .filter_map(|s| match s {
                StepSpec::Call(c) => Some(c.tag.clone()),
                StepSpec::FanOut(_) => None,
            })
            .filter(|_| below(3) == 0)
            .collect();
        let kills = match below(4) {
            0 => Vec::new(),
            n => (0..n.min(2))
                .map(|_| {
                    if below(3) == 0 {
                        Kill::After(Duration::from_millis(30 + u64::from(below(300))))
                    } else {
                        Kill::Requests(1 + below(4) as usize)
                    }
                })
                .collect(),
        };
        BinaryScenario { scenario, dialect, stepped, kills }
    }

    fn script_name(&self) -> &'static str {
        match self.dialect {
            Dialect::Rhai => "s.rhai",
            Dialect::Lua => "s.lua",
            Dialect::Orchestrator => "goal.txt",
        }
    }

    fn script(&self) -> String {
        match self.dialect {
            Dialect::Rhai => self.rhai(),
            Dialect::Lua => self.lua(),
            Dialect::Orchestrator => self.goal(),
        }
    }

    /// The orchestrator and its children (an orchestration's scenario).
    fn orchestration(&self) -> Option<(&CallSpec, &[CallSpec])> {
        match self.scenario.steps.as_slice() {
            [StepSpec::Call(orchestrator), StepSpec::FanOut(children)]
                if self.dialect == Dialect::Orchestrator =>
            {
                Some((orchestrator, children))
            }
            _ => None,
        }
    }

    /// The goal of an orchestration: its directive names the children.
    fn goal(&self) -> String {
        let Some((orchestrator, children)) = self.orchestration() else { return String::new() };
        let n = u32::try_from(children.len()).unwrap_or(0);
        let directive = Directive::orchestration("orchestrator", n, "worker", orchestrator.out);
        format!("Split the work into {n} tasks. {}", directive.render())
    }

    fn rhai(&self) -> String {
        let call = |c: &CallSpec| {
            let agent = format!("agent({}, {})", quoted(&prompt(c)), rhai_value(&options(c)));
            match &c.phase {
                Some(phase) => format!("phase({}, || {agent})", quoted(phase)),
                None => agent,
            }
        };
        let mut out = String::from("let r = [];\n");
        for step in &self.scenario.steps {
            let line = match step {
                StepSpec::Call(c) if self.stepped.contains(&c.tag) => {
                    format!("step({}, || {})", quoted(&format!("s-{}", c.tag)), call(c))
                }
                StepSpec::Call(c) => call(c),
                StepSpec::FanOut(cs) => {
                    let branches: Vec<String> = cs.iter().map(|c| format!("|| {}", call(c))).collect();
                    format!("parallel([{}], #{{on_error: \"null\"}})", branches.join(", "))
                }
            };
            out.push_str(&format!("r.push({line});\n"));
        }
        out.push_str("r\n");
        out
    }

    fn lua(&self) -> String {
        let call = |c: &CallSpec| {
            let agent = format!("agent({}, {})", quoted(&prompt(c)), lua_value(&options(c)));
            match &c.phase {
                Some(phase) => format!("phase({}, function() return {agent} end)", quoted(phase)),
                None => agent,
            }
        };
        let mut out = String::from("local r = {}\n");
        for step in &self.scenario.steps {
            let line = match step {
                StepSpec::Call(c) if self.stepped.contains(&c.tag) => {
                    format!("step({}, function() return {} end)", quoted(&format!("s-{}", c.tag)), call(c))
                }
                StepSpec::Call(c) => call(c),
                StepSpec::FanOut(cs) => {
                    let branches: Vec<String> =
                        cs.iter().map(|c| format!("function() return {} end", call(c))).collect();
                    format!("parallel({{{}}}, {{on_error = \"null\"}})", branches.join(", "))
                }
            };
            out.push_str(&format!("r[#r + 1] = {line}\n"));
        }
        out.push_str("return r\n");
        out
    }
}

/// A string literal both dialects read (every drawn string is plain ASCII).
fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

/// A call's options as the script passes them (the in-process harness's `AgentOptions`).
fn options(call: &CallSpec) -> Value {
    let mut options = json!({
        "label": call.tag,
        "model": MODELS[call.model].0,
        "max_output_tokens": call.max_output,
        "on_error": "null",
    });
    if call.json {
        options["schema"] = schema();
    }
    if call.tools > 0 {
        options["tools"] = json!(["files"]);
    }
    options
}

fn rhai_value(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let fields: Vec<String> = map.iter().map(|(k, v)| format!("{k}: {}", rhai_value(v))).collect();
            format!("#{{{}}}", fields.join(", "))
        }
        Value::Array(items) => format!("[{}]", items.iter().map(rhai_value).collect::<Vec<_>>().join(", ")),
        other => other.to_string(),
    }
}

fn lua_value(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let fields: Vec<String> = map.iter().map(|(k, v)| format!("{k} = {}", lua_value(v))).collect();
            format!("{{{}}}", fields.join(", "))
        }
        Value::Array(items) => format!("{{{}}}", items.iter().map(lua_value).collect::<Vec<_>>().join(", ")),
        other => other.to_string(),
    }
}

/// `cairn.toml` for one segment: the three providers at the simulator, each request counted
/// in `segment`; retries and their bounds as the in-process engine has them; the failover.
fn config(sim: &Simulator, b: &BinaryScenario, segment: u32) -> String {
    let scenario = &b.scenario;
    let base = format!("{}/segment/{segment}", sim.base_url());
    let mut out = String::new();
    for (name, kind, url) in [
        ("anth", "anthropic", base.clone()),
        ("chat", "openai", format!("{base}/v1")),
        ("resp", "openai-responses", format!("{base}/v1")),
    ] {
        let (_, wire, input, output) = MODELS.iter().find(|m| m.0.starts_with(&format!("{name}:"))).unwrap();
        // An orchestrator's turns carry no output cap of their own: the model's is 160 tokens
        // (a `parallel_agents` call of five children is about 120).
        let price = match b.orchestration() {
            Some(_) => format!("{{ input = {input:.1}, output = {output:.1}, max_output = 160 }}"),
            None => format!("[{input:.1}, {output:.1}]"),
        };
        out.push_str(&format!(
            "[providers.{name}]\nkind = \"{kind}\"\napi_key_env = \"CAIRN_SIM_KEY\"\nbase_url = \"{url}\"\nidle_timeout_ms = 800\nprices = {{ \"{wire}\" = {price} }}\n\n"
        ));
    }
    out.push_str(&format!("[routing]\ndefault = \"{}\"\n\n", MODELS[0].0));
    out.push_str(
        "[retry]\nmax_attempts = 4\ninitial_backoff_ms = 1\nmax_backoff_ms = 5\nmax_retry_after_ms = 20\n\n",
    );
    out.push_str("[toolsets.files]\nkind = \"fs-read\"\nroot = \"notes\"\n\n");
    if let Some((_, children)) = b.orchestration()
        && let Some(child) = children.first()
    {
        out.push_str(&format!(
            "[profiles.worker]\ndescription = \"does one task\"\nmodel = \"{}\"\nmax_output_tokens = {}\n\n",
            MODELS[child.model].0, child.max_output
        ));
    }
    if scenario.failover {
        out.push_str(&format!("[fallbacks]\n\"{}\" = [\"{}\"]\n", MODELS[0].0, MODELS[1].0));
    }
    out
}

fn run_id(seed: u64) -> RunId {
    RunId::parse(&format!("sim-{seed}")).unwrap()
}

/// The run's journal as the binary left it in `.cairn/cairn.db` (empty before it exists).
fn journal(dir: &Path, seed: u64) -> Vec<Entry> {
    let path = dir.join(".cairn/cairn.db");
    let Ok(Some(store)) = SqliteStore::open_read_only(&path, SqliteOptions::new()) else {
        return Vec::new();
    };
    match store.load(&run_id(seed)) {
        Ok(raw) => cairn::journal::decode_all(&raw).unwrap(),
        Err(_) => Vec::new(),
    }
}

/// Whether the binary created the run (a process killed early may have left none).
fn run_exists(dir: &Path, seed: u64) -> bool {
    let path = dir.join(".cairn/cairn.db");
    // (A process killed while it created the database may have left it empty.)
    SqliteStore::open_read_only(&path, SqliteOptions::new())
        .ok()
        .flatten()
        .is_some_and(|store| store.get_meta(&run_id(seed)).ok().flatten().is_some())
}

/// The lease a killed process held goes with it (the next driver would wait out its ttl).
fn release_the_lease(dir: &Path, seed: u64) {
    if !run_exists(dir, seed) {
        return;
    }
    let store = SqliteStore::open(&dir.join(".cairn/cairn.db"), SqliteOptions::new()).unwrap();
    if let Some(lease) = store.holder(&run_id(seed)).unwrap() {
        store.release(&lease).unwrap();
    }
}

/// What driving a seed to settlement left: the last segment's `--json` outcome, the
/// journal's length after each segment, the killed segments.
struct Driven {
    outcome: Value,
    ends: Vec<usize>,
    killed: BTreeSet<u32>,
}

/// Runs the script with `cairn run`, then `cairn resume` after every kill, until a process
/// exits by itself.
fn drive(b: &BinaryScenario, sim: &Simulator, dir: &Path) -> Result<Driven, String> {
    let seed = b.scenario.seed;
    let id = format!("sim-{seed}");
    let budget = b.scenario.ceiling.to_string();
    let mut ends = Vec::new();
    let mut killed = BTreeSet::new();
    for segment in 0u32..8 {
        std::fs::write(dir.join("cairn.toml"), config(sim, b, segment)).unwrap();
        // A process killed before it wrote anything left no run: start it again.
        let fresh = !run_exists(dir, seed);
        let mut command = Command::new(env!("CARGO_BIN_EXE_cairn"));
        command
            .current_dir(dir)
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env("CAIRN_SIM_KEY", "sim-key")
            // The default lease ttl (30 s): a short one can expire under a loaded machine's
            // stalls, which cancels the live driver; a killed driver's lease is released below.
            .env_remove("CAIRN_LEASE_TTL_MS");
        if fresh && let Some((orchestrator, _)) = b.orchestration() {
            let model = MODELS[orchestrator.model].0;
            command.args(["orchestrate", &b.goal(), "--profiles", "worker", "--model", model]);
            command.args(["-q", "--json", "--budget", &budget, "--run-id", &id]);
        } else if fresh {
            command.args(["run", b.script_name(), "-q", "--json", "--budget", &budget, "--run-id", &id]);
        } else {
            command.args(["resume", &id, "-q", "--json"]);
        }
        let out_path = dir.join(format!("out-{segment}.json"));
        let err_path = dir.join(format!("err-{segment}.txt"));
        command
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(std::fs::File::create(&err_path).unwrap());
        let before = sim.attempts().len();
        let began = Instant::now();
        let mut child = command.spawn().map_err(|e| format!("cannot start cairn: {e}"))?;
        let kill = b.kills.get(segment as usize).copied();
        let exited = loop {
            if child.try_wait().map_err(|e| e.to_string())?.is_some() {
                break true;
            }
            let due = match kill {
                Some(Kill::Requests(n)) => sim.attempts().len() >= before + n,
                Some(Kill::After(delay)) => began.elapsed() >= delay,
                None => false,
            };
            if due {
                // SIGKILL: nothing of the process runs after it.
                child.kill().map_err(|e| e.to_string())?;
                child.wait().map_err(|e| e.to_string())?;
                break false;
            }
            if began.elapsed() > Duration::from_secs(90) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("segment {segment} ran past 90 s"));
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        ends.push(journal(dir, seed).len());
        if exited {
            let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
            let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
            let outcome: Value = serde_json::from_str(&stdout)
                .map_err(|_| format!("segment {segment}: no JSON outcome: {stdout}{stderr}"))?;
            return Ok(Driven { outcome, ends, killed });
        }
        killed.insert(segment);
        release_the_lease(dir, seed);
    }
    Err("the run did not settle in eight segments".into())
}

/// The printed cost report against the journal's: the total and every split, line by line.
fn printed_matches_the_journal(outcome: &Value, report: &CostReport) -> Result<(), String> {
    let money = |v: &Value| v.as_i64().map(Money::from_nano_usd);
    let total = money(&outcome["cost"]["total"]["cost_nano_usd"]);
    if total != Some(report.total.cost) {
        return Err(format!(
            "the binary printed a total of {total:?}, its journal folds to {}",
            report.total.cost
        ));
    }
    for (name, split) in [("by_model", &report.by_model), ("by_phase", &report.by_phase)] {
        for (key, line) in split {
            let printed = money(&outcome["cost"][name][key]["cost_nano_usd"]);
            if printed != Some(line.cost) {
                return Err(format!(
                    "the binary printed {name}[{key}] = {printed:?}, its journal {}",
                    line.cost
                ));
            }
        }
    }
    Ok(())
}

/// Runs one seed through the binary; `Err` says what broke, with the scenario and script.
fn run_seed(seed: u64) -> Result<(), String> {
    let b = BinaryScenario::draw(seed);
    let sim = simulator(&b.scenario);
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("notes")).unwrap();
    std::fs::write(dir.path().join("notes/notes.txt"), "simulated notes").unwrap();
    std::fs::write(dir.path().join(b.script_name()), b.script()).unwrap();
    let explain =
        |broken: String| format!("seed {seed} (binary): {broken}\nscenario: {b:?}\nscript:\n{}", b.script());
    let driven = drive(&b, &sim, dir.path()).map_err(explain)?;
    let entries = journal(dir.path(), seed);
    let status: RunStatus = serde_json::from_value(driven.outcome["status"].clone())
        .map_err(|e| explain(format!("status: {e}: {}", driven.outcome)))?;
    let error = driven.outcome.get("error").filter(|e| !e.is_null()).map(ToString::to_string);
    // What the orchestrator's own turn meets ends its orchestration (a child's is caught): a
    // refusal, or a tool call cut at its output cap (`turn_limit`).
    let code = driven.outcome["error"]["code"].as_str().unwrap_or_default();
    let error_let_through = b.orchestration().is_some() && ["refused", "turn_limit"].contains(&code);
    let settled = Settled { status, error, cost: CostReport::fold(&entries), error_let_through };
    if std::env::var_os("SIM_VERBOSE").is_some() {
        eprintln!(
            "seed {seed} (binary, {:?}, kills {:?}): {status:?} after {} segments ({} killed), spent {} of {}, {} attempts billed {}; {:?}",
            b.dialect,
            b.kills,
            driven.ends.len(),
            driven.killed.len(),
            settled.cost.total.cost,
            b.scenario.ceiling,
            sim.attempts().len(),
            sim.bill().total,
            settled.error
        );
    }
    printed_matches_the_journal(&driven.outcome, &settled.cost).map_err(explain)?;
    check(&b.scenario, &sim, &entries, &settled, &driven.ends, &driven.killed).map_err(explain)
}

fn drawn_seeds() -> u32 {
    std::env::var("CAIRN_SIM_BINARY_SEEDS").ok().and_then(|n| n.parse().ok()).unwrap_or(DEFAULT_SEEDS)
}

/// Every binary seed that ever failed, replayed on every run.
#[test]
fn every_binary_seed_that_ever_failed_holds_now() {
    let seeds = regression_seeds_in(include_str!("../money-regressions/binary-seeds.txt"));
    let failures: Vec<String> = seeds.into_iter().filter_map(|seed| run_seed(seed).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Reproduces seeds: `SIM_SEED=<seed>` or `SIM_SEED=<from>..<to>` (without it, seed 1).
#[test]
fn one_seed() {
    let spec = std::env::var("SIM_SEED").unwrap_or_else(|_| "1".into());
    let seeds: Vec<u64> = match spec.split_once("..") {
        Some((from, to)) => (from.parse().unwrap()..to.parse().unwrap()).collect(),
        None => vec![spec.parse().unwrap()],
    };
    let failures: Vec<String> = seeds.into_iter().filter_map(|seed| run_seed(seed).err()).collect();
    assert!(failures.is_empty(), "{} failed:\n{}", failures.len(), failures.join("\n\n"));
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: drawn_seeds(),
        failure_persistence: None,
        max_shrink_iters: 0,
        ..ProptestConfig::default()
    })]

    /// Drawn seeds through the binary, killed with SIGKILL and resumed.
    #[test]
    fn money_holds_through_the_binary_under_faults_and_kills(seed in any::<u64>()) {
        if let Err(broken) = run_seed(seed) {
            prop_assert!(false, "{broken}\nkeep the seed in tests/money-regressions/binary-seeds.txt");
        }
    }
}
