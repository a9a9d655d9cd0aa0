//! #26.10: the first resolution of a wait wins across processes, not just within one server:
//! two `cairn serve` processes on one store (one SQLite file; one PostgreSQL database) take
//! racing resolutions of the same wait; the store decides, exactly one is applied, and every
//! other is answered 409 `already_resolved` with the winning value.

use serde_json::json;

use crate::support::serve::{Server, race_resolutions, start_on};

/// Sixteen resolutions of one wait, alternating between `a` and `b` (read back through `b`).
async fn race(a: &Server, b: &Server) {
    let run_id = "raced-wait";
    let (code, body) =
        a.submit(json!({ "source": "let r = await_external(\"approve\");\nr", "run_id": run_id })).await;
    assert_eq!(code, 202, "{body}");
    a.wait_for(run_id, "suspended").await;
    b.wait_for(run_id, "suspended").await;
    race_resolutions(&[a, b], run_id, "approve").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_sqlite_file_resolve_a_wait_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    let a = start_on(dir, store.clone(), None, &[]).await;
    let b = start_on(tempfile::tempdir().unwrap(), store, None, &[]).await;
    race(&a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_postgres_database_resolve_a_wait_once() {
    let Some(store) = crate::postgres::fresh_url("firstwins") else { return };
    let a = start_on(tempfile::tempdir().unwrap(), store.clone(), None, &[]).await;
    let b = start_on(tempfile::tempdir().unwrap(), store, None, &[]).await;
    race(&a, &b).await;
}
