//! What the inspector shows of a settled live agent call beyond its journal entries: each of
//! its turns (who served it, what it used and cost, when it started and ended) and, for a call
//! that wrote no checkpoint (it took one turn), its prompt. Never journaled, so no content key
//! or entry changes; display data, lossy by design.
//!
//! A call's turns up to its last turn boundary are in its checkpoint (`turn_log`, beside the
//! conversation, carried by a rerun that continues from it). The whole record is written when
//! the call settles, batched per run so that a quick call pays no write of its own: records
//! gather in memory and go to the transcript store as one blob `RUN/calls/FIRST-LAST` (the
//! lowest and highest `running` seq it holds, zero-padded) at most every [`FLUSH_EVERY`], or at
//! once when [`MAX_BATCH`] records or [`MAX_BATCH_BYTES`] gathered, and whatever is left when
//! the segment settles. A crash loses at most the records of the last [`FLUSH_EVERY`].

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::SharedClock;
use crate::money::Money;
use crate::store::{RunId, TranscriptStore};
use crate::usage::Usage;

/// How often buffered records are written at most (they wait no longer unless the process dies).
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(200);
/// The most records one blob holds.
pub(crate) const MAX_BATCH: usize = 256;
/// About the most bytes one blob holds.
pub(crate) const MAX_BATCH_BYTES: usize = 512 * 1024;
/// The most characters of a one-turn call's prompt kept (the inspector shows no more).
pub(crate) const PROMPT_CHARS: usize = 4000;

/// One model turn of an agent call, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TurnRecord {
    /// The turn's number in the call (from 1; a rerun continues its checkpoint's count).
    pub(crate) turn: u32,
    /// `ok` (the model answered) or `error` (its attempts failed).
    pub(crate) status: String,
    /// The model that answered (or was last tried), as `provider:model`.
    pub(crate) served_by: String,
    /// What its attempts used.
    pub(crate) usage: Usage,
    /// What its attempts cost, each priced at the model that served it; absent when unpriced.
    #[serde(rename = "cost_nano_usd", default, skip_serializing_if = "Option::is_none")]
    pub(crate) cost: Option<Money>,
    /// When it was sent and when it ended (ms since the epoch, the engine's clock).
    pub(crate) started_ms: i64,
    pub(crate) ended_ms: i64,
    /// Why the model stopped, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) finish_reason: Option<String>,
    /// The `running` entry of the attempt of the call that made it.
    pub(crate) call_seq: u64,
}

/// The prompt of a call that wrote no checkpoint, cut at [`PROMPT_CHARS`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PromptRecord {
    pub(crate) text: String,
    /// The whole prompt's length in characters.
    pub(crate) chars: usize,
}

impl PromptRecord {
    pub(crate) fn of(prompt: &str) -> PromptRecord {
        PromptRecord { text: prompt.chars().take(PROMPT_CHARS).collect(), chars: prompt.chars().count() }
    }
}

/// What is recorded of one settled attempt of an agent call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CallRecord {
    /// The attempt's `running` entry.
    pub(crate) seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) prompt: Option<PromptRecord>,
    /// Its turns, those of the checkpoint it continued from first.
    pub(crate) turns: Vec<TurnRecord>,
}

fn prefix(run: &RunId) -> String {
    format!("{run}/calls/")
}

/// One blob of records, as stored.
#[derive(Debug, Serialize, Deserialize)]
struct Batch {
    calls: Vec<CallRecord>,
}

/// The records of one run segment not yet written, and when they last were.
#[derive(Debug, Default)]
struct Buffered {
    calls: Vec<CallRecord>,
    bytes: usize,
    last_write_ms: Option<i64>,
    /// Whether a delayed write is on its way.
    scheduled: bool,
}

/// A run segment's call records on their way to the store.
#[derive(Debug)]
pub(crate) struct CallRecords {
    run: RunId,
    transcripts: Arc<dyn TranscriptStore>,
    clock: SharedClock,
    buffered: Mutex<Buffered>,
}

impl CallRecords {
    pub(crate) fn new(
        run: RunId,
        transcripts: Arc<dyn TranscriptStore>,
        clock: SharedClock,
    ) -> Arc<CallRecords> {
        Arc::new(CallRecords { run, transcripts, clock, buffered: Mutex::new(Buffered::default()) })
    }

    fn lock(&self) -> MutexGuard<'_, Buffered> {
        self.buffered.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `record`: written now when a write is due, else within [`FLUSH_EVERY`].
    pub(crate) fn record(self: &Arc<Self>, record: CallRecord) {
        let mut buffered = self.lock();
        buffered.bytes += 256 + record.prompt.as_ref().map_or(0, |p| p.text.len()) + record.turns.len() * 256;
        buffered.calls.push(record);
        let now = self.clock.now_ms();
        let idle = buffered.last_write_ms.is_none_or(|at| {
            now.saturating_sub(at) >= i64::try_from(FLUSH_EVERY.as_millis()).unwrap_or(i64::MAX)
        });
        if idle || buffered.calls.len() >= MAX_BATCH || buffered.bytes >= MAX_BATCH_BYTES {
            self.write(&mut buffered, now);
            return;
        }
        if !buffered.scheduled
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            buffered.scheduled = true;
            let records = self.clone();
            runtime.spawn(async move {
                tokio::time::sleep(FLUSH_EVERY).await;
                records.flush();
            });
        }
    }

    /// Writes what is buffered (at settlement, and for a delayed write).
    pub(crate) fn flush(&self) {
        let mut buffered = self.lock();
        buffered.scheduled = false;
        if !buffered.calls.is_empty() {
            let now = self.clock.now_ms();
            self.write(&mut buffered, now);
        }
    }

    /// Writes the buffered records as one blob. The lock is held through the write, so a
    /// flush at settlement returns only once every record taken before it is written.
    fn write(&self, buffered: &mut Buffered, now: i64) {
        let calls = std::mem::take(&mut buffered.calls);
        buffered.bytes = 0;
        buffered.last_write_ms = Some(now);
        let (Some(first), Some(last)) =
            (calls.iter().map(|c| c.seq).min(), calls.iter().map(|c| c.seq).max())
        else {
            return;
        };
        let name = format!("{}{first:012}-{last:012}", prefix(&self.run));
        // Lost records cost the inspector its detail, never the run anything.
        match serde_json::to_vec(&Batch { calls }) {
            Ok(bytes) => {
                if let Err(e) = self.transcripts.put(&name, &bytes) {
                    tracing::debug!(run = %self.run, error = %e, "could not write call records");
                }
            }
            Err(e) => tracing::debug!(run = %self.run, error = %e, "could not encode call records"),
        }
    }
}

/// The record of the attempt of an agent call whose `running` entry is `seq`, when one was
/// written, as JSON.
#[cfg(any(feature = "serve", test))]
pub(crate) fn call_record(
    transcripts: &dyn TranscriptStore,
    run: &RunId,
    seq: u64,
) -> Option<serde_json::Value> {
    let prefix = prefix(run);
    let holds = |blob: &str| {
        let (first, last) = blob.strip_prefix(&prefix)?.split_once('-')?;
        Some(first.parse::<u64>().ok()? <= seq && seq <= last.parse::<u64>().ok()?)
    };
    let refs = transcripts.list(run).ok()?;
    refs.iter().filter(|blob| holds(blob) == Some(true)).find_map(|blob| {
        let bytes = transcripts.get(blob).ok()??;
        let batch: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        let calls = batch.get("calls")?.as_array()?;
        calls.iter().find(|c| c.get("seq").and_then(serde_json::Value::as_u64) == Some(seq)).cloned()
    })
}

/// The turn records a checkpoint holds beside its conversation (none in a checkpoint written
/// before they were kept).
pub(crate) fn checkpoint_turns(bytes: &[u8]) -> Vec<TurnRecord> {
    #[derive(Deserialize)]
    struct Turns {
        #[serde(default)]
        turn_log: Vec<TurnRecord>,
    }
    serde_json::from_slice::<Turns>(bytes).map(|t| t.turn_log).unwrap_or_default()
}

/// A checkpoint as stored: the loop's state and, beside it, the records of its turns.
#[derive(Debug, Serialize)]
pub(crate) struct StoredCheckpoint<'a> {
    #[serde(flatten)]
    pub(crate) state: &'a crate::agent::Checkpoint,
    #[serde(skip_serializing_if = "<[TurnRecord]>::is_empty")]
    pub(crate) turn_log: &'a [TurnRecord],
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(turn: u32, call_seq: u64) -> TurnRecord {
        TurnRecord {
            turn,
            status: "ok".into(),
            served_by: "echo:default".into(),
            usage: Usage { input_tokens: 3, output_tokens: 2, ..Usage::default() },
            cost: Some(Money::from_nano_usd(7)),
            started_ms: 10,
            ended_ms: 12,
            finish_reason: Some("stop".into()),
            call_seq,
        }
    }

    #[test]
    fn a_checkpoint_keeps_its_turns_beside_it_and_an_old_one_still_loads() {
        let state = crate::agent::Checkpoint { turns: 1, ..Default::default() };
        let old = serde_json::to_vec(&state).unwrap();
        assert!(checkpoint_turns(&old).is_empty(), "a checkpoint from before holds no records");
        let turns = [turn(1, 4)];
        let stored = serde_json::to_vec(&StoredCheckpoint { state: &state, turn_log: &turns }).unwrap();
        assert_eq!(checkpoint_turns(&stored), turns);
        // The state reads back the same from either form.
        let back: crate::agent::Checkpoint = serde_json::from_slice(&stored).unwrap();
        assert_eq!(serde_json::to_vec(&back).unwrap(), old);
        // No records: the bytes are those of before.
        let none = serde_json::to_vec(&StoredCheckpoint { state: &state, turn_log: &[] }).unwrap();
        assert_eq!(none, old);
    }

    #[test]
    fn records_are_batched_and_each_is_found_by_its_seq() {
        let store = Arc::new(crate::store::MemoryStore::new());
        let clock = crate::clock::ManualClock::new(1_000);
        let run = RunId::parse("r").unwrap();
        let records = CallRecords::new(run.clone(), store.clone(), Arc::new(clock.clone()));
        let call =
            |seq: u64| CallRecord { seq, prompt: Some(PromptRecord::of("hi")), turns: vec![turn(1, seq)] };
        // The first is written at once; the next ones wait for the interval or the flush.
        records.record(call(3));
        records.record(call(9));
        records.record(call(5));
        let blobs = |store: &crate::store::MemoryStore| -> Vec<String> {
            store.list(&run).unwrap().into_iter().filter(|r| r.starts_with("r/calls/")).collect()
        };
        assert_eq!(blobs(&store), ["r/calls/000000000003-000000000003"]);
        records.flush();
        assert_eq!(blobs(&store).len(), 2);
        assert!(blobs(&store).contains(&"r/calls/000000000005-000000000009".to_owned()));
        for seq in [3, 5, 9] {
            let found = call_record(store.as_ref(), &run, seq).unwrap();
            assert_eq!(found["seq"], seq);
            assert_eq!(found["turns"][0]["cost_nano_usd"], 7);
        }
        assert!(call_record(store.as_ref(), &run, 4).is_none());
        // Past the interval, a record is written with those gathered since.
        records.record(call(11));
        clock.advance(i64::try_from(FLUSH_EVERY.as_millis()).unwrap());
        records.record(call(12));
        assert!(blobs(&store).contains(&"r/calls/000000000011-000000000012".to_owned()));
        // A long prompt is cut, its length kept.
        let long = PromptRecord::of(&"é".repeat(PROMPT_CHARS + 5));
        assert_eq!((long.text.chars().count(), long.chars), (PROMPT_CHARS, PROMPT_CHARS + 5));
    }
}
