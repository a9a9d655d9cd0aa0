//! `GET /v1/runs/{id}/events`: the run's journal as Server-Sent Events, read from the store
//! (so a run driven by another process streams the same way). Each entry is one `entry` event
//! whose `id:` is its journal seq; a client reconnecting with `Last-Event-ID: N` gets the
//! entries after seq N, missing none and repeating none. Entries journaled before the stream
//! opened carry `"replayed": true`. A `status` event (no id) reports each status change; once
//! the run settles, an `outcome` event (no id) ends the stream; when the server shuts down, a
//! `shutdown` event (no id, `{run_id, status, last_event_id, reason}`) ends it instead. A tool call's entries are each
//! followed by a `tool` event (no id): `{phase: start|end, tool, call_id, status, scope, seq,
//! error}`.
//!
//! With `?tokens=1`, the stream also carries `token` events (no id, never journaled): each
//! text delta of an agent call, `{run_id, scope, label, model, call, text}`, relayed from the
//! worker of this process that drives the run (`engine::live`), or, for a run another process
//! drives (a `cairn worker`, another `cairn serve`), through the store (`engine::live_store`:
//! the stream keeps its process's wish `RUN/live/wanted/PROCESS` fresh, the driving process
//! writes chunks of deltas that the stream reads every 250 ms). A settled run's in-process
//! deltas all come before its outcome. Lossy: a client that falls behind skips deltas, and a
//! chunk past its bound or deleted before it was read is lost; the journaled answer is whole
//! either way.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::channel::mpsc;
use futures::{SinkExt as _, Stream};
use serde_json::{Value, json};

use super::error::ApiError;
use super::runs::{meta_of, parse_run_id};
use super::state::{AppState, blocking};
use crate::store::{RunChanges, RunId, RunStatus};

/// The query of `GET /v1/runs/{id}/events`.
#[derive(Debug, serde::Deserialize)]
pub(super) struct EventsQuery {
    /// `1` (or `true`) adds the `token` events.
    pub tokens: Option<String>,
}

type Tokens = tokio::sync::broadcast::Receiver<crate::engine::LiveToken>;

/// `GET /v1/runs/{id}/events`.
pub(super) async fn events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let tokens = match query.tokens.as_deref().map(str::trim) {
        None | Some("" | "0" | "false") => false,
        Some("1" | "true") => true,
        Some(_) => return Err(ApiError::bad_request("tokens must be 1 or 0")),
    };
    let run = parse_run_id(&id)?;
    // An empty `Last-Event-ID` is a stream from the start, as the SSE standard has it.
    let after = match headers.get("last-event-id").map(|v| v.to_str().map(str::trim)) {
        None | Some(Ok("")) => 0,
        Some(text) => text
            .ok()
            .and_then(|t| t.parse::<u64>().ok())
            .ok_or_else(|| ApiError::bad_request("Last-Event-ID must be a journal seq (a whole number)"))?,
    };
    // Following starts before the first read, so a write between the read and the first
    // wait still wakes the stream.
    let changes = state.engine.journal_store().watch().map(|watch| watch.subscribe(&run));
    // Listening starts before the first read too, so no delta after it is missed.
    let live = tokens.then(|| state.engine.inner().live.subscribe(&run));
    let (meta, raw) = {
        let run = run.clone();
        blocking(&state, move |engine| {
            let meta = meta_of(engine, &run)?;
            let raw = engine.journal_store().load_page(&run, after, PAGE)?;
            Ok((meta, raw))
        })
        .await?
    };
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let remote = live.is_some();
        follow(state.clone(), run.clone(), after, meta.status, raw, (changes, live), tx).await;
        if remote {
            // Nobody here wants the run's deltas any more (another listener renews its wish).
            let _ = blocking(&state, move |engine| {
                crate::engine::unwant_live(engine, &run);
                Ok(())
            })
            .await;
        }
    });
    Ok(Sse::new(rx).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

type Tx = mpsc::Sender<Result<Event, Infallible>>;

/// How many entries the stream reads at a time: a long run's backlog is sent page by page,
/// never read whole.
const PAGE: usize = crate::store::PAGE_ENTRIES;

/// Sends the entries past `after` (read a page at a time, `raw` the first), then, woken by the
/// store's change notifications (or its bounded poll), reads the entries past the last one
/// sent until the run settles. Entries of the backlog (read before the stream first caught
/// up) are marked `replayed`.
async fn follow(
    state: AppState,
    run: RunId,
    mut after: u64,
    status: RunStatus,
    raw: Vec<crate::store::RawEntry>,
    (mut changes, mut live): (Option<RunChanges>, Option<Tokens>),
    mut tx: Tx,
) {
    // Reading what the journal held when the stream began, until the first short page.
    let mut backlog = true;
    let mut status = status;
    if !send_status(&mut tx, &run, status).await {
        return;
    }
    let mut batch = raw;
    // Deltas relayed through the store by a worker in another process: looked for every
    // `REMOTE_READ` while the client asked for tokens.
    let mut remote = live.is_some().then(RemoteTokens::default);
    let mut remote_tick = tokio::time::interval(REMOTE_READ);
    remote_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Every delta relayed before the read of `batch` goes out before what it read: a
        // call's last deltas and its answer (or the run's settlement) land together, and the
        // wait below may wake for the entry first (or before both, then read the answer),
        // which ended a settled run's stream with its last deltas still queued.
        if !send_queued_tokens(&mut tx, &run, &mut live).await {
            return;
        }
        for entry in &batch {
            if entry.seq() <= after {
                continue;
            }
            let mut value: Value = serde_json::from_str(entry.json()).unwrap_or(Value::Null);
            if let Value::Object(map) = &mut value {
                map.insert("replayed".into(), Value::Bool(backlog));
            }
            let tool = tool_event(&value, entry.seq());
            let event = Event::default().event("entry").id(entry.seq().to_string()).data(value.to_string());
            if tx.send(Ok(event)).await.is_err() {
                return;
            }
            if let Some(tool) = tool
                && tx.send(Ok(tool)).await.is_err()
            {
                return;
            }
            after = entry.seq();
        }
        if batch.len() >= PAGE {
            // More follows at once: the rest of the backlog, or of a burst (a failed read is
            // tried again after a poll's wait; what follows is never skipped).
            loop {
                let run = run.clone();
                let next = blocking(&state, move |engine| {
                    Ok(engine.journal_store().load_page(&run, after, PAGE)?)
                })
                .await;
                if let Ok(raw) = next {
                    batch = raw;
                    break;
                }
                tokio::time::sleep(state.options.poll_interval).await;
                if tx.is_closed() {
                    return;
                }
            }
            continue;
        }
        backlog = false;
        if settled(status) {
            // The last deltas before the outcome: this process's relay of the run publishes
            // them a moment after the run settles (it reads the run's events on a task of its
            // own), and the stream used to end first on a loaded machine.
            if !send_last_tokens(&state, &mut tx, &run, &mut live).await {
                return;
            }
            let settled = {
                let run = run.clone();
                blocking(&state, move |engine| {
                    let digest =
                        crate::engine::RunDigest::read(engine.journal_store().as_ref(), &run, |_| {})?;
                    let error =
                        meta_of(engine, &run)?.extra.remove(super::plan::ERROR_FIELD).or(digest.error);
                    Ok((digest.cost, error))
                })
                .await
                .ok()
            };
            let (cost, error) = settled.map_or((None, None), |(cost, error)| (Some(cost), error));
            let mut data = json!({ "run_id": run, "status": status, "cost": cost });
            if let Some(error) = error {
                // Why it failed: its settlement's journaled error, or (a planned run whose
                // plan failed) the plan's.
                data["error"] = error;
            }
            let _ = tx.send(Ok(Event::default().event("outcome").data(data.to_string()))).await;
            return;
        }
        let poll = tokio::time::sleep(state.options.poll_interval);
        tokio::pin!(poll);
        let shutdown = state.options.shutdown.clone();
        // Waits for a change, the poll or the shutdown; the deltas that arrive meanwhile are
        // sent as they come.
        let stopping = loop {
            let woke = tokio::select! {
                () = changed(&mut changes) => Woke::Changed,
                () = &mut poll => Woke::Changed,
                () = shutdown.cancelled() => Woke::Stopping,
                token = next_token(&mut live) => Woke::Token(token),
                _ = remote_tick.tick(), if remote.is_some() => Woke::Remote,
            };
            match woke {
                Woke::Changed => break false,
                Woke::Stopping => break true,
                Woke::Remote => {
                    let Some(seen) = remote.take() else { continue };
                    let read = {
                        let run = run.clone();
                        blocking(&state, move |engine| {
                            Ok(crate::engine::read_remote_live(engine, &run, seen))
                        })
                        .await
                    };
                    let Ok((tokens, seen)) = read else { continue };
                    remote = Some(seen);
                    for token in tokens {
                        if tx.send(Ok(token_event(&run, &token))).await.is_err() {
                            return;
                        }
                    }
                }
                Woke::Token(Some(token)) => {
                    if tx.send(Ok(token_event(&run, &token))).await.is_err() {
                        return;
                    }
                }
                // The relay is gone (it never closes while the server lives): no more deltas.
                Woke::Token(None) => live = None,
            }
        };
        if let Some(changes) = &mut changes {
            // Seen before the read below: a write after this point wakes the next wait.
            changes.mark_seen();
        }
        if stopping {
            // The server is stopping: say so, and end the stream (the client reconnects to
            // another server, or this one restarted, with `Last-Event-ID`).
            let data = json!({ "run_id": run, "status": status, "last_event_id": after, "reason": "the server is shutting down" });
            let _ = tx.send(Ok(Event::default().event("shutdown").data(data.to_string()))).await;
            return;
        }
        if tx.is_closed() {
            return;
        }
        let polled = {
            let run = run.clone();
            blocking(&state, move |engine| {
                // The status first: entries read after it include every entry a settled run wrote.
                let meta = meta_of(engine, &run)?;
                let raw = engine.journal_store().load_page(&run, after, PAGE)?;
                Ok((meta.status, raw))
            })
            .await
        };
        let Ok((now, raw)) = polled else {
            batch = Vec::new();
            continue;
        };
        if now != status {
            status = now;
            if !send_status(&mut tx, &run, status).await {
                return;
            }
        }
        batch = raw;
    }
}

enum Woke {
    Changed,
    Stopping,
    Token(Option<crate::engine::LiveToken>),
    Remote,
}

/// How often a stream with `?tokens=1` reads the deltas relayed through the store.
const REMOTE_READ: Duration = Duration::from_millis(250);

/// What a stream has read of the deltas relayed through the store.
pub(crate) type RemoteTokens = crate::engine::RemoteLive;

/// Resolves when the store notifies a change (never, without notifications).
async fn changed(changes: &mut Option<RunChanges>) {
    match changes {
        Some(changes) => changes.changed().await,
        None => std::future::pending().await,
    }
}

/// The next delta (skipping any the stream fell behind on); `None` once the relay closed;
/// never resolves without `?tokens=1`.
async fn next_token(live: &mut Option<Tokens>) -> Option<crate::engine::LiveToken> {
    let Some(rx) = live else { return std::future::pending().await };
    loop {
        match rx.recv().await {
            Ok(token) => return Some(token),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
        }
    }
}

/// Sends the deltas the relay holds now, without waiting; `false` once the client is gone.
async fn send_queued_tokens(tx: &mut Tx, run: &RunId, live: &mut Option<Tokens>) -> bool {
    use tokio::sync::broadcast::error::TryRecvError;
    let Some(rx) = live else { return true };
    loop {
        let token = match rx.try_recv() {
            Ok(token) => token,
            Err(TryRecvError::Lagged(_)) => continue,
            Err(TryRecvError::Empty) => return true,
            Err(TryRecvError::Closed) => {
                *live = None;
                return true;
            }
        };
        if tx.send(Ok(token_event(run, &token))).await.is_err() {
            return false;
        }
    }
}

/// Sends every delta of a settled run still to come from this process's relays of it, then
/// what is queued; `false` once the client is gone.
async fn send_last_tokens(state: &AppState, tx: &mut Tx, run: &RunId, live: &mut Option<Tokens>) -> bool {
    if live.is_none() {
        return true;
    }
    let relay = state.engine.inner().live.clone();
    let relayed = relay.relayed(run);
    tokio::pin!(relayed);
    loop {
        tokio::select! {
            biased;
            token = next_token(live) => match token {
                Some(token) => {
                    if tx.send(Ok(token_event(run, &token))).await.is_err() {
                        return false;
                    }
                }
                None => {
                    *live = None;
                    return true;
                }
            },
            () = &mut relayed => return send_queued_tokens(tx, run, live).await,
        }
    }
}

/// A `token` event.
fn token_event(run: &RunId, token: &crate::engine::LiveToken) -> Event {
    let mut data = serde_json::to_value(token).unwrap_or(Value::Null);
    data["run_id"] = json!(run);
    Event::default().event("token").data(data.to_string())
}

async fn send_status(tx: &mut Tx, run: &RunId, status: RunStatus) -> bool {
    let data = json!({ "run_id": run, "status": status });
    tx.send(Ok(Event::default().event("status").data(data.to_string()))).await.is_ok()
}

fn settled(status: RunStatus) -> bool {
    matches!(status, RunStatus::Ok | RunStatus::Error | RunStatus::Cancelled | RunStatus::Exhausted)
}

/// The `tool` event after a tool call's journal entry: its dispatch (`start`) or its end.
fn tool_event(entry: &Value, seq: u64) -> Option<Event> {
    if entry.get("kind").and_then(Value::as_str) != Some("tool") {
        return None;
    }
    let status = entry.get("status").and_then(Value::as_str).unwrap_or_default();
    let data = json!({
        "phase": if status == "running" { "start" } else { "end" },
        "tool": entry.get("name"),
        "call_id": entry.get("label"),
        "status": status,
        "scope": entry.get("scope"),
        "seq": seq,
        "error": entry.get("error"),
        "replayed": entry.get("replayed"),
    });
    Some(Event::default().event("tool").data(data.to_string()))
}

#[cfg(test)]
mod tool_event_tests {
    use super::*;
    use crate::journal::{Entry, Kind, ScopePath, Seq, Status};

    #[test]
    fn a_tool_entry_is_followed_by_a_tool_event_and_others_are_not() {
        let key = crate::journal::content_key(&json!("t")).unwrap();
        let mut running = Entry::new(Seq(4), Kind::Tool, Status::Running, ScopePath::root(), key, 0);
        running.name = Some("docs_search".into());
        running.label = Some("call_1_0".into());
        let value = serde_json::to_value(&running).unwrap();
        let event = format!("{:?}", tool_event(&value, 4).unwrap());
        assert!(
            event.contains("tool") && event.contains("docs_search") && event.contains("start"),
            "{event}"
        );
        let agent = Entry::new(Seq(1), Kind::Agent, Status::Running, ScopePath::root(), key, 0);
        assert!(tool_event(&serde_json::to_value(&agent).unwrap(), 1).is_none());
    }
}
