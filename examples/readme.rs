//! The README's embedding example, verbatim (the test below checks README.md shows exactly
//! this program), run by `cargo test` in a fresh directory: a closure workflow on the SQLite
//! store, run, then resumed by the same engine with nothing paid twice.

use cairn::{AgentOptions, Engine, ResumeOptions, RunOptions, SqliteOptions, SqliteStore, Workflow};
use std::{path::Path, sync::Arc};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = Arc::new(SqliteStore::open(Path::new("runs.db"), SqliteOptions::new())?);
    let engine = Engine::builder(store).build()?;
    let greet = Workflow::new("greet", |ctx, args| async move {
        ctx.agent(&format!("greet {}", args["name"]), AgentOptions::default()).await
    });
    let run = engine.run(&greet, serde_json::json!({"name": "Ada"}), RunOptions::default())?;
    let (id, first) = (run.run_id().clone(), run.result().await?);
    println!("{:?}", first.value);
    // A resume replays the journal: the paid call is served from it, never paid twice.
    let again = engine.resume(&id, ResumeOptions::default())?.result().await?;
    assert_eq!((again.value, again.preview.hits), (first.value, 1));
    Ok(())
}

#[cfg(test)]
mod tests {
    /// README.md's ```rust block under "Embedding" is this file's program.
    #[test]
    fn the_readme_shows_this_program_and_it_runs() {
        let file = include_str!("readme.rs");
        let program = file.split_once("\n\n").map_or("", |(_, rest)| rest);
        let program = program.split("#[cfg(test)]").next().unwrap_or("").trim_end();
        let readme = include_str!("../README.md");
        assert!(
            readme.contains(&format!("```rust,no_run\n{program}\n```")),
            "README.md's embedding example drifted"
        );
        let dir = tempfile::tempdir().unwrap();
        std::env::set_current_dir(dir.path()).unwrap();
        super::main().unwrap();
        assert!(dir.path().join("runs.db").exists());
    }
}
