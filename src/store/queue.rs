//! The run queue seam: runs waiting for a worker, claimed one at a time under a lease.
//!
//! A queued run is a run whose meta, arguments and script are already stored (status
//! `queued`); the queue holds only its id, when it became ready and who claims it. A worker
//! claims the oldest ready run with a lease (an owner, an epoch that only grows, an expiry),
//! renews the claim while it drives the run, and finishes it when the run settles or parks
//! (suspends). A claim whose worker died expires, and the next claim takes the run over: that
//! is a *takeover*, counted by the store so an operator can see it. The run's own journal
//! writes are fenced by the run's lease ([`LeasableStore`](super::LeasableStore)); the claim
//! only decides which worker should drive it.

use std::time::Duration;

use super::error::Result;
use super::run_id::RunId;

/// A worker's claim on one queued run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The claimed run.
    pub run_id: RunId,
    /// The claiming worker.
    pub owner: String,
    /// The claim's fencing epoch: strictly increasing per queued run, so a worker whose claim
    /// was taken over can neither renew nor finish it.
    pub epoch: u64,
    /// Whether this claim took the run from a worker whose claim had expired.
    pub takeover: bool,
    /// How many claims the run has had since it was enqueued (this one included).
    pub attempts: u32,
}

/// A durable queue of runs for workers to drive.
///
/// Every method is one atomic unit of the store: two workers never hold live claims on one
/// run, and a claim is granted only to a run that is ready (never claimed, deferred until a
/// time now past, or claimed by a worker whose claim expired).
pub trait RunQueue: Send + Sync + std::fmt::Debug {
    /// Puts a run (whose meta and inputs are stored) in the queue, ready now. A run already
    /// in the queue keeps its place and its claim; an unclaimed one deferred to later (a parked
    /// run waiting for its deadline, once a resolution reached it) becomes ready now.
    ///
    /// # Errors
    /// The store's failure.
    fn enqueue(&self, run: &RunId) -> Result<()>;

    /// Claims the oldest ready run for `owner` for `ttl`, or `None` when nothing is ready.
    ///
    /// # Errors
    /// The store's failure.
    fn claim(&self, owner: &str, ttl: Duration) -> Result<Option<Claim>>;

    /// Extends a live claim by `ttl` from now.
    ///
    /// # Errors
    /// [`Error::LeaseHeld`](super::Error::LeaseHeld) when the claim is no longer current.
    fn renew(&self, claim: &Claim, ttl: Duration) -> Result<()>;

    /// Takes the run out of the queue: it settled, or parked waiting for a person. Returns
    /// whether someone had asked to cancel it (a run that parked is then still to cancel).
    ///
    /// # Errors
    /// [`Error::LeaseHeld`](super::Error::LeaseHeld) when the claim is no longer current.
    fn finish(&self, claim: &Claim) -> Result<bool>;

    /// Gives the claim up and makes the run ready again after `delay` (its driver could not
    /// start it yet, or is shutting down).
    ///
    /// # Errors
    /// [`Error::LeaseHeld`](super::Error::LeaseHeld) when the claim is no longer current.
    fn defer(&self, claim: &Claim, delay: Duration) -> Result<()>;

    /// Takes a run out of the queue when no live claim holds it (never claimed, deferred, or
    /// claimed by a worker whose claim expired): a run cancelled before any worker drives it.
    /// `false` when a live claim holds it, or it is not in the queue.
    ///
    /// # Errors
    /// The store's failure.
    fn withdraw(&self, run: &RunId) -> Result<bool>;

    /// Records a request to cancel a run in the queue, for the worker that claims (or holds) it
    /// to act on; durable, and kept until the run leaves the queue. `false` when the run is not
    /// in the queue.
    ///
    /// # Errors
    /// The store's failure.
    fn request_cancel(&self, run: &RunId) -> Result<bool>;

    /// The runs claimed by `owner` that someone asked to cancel.
    ///
    /// # Errors
    /// The store's failure.
    fn cancel_requests(&self, owner: &str) -> Result<Vec<RunId>>;

    /// How many runs are in the queue (claimed or not).
    ///
    /// # Errors
    /// The store's failure.
    fn depth(&self) -> Result<u64>;

    /// How many runs in the queue are unclaimed and deferred to a later time: parked runs
    /// waiting for a deadline (and runs handed back for a later try).
    ///
    /// # Errors
    /// The store's failure.
    fn delayed(&self) -> Result<u64> {
        Ok(0)
    }

    /// How many claims took a run over from a worker whose claim had expired, since the store
    /// was created.
    ///
    /// # Errors
    /// The store's failure.
    fn takeovers(&self) -> Result<u64>;

    /// The runs in the queue claimed more than once (retried after a failed or lapsed
    /// claim), with how many claims each has had: what `/metrics` shows of runs a worker
    /// could not drive.
    ///
    /// # Errors
    /// The store's failure.
    fn retried(&self) -> Result<Vec<(RunId, u32)>> {
        Ok(Vec::new())
    }
}
