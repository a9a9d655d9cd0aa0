//! Admission of one agent call: the run's spawn cap, its turn in its fan-out's admission
//! order, then a reserve on its context's account; a refusal is journaled before it takes
//! effect.

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;

use serde_json::Value;

use super::prepare::Resolved;
use crate::engine::admit::reserve_for;
use crate::engine::budget::Reservation;
use crate::engine::ctx::Ctx;
use crate::engine::events::EventKind;
use crate::engine::options::AgentOptions;
use crate::engine::run::Durability;
use crate::error::{Error, ErrorCode};
use crate::journal::{ContentKey, Kind, Status};
use crate::model::Price;
use crate::money::Money;
use crate::provider::ChatRequest;

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

impl Ctx {
    /// The admission step of a live call: the run's spawn cap, then a reserve derived from
    /// the call's first request (its price, its tools, its estimate) on this context's
    /// account. A refusal is the call's result ([`ControlFlow::Break`]) and frees its spawn.
    pub(super) async fn admit_call(
        &self,
        call: &Resolved<'_>,
        opts: &AgentOptions,
        request: &ChatRequest,
        price: Option<&Price>,
        site: (ContentKey, u32),
        span: u64,
    ) -> ControlFlow<Result<Value, Error>, Reservation> {
        let engine = &self.run.engine;
        let label = opts.label.clone();
        let spawned = self.run.spawns.fetch_add(1, Ordering::SeqCst) + 1;
        if spawned > engine.max_spawns {
            self.run
                .emit(self.span_pair(span), false, || EventKind::BudgetExhausted { what: "spawn".into() });
            let error = Error::new(
                ErrorCode::BudgetExhausted,
                format!("the run reached its lifetime cap of {} agent spawns", engine.max_spawns),
            );
            return ControlFlow::Break(self.fail(opts.on_error, "agent", label, error));
        }
        let est_cost = opts.est_cost.or_else(|| call.profile.and_then(|p| p.est_cost));
        let bounded = self.run.budget.is_bounded(self.account);
        let unpriced_ok = engine.prices.unpriced_allowed();
        let reserve = match reserve_for(
            &call.model_name,
            price,
            request,
            &call.tools,
            est_cost,
            bounded,
            unpriced_ok,
        ) {
            Ok(reserve) => reserve,
            Err(error) => {
                self.run.spawns.fetch_sub(1, Ordering::SeqCst);
                return ControlFlow::Break(self.fail(opts.on_error, "agent", label, error));
            }
        };
        match self.admit(reserve.amount, &reserve.derivation, site.0, site.1).await {
            Ok(reservation) => ControlFlow::Continue(reservation),
            Err(error) => {
                self.run.spawns.fetch_sub(1, Ordering::SeqCst);
                self.run.emit(self.span_pair(span), false, || EventKind::BudgetExhausted {
                    what: "agent".into(),
                });
                ControlFlow::Break(self.agent_failed(opts, label, error, None))
            }
        }
    }
}
