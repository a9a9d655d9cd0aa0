//! The life of one live agent call, as a small explicit state machine:
//!
//! ```text
//! Admitted ──▶ Attempt(1) ──▶ TurnCheckpointed ──▶ Attempt(n) ──▶ … ──▶ Settled
//!                  │  ▲ retry, failover                                   ▲
//!                  └──┘                                                   │
//!        (any state) ─────────────────────────────────────────────────────┘
//! ```
//!
//! *Admitted*: its reservation is held, nothing is sent. *Attempt(n)*: the turn guard granted
//! the call's n-th wire attempt (retries and failovers count); the attempt's money is in the
//! call's ledger (`agent::ledger`). *TurnCheckpointed*: a turn boundary is durable, and the
//! checkpoint holds the usage of every completed turn (so a resume counts it spent). *Settled*:
//! the terminal entry is written and the reservation settled; what the settlement needs (whether
//! this attempt wrote a checkpoint, the usage checkpoints hold) comes out of the transition.

use crate::engine::carry::Covered;

/// Where a call is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Its reservation is held; nothing is on the wire yet.
    Admitted,
    /// Its n-th wire attempt (counting from 1, across turns, retries and failovers).
    Attempt(u32),
    /// A turn boundary is durable.
    TurnCheckpointed,
    /// Its terminal entry is written and its reservation settled.
    Settled,
}

/// What settling a call takes from its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settlement {
    /// Whether this attempt of the call wrote a checkpoint (its terminal entry points at it).
    pub(crate) wrote_checkpoint: bool,
    /// The usage the call's latest checkpoint holds (its completed turns, every attempt of
    /// the call included) and what it cost by model, which the terminal entry now covers.
    pub(crate) covered: Option<Covered>,
    /// Wire attempts made.
    pub(crate) attempts: u32,
}

/// One live call's life.
#[derive(Debug)]
pub(crate) struct CallLife {
    phase: Phase,
    attempts: u32,
    wrote_checkpoint: bool,
    checkpointed: Option<Covered>,
}

impl CallLife {
    /// A call just admitted; `resumed` is the usage of the checkpoint it continues from.
    pub(crate) fn admitted(resumed: Option<Covered>) -> CallLife {
        CallLife { phase: Phase::Admitted, attempts: 0, wrote_checkpoint: false, checkpointed: resumed }
    }

    /// The current phase.
    #[cfg(test)]
    pub(crate) fn phase(&self) -> Phase {
        self.phase
    }

    /// Whether this attempt of the call has written a checkpoint yet.
    pub(crate) fn wrote_checkpoint(&self) -> bool {
        self.wrote_checkpoint
    }

    /// The next wire attempt was granted.
    pub(crate) fn attempt(&mut self) {
        if self.phase == Phase::Settled {
            return;
        }
        self.attempts += 1;
        self.phase = Phase::Attempt(self.attempts);
    }

    /// A checkpoint holding `usage` is durable.
    pub(crate) fn checkpointed(&mut self, usage: Covered) {
        if self.phase == Phase::Settled {
            return;
        }
        self.wrote_checkpoint = true;
        self.checkpointed = Some(usage);
        self.phase = Phase::TurnCheckpointed;
    }

    /// The call settles.
    pub(crate) fn settle(&mut self) -> Settlement {
        self.phase = Phase::Settled;
        Settlement {
            wrote_checkpoint: self.wrote_checkpoint,
            covered: self.checkpointed.clone(),
            attempts: self.attempts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::Usage;

    fn covering(output_tokens: u64) -> Covered {
        Covered { usage: Usage { output_tokens, ..Usage::default() }, ..Covered::default() }
    }

    #[test]
    fn a_call_goes_from_admitted_through_attempts_and_checkpoints_to_settled() {
        let resumed = covering(5);
        let mut life = CallLife::admitted(Some(resumed.clone()));
        assert_eq!(life.phase(), Phase::Admitted);
        life.attempt();
        life.attempt(); // a retry
        assert_eq!(life.phase(), Phase::Attempt(2));
        assert!(!life.wrote_checkpoint());
        let turn = covering(12);
        life.checkpointed(turn.clone());
        assert_eq!(life.phase(), Phase::TurnCheckpointed);
        life.attempt();
        assert_eq!(life.phase(), Phase::Attempt(3));
        let settled = life.settle();
        assert_eq!(settled, Settlement { wrote_checkpoint: true, covered: Some(turn), attempts: 3 });
        // Nothing moves a settled call.
        life.attempt();
        life.checkpointed(Covered::default());
        assert_eq!(life.phase(), Phase::Settled);
        // A call that never checkpoints covers what it resumed from.
        let mut fresh = CallLife::admitted(Some(resumed.clone()));
        assert_eq!(fresh.settle().covered, Some(resumed));
    }
}
