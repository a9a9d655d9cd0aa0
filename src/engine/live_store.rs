//! The live relay across processes: an agent call's streamed text, handed from a `cairn worker`
//! process that drives a run to the event streams of a `cairn serve` on the same store, through
//! the transcript store. Bounded and lossy, like the in-process relay:
//!
//! - a listener (`GET /v1/runs/{id}/events?tokens=1`) says it wants the run's deltas by keeping
//!   the blob `RUN/live/wanted` (its expiry, ms since the epoch) fresh every few seconds;
//! - a worker driving the run looks for that blob every [`WANTED_POLL`]; while it is fresh, the
//!   worker reads the run's events and writes the deltas in chunks, one blob
//!   `RUN/live/chunk/TIME-ULID` per [`FLUSH_EVERY`] at most, each at most [`CHUNK_BYTES`] of
//!   text (the rest of a burst is dropped), the newest [`KEPT_CHUNKS`] kept; it deletes its
//!   chunks a little after it stops;
//! - the listener reads the chunks it has not seen (skipping its own process's, which reach it
//!   in-process), every few hundred ms.
//!
//! Nothing here is journaled: a listener that falls behind, a chunk deleted before it was read or
//! a burst past the cap loses deltas, never the journaled answer.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::events::EventStream;
use super::live::{Calls, LiveToken};
use crate::clock::SharedClock;
use crate::error::Error;
use crate::store::{RunId, TranscriptStore};

/// How long a listener's wish lasts unless it renews it.
pub(crate) const WANTED_TTL: Duration = Duration::from_secs(10);
/// How often a listener renews its wish.
pub(crate) const WANTED_RENEW: Duration = Duration::from_secs(3);
/// How often a driving worker looks for a listener elsewhere.
pub(crate) const WANTED_POLL: Duration = Duration::from_millis(500);
/// How often a relaying worker writes a chunk (when it has deltas).
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(200);
/// The most text one chunk holds; the rest of a burst is dropped.
pub(crate) const CHUNK_BYTES: usize = 32 * 1024;
/// How many chunks a relaying worker keeps in the store.
pub(crate) const KEPT_CHUNKS: usize = 64;
/// How long a worker leaves its chunks after it stops relaying, for listeners to read.
const LINGER: Duration = Duration::from_secs(3);

fn wanted_ref(run: &RunId) -> String {
    format!("{run}/live/wanted")
}

fn chunk_prefix(run: &RunId) -> String {
    format!("{run}/live/chunk/")
}

/// One chunk of deltas, as stored.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Chunk {
    /// The process that wrote it (a lease owner's form, `pid N on HOST`).
    pub(crate) by: String,
    /// The deltas, in order.
    pub(crate) tokens: Vec<LiveToken>,
}

/// Says a listener wants `run`'s deltas until [`WANTED_TTL`] from `now_ms`.
pub(crate) fn want(transcripts: &dyn TranscriptStore, run: &RunId, now_ms: i64) -> Result<(), Error> {
    let until = now_ms.saturating_add(i64::try_from(WANTED_TTL.as_millis()).unwrap_or(i64::MAX));
    transcripts.put(&wanted_ref(run), until.to_string().as_bytes())?;
    Ok(())
}

/// Whether a listener somewhere wants `run`'s deltas at `now_ms`.
pub(crate) fn wanted(transcripts: &dyn TranscriptStore, run: &RunId, now_ms: i64) -> bool {
    let Ok(Some(bytes)) = transcripts.get(&wanted_ref(run)) else { return false };
    std::str::from_utf8(&bytes)
        .ok()
        .and_then(|t| t.trim().parse::<i64>().ok())
        .is_some_and(|until| until > now_ms)
}

/// The chunks of `run` after the ref `after` (all of them for `None`), oldest first, skipping
/// the ones `own` (this process) wrote. Returns the newest ref seen.
pub(crate) fn chunks_after(
    transcripts: &dyn TranscriptStore,
    run: &RunId,
    after: Option<&str>,
    own: &str,
) -> Result<(Vec<LiveToken>, Option<String>), Error> {
    let prefix = chunk_prefix(run);
    let mut tokens = Vec::new();
    let mut newest = after.map(str::to_owned);
    for blob_ref in transcripts.list(run)? {
        if !blob_ref.starts_with(&prefix) || after.is_some_and(|a| blob_ref.as_str() <= a) {
            continue;
        }
        newest = Some(blob_ref.clone());
        // Deleted since it was listed, or not one of ours: skipped.
        let Some(bytes) = transcripts.get(&blob_ref)? else { continue };
        let Ok(chunk) = serde_json::from_slice::<Chunk>(&bytes) else { continue };
        if chunk.by != own {
            tokens.extend(chunk.tokens);
        }
    }
    Ok((tokens, newest))
}

/// Writes `events`' deltas to the store for listeners elsewhere, while one wants them; ends
/// when the stream ends or nobody wants them any more, and deletes its chunks after
/// [`LINGER`].
pub(crate) async fn relay_to_store(
    transcripts: Arc<dyn TranscriptStore>,
    clock: SharedClock,
    run: RunId,
    mut events: EventStream,
) {
    let owner = super::lease::owner();
    let mut calls = Calls::default();
    let mut pending: Vec<LiveToken> = Vec::new();
    let mut pending_bytes = 0usize;
    let mut written: VecDeque<String> = VecDeque::new();
    let mut flush = tokio::time::interval(FLUSH_EVERY);
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut look = tokio::time::interval(WANTED_POLL);
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            event = events.next() => {
                let Some(event) = event else { break };
                if let Some(token) = calls.token(&event)
                    && pending_bytes < CHUNK_BYTES
                {
                    pending_bytes += token.text.len();
                    pending.push(token);
                }
            }
            _ = flush.tick() => {
                if pending.is_empty() {
                    continue;
                }
                let chunk = Chunk { by: owner.clone(), tokens: std::mem::take(&mut pending) };
                pending_bytes = 0;
                let name = format!("{}{:013}-{}", chunk_prefix(&run), clock.now_ms().max(0), ulid::Ulid::generate());
                written.push_back(name.clone());
                let stale = if written.len() > KEPT_CHUNKS { written.pop_front() } else { None };
                let store = transcripts.clone();
                let wrote = tokio::task::spawn_blocking(move || {
                    let bytes = serde_json::to_vec(&chunk).map_err(|e| Error::internal(e.to_string()))?;
                    store.put(&name, &bytes)?;
                    if let Some(stale) = stale {
                        store.delete(&stale)?;
                    }
                    Ok::<_, Error>(())
                })
                .await;
                if let Ok(Err(e)) = wrote {
                    tracing::debug!(run = %run, error = %e, "could not relay a chunk of deltas");
                }
            }
            _ = look.tick() => {
                let (store, id, now) = (transcripts.clone(), run.clone(), clock.now_ms());
                let still = tokio::task::spawn_blocking(move || wanted(store.as_ref(), &id, now)).await;
                if !matches!(still, Ok(true)) {
                    break;
                }
            }
        }
    }
    // Left for the listeners' next read, then deleted.
    tokio::time::sleep(LINGER).await;
    let _ = tokio::task::spawn_blocking(move || {
        for name in written {
            let _ = transcripts.delete(&name);
        }
    })
    .await;
}

/// What a listener has read of a run's relayed deltas, and when it last renewed its wish.
#[derive(Debug, Default)]
pub(crate) struct RemoteLive {
    last: Option<String>,
    renewed_at_ms: Option<i64>,
}

/// For a listener: renews its wish for `run`'s deltas when due and reads the chunks it has not
/// seen that another process wrote. A store failure reads nothing (lossy).
pub(crate) fn read_remote_live(
    engine: &super::Engine,
    run: &RunId,
    mut seen: RemoteLive,
) -> (Vec<LiveToken>, RemoteLive) {
    let inner = engine.inner();
    let now = inner.clock.now_ms();
    let renew = i64::try_from(WANTED_RENEW.as_millis()).unwrap_or(i64::MAX);
    if seen.renewed_at_ms.is_none_or(|at| now.saturating_sub(at) >= renew)
        && want(inner.transcripts.as_ref(), run, now).is_ok()
    {
        seen.renewed_at_ms = Some(now);
    }
    match chunks_after(inner.transcripts.as_ref(), run, seen.last.as_deref(), &super::lease::owner()) {
        Ok((tokens, newest)) => {
            seen.last = newest;
            (tokens, seen)
        }
        Err(_) => (Vec::new(), seen),
    }
}

/// For a listener that left: withdraws the wish for `run`'s deltas (best effort; another
/// listener renews its own within [`WANTED_RENEW`]).
pub(crate) fn unwant_live(engine: &super::Engine, run: &RunId) {
    let _ = engine.inner().transcripts.delete(&wanted_ref(run));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(text: &str) -> LiveToken {
        LiveToken { scope: String::new(), label: None, model: None, call: 1, text: text.into() }
    }

    #[test]
    fn a_wish_expires_and_chunks_are_read_once_skipping_ones_own() {
        let store = crate::store::MemoryStore::new();
        let run = RunId::parse("r").unwrap();
        assert!(!wanted(&store, &run, 0));
        want(&store, &run, 1_000).unwrap();
        assert!(wanted(&store, &run, 1_001));
        assert!(!wanted(&store, &run, 1_000 + 10_000));
        let put = |name: &str, by: &str, text: &str| {
            let chunk = Chunk { by: by.into(), tokens: vec![token(text)] };
            store.put(&format!("r/live/chunk/{name}"), &serde_json::to_vec(&chunk).unwrap()).unwrap();
        };
        put("0001-a", "pid 1 on h", "hel");
        put("0002-b", "pid 2 on h", "mine");
        put("0003-c", "pid 1 on h", "lo");
        let (tokens, newest) = chunks_after(&store, &run, None, "pid 2 on h").unwrap();
        let text: String = tokens.iter().map(|t| t.text.as_str()).collect();
        assert_eq!(text, "hello");
        let (again, _) = chunks_after(&store, &run, newest.as_deref(), "pid 2 on h").unwrap();
        assert!(again.is_empty());
    }
}
