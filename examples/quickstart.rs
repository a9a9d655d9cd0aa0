//! Embeds cairn in a Rust program: a closure workflow that fans out three agent calls and
//! merges them, run durably on the SQLite store under a $1.00 ceiling, then resumed to show
//! the replay: every call is served from the journal and nothing is paid twice.
//!
//! ```sh
//! cargo run --example quickstart
//! ```
//!
//! With no API key configured it uses the built-in offline `echo` model (priced, and free)
//! and says so. `cargo test` runs this example's test, which checks every claim above.

use std::sync::Arc;

use cairn::store::{SqliteOptions, SqliteStore};
use cairn::{AgentOptions, Engine, ParallelOptions, ResumeOptions, RunOptions, RunOutcome, Workflow, branch};
use serde_json::json;

fn digest() -> Workflow {
    Workflow::new("digest", |ctx, args| async move {
        let topic = args["topic"].as_str().unwrap_or("rust").to_owned();
        let angles = ["history", "ecosystem", "pitfalls"];
        let branches = angles
            .iter()
            .map(|angle| {
                let prompt = format!("Write one paragraph on the {angle} of {topic}.");
                branch(move |ctx| async move { ctx.agent(&prompt, AgentOptions::default()).await })
            })
            .collect();
        let notes = ctx.parallel(branches, ParallelOptions::default()).await?;
        let merged = ctx
            .phase("merge", |ctx| async move {
                ctx.agent(
                    &format!("Merge these notes into a digest: {}", json!(notes)),
                    AgentOptions::default(),
                )
                .await
            })
            .await?;
        Ok(json!({ "topic": topic, "digest": merged }))
    })
}

/// The run and its resume.
struct Quickstart {
    run_id: String,
    first: RunOutcome,
    resumed: RunOutcome,
}

/// Runs the digest, then resumes the finished run.
async fn quickstart(dir: &std::path::Path) -> Result<Quickstart, Box<dyn std::error::Error>> {
    let store = Arc::new(SqliteStore::open(&dir.join("cairn.db"), SqliteOptions::new())?);
    let engine = Engine::builder(store).workflow(digest()).build()?;

    let options = RunOptions { budget_usd: Some(1.0), ..RunOptions::default() };
    let handle = engine.run(&digest(), json!({ "topic": "durable workflows" }), options)?;
    let run_id = handle.run_id().clone();
    let first = handle.result().await?;

    // Resume the finished run: every call is served from the journal, nothing is re-paid.
    let resumed = engine.resume(&run_id, ResumeOptions::default())?.result().await?;
    Ok(Quickstart { run_id: run_id.to_string(), first, resumed })
}

/// What the comments promise: the run ends ok with a digest, and its resume replays all four
/// calls (three branches and the merge) with no live call and the same value.
fn check(q: &Quickstart) -> Result<(), String> {
    let (first, again) = (&q.first, &q.resumed);
    if first.status != cairn::RunStatus::Ok {
        return Err(format!("the run ended {} ({:?}), not ok", first.status, first.error));
    }
    if first.value.as_ref().and_then(|v| v["digest"].as_str()).is_none() {
        return Err(format!("the run produced no digest: {:?}", first.value));
    }
    if (again.preview.hits, again.preview.misses) != (4, 0) || again.value != first.value {
        return Err(format!(
            "the resume was not a pure replay: {} hits, {} misses, same value: {}",
            again.preview.hits,
            again.preview.misses,
            again.value == first.value
        ));
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    eprintln!("using the offline echo model (echo:default): no provider is configured in this example");
    let q = quickstart(dir.path()).await?;
    println!("run {}: {}", q.run_id, q.first.status);
    println!("{}", serde_json::to_string_pretty(&q.first.value)?);
    println!(
        "resumed: {} hits, {} misses, same value: {}",
        q.resumed.preview.hits,
        q.resumed.preview.misses,
        q.resumed.value == q.first.value
    );
    check(&q)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn the_quickstart_does_what_its_comments_say() {
        let dir = tempfile::tempdir().unwrap();
        let q = super::quickstart(dir.path()).await.unwrap();
        super::check(&q).unwrap();
    }
}
