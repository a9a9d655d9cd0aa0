//! The counters check: a store that keeps counters keeps them exactly, through tallied and
//! untallied appends, refused batches, status changes and deletes.

use super::fixtures::{Outcome, ensure, entries, meta, ok, run_id};
use crate::store::{JournalStore, RunStatus};

pub(super) fn counters_follow_writes(store: &dyn JournalStore) -> Outcome {
    use crate::money::Money;
    use crate::store::Tally;
    // A store that keeps no counters says so; one that keeps them keeps them exactly.
    if ok("counters", store.counters())?.is_none() {
        return Ok(());
    }
    let (a, b) = (run_id("counted-a"), run_id("counted-b"));
    let tally = |calls, nanos| Tally { calls, spend: Money::from_nano_usd(nanos) };
    ok("append_tallied", store.append_tallied(&a, &entries(&[1, 2]), None, tally(2, 1_500)))?;
    ok("append_tallied", store.append_tallied(&b, &entries(&[1]), None, tally(0, 0)))?;
    ok("append", store.append(&a, &entries(&[3]), None))?;
    ok("append_tallied", store.append_tallied(&b, &entries(&[2, 3]), None, tally(5, 40)))?;
    // A refused batch adds nothing.
    ensure!(
        store.append_tallied(&b, &entries(&[3]), None, tally(100, 100)).is_err(),
        "a batch at the stored tail was accepted"
    );
    ok("put_meta", store.put_meta(&meta("counted-a", RunStatus::Running, 1), None))?;
    ok("put_meta", store.put_meta(&meta("counted-b", RunStatus::Running, 2), None))?;
    ok("put_meta", store.put_meta(&meta("counted-c", RunStatus::Queued, 3), None))?;
    ok("put_meta", store.put_meta(&meta("counted-a", RunStatus::Ok, 1), None))?;
    let counters = ok("counters", store.counters())?.ok_or("the store stopped counting")?;
    ensure!(
        counters.appended == tally(7, 1_540),
        "appended tallies are {:?}, not 7 calls, 1540 nano-USD",
        counters.appended
    );
    let statuses = [RunStatus::Ok, RunStatus::Running, RunStatus::Queued, RunStatus::Error];
    for (status, want) in statuses.iter().zip([1, 1, 1, 0]) {
        ensure!(counters.runs_in(*status) == want, "{} runs {status}, not {want}", counters.runs_in(*status));
    }
    ok("delete", store.delete(&b, None))?;
    let counters = ok("counters", store.counters())?.ok_or("the store stopped counting")?;
    ensure!(counters.runs_in(RunStatus::Running) == 0, "a deleted run is still counted running");
    ensure!(
        counters.appended == tally(7, 1_540),
        "a delete changed the appended totals: {:?}",
        counters.appended
    );
    Ok(())
}
