//! Embeds cairn in a Rust program: a closure workflow that fans out three agent calls and
//! merges them, run durably on the SQLite store and resumed to show the replay.
//!
//! ```sh
//! cargo run --example quickstart
//! ```
//!
//! With no API key configured it uses the built-in offline `echo` model and says so.

use std::sync::Arc;

use cairn::store::{SqliteOptions, SqliteStore};
use cairn::{AgentOptions, Engine, ParallelOptions, ResumeOptions, RunOptions, Workflow, branch};
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(SqliteStore::open(&dir.path().join("cairn.db"), SqliteOptions::new())?);
    let engine = Engine::builder(store.clone(), store).workflow(digest()).build()?;
    eprintln!("using the offline echo model (echo:default): no provider is configured in this example");

    let options = RunOptions { budget_usd: Some(1.0), ..RunOptions::default() };
    let handle = engine.run(&digest(), json!({ "topic": "durable workflows" }), options)?;
    let run_id = handle.run_id().clone();
    let outcome = handle.result().await?;
    println!("run {run_id}: {}", outcome.status);
    println!("{}", serde_json::to_string_pretty(&outcome.value)?);

    // Resume the finished run: every call is served from the journal, nothing is re-paid.
    let again = engine.resume(&run_id, ResumeOptions::default())?.result().await?;
    println!(
        "resumed: {} hits, {} misses, same value: {}",
        again.preview.hits,
        again.preview.misses,
        again.value == outcome.value
    );
    Ok(())
}
