//! Usage a rerun carries: each paid turn is charged exactly once across any sequence of
//! failures, suspensions and crashes.
//!
//! An agent's checkpoint holds the usage of every turn it completed, across attempts. An
//! attempt that ends writes a terminal entry with its own usage; an attempt that crashes
//! writes none, so the next attempt carries the crashed one's completed turns. What it must
//! carry is the checkpoint's usage *minus what earlier terminal entries already journaled*:
//! after each terminal entry is durable, the checkpoint usage it covered is recorded beside
//! the checkpoint (`<checkpoint>/journaled`). Adding the whole checkpoint usage counted the
//! turns before a failure twice (#18.3).
//!
//! The marker is written after the terminal entry: a crash between the two makes the next
//! attempt count that attempt's turns again (an overcount, never an undercount, so the
//! ceiling still holds).

use crate::agent::Checkpoint;
use crate::journal::{Entry, Name, Seq};
use crate::money::Money;
use crate::store::{RunId, TranscriptStore};
use crate::usage::Usage;

/// Where the checkpoint of the call whose attempt is `running` lives: beside the call's
/// first attempt (`target` of a later attempt's `running` entry).
pub(crate) fn checkpoint_ref(run_id: &RunId, running: &Entry) -> String {
    checkpoint_ref_at(run_id, running.target.unwrap_or(running.seq))
}

/// Where the checkpoint of the call whose first attempt is `first` lives.
fn checkpoint_ref_at(run_id: &RunId, first: Seq) -> String {
    format!("{run_id}/ckpt/{}", first.0)
}

/// The checkpointed turns of every agent call a crashed segment left unsettled (a `running`
/// entry with no terminal entry), priced at the call's model: a resume counts them spent
/// before anything runs, so the resumed budget never hands out again what they paid (#23.2).
/// One item per checkpoint, by its ref.
pub(crate) fn unsettled(
    engine: &super::EngineInner,
    run_id: &RunId,
    unended: &[(Seq, Option<Name>)],
) -> Vec<(String, Money)> {
    let mut carried = Vec::new();
    for (first, model) in unended {
        let reference = checkpoint_ref_at(run_id, *first);
        let Some(usage) = open_turns(engine, &reference) else { continue };
        let price = model.as_deref().and_then(|m| engine.prices.price(m));
        if let Some(price) = price {
            carried.push((reference, price.cost(&usage)));
        }
    }
    carried
}

/// The usage of the turns the checkpoint at `reference` holds that no terminal entry does.
pub(crate) fn open_turns(engine: &super::EngineInner, reference: &str) -> Option<Usage> {
    let checkpoint = checkpoint_at(engine, reference)?;
    unjournaled(engine.transcripts.as_ref(), reference, false, Some(&checkpoint))
}

/// The checkpoint at `reference`, when one was written.
pub(crate) fn checkpoint_at(engine: &super::EngineInner, reference: &str) -> Option<Checkpoint> {
    engine
        .transcripts
        .get(reference)
        .ok()
        .flatten()
        .and_then(|bytes| serde_json::from_slice::<Checkpoint>(&bytes).ok())
}

fn marker_ref(checkpoint_ref: &str) -> String {
    format!("{checkpoint_ref}/journaled")
}

/// The usage of turns a crashed attempt completed that no terminal entry holds yet.
pub(crate) fn unjournaled(
    transcripts: &dyn TranscriptStore,
    checkpoint_ref: &str,
    previous_attempt_ended: bool,
    checkpoint: Option<&Checkpoint>,
) -> Option<Usage> {
    // The latest attempt wrote a terminal entry: it covered the checkpoint as it stands.
    if previous_attempt_ended {
        return None;
    }
    let checkpoint = checkpoint?;
    let journaled: Usage = transcripts
        .get(&marker_ref(checkpoint_ref))
        .ok()
        .flatten()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let carried = minus(&checkpoint.usage, &journaled);
    (carried.total_tokens() > 0).then_some(carried)
}

/// Records that terminal entries now hold every turn of `checkpoint_usage`.
pub(crate) fn mark_journaled(
    transcripts: &dyn TranscriptStore,
    checkpoint_ref: &str,
    checkpoint_usage: &Usage,
) {
    // A lost marker costs at most an overcount on a later crash.
    if let Ok(bytes) = serde_json::to_vec(checkpoint_usage) {
        let _ = transcripts.put(&marker_ref(checkpoint_ref), &bytes);
    }
}

/// `a − b`, field by field, never below zero.
fn minus(a: &Usage, b: &Usage) -> Usage {
    Usage {
        input_tokens: a.input_tokens.saturating_sub(b.input_tokens),
        output_tokens: a.output_tokens.saturating_sub(b.output_tokens),
        cache_read_tokens: a.cache_read_tokens.saturating_sub(b.cache_read_tokens),
        cache_write_tokens: a.cache_write_tokens.saturating_sub(b.cache_write_tokens),
        reasoning_tokens: a.reasoning_tokens.saturating_sub(b.reasoning_tokens),
        approximate: a.approximate,
    }
}
