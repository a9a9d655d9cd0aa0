//! A model writes the workflow: `run_planned` has the `plan` role draft a Rhai script for a
//! goal, lints and compiles each draft, sends the errors back as JSON for repair, bounds the
//! accepted script's cost statically (at most 4 agent calls here, within the run's $1.00
//! ceiling), then runs it (frozen source you can read) under its own ceiling.
//!
//! ```sh
//! cargo run --example planner
//! ```
//!
//! It runs offline. A scripted planner stands in for the model the first time (its first draft
//! is JavaScript, as small models often write; its second, after the diagnostics, is Rhai), and
//! every provider exchange is recorded to a cassette. Then a fresh engine on a fresh store,
//! whose only provider is that cassette, plans and runs the same goal again with zero network:
//! the same two drafts, the same script, the same result. Finally re-planning the goal is
//! served from the planning run's journal without a single provider call. `cargo test` runs
//! this example's test, which checks every claim above.

use std::sync::Arc;

use cairn::CostBound;
use cairn::provider::cassette::{RecordingProvider, ReplayProvider};
use cairn::store::{SqliteOptions, SqliteStore};
use cairn::testing::{FakeProvider, FakeScript};
use cairn::{AgentProfile, Engine, Money, Provider, RunOptions, RunStatus};
use cairn::{ModelRef, Price, PriceTable};
use cairn::{PlanOptions, Planned, RunPlannedOptions, plan, run_planned};
use serde_json::json;

const GOAL: &str = "Write a short digest on durable workflows: one paragraph each on their history, \
                    ecosystem and pitfalls, written in parallel, then merged.";

/// What the scripted planner writes first: JavaScript, which lint rejects.
const FIRST_DRAFT: &str = "Sure! Here is the workflow:\n\n```js\nconst angles = [\"history\", \"ecosystem\", \"pitfalls\"];\n\
const notes = await Promise.all(angles.map((angle) => agent(`Write one paragraph on the ${angle} of durable workflows.`)));\n\
console.log(notes);\nreturn { digest: await agent(\"Merge: \" + notes.join(\"\\n\")) };\n```\n";

/// What it writes after reading the diagnostics.
const SECOND_DRAFT: &str = "```rhai\nlet angles = [\"history\", \"ecosystem\", \"pitfalls\"];\n\
let notes = parallel(angles, |angle| agent(`Write one paragraph on the ${angle} of durable workflows.`, #{profile: \"writer\"}));\n\
let digest = agent(`Merge these notes into a digest: ${notes}`, #{profile: \"writer\"});\n\
#{ notes: notes, digest: digest }\n```";

/// A model that writes the two drafts when asked for a script, and a paragraph otherwise.
fn scripted_planner() -> FakeProvider {
    let asks_for_a_script =
        regex::Regex::new("workflow script|previous rhai script").unwrap_or_else(|_| unreachable!());
    FakeProvider::named("demo")
        .on_prompt(asks_for_a_script, FakeScript::text(FIRST_DRAFT).then_text(SECOND_DRAFT))
        .otherwise(FakeScript::text("A paragraph of notes."))
}

/// An engine on `store` whose `demo` provider is `provider`, priced, with a `writer` profile.
fn engine(store: Arc<SqliteStore>, provider: Arc<dyn Provider>) -> Result<Engine, cairn::Error> {
    let mut prices = PriceTable::shipped();
    let usd = |v| Money::from_usd(v).unwrap_or(Money::ZERO);
    prices.set("demo:planner", Price::flat(usd(1.0), usd(4.0)));
    let model = ModelRef::parse("demo:planner").map_err(|e| cairn::Error::config(e.to_string()))?;
    let writer = AgentProfile { description: "Writes clear, short prose.".into(), ..AgentProfile::default() };
    Engine::builder(store)
        .provider(provider)
        .prices(prices)
        .default_model(model)
        .profile("writer", writer)
        .build()
}

fn options() -> RunPlannedOptions {
    RunPlannedOptions {
        plan: PlanOptions { budget_usd: Some(0.50), ..PlanOptions::default() },
        run: RunOptions { budget_usd: Some(1.00), ..RunOptions::default() },
        // The script's static cost bound must fit the run's ceiling, or the run is refused.
        force: false,
    }
}

/// Everything the example does.
struct Demo {
    recorded: Planned,
    offline: Planned,
    /// Provider calls the re-plan made (on the offline engine, counted by the cassette).
    replanned_live_calls: u64,
    replanned_source: String,
}

async fn demo(dir: &std::path::Path) -> Result<Demo, Box<dyn std::error::Error>> {
    let tape = dir.join("planner.cassette.jsonl");
    cairn::provider::cassette::create_tape(&tape)?;

    // 1. With the scripted planner, recording every exchange.
    let store = Arc::new(SqliteStore::open(&dir.join("first.db"), SqliteOptions::new())?);
    let recording = Arc::new(RecordingProvider::new(Arc::new(scripted_planner()), &tape));
    let recorded = run_planned(&engine(store, recording)?, GOAL, json!({}), options()).await?;

    // 2. Offline: a fresh store, and the cassette as the only provider.
    let store = Arc::new(SqliteStore::open(&dir.join("second.db"), SqliteOptions::new())?);
    let replay = Arc::new(ReplayProvider::open(&tape, "demo")?);
    let offline_engine = engine(store, replay)?;
    let offline = run_planned(&offline_engine, GOAL, json!({}), options()).await?;

    // 3. Re-planning the goal: served from the planning run's journal.
    let again = plan(&offline_engine, GOAL, options().plan).await?;
    Ok(Demo {
        recorded,
        offline,
        replanned_live_calls: again.planning.preview.misses,
        replanned_source: again.source,
    })
}

/// What the comments promise.
fn check(demo: &Demo) -> Result<(), String> {
    for (leg, planned) in [("recorded", &demo.recorded), ("offline", &demo.offline)] {
        if planned.plan.drafts != 2 {
            return Err(format!(
                "{leg}: {} drafts, not 2 (a rejected one, then the repair)",
                planned.plan.drafts
            ));
        }
        if planned.outcome.status != RunStatus::Ok {
            return Err(format!(
                "{leg}: the run ended {} ({:?})",
                planned.outcome.status, planned.outcome.error
            ));
        }
        let value = planned.outcome.value.clone().unwrap_or_default();
        if value["digest"] != "A paragraph of notes." || value["notes"].as_array().map(Vec::len) != Some(3) {
            return Err(format!("{leg}: unexpected result {value}"));
        }
    }
    if demo.offline.plan.source != demo.recorded.plan.source
        || demo.offline.outcome.value != demo.recorded.outcome.value
    {
        return Err("the offline leg did not reproduce the recorded plan and result".into());
    }
    match &demo.recorded.plan.cost_bound {
        CostBound::Bounded { max_agent_calls: 4, worst_case } if worst_case.as_usd() <= 1.0 => {}
        other => return Err(format!("the bound is not 4 calls within the $1.00 ceiling: {other}")),
    }
    if !demo.recorded.plan.source.starts_with("let angles") {
        return Err(format!("the accepted script is not the repaired draft:\n{}", demo.recorded.plan.source));
    }
    if demo.replanned_live_calls != 0 || demo.replanned_source != demo.recorded.plan.source {
        return Err(format!("re-planning made {} live calls", demo.replanned_live_calls));
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let demo = demo(dir.path()).await?;
    let plan = &demo.recorded.plan;
    println!("accepted after {} drafts (planning run {}):\n", plan.drafts, plan.planning_run_id);
    println!("{}", plan.source);
    println!("cost bound: {}", plan.cost_bound);
    println!("result: {}", serde_json::to_string_pretty(&demo.recorded.outcome.value)?);
    println!(
        "offline from the cassette: same script {}, same result {}; re-plan: {} live calls",
        demo.offline.plan.source == plan.source,
        demo.offline.outcome.value == demo.recorded.outcome.value,
        demo.replanned_live_calls
    );
    check(&demo)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_planner_example_does_what_its_comments_say() {
        let dir = tempfile::tempdir().unwrap();
        let demo = super::demo(dir.path()).await.unwrap();
        super::check(&demo).unwrap();
    }
}
