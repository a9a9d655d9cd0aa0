//! The live relay across processes: an agent call's streamed text, handed from the process
//! that drives a run (a `cairn worker`, or a `cairn serve`'s own workers) to the event streams
//! of any other process on the same store (another `cairn serve`), through the transcript
//! store. Bounded and lossy, like the in-process relay:
//!
//! - a listener (`GET /v1/runs/{id}/events?tokens=1`) says its process wants the run's deltas
//!   by keeping its process's wish `RUN/live/wanted/PROCESS` (who and until when) fresh every
//!   few seconds;
//! - the process driving the run looks for a fresh wish of *another* process every
//!   [`WANTED_POLL`] (its own listeners get the deltas in process, whether or not others
//!   listen); while there is one, it reads the run's events and writes the deltas in chunks, one
//!   blob `RUN/live/chunk/TIME-ULID` per [`FLUSH_EVERY`] at most, each at most [`CHUNK_BYTES`]
//!   of text (the rest of a burst is dropped), the newest [`KEPT_CHUNKS`] kept; it deletes its
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

fn wanted_prefix(run: &RunId) -> String {
    format!("{run}/live/wanted/")
}

/// The wish of the process `own` (a lease owner's form, `pid N on HOST`), named by it.
fn wanted_ref(run: &RunId, own: &str) -> String {
    let name: String = own
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' })
        .collect();
    format!("{}{name}", wanted_prefix(run))
}

/// A process's wish for a run's deltas, as stored.
#[derive(Debug, Serialize, Deserialize)]
struct Wish {
    /// The process that wants them (a lease owner's form).
    by: String,
    /// Until when (ms since the epoch), unless renewed.
    until_ms: i64,
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

/// Says a listener of the process `own` wants `run`'s deltas until [`WANTED_TTL`] from `now_ms`.
pub(crate) fn want(
    transcripts: &dyn TranscriptStore,
    run: &RunId,
    own: &str,
    now_ms: i64,
) -> Result<(), Error> {
    let until_ms = now_ms.saturating_add(i64::try_from(WANTED_TTL.as_millis()).unwrap_or(i64::MAX));
    let wish = Wish { by: own.to_owned(), until_ms };
    let bytes = serde_json::to_vec(&wish).map_err(|e| Error::internal(e.to_string()))?;
    transcripts.put(&wanted_ref(run, own), &bytes)?;
    Ok(())
}

/// Whether a listener of a process other than `own` wants `run`'s deltas at `now_ms`.
pub(crate) fn wanted_elsewhere(
    transcripts: &dyn TranscriptStore,
    run: &RunId,
    own: &str,
    now_ms: i64,
) -> bool {
    let prefix = wanted_prefix(run);
    let Ok(refs) = transcripts.list(run) else { return false };
    refs.iter().filter(|r| r.starts_with(&prefix) && **r != wanted_ref(run, own)).any(|r| {
        let Ok(Some(bytes)) = transcripts.get(r) else { return false };
        serde_json::from_slice::<Wish>(&bytes).is_ok_and(|wish| wish.by != own && wish.until_ms > now_ms)
    })
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
    owner: String,
    mut events: EventStream,
) {
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
                let (store, id, own, now) = (transcripts.clone(), run.clone(), owner.clone(), clock.now_ms());
                let still =
                    tokio::task::spawn_blocking(move || wanted_elsewhere(store.as_ref(), &id, &own, now)).await;
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
    let own = super::lease::owner();
    let renew = i64::try_from(WANTED_RENEW.as_millis()).unwrap_or(i64::MAX);
    if seen.renewed_at_ms.is_none_or(|at| now.saturating_sub(at) >= renew)
        && want(inner.transcripts.as_ref(), run, &own, now).is_ok()
    {
        seen.renewed_at_ms = Some(now);
    }
    match chunks_after(inner.transcripts.as_ref(), run, seen.last.as_deref(), &own) {
        Ok((tokens, newest)) => {
            seen.last = newest;
            (tokens, seen)
        }
        Err(_) => (Vec::new(), seen),
    }
}

/// For a listener that left: withdraws its process's wish for `run`'s deltas, unless another
/// listener of this process still follows the run (best effort).
pub(crate) fn unwant_live(engine: &super::Engine, run: &RunId) {
    let inner = engine.inner();
    if inner.live.listened(run) {
        return;
    }
    let _ = inner.transcripts.delete(&wanted_ref(run, &super::lease::owner()));
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
        let (driver, reader) = ("pid 1 on h", "pid 2 on h");
        assert!(!wanted_elsewhere(&store, &run, driver, 0));
        // The driver's own listeners are served in process: its own wish asks nothing.
        want(&store, &run, driver, 1_000).unwrap();
        assert!(!wanted_elsewhere(&store, &run, driver, 1_001));
        want(&store, &run, reader, 1_000).unwrap();
        assert!(wanted_elsewhere(&store, &run, driver, 1_001));
        assert!(wanted_elsewhere(&store, &run, reader, 1_001), "the driver's own wish counts for others");
        assert!(!wanted_elsewhere(&store, &run, driver, 1_000 + 10_000), "a wish expires");
        store.delete(&wanted_ref(&run, reader)).unwrap();
        assert!(!wanted_elsewhere(&store, &run, driver, 1_001));
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
