//! What the Cargo features leave in or out of the engine: a dialect whose feature is off is
//! refused as unknown before anything is written; with its feature on it runs.

use std::sync::Arc;

use serde_json::json;

use crate::store::{JournalStore, MemoryStore, RunFilter};
use crate::{Engine, RunOptions, Script};

fn engine() -> (Arc<MemoryStore>, Engine) {
    let store = Arc::new(MemoryStore::new());
    (store.clone(), Engine::builder(store).build().unwrap())
}

#[cfg(not(feature = "lua"))]
#[test]
fn without_the_lua_feature_a_lua_script_is_an_unknown_dialect() {
    let (store, engine) = engine();
    let script = Script::new("lua", "hello", "return agent(\"hi\")");
    let err = engine.run_script(&script, json!({}), RunOptions::default()).unwrap_err();
    assert_eq!(err.code, crate::ErrorCode::Config, "{err}");
    assert!(engine.dialect("lua").is_err());
    assert!(engine.dialect_for_extension("lua").is_none());
    assert!(store.list_runs(&RunFilter::default()).unwrap().is_empty(), "nothing is written");
}

#[cfg(feature = "lua")]
#[tokio::test]
async fn with_the_lua_feature_script_lua_runs_beside_rhai() {
    let (store, engine) = engine();
    for script in [Script::lua("hello", "return agent(\"hi\")"), Script::rhai("hello", "agent(\"hi\")")] {
        let outcome =
            engine.run_script(&script, json!({}), RunOptions::default()).unwrap().result().await.unwrap();
        assert_eq!(outcome.value, Some(json!("echo: hi")), "{script:?}");
    }
    assert_eq!(store.list_runs(&RunFilter::default()).unwrap().len(), 2);
}
