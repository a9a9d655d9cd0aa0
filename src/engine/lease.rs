//! One driver per run: the run's lease, taken when a run starts or resumes, renewed while it
//! runs, fencing every journal append and meta write, and released when it settles; and the
//! inbox through which another process resolves a wait of a run being driven.
//!
//! A store that grants leases ([`JournalStore::leases`](crate::store::JournalStore::leases))
//! refuses a second driver at once: the engine reports `run_busy`, naming the holder. A
//! driver that dies keeps the run until its lease expires (the ttl, 30 s by default; the JSONL
//! store's OS file locks free it at once).
//!
//! Resolutions while a run is driven elsewhere: the resolver cannot append to the journal (the
//! driver owns its seqs), so it leaves the resolution in the run's inbox (blobs under
//! `<run>/inbox/`). The driver drains the inbox while it has open waits, appending each as its
//! own resolution entry; a resume drains what a driver left before it loads the journal. An
//! inbox item is deleted only after its resolution is durable, so nothing is lost; a crash in
//! between records the same resolution twice, and the second attempt is recorded as not
//! applied.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::registry::EngineInner;
use super::resolution::{check_stored_resolution, claim_first, resolve_stored, target_of};
use crate::clock::SharedClock;
use crate::error::{Error, ErrorCode};
use crate::store::{self, Lease, RunId};

/// How long a run's lease lasts without renewal, unless the engine is told otherwise.
pub(crate) const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// How a resolution of an external wait was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// It closed the wait.
    Applied,
    /// An earlier resolution had closed the wait; this attempt is recorded, not applied.
    AlreadyResolved,
    /// Another process is driving the run: the resolution waits in the run's inbox, and the
    /// driver (or the next resume) applies it.
    Queued,
}

/// One resolution waiting in a run's inbox.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct InboxItem {
    pub(super) key: String,
    pub(super) value: Value,
    /// The service token that resolved it, journaled with the resolution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) by: Option<String>,
}

/// Who this process is, as a lease's owner: `pid N on HOST`.
pub(crate) fn owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "an unknown host".into());
    format!("pid {} on {host}", std::process::id())
}

/// The refusal of a run another process drives.
fn busy(run: &RunId, detail: &str, ttl: Duration) -> Error {
    Error::new(
        ErrorCode::RunBusy,
        format!(
            "run {run} is being driven by another process ({detail}); wait for it to finish, or use \
             `cairn resume {run} --wait` (a driver that died frees the run within {} s)",
            ttl.as_secs().max(1)
        ),
    )
}

/// Takes the run's lease, when the store grants leases.
///
/// # Errors
/// `run_busy` while another driver holds it; the store's failure otherwise.
pub(crate) fn acquire(engine: &EngineInner, run: &RunId) -> Result<Option<Lease>, Error> {
    acquire_for(engine, run, engine.lease_ttl)
}

/// How long a run's lease lasts while a submission writes the run (its inputs, meta and
/// queue row), however short the engine's driver lease: nothing renews it meanwhile, and a
/// submission whose writes outlast its lease is refused by the store's fence. Holding it long
/// costs nothing: nobody drives a run before its submission put it in the queue.
pub(crate) const SUBMISSION_LEASE_TTL: Duration = Duration::from_secs(30);

/// Takes the run's lease for `ttl`, as [`acquire`] does.
///
/// # Errors
/// As [`acquire`].
pub(crate) fn acquire_for(engine: &EngineInner, run: &RunId, ttl: Duration) -> Result<Option<Lease>, Error> {
    let Some(leases) = engine.journal.leases() else { return Ok(None) };
    let owner = owner();
    let started = Instant::now();
    loop {
        match leases.acquire(run, &owner, ttl) {
            Ok(lease) => return Ok(Some(lease)),
            // A `cairn resolve` holds the lease for a moment: give it that moment.
            Err(store::Error::LeaseHeld { .. }) if started.elapsed() < BRIEF_HOLD => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(store::Error::LeaseHeld { detail, .. }) => {
                // A holder on this machine whose process is gone died without releasing:
                // take the run over now instead of waiting out its ttl.
                if let Ok(Some(holder)) = leases.holder(run)
                    && is_dead(&holder.owner)
                {
                    match leases.take_over(&holder, &owner, ttl) {
                        Ok(lease) => return Ok(Some(lease)),
                        Err(store::Error::LeaseHeld { .. }) => {}
                        Err(other) => return Err(other.into()),
                    }
                }
                return Err(busy(run, &detail, engine.lease_ttl));
            }
            Err(other) => return Err(other.into()),
        }
    }
}

/// Whether a lease owner names a process of this machine that no longer exists. `false`
/// whenever that cannot be told (another host, an owner of another form, no `/proc`).
pub(crate) fn is_dead(holder: &str) -> bool {
    let Some((pid, host)) = holder.strip_prefix("pid ").and_then(|rest| rest.split_once(" on ")) else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else { return false };
    let mine = owner();
    let my_host = mine.split_once(" on ").map(|(_, host)| host);
    my_host == Some(host)
        && pid != std::process::id()
        && std::path::Path::new("/proc/self").exists()
        && match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // A zombie has exited; only its exit status is left to collect.
            Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')),
            Err(_) => true,
        }
}

/// How long a driver waits for a lease held briefly (by a resolver) before giving up.
const BRIEF_HOLD: Duration = Duration::from_millis(250);

/// Gives the lease up (best effort: an expired lease frees the run anyway).
pub(crate) fn release(engine: &EngineInner, lease: Option<&Lease>) {
    if let (Some(leases), Some(lease)) = (engine.journal.leases(), lease) {
        let _ = leases.release(lease);
    }
}

/// Renews the lease for another ttl.
///
/// # Errors
/// The store's refusal: the lease expired and another driver may hold the run.
pub(crate) fn renew(engine: &EngineInner, lease: &Lease) -> Result<(), Error> {
    match engine.journal.leases() {
        Some(leases) => leases.renew(lease, engine.lease_ttl).map_err(Error::from),
        None => Ok(()),
    }
}

/// Keeps a segment's lease from the moment it is taken: a thread renews it (from before the
/// journal is read back, which for a long run can take longer than the lease's ttl) until the
/// keeper stops or what it watches is gone, and the segment's state, once it exists, hears of a
/// loss. Dropped with the segment's state, it stops renewing and draining.
///
/// It also says when the segment may send a model request ([`Keeper::dispatchable`]): only
/// while the lease is surely still its own, so a driver whose lease lapsed (its renewals held
/// up past the ttl: a starved process, a slow store) never starts a wire attempt another
/// driver may be making too.
#[derive(Debug)]
pub(crate) struct Keeper {
    /// Whether it stopped, and whether a dispatcher asks for a renewal now; the renewal thread
    /// waits on it between renewals.
    control: Arc<(Mutex<Control>, Condvar)>,
    /// What must live for the renewals to go on: `reading` until the run's task follows it
    /// ([`Keeper::follow`]), then that task's marker.
    watched: Arc<Mutex<Weak<()>>>,
    /// The keeper's own marker while the journal is read back (the keeper is dropped, and so
    /// stops, if the segment never launches); dropped once the run's task is watched instead.
    reading: Mutex<Option<Arc<()>>>,
    /// The same, for the inbox drain (a task).
    token: CancellationToken,
    /// Why the segment lost its lease, once it did, and who to tell.
    loss: Arc<Mutex<Loss>>,
    /// Until when (the engine's clock, ms) the lease is surely held: the time read before the
    /// store last granted or renewed it, plus its ttl (the store counts its expiry from a
    /// later time). `i64::MAX` without a lease.
    held_until: Arc<AtomicI64>,
    /// How much of the lease must be left for a request to be sent (a renewal's interval).
    margin_ms: i64,
    /// Whether the renewal thread runs: a dispatcher waits for its answer only then.
    renewing: Arc<AtomicBool>,
    /// Wakes the dispatchers waiting for a renewal's answer.
    answered: Arc<tokio::sync::Notify>,
}

/// What the renewal thread is told.
#[derive(Debug, Default)]
struct Control {
    stopped: bool,
    /// A dispatcher found the lease too close to its expiry: renew now.
    urgent: bool,
}

impl Default for Keeper {
    fn default() -> Keeper {
        Keeper {
            control: Arc::default(),
            watched: Arc::default(),
            reading: Mutex::default(),
            token: CancellationToken::new(),
            loss: Arc::default(),
            held_until: Arc::new(AtomicI64::new(i64::MAX)),
            margin_ms: 0,
            renewing: Arc::default(),
            answered: Arc::default(),
        }
    }
}

/// A lost lease: the first reason, and what hears of it (the segment's state, once launched).
#[derive(Default)]
struct Loss {
    error: Option<Error>,
    notify: Option<Box<dyn FnOnce(Error) + Send>>,
}

impl std::fmt::Debug for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loss").field("error", &self.error).field("notify", &self.notify.is_some()).finish()
    }
}

impl Keeper {
    /// Starts keeping `lease` (when the store granted one): renewed every third of its ttl on
    /// a thread of its own ([`keep_renewed`]) until the keeper stops.
    ///
    /// # Errors
    /// `internal` when the renewal thread cannot be started.
    /// `asked_ms` is when (by the engine's clock) the lease was asked for: it is held a ttl
    /// from then at least.
    pub(crate) fn start(
        engine: &Arc<EngineInner>,
        lease: Option<&Lease>,
        asked_ms: i64,
    ) -> Result<Keeper, Error> {
        let mut keeper = Keeper::default();
        if let Some(lease) = lease {
            keeper.held_until.store(asked_ms.saturating_add(millis(engine.lease_ttl)), Ordering::Release);
            keeper.margin_ms = millis(renewal_interval(engine.lease_ttl));
            let reading = Arc::new(());
            *lock_watched(&keeper.watched) = Arc::downgrade(&reading);
            *keeper.reading.lock().unwrap_or_else(|p| p.into_inner()) = Some(reading);
            keep_renewed(&keeper, engine, lease.clone())?;
        }
        Ok(keeper)
    }

    /// Renews from now on only while `alive` lives (the run's task holds it): a task dropped
    /// before it settled lets the lease run out, though its state (and this keeper) may live on.
    pub(crate) fn follow(&self, alive: Weak<()>) {
        *lock_watched(&self.watched) = alive;
        self.reading.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// Stops renewing and draining.
    pub(crate) fn stop(&self) {
        let (control, wake) = &*self.control;
        lock(control).stopped = true;
        wake.notify_all();
        self.token.cancel();
    }

    /// Resolves once the segment may send a model request: its lease is held, by the engine's
    /// clock, for at least a renewal's interval more. Closer to its expiry (the renewals were
    /// held up), it asks the renewal thread to renew now and waits for the store's answer, so
    /// a lease that lapsed, and may be another driver's, never covers a request.
    ///
    /// # Errors
    /// `run_busy` once the lease is lost (the store refused a renewal), or is no longer kept
    /// (the segment settled or its task is gone).
    pub(crate) async fn dispatchable(&self, clock: &SharedClock) -> Result<(), Error> {
        loop {
            let answered = self.answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            if let Some(error) = self.loss() {
                return Err(error);
            }
            let until = self.held_until.load(Ordering::Acquire);
            if until == i64::MAX || clock.now_ms().saturating_add(self.margin_ms) < until {
                return Ok(());
            }
            if !self.renewing.load(Ordering::Acquire) {
                return Err(Error::new(
                    ErrorCode::RunBusy,
                    "the run's lease is no longer renewed here, so this process sends no more requests for it",
                ));
            }
            let (control, wake) = &*self.control;
            lock(control).urgent = true;
            wake.notify_all();
            answered.await;
        }
    }

    /// Calls `notify` with the reason once the lease is lost: at once if it already was
    /// (while the journal was read back, say), else from the renewal thread.
    pub(crate) fn on_loss(&self, notify: impl FnOnce(Error) + Send + 'static) {
        let mut loss = self.loss.lock().unwrap_or_else(|p| p.into_inner());
        match loss.error.clone() {
            Some(error) => {
                drop(loss);
                notify(error);
            }
            None => loss.notify = Some(Box::new(notify)),
        }
    }

    /// Why the segment lost its lease, if it did.
    pub(crate) fn loss(&self) -> Option<Error> {
        self.loss.lock().unwrap_or_else(|p| p.into_inner()).error.clone()
    }

    /// Fires once stopped (what the inbox drain waits on).
    pub(crate) fn token(&self) -> CancellationToken {
        self.token.clone()
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Records the first reason a lease was lost and tells its listener, outside the lock.
fn record_loss(loss: &Mutex<Loss>, error: Error) {
    let mut held = loss.lock().unwrap_or_else(|p| p.into_inner());
    if held.error.is_some() {
        return;
    }
    held.error = Some(error.clone());
    let notify = held.notify.take();
    drop(held);
    if let Some(notify) = notify {
        notify(error);
    }
}

fn lock(control: &Mutex<Control>) -> MutexGuard<'_, Control> {
    control.lock().unwrap_or_else(|p| p.into_inner())
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn lock_watched(watched: &Mutex<Weak<()>>) -> MutexGuard<'_, Weak<()>> {
    watched.lock().unwrap_or_else(|p| p.into_inner())
}

/// How often a lease of `ttl` is renewed: three times per ttl, so one late renewal never lets
/// it lapse.
fn renewal_interval(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_millis(10))
}

/// Renews `lease` every third of its ttl on a thread of its own until `keeper` stops or what
/// it watches is gone, and records the loss in `keeper` once the store refuses a renewal (the
/// lease lapsed and may be another driver's): nothing the segment writes afterwards can land.
///
/// What it watches: the keeper's own marker while the journal is read back, then the run's
/// task ([`Keeper::follow`]). A task dropped before it settled (its runtime shut down under
/// it) leaves the lease to run out, as a driver whose process died does; renewed on, it kept
/// the run from every other driver for as long as the process lived (the segment's state, and
/// so its keeper, can outlive the task: a leaked handle holds it).
///
/// A thread, not a task: a lease must outlive anything that holds up the run's async
/// runtime (a blocking call in a task, a host that blocks its own runtime, every worker busy),
/// which would otherwise stop the renewal while the run goes on, until its next write finds
/// the lease gone. The renewal shares nothing with the inbox drain either, whose store reads
/// and appends may take their time. A store failure other than the refusal (a busy
/// database, a dropped connection) is tried again at the next interval: the lease holds
/// until its ttl runs out, and a renewal after that is refused.
///
/// # Errors
/// `internal` when the thread cannot be started.
fn keep_renewed(keeper: &Keeper, engine: &Arc<EngineInner>, lease: Lease) -> Result<(), Error> {
    let control = keeper.control.clone();
    let loss = keeper.loss.clone();
    let watched = keeper.watched.clone();
    let held_until = keeper.held_until.clone();
    let answered = keeper.answered.clone();
    let every = renewal_interval(engine.lease_ttl);
    let ttl = engine.lease_ttl;
    // Never the engine's last owner: a thread that held it (and so its store) past the run's
    // end kept a SQLite store's connections open until the process exited, when it had not yet
    // woken to see the keeper stopped, so the WAL's files stayed beside the database.
    let engine = Arc::downgrade(engine);
    // Says the thread is gone (and wakes the dispatchers waiting for it) however it ends.
    let gone = Gone { renewing: keeper.renewing.clone(), answered: keeper.answered.clone() };
    gone.renewing.store(true, Ordering::Release);
    let renewing = move || {
        let _gone = gone;
        let (control, wake) = &*control;
        let mut renewed = Instant::now();
        // After a failed renewal (a busy store) a dispatcher's ask waits for the next interval,
        // so a failing store is not asked in a loop.
        let mut heed_urgent = true;
        loop {
            let due = Instant::now() + every;
            let mut held = lock(control);
            while !(held.stopped || (held.urgent && heed_urgent)) {
                let now = Instant::now();
                if now >= due {
                    break;
                }
                held = wake.wait_timeout(held, due - now).unwrap_or_else(|p| p.into_inner()).0;
            }
            if held.stopped || lock_watched(&watched).strong_count() == 0 {
                return;
            }
            held.urgent = false;
            drop(held);
            let Some(engine) = engine.upgrade() else { return };
            // Read before the store counts the renewed expiry from its own, later, reading.
            let asked = engine.clock.now_ms();
            match renew(&engine, &lease) {
                Ok(()) => {
                    renewed = Instant::now();
                    heed_urgent = true;
                    held_until.fetch_max(asked.saturating_add(millis(ttl)), Ordering::AcqRel);
                    answered.notify_waiters();
                }
                Err(e) if e.code == ErrorCode::RunBusy => {
                    // How long this process went without renewing says why it lost the run.
                    let message = format!(
                        "run {} lost its lease, so this process stopped driving it: {} (last renewed {} ms \
                         before, ttl {} ms)",
                        lease.run_id,
                        e.message,
                        renewed.elapsed().as_millis(),
                        ttl.as_millis()
                    );
                    return record_loss(&loss, Error::new(e.code, message));
                }
                Err(_) => heed_urgent = false,
            }
        }
    };
    std::thread::Builder::new()
        .name("cairn-lease".into())
        .spawn(renewing)
        .map(drop)
        .map_err(|e| Error::internal(format!("cannot start the thread that renews the run's lease: {e}")))
}

/// Marks the renewal thread gone when it ends, and wakes whoever waits for its answer.
struct Gone {
    renewing: Arc<AtomicBool>,
    answered: Arc<tokio::sync::Notify>,
}

impl Drop for Gone {
    fn drop(&mut self) {
        self.renewing.store(false, Ordering::Release);
        self.answered.notify_waiters();
    }
}

fn inbox_prefix(run: &RunId) -> String {
    format!("{run}/inbox/")
}

/// The inbox's items, oldest first.
pub(super) fn inbox(engine: &EngineInner, run: &RunId) -> Result<Vec<(String, InboxItem)>, Error> {
    let prefix = inbox_prefix(run);
    let mut items = Vec::new();
    for blob_ref in engine.transcripts.list(run)?.into_iter().filter(|r| r.starts_with(&prefix)) {
        let Some(bytes) = engine.transcripts.get(&blob_ref)? else { continue };
        match serde_json::from_slice::<InboxItem>(&bytes) {
            Ok(item) => items.push((blob_ref, item)),
            // Not one of ours: leave it for a person to look at, and never apply it.
            Err(_) => continue,
        }
    }
    Ok(items)
}

/// Applies what a driver left in the inbox, under the resuming driver's lease, before the
/// journal is loaded.
pub(crate) fn drain_stored(engine: &EngineInner, run: &RunId, lease: Option<&Lease>) -> Result<(), Error> {
    for (blob_ref, item) in inbox(engine, run)? {
        match resolve_stored(engine, run, &item.key, item.value, item.by.as_deref(), lease) {
            Ok(_) => {}
            Err(e) if e.code == ErrorCode::Validation => {}
            Err(e) => return Err(e),
        }
        engine.transcripts.delete(&blob_ref)?;
    }
    Ok(())
}

/// Resolves a wait of a run that is not live in this process: appended under the run's lease
/// when nobody drives it, queued in its inbox when someone does. `by` names the service token
/// that asked, journaled with the resolution.
pub(crate) fn resolve(
    engine: &EngineInner,
    run: &RunId,
    key: &str,
    value: Value,
    by: Option<&str>,
) -> Result<Resolution, Error> {
    let of = |applied: bool| if applied { Resolution::Applied } else { Resolution::AlreadyResolved };
    // First wins across processes: the store decides which resolver claims the wait.
    let (target, closed) = target_of(engine, run, key, &value)?;
    if closed || !claim_first(engine, run, key, target, &value)? {
        return Ok(Resolution::AlreadyResolved);
    }
    let Some(leases) = engine.journal.leases() else {
        return resolve_stored(engine, run, key, value, by, None).map(of);
    };
    // An unknown run is refused before any lease is taken: a lease on a run about to start
    // would keep its driver out.
    if engine.journal.get_meta(run)?.is_none() {
        return Err(Error::config(format!("unknown run {run}")));
    }
    match leases.acquire(run, &owner(), engine.lease_ttl) {
        Ok(lease) => {
            let outcome = resolve_stored(engine, run, key, value, by, Some(&lease));
            let _ = leases.release(&lease);
            outcome.map(of)
        }
        Err(store::Error::LeaseHeld { .. }) => {
            check_stored_resolution(engine, run, key, &value)?;
            let item = InboxItem { key: key.to_owned(), value, by: by.map(str::to_owned) };
            let bytes = serde_json::to_vec(&item).map_err(|e| Error::validation(e.to_string()))?;
            let name = format!("{}{}", inbox_prefix(run), ulid::Ulid::generate());
            engine.transcripts.put(&name, &bytes)?;
            Ok(Resolution::Queued)
        }
        Err(other) => Err(other.into()),
    }
}
