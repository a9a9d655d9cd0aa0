//! #26.10: the first resolution of a wait wins across processes, not just within one server:
//! two `cairn serve` processes on one store (one SQLite file; one PostgreSQL database) take
//! racing resolutions of the same wait; the store decides, exactly one is applied, and every
//! other is answered 409 `already_resolved` with the winning value.

use serde_json::{Value, json};

use crate::support::serve::{Server, start_on};

/// Sixteen resolutions of one wait, alternating between `a` and `b`.
async fn race(a: &Server, b: &Server) {
    let run_id = "raced-wait";
    let (code, body) =
        a.submit(json!({ "source": "let r = await_external(\"approve\");\nr", "run_id": run_id })).await;
    assert_eq!(code, 202, "{body}");
    a.wait_for(run_id, "suspended").await;
    b.wait_for(run_id, "suspended").await;
    let path = format!("/v1/runs/{run_id}/resolve/approve");
    let resolutions = (0..16).map(|i| {
        let server = if i % 2 == 0 { a } else { b };
        server.post(&path, json!(i))
    });
    let answers = futures::future::join_all(resolutions).await;
    let won: Vec<&(u16, Value)> = answers.iter().filter(|(c, _)| *c == 200 || *c == 202).collect();
    assert_eq!(won.len(), 1, "one resolution wins across both servers: {answers:?}");
    let done = a.wait_for(run_id, "ok").await;
    let journal = b.get(&format!("/v1/runs/{run_id}/journal")).await.1;
    let resolved: Vec<&Value> = journal["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "resolution")
        .map(|e| &e["value"])
        .collect();
    assert_eq!(resolved.len(), 1, "only the winner is journaled: {resolved:?}");
    for (code, body) in answers.iter().filter(|(c, _)| *c != 200 && *c != 202) {
        assert_eq!((*code, body["code"].as_str()), (409, Some("already_resolved")), "{body}");
        assert_eq!(&body["details"]["value"], resolved[0], "{body}");
    }
    assert_eq!(done["status"], "ok");
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
