//! Workers: each claims queued runs one at a time per free slot, drives each through the
//! engine's resume path, renews its claim while the run is driven, watches its claims for
//! cancel requests, and takes a run out of the queue when it settles or parks (see `queue.rs`
//! for what is queued and how a cancel is requested).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::inputs::ResumeOptions;
use super::queue::is_settled;
use super::registry::Engine;
use crate::error::{Error, ErrorCode};
use crate::store::{Claim, RunId, RunQueue, RunStatus};

/// How a [`Worker`] works.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// How many runs it drives at once.
    pub concurrency: usize,
    /// How long a claim lasts unrenewed: a worker that dies holds its runs this long before
    /// another worker takes them over. Renewed every third of it.
    pub claim_ttl: Duration,
    /// How long it waits before looking again when the queue has nothing ready.
    pub poll: Duration,
    /// How long a run another process still drives waits before it is tried again.
    pub busy_retry: Duration,
    /// Who claims: the owner written into claims (default: `worker pid N on HOST`).
    pub owner: String,
    /// How often it looks for requests (from other processes) to cancel the runs it drives.
    pub cancel_poll: Duration,
    /// How many claims a run that cannot be driven gets (a worker whose `cairn.toml` lacks the
    /// run's provider, say) before it is settled `error` with the reason. Between them the run
    /// waits in the queue, longer each time, for a worker that can drive it.
    pub max_attempts: u32,
}

impl Default for WorkerOptions {
    fn default() -> WorkerOptions {
        WorkerOptions {
            concurrency: 1,
            claim_ttl: Duration::from_secs(30),
            poll: Duration::from_millis(100),
            busy_retry: Duration::from_millis(500),
            owner: format!("worker {}", super::lease::owner()),
            cancel_poll: Duration::from_millis(500),
            max_attempts: 5,
        }
    }
}

/// What a worker did, counted when it stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct WorkerReport {
    /// Runs it drove to a settled status (`ok`, `error`, `cancelled`, `exhausted`).
    pub settled: u64,
    /// Runs it drove until they parked waiting for a person.
    pub suspended: u64,
    /// Claims it took over from a worker whose claim had expired.
    pub takeovers: u64,
    /// Claims it handed back because another process still drove the run.
    pub deferred: u64,
    /// Claims of runs that could not be driven (each logged: the run stays queued for
    /// another try, or after its last attempt is settled `error` with the reason).
    pub failed: u64,
}

/// Claims queued runs from the engine's store and drives them, `concurrency` at a time.
#[derive(Debug, Clone)]
pub struct Worker {
    engine: Engine,
    options: WorkerOptions,
}

/// How one claim ended.
enum Driven {
    Settled,
    Suspended,
    Deferred,
    Failed,
}

impl Worker {
    /// A worker over the engine's store.
    ///
    /// # Errors
    /// `config` when the store keeps no run queue.
    pub fn new(engine: Engine, mut options: WorkerOptions) -> Result<Worker, Error> {
        if engine.inner.journal.queue().is_none() {
            return Err(Error::config("this store keeps no run queue; use a sqlite or postgres store"));
        }
        options.concurrency = options.concurrency.max(1);
        Ok(Worker { engine, options })
    }

    /// Claims and drives runs until `shutdown` fires; then claims nothing more, finishes the
    /// runs in flight and returns what it did. A worker killed instead loses nothing: its
    /// claims expire and other workers resume its runs from their journals.
    pub async fn run_until(&self, shutdown: CancellationToken) -> WorkerReport {
        let slots = Arc::new(tokio::sync::Semaphore::new(self.options.concurrency));
        let mut tasks: JoinSet<Driven> = JoinSet::new();
        let mut report = WorkerReport::default();
        let driving = Driving::default();
        let watcher = tokio::spawn(watch_cancels(self.engine.clone(), self.options.clone(), driving.clone()));
        loop {
            while let Some(done) = tasks.try_join_next() {
                tally(&mut report, done);
            }
            let permit = tokio::select! {
                permit = slots.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break,
                },
                _ = shutdown.cancelled() => break,
            };
            if shutdown.is_cancelled() {
                break;
            }
            let engine = self.engine.clone();
            let (owner, ttl) = (self.options.owner.clone(), self.options.claim_ttl);
            let claimed = tokio::task::spawn_blocking(move || match engine.inner.journal.queue() {
                Some(queue) => queue.claim(&owner, ttl),
                None => Ok(None),
            })
            .await;
            match claimed {
                Ok(Ok(Some(claim))) => {
                    if claim.takeover {
                        report.takeovers += 1;
                        tracing::info!(run = %claim.run_id, attempts = claim.attempts, "took over a run whose worker's claim expired");
                    }
                    let (engine, options) = (self.engine.clone(), self.options.clone());
                    let cancelled = driving.register(&claim.run_id);
                    let driving = driving.clone();
                    tasks.spawn(async move {
                        let driven = drive(&engine, &options, &claim, &cancelled).await;
                        driving.forget(&claim.run_id);
                        drop(permit);
                        driven
                    });
                }
                other => {
                    drop(permit);
                    if let Ok(Err(e)) | Err(e) =
                        other.map_err(|e| crate::store::Error::Postgres(e.to_string()))
                    {
                        tracing::warn!(error = %e, "claiming from the run queue failed");
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(self.options.poll) => {}
                        _ = shutdown.cancelled() => break,
                        Some(done) = tasks.join_next(), if !tasks.is_empty() => tally(&mut report, done),
                    }
                }
            }
        }
        while let Some(done) = tasks.join_next().await {
            tally(&mut report, done);
        }
        watcher.abort();
        report
    }
}

/// The runs a worker drives, each with the token that cancels it.
#[derive(Debug, Clone, Default)]
struct Driving(Arc<Mutex<HashMap<RunId, CancellationToken>>>);

impl Driving {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, CancellationToken>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(&self, run: &RunId) -> CancellationToken {
        let token = CancellationToken::new();
        self.lock().insert(run.clone(), token.clone());
        token
    }

    fn forget(&self, run: &RunId) {
        self.lock().remove(run);
    }
}

/// Looks for cancel requests on the worker's claims every `cancel_poll` (one query for all of
/// them, none while it drives nothing) and fires the tokens of the runs asked to cancel.
async fn watch_cancels(engine: Engine, options: WorkerOptions, driving: Driving) {
    loop {
        tokio::time::sleep(options.cancel_poll).await;
        if driving.lock().is_empty() {
            continue;
        }
        let owner = options.owner.clone();
        match on_queue(&engine, move |queue| queue.cancel_requests(&owner)).await {
            Ok(asked) => {
                let driving = driving.lock();
                for run in asked {
                    if let Some(token) = driving.get(&run) {
                        token.cancel();
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not look for cancel requests"),
        }
    }
}

fn tally(report: &mut WorkerReport, done: Result<Driven, tokio::task::JoinError>) {
    match done {
        Ok(Driven::Settled) => report.settled += 1,
        Ok(Driven::Suspended) => report.suspended += 1,
        Ok(Driven::Deferred) => report.deferred += 1,
        Ok(Driven::Failed) | Err(_) => report.failed += 1,
    }
}

/// Runs a blocking queue operation off the async threads.
async fn on_queue<T: Send + 'static>(
    engine: &Engine,
    op: impl FnOnce(&dyn RunQueue) -> crate::store::Result<T> + Send + 'static,
) -> Result<T, Error> {
    let engine = engine.clone();
    tokio::task::spawn_blocking(move || match engine.inner.journal.queue() {
        Some(queue) => op(queue).map_err(Error::from),
        None => Err(Error::config("this store keeps no run queue")),
    })
    .await
    .map_err(|e| Error::internal(format!("a queue task failed: {e}")))?
}

/// Drives one claimed run to settlement or suspension, renewing the claim meanwhile.
async fn drive(
    engine: &Engine,
    options: &WorkerOptions,
    claim: &Claim,
    cancelled: &CancellationToken,
) -> Driven {
    let run = claim.run_id.clone();
    // Whether someone had asked to cancel the run when it left the queue.
    let finish = |claim: Claim| async move {
        match on_queue(engine, move |queue| queue.finish(&claim)).await {
            Ok(asked) => asked,
            Err(e) => {
                // Lost to a takeover (this worker stalled past its claim). The worker that took
                // it found the run driven here and handed it back for later, so the run, settled
                // or parked now, is taken out unless a live claim holds it (whose worker finds
                // it settled and finishes it); else it stayed queued until some worker claimed it
                // again, and with none left, for good.
                tracing::warn!(run = %run, error = %e, "could not take a driven run out of the queue");
                let held = run.clone();
                if let Err(e) = on_queue(engine, move |queue| queue.withdraw(&held)).await {
                    tracing::warn!(run = %run, error = %e, "could not withdraw a driven run from the queue");
                }
                false
            }
        }
    };
    // A run claimed before may have settled under an earlier claim that never finished. A
    // first claim is of a run that waits (and the resume reads its meta anyway).
    if claim.attempts > 1 {
        let meta = {
            let engine = engine.clone();
            let run = claim.run_id.clone();
            tokio::task::spawn_blocking(move || engine.inner.journal.get_meta(&run)).await
        };
        match meta {
            Ok(Ok(Some(meta))) if is_settled(meta.status) => {
                finish(claim.clone()).await;
                return Driven::Settled;
            }
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => {
                tracing::warn!(run = %claim.run_id, "a queued run has no meta record; dropping it from the queue");
                finish(claim.clone()).await;
                return Driven::Failed;
            }
            _ => return defer(engine, options, claim).await,
        }
    }
    let resumed = {
        let engine = engine.clone();
        let run = claim.run_id.clone();
        // Starting a resume reads and writes the store: off the async threads.
        tokio::task::spawn_blocking(move || engine.resume(&run, ResumeOptions::default())).await
    };
    let mut handle = match resumed {
        Ok(Ok(handle)) => handle,
        Ok(Err(e)) if e.code == ErrorCode::RunBusy => return defer(engine, options, claim).await,
        Ok(Err(e)) => return cannot_drive(engine, options, claim, e).await,
        Err(_) => return defer(engine, options, claim).await,
    };
    handle.release_events();
    let renew_every = (options.claim_ttl / 3).max(Duration::from_millis(10));
    let mut cancel_sent = false;
    // The run's agent deltas reach this process's listeners once one asks (none are built
    // before); a relay that lost its listeners ends, and the next listener starts another.
    let live = engine.inner.live.clone();
    let mut relaying: Option<tokio::task::JoinHandle<()>> = None;
    // Listeners in other processes (another `cairn serve` over the same store) get the deltas
    // through the store while one wants them, whether or not any listens here (`live_store`).
    let mut storing: Option<tokio::task::JoinHandle<()>> = None;
    let owner = super::lease::owner();
    let mut look = tokio::time::interval(super::live_store::WANTED_POLL);
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + renew_every, renew_every);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let outcome = loop {
        let relay_idle = relaying.as_ref().is_none_or(tokio::task::JoinHandle::is_finished);
        let store_idle = storing.as_ref().is_none_or(tokio::task::JoinHandle::is_finished);
        tokio::select! {
            outcome = handle.wait() => break outcome,
            () = live.wanted(&claim.run_id), if relay_idle => {
                relaying = Some(tokio::spawn(super::live::relay(live.clone(), claim.run_id.clone(), handle.events())));
            }
            _ = look.tick(), if store_idle => {
                let (store, run, own, now) = (
                    engine.inner.transcripts.clone(),
                    claim.run_id.clone(),
                    owner.clone(),
                    engine.inner.clock.now_ms(),
                );
                let wanted = tokio::task::spawn_blocking(move || {
                    super::live_store::wanted_elsewhere(store.as_ref(), &run, &own, now)
                })
                .await;
                if matches!(wanted, Ok(true)) {
                    storing = Some(tokio::spawn(super::live_store::relay_to_store(
                        engine.inner.transcripts.clone(),
                        engine.inner.clock.clone(),
                        claim.run_id.clone(),
                        owner.clone(),
                        handle.events(),
                    )));
                }
            }
            _ = cancelled.cancelled(), if !cancel_sent => {
                tracing::info!(run = %claim.run_id, "cancelling a run at another process's request");
                handle.cancel();
                cancel_sent = true;
            }
            _ = renew.tick() => {
                let (held, ttl) = (claim.clone(), options.claim_ttl);
                if let Err(e) = on_queue(engine, move |queue| queue.renew(&held, ttl)).await {
                    tracing::warn!(run = %claim.run_id, error = %e, "could not renew a claim");
                }
            }
        }
    };
    match outcome {
        // The store failed under the run (an outage, a restart): it is driven again from its
        // journal, which holds everything it paid for, once the store answers.
        Ok(outcome)
            if outcome.status == RunStatus::Error
                && outcome.error.as_ref().is_some_and(is_store_failure)
                && claim.attempts < options.max_attempts.saturating_mul(4) =>
        {
            tracing::warn!(run = %claim.run_id, attempt = claim.attempts, error = ?outcome.error.as_ref().map(|e| &e.message), "the store failed under a run: it is driven again");
            retry_later(engine, options, claim).await
        }
        // The outcome is not durable (the settlement could not be written): the run is
        // driven again, never left `running` out of the queue.
        Ok(outcome)
            if claim.attempts < options.max_attempts.saturating_mul(4)
                && outcome.error.as_ref().is_none_or(|e| e.code != ErrorCode::RekeyRefused)
                && !durably(engine, &claim.run_id, outcome.status).await =>
        {
            tracing::warn!(run = %claim.run_id, status = %outcome.status, "a run's outcome did not reach the store: it is driven again");
            retry_later(engine, options, claim).await
        }

        Ok(outcome)
            if outcome.status == RunStatus::Suspended
                && !cancelled.is_cancelled()
                && outcome.pending.iter().any(|p| p.deadline_ms.is_some()) =>
        {
            // Parked until its earliest deadline: it stays in the queue, unclaimed, ready then
            // (a resolution before it makes it ready at once), across restarts.
            let deadline = outcome.pending.iter().filter_map(|p| p.deadline_ms).min().unwrap_or(0);
            let wait = u64::try_from(deadline.saturating_sub(engine.inner.clock.now_ms())).unwrap_or(0);
            let (held, delay) = (claim.clone(), Duration::from_millis(wait));
            if let Err(e) = on_queue(engine, move |queue| queue.defer(&held, delay)).await {
                tracing::warn!(run = %claim.run_id, error = %e, "could not park a run until its deadline");
            }
            // A resolution left for this driver as it parked waits for nobody: ready it now.
            requeue_if_resolved(engine, &claim.run_id).await;
            Driven::Suspended
        }
        Ok(outcome) if outcome.status == RunStatus::Suspended => {
            let asked = finish(claim.clone()).await || cancelled.is_cancelled();
            if asked {
                // Asked to cancel as it parked: nobody drives it now, so it is cancelled here.
                let (engine, run) = (engine.clone(), claim.run_id.clone());
                let cancelled = tokio::task::spawn_blocking(move || engine.cancel_run(&run)).await;
                if let Ok(Err(e)) = cancelled {
                    tracing::warn!(run = %claim.run_id, error = %e, "could not cancel a parked run as asked");
                }
                return Driven::Settled;
            }
            // A resolution left for this driver as it parked the run would wait for nobody:
            // the resolver saw the run driven. Checked after the run left the queue, so either
            // this sees it or the resolver sees the run parked and puts it back itself.
            requeue_if_resolved(engine, &claim.run_id).await;
            Driven::Suspended
        }
        Ok(outcome) if is_settled(outcome.status) => {
            finish(claim.clone()).await;
            Driven::Settled
        }
        Ok(_) | Err(_) => defer(engine, options, claim).await,
    }
}

/// Hands a claim back for a later try.
async fn defer(engine: &Engine, options: &WorkerOptions, claim: &Claim) -> Driven {
    defer_for(engine, claim, options.busy_retry).await
}

/// Hands a claim back for a try after `delay`. When even that fails (the store is down), the
/// claim lapses at its expiry and the run is claimable again: nothing is lost either way.
async fn defer_for(engine: &Engine, claim: &Claim, delay: Duration) -> Driven {
    let held = claim.clone();
    if let Err(e) = on_queue(engine, move |queue| queue.defer(&held, delay)).await {
        tracing::warn!(run = %claim.run_id, error = %e, "could not hand a claim back; it lapses at its expiry");
    }
    Driven::Deferred
}

/// Hands a claim back for a try later the more claims the run has had (`busy_retry`
/// doubled per claim, at most 30 s).
async fn retry_later(engine: &Engine, options: &WorkerOptions, claim: &Claim) -> Driven {
    let doublings = claim.attempts.saturating_sub(1).min(10);
    let delay = options.busy_retry.saturating_mul(1 << doublings).min(Duration::from_secs(30));
    defer_for(engine, claim, delay).await
}

/// A run this worker could not start: left in the queue for a later claim (this worker's or
/// one configured to drive it) until it has had `max_attempts`, then settled `error` with the
/// reason journaled. A store failure is never the run's fault: it is only retried.
async fn cannot_drive(engine: &Engine, options: &WorkerOptions, claim: &Claim, error: Error) -> Driven {
    let run = &claim.run_id;
    if is_store_failure(&error) || claim.attempts < options.max_attempts {
        tracing::warn!(run = %run, attempt = claim.attempts, max_attempts = options.max_attempts, error = %error, "a queued run could not be driven; it stays queued for another try");
        retry_later(engine, options, claim).await;
        return Driven::Failed;
    }
    tracing::error!(run = %run, attempts = claim.attempts, error = %error, "a queued run could not be driven by any claim: settled error");
    let reason = Error::new(
        error.code,
        format!("no worker could drive the run in {} attempts: {}", claim.attempts, error.message),
    );
    let settled = {
        let (engine, run) = (engine.clone(), run.clone());
        tokio::task::spawn_blocking(move || engine.settle_undrivable(&run, &reason)).await
    };
    match settled {
        Ok(Ok(())) => {
            let held = claim.clone();
            if let Err(e) = on_queue(engine, move |queue| queue.finish(&held).map(drop)).await {
                tracing::warn!(run = %run, error = %e, "could not take a settled run out of the queue");
            }
        }
        Ok(Err(e)) => {
            tracing::warn!(run = %run, error = %e, "could not settle a run no worker can drive; it stays queued");
            retry_later(engine, options, claim).await;
        }
        Err(_) => {
            retry_later(engine, options, claim).await;
        }
    }
    Driven::Failed
}

/// Whether the store holds `status` for the run now (`false` when it cannot be read).
async fn durably(engine: &Engine, run: &RunId, status: RunStatus) -> bool {
    let (engine, run) = (engine.clone(), run.clone());
    matches!(
        tokio::task::spawn_blocking(move || engine.inner.journal.get_meta(&run)).await,
        Ok(Ok(Some(meta))) if meta.status == status
    )
}

/// Whether an error is the store's (unreachable, restarting, out of space), not the run's.
fn is_store_failure(error: &Error) -> bool {
    error.code == ErrorCode::StoreIo
        || (error.code == ErrorCode::Internal
            && ["postgres failed", "sqlite failed", "store i/o failed", "no connection to the store"]
                .iter()
                .any(|m| error.message.contains(m)))
}

/// Puts `run` back in the queue when a resolution waits in its inbox: one left for the driver
/// that just parked it would otherwise wait for nobody (the resolver saw the run driven).
async fn requeue_if_resolved(engine: &Engine, run: &RunId) {
    let (engine, run_id) = (engine.clone(), run.clone());
    let requeued = tokio::task::spawn_blocking(move || {
        let prefix = format!("{run_id}/inbox/");
        let waiting = engine.inner.transcripts.list(&run_id)?.iter().any(|r| r.starts_with(&prefix));
        if waiting && let Some(queue) = engine.inner.journal.queue() {
            queue.enqueue(&run_id)?;
        }
        Ok::<_, Error>(())
    })
    .await;
    if let Ok(Err(e)) = requeued {
        tracing::warn!(run = %run, error = %e, "could not put a resolved parked run back in the queue");
    }
}
