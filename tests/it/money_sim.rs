//! #23: the fault simulator finds the next money break. A seed draws a workflow (sequential
//! calls, fan-outs, tool loops, schema repairs, on three wire dialects, with and without a
//! failover), a ceiling and kill points; `cairn::testing::sim` serves every request over real
//! HTTP with a fault drawn from the same seed and bills every attempt as its provider would.
//! After every seed:
//! - spent ≤ ceiling + [`SLACK`] (cairn's books), and the provider's bill ≤ that plus what the
//!   kills left unjournaled;
//! - cairn's charge for every call = the simulator's bill for it (exactly when every attempt's
//!   usage was on the wire; between the bill and the bill plus the estimate's tolerance when not);
//! - no completed call is paid twice: nothing is asked again of a call once its `ok` is durable;
//! - every run settles, and no call is left `running`;
//! - the cost report's splits (by model, phase, agent type, role) sum to the total, and by model
//!   they match the bill wherever the bill is exact.
//!
//! Reproduce a seed: `SIM_SEED=<seed> cargo test --test integration money_sim::one_seed`.
//! Every seed that ever failed is in `tests/money-regressions/seeds.txt` and replayed first.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use cairn::journal::{Entry, Kind, Status};
use cairn::testing::sim::{Attempt, Bill, Directive, Fault, FaultMix, RetryAfter, SimConfig, Simulator};
use cairn::{
    AgentOptions, Engine, JournalStore, LeasableStore, MemoryStore, Money, OnError, ParallelOptions,
    ResumeOptions, RunId, RunOptions, RunStatus, Workflow, branch,
};
use cairn::{Price, PriceTable};
use proptest::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The one in-flight slack cairn's books may show over the ceiling.
pub(crate) const SLACK: Money = Money::ZERO;

/// The three models: (model ref, wire model name, $/M input, $/M output).
pub(crate) const MODELS: [(&str, &str, f64, f64); 3] = [
    ("anth:claude-sim", "claude-sim", 300.0, 1500.0),
    ("chat:gpt-sim", "gpt-sim", 200.0, 800.0),
    ("resp:o-sim", "o-sim", 100.0, 400.0),
];

fn usd(x: f64) -> Money {
    Money::from_usd(x).unwrap()
}

pub(crate) fn price(i: usize) -> Price {
    Price::flat(usd(MODELS[i].2), usd(MODELS[i].3))
}

/// One agent call of a drawn workflow.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CallSpec {
    pub(crate) tag: String,
    pub(crate) model: usize,
    pub(crate) tools: u32,
    pub(crate) json: bool,
    pub(crate) repair: bool,
    pub(crate) out: u32,
    pub(crate) max_output: u32,
    pub(crate) phase: Option<String>,
}

/// A step of a drawn workflow.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum StepSpec {
    Call(CallSpec),
    FanOut(Vec<CallSpec>),
}

/// Everything a seed draws.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Scenario {
    pub(crate) seed: u64,
    pub(crate) steps: Vec<StepSpec>,
    pub(crate) ceiling: f64,
    /// Kill the driver once this many attempts of the segment have arrived (one per kill).
    pub(crate) kills: Vec<usize>,
    pub(crate) failover: bool,
    pub(crate) max_faulty_attempts: u32,
    /// With a failover: the calls on the primary whose first attempts the primary refuses
    /// (529) until their retries are spent, so they fail over at once and the fallback, at
    /// another price, serves their turns (checkpointed, then perhaps killed and carried).
    #[serde(default)]
    pub(crate) outage: Vec<String>,
}

impl Scenario {
    pub(crate) fn draw(seed: u64, allow_kills: bool) -> Scenario {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut below = |n: u32| rng.next_u32() % n;
        let mut tags = 0;
        let mut call = |below: &mut dyn FnMut(u32) -> u32| {
            tags += 1;
            let json = below(3) == 0;
            CallSpec {
                tag: format!("c{tags}"),
                model: below(3) as usize,
                tools: if below(3) == 0 { 1 + below(3) } else { 0 },
                json,
                repair: json && below(2) == 0,
                out: 1 + below(60),
                max_output: 32 + below(224),
                phase: (below(3) == 0).then(|| format!("p{}", below(2))),
            }
        };
        let steps: Vec<StepSpec> = (0..1 + below(4))
            .map(|_| {
                if below(3) == 0 {
                    StepSpec::FanOut((0..2 + below(4)).map(|_| call(&mut below)).collect())
                } else {
                    StepSpec::Call(call(&mut below))
                }
            })
            .collect();
        let ceiling = [0.1, 0.3, 0.6, 1.0, 2.0, 20.0][below(6) as usize];
        let kills = if allow_kills && below(3) == 0 {
            (0..1 + below(2)).map(|_| 1 + below(12) as usize).collect()
        } else {
            Vec::new()
        };
        let failover = below(4) == 0;
        let max_faulty_attempts = if below(4) == 0 { 6 } else { 3 };
        // Drawn from a stream of its own, so every earlier seed keeps the scenario it had.
        let mut outage_rng = ChaCha8Rng::seed_from_u64(seed ^ 0x000A_7A6E);
        let outage = match failover {
            true => steps
                .iter()
                .flat_map(|s: &StepSpec| match s {
                    StepSpec::Call(c) => vec![c],
                    StepSpec::FanOut(cs) => cs.iter().collect(),
                })
                .filter(|c| c.model == 0 && outage_rng.next_u32() % 2 == 0)
                .map(|c| c.tag.clone())
                .collect(),
            false => Vec::new(),
        };
        Scenario { seed, steps, ceiling, kills, failover, max_faulty_attempts, outage }
    }

    pub(crate) fn calls(&self) -> Vec<&CallSpec> {
        self.steps
            .iter()
            .flat_map(|s| match s {
                StepSpec::Call(c) => vec![c],
                StepSpec::FanOut(cs) => cs.iter().collect(),
            })
            .collect()
    }
}

pub(crate) fn prompt(call: &CallSpec) -> String {
    let directive = Directive {
        tools: call.tools,
        json: call.json,
        repair: call.repair,
        ..Directive::text(call.tag.clone(), call.out)
    };
    format!("Answer the question of call {}. {}", call.tag, directive.render())
}

pub(crate) fn schema() -> Value {
    json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]})
}

fn options(call: &CallSpec) -> AgentOptions {
    AgentOptions {
        label: Some(call.tag.clone()),
        model: Some(MODELS[call.model].0.to_owned()),
        schema: call.json.then(schema),
        max_output_tokens: Some(call.max_output),
        tools: if call.tools > 0 { vec!["fs-read".into()] } else { Vec::new() },
        on_error: Some(OnError::Null),
        ..AgentOptions::default()
    }
}

async fn run_call(ctx: cairn::Ctx, call: CallSpec) -> Result<Value, cairn::Error> {
    match call.phase.clone() {
        Some(phase) => {
            ctx.phase(&phase, move |ctx| async move { ctx.agent(&prompt(&call), options(&call)).await }).await
        }
        None => ctx.agent(&prompt(&call), options(&call)).await,
    }
}

/// The drawn workflow as a Rust closure: its steps come in as the run's arguments.
fn workflow() -> Workflow {
    Workflow::new("sim", |ctx, args| async move {
        let steps: Vec<StepSpec> =
            serde_json::from_value(args).map_err(|e| cairn::Error::config(e.to_string()))?;
        let mut results = Vec::new();
        for step in steps {
            match step {
                StepSpec::Call(call) => results.push(run_call(ctx.clone(), call).await?),
                StepSpec::FanOut(calls) => {
                    let branches =
                        calls.into_iter().map(|call| branch(move |ctx| run_call(ctx, call))).collect();
                    let options =
                        ParallelOptions { on_error: Some(OnError::Null), ..ParallelOptions::default() };
                    results.push(json!(ctx.parallel(branches, options).await?));
                }
            }
        }
        Ok(json!(results))
    })
}

struct Harness {
    scenario: Scenario,
    sim: Simulator,
    store: Arc<MemoryStore>,
    dir: tempfile::TempDir,
}

/// The simulator a scenario runs against: its seed's faults, the three models' prices.
pub(crate) fn simulator(scenario: &Scenario) -> Simulator {
    let mut config = SimConfig::new(scenario.seed)
        .faults(FaultMix {
            max_faulty_attempts: scenario.max_faulty_attempts,
            weights: [30, 20, 1, 8, 8, 12, 3, 5],
            ..FaultMix::default()
        })
        .idle_timeout(Duration::from_millis(800));
    for (i, model) in MODELS.iter().enumerate() {
        config = config.price(model.1, price(i));
    }
    // The primary's outage: each of the call's first attempts is refused, as many as the
    // engine's retries (3) allow, so the call fails over on its first turn.
    for tag in &scenario.outage {
        let refused = Fault::Status { status: 529, retry_after: RetryAfter::None };
        config = config.script(tag, vec![refused; 4]);
    }
    Simulator::start(config).unwrap()
}

impl Harness {
    fn new(scenario: Scenario) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "simulated notes").unwrap();
        let sim = simulator(&scenario);
        Harness { scenario, sim, store: Arc::new(MemoryStore::new()), dir }
    }

    /// A fresh engine over the same store: a new process.
    fn engine(&self, segment: u32) -> Engine {
        let view = self.sim.in_segment(segment);
        let mut prices = PriceTable::shipped();
        for (i, model) in MODELS.iter().enumerate() {
            prices.set(model.0, price(i));
        }
        let mut builder = Engine::builder(self.store.clone())
            .provider(Arc::new(view.anthropic("anth").unwrap()))
            .provider(Arc::new(view.openai_chat("chat").unwrap()))
            .provider(Arc::new(view.openai_responses("resp").unwrap()))
            .prices(prices)
            .toolset(cairn::fs_read_toolset(self.dir.path()).unwrap())
            .retries(3, Duration::from_millis(1))
            .retry_limits(Duration::from_millis(5), Duration::from_millis(20));
        if self.scenario.failover {
            builder = builder.fallbacks(
                cairn::ModelRef::parse(MODELS[0].0).unwrap(),
                vec![cairn::ModelRef::parse(MODELS[1].0).unwrap()],
            );
        }
        builder.build().unwrap()
    }

    fn entries(&self, run: &RunId) -> Vec<Entry> {
        cairn::journal::decode_all(&self.store.load(run).unwrap()).unwrap()
    }

    /// Runs the scenario to settlement, killing the driver at each kill point; returns the
    /// outcome, the journal's length at the end of each segment and the killed segments.
    fn drive(&self) -> (cairn::RunOutcome, Vec<usize>, BTreeSet<u32>) {
        let run = RunId::parse(&format!("sim-{}", self.scenario.seed)).unwrap();
        let args = serde_json::to_value(&self.scenario.steps).unwrap();
        let mut ends = Vec::new();
        let mut killed = BTreeSet::new();
        let mut segment = 0u32;
        loop {
            let engine = self.engine(segment);
            let before = self.sim.attempts().len();
            let kill_at = self.scenario.kills.get(segment as usize).map(|n| before + n);
            let runtime =
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            let outcome = runtime.block_on(async {
                let handle = if segment == 0 {
                    let options = RunOptions {
                        run_id: Some(run.clone()),
                        budget_usd: Some(self.scenario.ceiling),
                        ..RunOptions::default()
                    };
                    engine.run(&workflow(), args.clone(), options).unwrap()
                } else {
                    let options = ResumeOptions { workflow: Some(workflow()), ..ResumeOptions::default() };
                    engine.resume(&run, options).unwrap()
                };
                let result = handle.result();
                let killer = async {
                    match kill_at {
                        Some(n) => {
                            while self.sim.attempts().len() < n {
                                tokio::time::sleep(Duration::from_millis(2)).await;
                            }
                        }
                        None => std::future::pending::<()>().await,
                    }
                };
                tokio::select! {
                    outcome = result => Some(outcome.unwrap()),
                    () = killer => None,
                }
            });
            // A kill: the runtime goes with everything on it, as a process would, and the next
            // segment starts only once it is gone. Shutting it down in the background let the
            // dead segment's tasks run on for a moment: a stream the shutdown failed was charged
            // and its checkpoint rewritten after the resume had read it, so the resume's budget
            // counted the call's turns below what its settlement later carried (seed
            // 16412102846195817932: $0.3002 spent under $0.30). No killed process writes after
            // its successor started.
            runtime.shutdown_timeout(Duration::from_secs(60));
            ends.push(self.store.load(&run).unwrap().len());
            match outcome {
                Some(outcome) => return (outcome, ends, killed),
                None => {
                    killed.insert(segment);
                    // The dead driver's lease goes with its process.
                    if let Some(lease) = self.store.holder(&run).unwrap() {
                        self.store.release(&lease).unwrap();
                    }
                }
            }
            segment += 1;
        }
    }
}

/// How a seed's run settled, as its driver saw it.
pub(crate) struct Settled {
    pub(crate) status: RunStatus,
    pub(crate) error: Option<String>,
    pub(crate) cost: cairn::CostReport,
    /// The run ended `error` in a way its workflow lets through (an orchestrator the model
    /// refused: nothing catches its own refusal); it still settled.
    pub(crate) error_let_through: bool,
}

impl Settled {
    fn of(outcome: &cairn::RunOutcome) -> Settled {
        Settled {
            status: outcome.status,
            error: outcome.error.as_ref().map(ToString::to_string),
            cost: outcome.cost.clone(),
            error_let_through: false,
        }
    }
}

/// The call a journal label belongs to: an orchestrator's finalization turn (its goal, so its
/// directive, is the orchestrator's) is billed under the orchestrator's tag.
fn call_of(label: &str) -> &str {
    label.strip_suffix("-finalize").unwrap_or(label)
}

/// The checks after one seed; `Err` names every broken property. `ends` is the journal's
/// length at the end of each segment, `killed` the segments that were killed.
pub(crate) fn check(
    scenario: &Scenario,
    sim: &Simulator,
    entries: &[Entry],
    outcome: &Settled,
    ends: &[usize],
    killed: &BTreeSet<u32>,
) -> Result<(), String> {
    let attempts = sim.attempts();
    let mut broken = Vec::new();
    let ceiling = usd(scenario.ceiling);

    // Every run settles, and no call is left running.
    let let_through = outcome.error_let_through && outcome.status == RunStatus::Error;
    if !matches!(outcome.status, RunStatus::Ok | RunStatus::Exhausted) && !let_through {
        broken.push(format!("the run settled {:?}: {:?}", outcome.status, outcome.error));
    }
    // Every `running` entry of every segment ends: a later entry (a rerun's `running` entry
    // or a terminal one) names it, also for a call a killed segment left and the resumed run
    // never reached (it is abandoned when the run settles).
    let targeted: BTreeSet<u64> = entries.iter().filter_map(|e| e.target.map(|t| t.0)).collect();
    for entry in entries.iter().filter(|e| e.status == Status::Running && !targeted.contains(&e.seq.0)) {
        let label = entry.label.as_deref().unwrap_or("?");
        broken.push(format!("{:?} {label} is left running (seq {})", entry.kind, entry.seq.0));
    }

    // Charged per call, against the bill per call.
    let mut charged: BTreeMap<String, Money> = BTreeMap::new();
    for entry in entries.iter().filter(|e| e.kind == Kind::Agent) {
        if let (Some(label), Some(cost)) = (&entry.label, entry.cost) {
            *charged.entry(call_of(label).to_owned()).or_default() += cost;
        }
    }
    let mut lost = Money::ZERO;
    for call in scenario.calls() {
        let mine: Vec<&Attempt> = attempts.iter().filter(|a| a.tag.as_deref() == Some(&call.tag)).collect();
        let bill = Bill::of(mine.iter().copied());
        let charge = charged.get(&call.tag).copied().unwrap_or_default();
        let in_killed: Vec<&&Attempt> = mine.iter().filter(|a| killed.contains(&a.segment)).collect();
        let exact = mine.iter().all(|a| a.is_exact());
        let journaled: Vec<String> = entries
            .iter()
            .filter(|e| e.kind == Kind::Agent && e.label.as_deref().map(call_of) == Some(&call.tag))
            .map(|e| {
                format!(
                    "#{} {:?} cost {:?} usage {:?}",
                    e.seq.0,
                    e.status,
                    e.cost,
                    e.usage.map(|u| (u.input_tokens, u.output_tokens))
                )
            })
            .collect();
        let mine_short: Vec<String> = mine
            .iter()
            .map(|a| {
                format!(
                    "[s{} t{} a{} {:?} {:?}{} in {} out {} = {}]",
                    a.segment,
                    a.turn,
                    a.attempt,
                    a.fault,
                    a.end,
                    if a.delivered { "" } else { " (hung up)" },
                    a.usage.input_tokens,
                    a.usage.output_tokens,
                    a.cost
                )
            })
            .collect();
        if std::env::var_os("SIM_VERBOSE").is_some() {
            eprintln!(
                "  call {}: charged {charge}, billed {}\n    billed: {mine_short:?}\n    journal: {journaled:?}",
                call.tag, bill.total
            );
        }
        if in_killed.is_empty() {
            if exact && charge != bill.total {
                broken.push(format!("call {}: charged {charge}, billed {}\n  billed: {mine_short:?}\n  journal: {journaled:?}", call.tag, bill.total));
            }
            if !exact && (charge < bill.total || charge > bill.total + bill.tolerance) {
                broken.push(format!(
                    "call {}: charged {charge}, billed {} (+ tolerance {})\n  billed: {mine_short:?}\n  journal: {journaled:?}",
                    call.tag, bill.total, bill.tolerance
                ));
            }
        } else {
            // A call's attempts are sequential, and each one's charge is durable (journaled or
            // checkpointed) before the next goes out: a kill can take from cairn's books only the
            // call's last attempt in each killed segment (the one on the wire, or just ended).
            let last_in_killed = killed.iter().filter_map(|segment| {
                in_killed.iter().filter(|a| a.segment == *segment).max_by_key(|a| a.seq).map(|a| **a)
            });
            let last_in_killed: Vec<&Attempt> = last_in_killed.collect();
            let at_risk = Bill::of(last_in_killed.iter().copied()).total;
            // Such an attempt may also have been charged its estimate, if its stream failed
            // before the driver died (an in-process kill can fail it: the runtime goes first).
            let dropped = last_in_killed
                .iter()
                .filter(|a| a.is_exact())
                .fold(Money::ZERO, |total, a| total + a.drop_tolerance);
            if charge > bill.total + bill.tolerance + dropped || charge + at_risk < bill.total {
                broken.push(format!(
                    "call {} (killed mid-call): charged {charge}, billed {}, at risk {at_risk}\n  billed: {mine_short:?}\n  journal: {journaled:?}",
                    call.tag, bill.total
                ));
            }
            lost += bill.total.sub_or_zero(charge);
        }
        // No completed call paid twice: once its ok entry is durable, nothing more is asked of it.
        if let Some(ok) = entries.iter().find(|e| {
            e.kind == Kind::Agent
                && e.status == Status::Ok
                && e.label.as_deref().map(call_of) == Some(&call.tag)
        }) {
            let segment = ends.iter().position(|end| ok.seq.0 as usize <= *end).unwrap_or(ends.len()) as u32;
            let later: Vec<&&Attempt> = mine.iter().filter(|a| a.segment > segment).collect();
            if !later.is_empty() {
                broken.push(format!("call {} was asked again after its ok (segment {segment}): {} more\n  billed: {mine_short:?}\n  journal: {journaled:?}", call.tag, later.len()));
            }
        }
    }

    // The ceiling: cairn's books, and the provider's bill beside what the kills lost.
    let spent = outcome.cost.total.cost;
    if spent > ceiling + SLACK {
        broken.push(format!("spent {spent} under a ceiling of {ceiling}"));
    }
    let billed = sim.bill().total;
    if billed > ceiling + SLACK + lost {
        broken.push(format!(
            "the provider billed {billed} under a ceiling of {ceiling} (lost to kills {lost})"
        ));
    }

    // The splits sum to the total; by model they match the bill where it is exact.
    let report = &outcome.cost;
    for (name, split) in [
        ("by_model", &report.by_model),
        ("by_phase", &report.by_phase),
        ("by_agent_type", &report.by_agent_type),
        ("by_role", &report.by_role),
    ] {
        let sum = split.values().fold(Money::ZERO, |sum, line| sum + line.cost);
        if sum != report.total.cost {
            broken.push(format!("{name} sums to {sum}, the total is {}", report.total.cost));
        }
    }
    if killed.is_empty() && attempts.iter().all(Attempt::is_exact) {
        let bill = sim.bill();
        for (model_ref, wire, ..) in MODELS {
            let reported = report.by_model.get(model_ref).map(|l| l.cost).unwrap_or_default();
            let billed = bill.by_model.get(wire).copied().unwrap_or_default();
            if reported != billed {
                broken.push(format!("by_model[{model_ref}] = {reported}, billed {billed}"));
            }
        }
    }
    if broken.is_empty() { Ok(()) } else { Err(broken.join("\n")) }
}

/// Runs one seed end to end; `Err` says what broke, with the scenario.
pub(crate) fn run_seed(seed: u64, allow_kills: bool) -> Result<(), String> {
    let harness = Harness::new(Scenario::draw(seed, allow_kills));
    let (outcome, ends, killed) = harness.drive();
    if std::env::var_os("SIM_VERBOSE").is_some() {
        eprintln!(
            "seed {seed}: {:?} after {} segments, spent {} of {}, {} attempts billed {}; {:?}",
            outcome.status,
            ends.len(),
            outcome.cost.total.cost,
            harness.scenario.ceiling,
            harness.sim.attempts().len(),
            harness.sim.bill().total,
            outcome.error
        );
    }
    let run = RunId::parse(&format!("sim-{seed}")).unwrap();
    let entries = harness.entries(&run);
    check(&harness.scenario, &harness.sim, &entries, &Settled::of(&outcome), &ends, &killed).map_err(
        |broken| {
            format!("seed {seed}: {broken}\nscenario: {:?}\noutcome: {:?}", harness.scenario, outcome.status)
        },
    )
}

/// The seeds that ever failed, replayed on every run.
fn regression_seeds() -> Vec<u64> {
    regression_seeds_in(include_str!("../money-regressions/seeds.txt"))
}

/// The seeds of a regression list: one a line, `# why` after a seed is a note.
pub(crate) fn regression_seeds_in(text: &str) -> Vec<u64> {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or_default().trim())
        .filter(|line| !line.is_empty())
        .map(|line| line.parse().unwrap())
        .collect()
}

#[test]
fn every_seed_that_ever_failed_holds_now() {
    let failures: Vec<String> =
        regression_seeds().into_iter().filter_map(|seed| run_seed(seed, true).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Reproduces seeds: `SIM_SEED=<seed>` or `SIM_SEED=<from>..<to>` (without it, seed 0).
#[test]
fn one_seed() {
    let spec = std::env::var("SIM_SEED").unwrap_or_else(|_| "0".into());
    let seeds: Vec<u64> = match spec.split_once("..") {
        Some((from, to)) => (from.parse().unwrap()..to.parse().unwrap()).collect(),
        None => vec![spec.parse().unwrap()],
    };
    let failures: Vec<String> = seeds.into_iter().filter_map(|seed| run_seed(seed, true).err()).collect();
    assert!(failures.is_empty(), "{} failed:\n{}", failures.len(), failures.join("\n\n"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, failure_persistence: None, ..ProptestConfig::default() })]

    /// A few hundred seeds in-process (with the seeds above, one CI minute).
    #[test]
    fn money_holds_under_simulated_faults_and_kills(seed in any::<u64>()) {
        if let Err(broken) = run_seed(seed, true) {
            prop_assert!(false, "{broken}\nkeep the seed in tests/money-regressions/seeds.txt");
        }
    }
}

/// The simulator's wire, read by cairn's own adapters: every fault arrives on each dialect as
/// the billing rules say (deltas before a break, nothing before a refusal, the usage billed on
/// a finished turn).
#[test]
fn every_fault_reaches_each_adapter_as_its_wire_says() {
    use cairn::provider::{ChatRequest, FinishReason, Message, Provider};
    use cairn::testing::sim::{AttemptEnd, Fault, RetryAfter};
    use cairn::{ChatEvent, ErrorCode};
    use futures::StreamExt;
    let faults = [
        Fault::None,
        Fault::Status { status: 429, retry_after: RetryAfter::Millis(7) },
        Fault::Status { status: 503, retry_after: RetryAfter::Seconds(0) },
        Fault::Drop { after: 3 },
        Fault::Stall { after: 2 },
        Fault::Malformed { after: 4 },
        Fault::StreamError { after: 5 },
        Fault::UsageMissing,
        Fault::Refusal,
        Fault::MaxTokens,
    ];
    // Long enough that a loaded machine answers every request before it (at load 24 a 300 ms
    // timeout fired before the simulator had logged a request); only the stalls wait it out.
    let mut config = SimConfig::new(1).idle_timeout(Duration::from_secs(2));
    for (i, fault) in faults.iter().enumerate() {
        for dialect in 0..3 {
            config = config.script(&format!("f{i}d{dialect}"), vec![*fault]);
        }
    }
    let sim = Simulator::start(config).unwrap();
    let providers: [Arc<dyn Provider>; 3] = [
        Arc::new(sim.anthropic("anth").unwrap()),
        Arc::new(sim.openai_chat("chat").unwrap()),
        Arc::new(sim.openai_responses("resp").unwrap()),
    ];
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for (i, fault) in faults.iter().enumerate() {
        for (d, provider) in providers.iter().enumerate() {
            let tag = format!("f{i}d{d}");
            let prompt = format!("hello {}", Directive::text(tag.clone(), 20).render());
            let mut request = ChatRequest::new("m", vec![Message::user(&prompt)]);
            request.max_output_tokens = Some(12);
            let events: Vec<ChatEvent> = runtime
                .block_on(provider.stream(request, tokio_util::sync::CancellationToken::new()).collect());
            let attempt = sim.attempts().into_iter().find(|a| a.tag.as_deref() == Some(&tag)).unwrap();
            let deltas: usize = events
                .iter()
                .map(|e| match e {
                    ChatEvent::TextDelta(t) => t.len(),
                    _ => 0,
                })
                .sum();
            let last = events.last().unwrap();
            let what = format!("{fault:?} on {tag}: {events:?}");
            match fault {
                Fault::None | Fault::UsageMissing | Fault::Refusal | Fault::MaxTokens => {
                    let ChatEvent::Finish { reason, usage } = last else { panic!("{what}") };
                    if attempt.end == AttemptEnd::Reported {
                        assert_eq!(
                            (usage.input_tokens, usage.output_tokens),
                            (attempt.usage.input_tokens, attempt.usage.output_tokens),
                            "{what}"
                        );
                        assert!(!usage.approximate, "{what}");
                    } else {
                        assert!(usage.approximate, "{what}");
                    }
                    match fault {
                        Fault::Refusal => assert_eq!(*reason, FinishReason::Refusal, "{what}"),
                        Fault::MaxTokens => {
                            assert_eq!(*reason, FinishReason::Length, "{what}");
                            assert_eq!(attempt.usage.output_tokens, 12, "{what}");
                        }
                        _ => assert_eq!(*reason, FinishReason::Length, "{what}"), // 20 tokens past a cap of 12
                    }
                }
                Fault::Status { retry_after, .. } => {
                    assert_eq!(events.len(), 1, "{what}");
                    let ChatEvent::Error(error) = last else { panic!("{what}") };
                    assert!(error.retryable, "{what}");
                    let expected = match retry_after {
                        RetryAfter::Millis(ms) => Some(*ms),
                        RetryAfter::Seconds(s) => Some(s * 1000),
                        RetryAfter::None => None,
                    };
                    assert_eq!(error.retry_after_ms, expected, "{what}");
                    assert_eq!(attempt.cost, Money::ZERO);
                }
                Fault::Drop { after }
                | Fault::Stall { after }
                | Fault::Malformed { after }
                | Fault::StreamError { after } => {
                    let ChatEvent::Error(error) = last else { panic!("{what}") };
                    assert!(error.retryable, "{what}");
                    if matches!(fault, Fault::Drop { .. } | Fault::Stall { .. }) {
                        assert_eq!(error.code, ErrorCode::Transport, "{what}");
                    }
                    assert_eq!(
                        deltas,
                        *after as usize * 4,
                        "every streamed token reached the adapter: {what}"
                    );
                    assert_eq!(attempt.usage.output_tokens, u64::from(*after), "{what}");
                }
            }
        }
    }
}
