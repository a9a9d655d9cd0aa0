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
//! Both the checkpoint and the marker keep what that usage cost by serving model
//! ([`Spend`]): a call that failed over was served at several prices, and its carried turns
//! are counted at theirs, not at the requested model's.
//!
//! The marker is written after the terminal entry: a crash between the two makes the next
//! attempt count that attempt's turns again (an overcount, never an undercount, so the
//! ceiling still holds).

use serde::{Deserialize, Serialize};

use crate::agent::{Checkpoint, Spend};
use crate::journal::{Entry, Name, Seq};
use crate::model::Price;
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
/// entry with no terminal entry), at what they cost (each attempt at the model that served it):
/// a resume counts them spent before anything runs, so the resumed budget never hands out again
/// what they paid (#23.2). One item per checkpoint, by its ref.
pub(crate) fn unsettled(
    engine: &super::EngineInner,
    run_id: &RunId,
    unended: &[(Seq, Option<Name>)],
) -> Vec<(String, Money)> {
    let mut carried = Vec::new();
    for (first, model) in unended {
        let reference = checkpoint_ref_at(run_id, *first);
        let model = model.as_deref().unwrap_or_default();
        let requested = (model, engine.prices.price(model).copied());
        if let Some(cost) = open_turns(engine, &reference, requested).and_then(|spend| spend.cost()) {
            carried.push((reference, cost));
        }
    }
    carried
}

/// What the turns the checkpoint at `reference` holds that no terminal entry does cost, by
/// serving model; `requested` (the call's model and its price) prices a checkpoint written
/// before spend was kept.
pub(crate) fn open_turns(
    engine: &super::EngineInner,
    reference: &str,
    requested: (&str, Option<Price>),
) -> Option<Spend> {
    let checkpoint = checkpoint_at(engine, reference)?;
    unjournaled(engine.transcripts.as_ref(), reference, false, Some(&checkpoint), requested)
}

/// The model a call asked for and its price, for checkpoints that kept no spend.
pub(crate) fn requested<'a>(engine: &super::EngineInner, running: &'a Entry) -> (&'a str, Option<Price>) {
    let model = running.model.as_deref().unwrap_or_default();
    (model, engine.prices.price(model).copied())
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

/// What terminal entries hold of a call's checkpoint: its usage and what that cost by model
/// (a marker written before spend was kept holds the usage alone).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Covered {
    #[serde(flatten)]
    pub(crate) usage: Usage,
    #[serde(default, skip_serializing_if = "Spend::is_empty")]
    pub(crate) spend: Spend,
}

impl Covered {
    /// What a checkpoint holds.
    pub(crate) fn of(checkpoint: &Checkpoint) -> Covered {
        Covered { usage: checkpoint.usage, spend: checkpoint.spend.clone() }
    }

    /// Its spend, or (kept before spend was) its usage at `requested`'s price.
    fn spend(&self, (model, price): (&str, Option<Price>)) -> Spend {
        if !self.spend.is_empty() || self.usage.total_tokens() == 0 {
            return self.spend.clone();
        }
        Spend::of(model, self.usage, price.map(|p| p.cost(&self.usage)))
    }
}

/// What the turns a crashed attempt completed that no terminal entry holds yet cost, by the
/// model that served them; `requested` (the call's model and price) prices a checkpoint or
/// marker that kept usage alone.
pub(crate) fn unjournaled(
    transcripts: &dyn TranscriptStore,
    checkpoint_ref: &str,
    previous_attempt_ended: bool,
    checkpoint: Option<&Checkpoint>,
    requested: (&str, Option<Price>),
) -> Option<Spend> {
    // The latest attempt wrote a terminal entry: it covered the checkpoint as it stands.
    if previous_attempt_ended {
        return None;
    }
    let checkpoint = Covered::of(checkpoint?);
    let journaled: Covered = transcripts
        .get(&marker_ref(checkpoint_ref))
        .ok()
        .flatten()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let carried = checkpoint.spend(requested).minus(&journaled.spend(requested));
    (carried.usage().total_tokens() > 0).then_some(carried)
}

/// Records that terminal entries now hold every turn of the checkpoint `covered`.
pub(crate) fn mark_journaled(transcripts: &dyn TranscriptStore, checkpoint_ref: &str, covered: &Covered) {
    // A lost marker costs at most an overcount on a later crash.
    if let Ok(bytes) = serde_json::to_vec(covered) {
        let _ = transcripts.put(&marker_ref(checkpoint_ref), &bytes);
    }
}
