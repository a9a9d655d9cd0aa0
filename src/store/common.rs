//! Rules every shipped store applies the same way: the seq order of a batch, whether a
//! lease is current, the shape of a blob ref and the order of a run listing.
//!
//! Keeping them in one place is what makes the stores interchangeable: the conformance
//! suite checks behaviour, and these functions are that behaviour.

use std::cmp::Ordering;
use std::time::Duration;

use super::{Error, Lease, RawEntry, Result, RunFilter, RunId, RunMeta, RunStatus, StoreCounters, Tally};

/// Refuses a batch whose own seqs are not strictly increasing.
///
/// Checked before the tail so that a caller bug ([`Error::UnorderedBatch`]) is never
/// reported as a race with another writer ([`Error::OrderViolation`]).
pub(crate) fn check_batch(run: &RunId, entries: &[RawEntry]) -> Result<()> {
    if entries.windows(2).all(|pair| pair[0].seq() < pair[1].seq()) {
        Ok(())
    } else {
        Err(Error::UnorderedBatch { run: run.clone() })
    }
}

/// Refuses a (strictly increasing) batch whose first seq is not after the stored tail.
pub(crate) fn check_tail(run: &RunId, tail: Option<u64>, entries: &[RawEntry]) -> Result<()> {
    match (tail, entries.first()) {
        (Some(tail), Some(first)) if first.seq() <= tail => {
            Err(Error::OrderViolation { run: run.clone(), seq: first.seq(), tail })
        }
        _ => Ok(()),
    }
}

/// The lease a store has on record for a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeldLease {
    /// Who holds it.
    pub(crate) owner: String,
    /// Its fencing epoch.
    pub(crate) epoch: u64,
    /// When it stops holding the run, in ms since the epoch; held while `now < expires_at_ms`.
    pub(crate) expires_at_ms: i64,
}

impl HeldLease {
    /// Whether the lease still holds the run at `now_ms`. Expiry frees the run: a lease
    /// is live strictly before its deadline, so a zero ttl is born expired.
    pub(crate) fn is_live(&self, now_ms: i64) -> bool {
        now_ms < self.expires_at_ms
    }
}

/// Checks that `given` is the current, unexpired lease of `run`, given the store's record.
///
/// A lease names its run, so a lease for another run authorizes nothing here even when
/// that run is not leased at all.
pub(crate) fn check_lease(run: &RunId, given: &Lease, held: Option<&HeldLease>, now_ms: i64) -> Result<()> {
    let refuse = |detail: String| Err(Error::LeaseHeld { run: run.clone(), detail });
    if given.run_id != *run {
        return refuse(format!("the given lease is for run {}, not this run", given.run_id));
    }
    match held {
        None => refuse(format!(
            "the given lease (owner {}, epoch {}) is not current: the run holds no lease",
            given.owner, given.epoch
        )),
        Some(held) if held.owner != given.owner || held.epoch != given.epoch => refuse(format!(
            "the given lease (owner {}, epoch {}) is superseded by owner {}, epoch {}",
            given.owner, given.epoch, held.owner, held.epoch
        )),
        Some(held) if !held.is_live(now_ms) => refuse(format!(
            "the given lease (owner {}, epoch {}) expired at {} ms (now {} ms)",
            given.owner, given.epoch, held.expires_at_ms, now_ms
        )),
        Some(_) => Ok(()),
    }
}

/// The refusal of `acquire` while a live lease holds the run.
pub(crate) fn held_by(run: &RunId, held: &HeldLease) -> Error {
    Error::LeaseHeld {
        run: run.clone(),
        detail: format!(
            "owner {} holds it at epoch {} until {} ms",
            held.owner, held.epoch, held.expires_at_ms
        ),
    }
}

/// The deadline of a lease taken at `now_ms` for `ttl`, saturating instead of wrapping.
pub(crate) fn expiry(now_ms: i64, ttl: Duration) -> i64 {
    now_ms.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
}

/// A validated blob ref: `<run id>/<name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BlobRef<'a> {
    /// The run the blob belongs to.
    pub(crate) run: RunId,
    /// The rest of the ref; `/`-separated segments, none empty, `.` or `..`.
    pub(crate) name: &'a str,
}

/// Parses a blob ref, refusing anything that could name a place outside the run's blobs.
///
/// Every store applies the same rule (even those with no file system under them) so a ref
/// that works on one store works on all of them.
pub(crate) fn parse_blob_ref(blob_ref: &str) -> Result<BlobRef<'_>> {
    let refuse = |why: &str| Err(Error::Config(format!("invalid blob ref {blob_ref:?}: {why}")));
    let Some((run, name)) = blob_ref.split_once('/') else {
        return refuse("expected <run id>/<name>");
    };
    let Ok(run) = RunId::parse(run) else {
        return refuse("the part before the first '/' is not a valid run id");
    };
    if name.is_empty() {
        return refuse("the name is empty");
    }
    if name.contains('\0') {
        return refuse("the name holds a NUL character");
    }
    if name.split('/').any(|segment| segment.is_empty() || segment == "." || segment == "..") {
        return refuse("the name has an empty, '.' or '..' segment");
    }
    Ok(BlobRef { run, name })
}

/// Newest first: by creation time, then by run id (ULIDs order by time too), both
/// descending, so every store lists ties the same way.
pub(crate) fn newest_first(a: &RunMeta, b: &RunMeta) -> Ordering {
    b.created_at_ms.cmp(&a.created_at_ms).then_with(|| b.run_id.cmp(&a.run_id))
}

/// Filters, orders and limits metas in memory, for the stores that list by scanning.
pub(crate) fn select_runs(mut metas: Vec<RunMeta>, filter: &RunFilter) -> Vec<RunMeta> {
    metas.retain(|meta| filter.matches(meta));
    metas.sort_by(newest_first);
    if let Some(limit) = filter.limit {
        metas.truncate(limit);
    }
    metas
}

/// The one fold of a store's counters: runs counted by status (from per-run statuses, or from
/// a database's grouped counts; repeated statuses are summed, zero counts dropped) beside the
/// appended tallies. Every store that counts builds its [`StoreCounters`] here, so they agree
/// on the shape `/metrics` reads.
pub(crate) fn fold_counters(
    statuses: impl IntoIterator<Item = (RunStatus, u64)>,
    appended: Tally,
) -> StoreCounters {
    let mut runs: Vec<(RunStatus, u64)> = Vec::new();
    for (status, n) in statuses {
        if n == 0 {
            continue;
        }
        match runs.iter_mut().find(|(seen, _)| *seen == status) {
            Some((_, total)) => *total = total.saturating_add(n),
            None => runs.push((status, n)),
        }
    }
    StoreCounters { runs, appended }
}

/// A status as a database column holds it (its snake_case name).
///
/// # Errors
/// [`Error::Corrupt`] for any other text.
pub(crate) fn parse_status(store: &str, text: &str) -> Result<RunStatus> {
    serde_json::from_value(serde_json::Value::from(text))
        .map_err(|err| Error::Corrupt { what: format!("{store} runs"), detail: err.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64) -> RawEntry {
        RawEntry::new(seq, format!(r#"{{"seq":{seq}}}"#)).unwrap()
    }

    #[test]
    fn batch_order_is_checked_before_the_tail() {
        let run = RunId::parse("r").unwrap();
        assert!(matches!(check_batch(&run, &[entry(3), entry(2)]), Err(Error::UnorderedBatch { .. })));
        assert!(matches!(check_batch(&run, &[entry(3), entry(3)]), Err(Error::UnorderedBatch { .. })));
        assert!(check_batch(&run, &[entry(1), entry(7)]).is_ok());
        assert!(matches!(
            check_tail(&run, Some(7), &[entry(7)]),
            Err(Error::OrderViolation { seq: 7, tail: 7, .. })
        ));
        assert!(check_tail(&run, None, &[entry(0)]).is_ok());
        assert!(check_tail(&run, Some(7), &[entry(8)]).is_ok());
    }

    #[test]
    fn blob_refs_stay_inside_their_run() {
        let ok = parse_blob_ref("run-1/a/b.json").unwrap();
        assert_eq!((ok.run.as_str(), ok.name), ("run-1", "a/b.json"));
        assert!(parse_blob_ref("run-1/é x").is_ok());
        for bad in [
            "", "run", "run/", "/abs/x", "run/../x", "run/a//b", "run/./a", "run/a/..", "../x", ".r/x",
            "r/\0",
        ] {
            assert!(matches!(parse_blob_ref(bad), Err(Error::Config(_))), "{bad:?} accepted");
        }
    }

    #[test]
    fn counters_fold_statuses_into_one_row_each() {
        let folded = fold_counters(
            [(RunStatus::Ok, 1), (RunStatus::Error, 2), (RunStatus::Ok, 3), (RunStatus::Queued, 0)],
            Tally::default(),
        );
        assert_eq!(folded.runs, [(RunStatus::Ok, 4), (RunStatus::Error, 2)]);
        assert_eq!(folded.runs_in(RunStatus::Queued), 0);
        assert_eq!(parse_status("x", "suspended").unwrap(), RunStatus::Suspended);
        assert!(matches!(parse_status("x", "Done"), Err(Error::Corrupt { .. })));
    }

    #[test]
    fn leases_are_live_strictly_before_their_deadline() {
        let held = HeldLease { owner: "w".into(), epoch: 1, expires_at_ms: 100 };
        assert!(held.is_live(99));
        assert!(!held.is_live(100));
        assert_eq!(expiry(i64::MAX - 1, Duration::from_secs(1)), i64::MAX);
    }
}
