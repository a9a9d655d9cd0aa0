//! Admission of one agent call: its turn in its fan-out's admission order, then a reserve on
//! its context's account; a refusal is journaled before it takes effect.

use crate::engine::budget::Reservation;
use crate::engine::ctx::Ctx;
use crate::engine::run::Durability;
use crate::error::Error;
use crate::journal::{ContentKey, Kind, Status};
use crate::money::Money;

impl Ctx {
    /// Admission for one agent call: in branch order within its fan-out, then a reserve of
    /// `amount` (`derivation` says how it was reckoned) on this context's account. A refusal
    /// is journaled (a `decision` entry with the call's key and ordinal, so a replay finds it
    /// in the call's place, and the very error the call fails with, so a replay reads the
    /// same) before it takes effect.
    pub(crate) async fn admit(
        &self,
        amount: Money,
        derivation: &(dyn std::fmt::Display + Sync),
        key: ContentKey,
        ordinal: u32,
    ) -> Result<Reservation, Error> {
        if let Some(ticket) = &self.admission {
            ticket.wait(&self.cancel).await;
        }
        let prepaid = self.prepaid.as_ref().and_then(|p| p.lock().unwrap_or_else(|e| e.into_inner()).take());
        let verdict = match (prepaid, &self.admission) {
            // Admitted with a hold (an orchestrator child): exchanged, never reserved twice.
            (Some(hold), _) => self.run.budget.exchange(hold, self.account, amount),
            (None, Some(ticket)) => ticket.reserve(&self.run.budget, self.account, amount),
            (None, None) => self.run.budget.reserve(self.account, amount),
        };
        let verdict = verdict.map_err(|denied| {
            let refusal = crate::engine::admission::refusal(&denied, derivation);

            let mut entry = crate::journal::Entry::new(
                crate::journal::Seq(0),
                Kind::Decision,
                Status::Error,
                self.scope.clone(),
                key,
                ordinal,
            );
            entry.error = Some(refusal.clone());
            entry.set_value(Some(&serde_json::json!({
                "type": "admission",
                "verdict": "refused",
                "requested_nano_usd": denied.requested.nano_usd(),
                "available_nano_usd": denied.available.nano_usd(),
            })));
            // A write failure latches and fails the run; the refusal stands either way.
            let _ = self.run.append_one(entry, Durability::Deferred);
            refusal
        });
        if let Some(ticket) = &self.admission {
            ticket.pass();
        }
        verdict
    }
}
