//! The lease checks: exclusivity, epochs that only grow, fencing of every stale, forged,
//! expired or wrong-run lease on every fenced write, expiry, renew, release and takeover.

use std::time::Duration;

use super::fixtures::{Outcome, ensure, entries, entry, lease_held, load_seqs, meta, ok, refused, run_id};
use crate::clock::ManualClock;
use crate::store::{LeasableStore, Lease, RunId, RunStatus};

const TTL: Duration = Duration::from_secs(10);
const TTL_MS: i64 = 10_000;

pub(super) fn lease_exclusive(store: &dyn LeasableStore, _: &ManualClock) -> Outcome {
    let run = run_id("exclusive");
    let lease = ok("acquire", store.acquire(&run, "w1", TTL))?;
    ensure!(lease.run_id == run && lease.owner == "w1", "acquire returned {lease:?}");
    refused("acquire by another owner", store.acquire(&run, "w2", TTL), "LeaseHeld", lease_held)?;
    refused("acquire again by the holder", store.acquire(&run, "w1", TTL), "LeaseHeld", lease_held)?;
    ok("append with the lease", store.append(&run, &entries(&[1]), Some(&lease)))?;
    let other = ok("acquire of another run", store.acquire(&run_id("exclusive-2"), "w2", TTL))?;
    ensure!(other.owner == "w2", "acquire returned {other:?}");
    Ok(())
}

pub(super) fn epochs_only_grow(store: &dyn LeasableStore, clock: &ManualClock) -> Outcome {
    let run = run_id("epochs");
    let grew = |how: &str, before: &Lease, after: &Lease| -> Outcome {
        ensure!(
            after.epoch > before.epoch,
            "epoch after {how} is {}, not above {}",
            after.epoch,
            before.epoch
        );
        Ok(())
    };
    let first = ok("acquire", store.acquire(&run, "w", TTL))?;
    // Another run's leases do not advance this run's epochs backwards (or at all).
    let other = ok("acquire of another run", store.acquire(&run_id("epochs-other"), "w", TTL))?;
    ok("release of another run", store.release(&other))?;
    ok("release", store.release(&first))?;
    let released = ok("acquire after release", store.acquire(&run, "w", TTL))?;
    grew("release", &first, &released)?;
    clock.advance(TTL_MS);
    let expired = ok("acquire after expiry", store.acquire(&run, "w2", TTL))?;
    grew("expiry", &released, &expired)?;
    ok("append", store.append(&run, &entries(&[1]), Some(&expired)))?;
    ok("delete", store.delete(&run, Some(&expired)))?;
    let recreated = ok("acquire after delete", store.acquire(&run, "w", TTL))?;
    grew("delete", &expired, &recreated)?;
    let stale = store.append(&run, &entries(&[1]), Some(&expired));
    refused("append with the deleted incarnation's lease", stale, "LeaseHeld", lease_held)?;
    ok("append with the new lease", store.append(&run, &entries(&[1]), Some(&recreated)))?;
    Ok(())
}

/// Checks every fenced surface refuses `stale` and changes nothing.
fn all_writes_refused(store: &dyn LeasableStore, run: &RunId, stale: &Lease, why: &str) -> Outcome {
    let before = ok("load", store.load(run))?;
    let meta_before = ok("get_meta", store.get_meta(run))?;
    let next_seq = before.last().map_or(1, |entry| entry.seq() + 1);
    refused(
        &format!("append with {why}"),
        store.append(run, &[entry(next_seq)], Some(stale)),
        "LeaseHeld",
        lease_held,
    )?;
    let mut changed = meta(run.as_str(), RunStatus::Error, 42);
    changed.name = Some("overwritten".into());
    refused(&format!("put_meta with {why}"), store.put_meta(&changed, Some(stale)), "LeaseHeld", lease_held)?;
    refused(&format!("delete with {why}"), store.delete(run, Some(stale)), "LeaseHeld", lease_held)?;
    refused(&format!("renew with {why}"), store.renew(stale, TTL), "LeaseHeld", lease_held)?;
    refused(&format!("release with {why}"), store.release(stale), "LeaseHeld", lease_held)?;
    ensure!(ok("load", store.load(run))? == before, "a write with {why} became visible in the journal");
    ensure!(ok("get_meta", store.get_meta(run))? == meta_before, "a write with {why} changed the meta");
    Ok(())
}

pub(super) fn stale_lease_fenced(store: &dyn LeasableStore, clock: &ManualClock) -> Outcome {
    let run = run_id("stale");
    let old = ok("acquire", store.acquire(&run, "w1", TTL))?;
    ok("append with the lease", store.append(&run, &entries(&[1, 2]), Some(&old)))?;
    ok("put_meta with the lease", store.put_meta(&meta("stale", RunStatus::Running, 1), Some(&old)))?;
    clock.advance(TTL_MS + 1);
    let new = ok("acquire after expiry", store.acquire(&run, "w2", TTL))?;
    all_writes_refused(store, &run, &old, "a superseded lease")?;
    // The same owner coming back with its old epoch is still stale.
    ok("release", store.release(&new))?;
    let mine = ok("acquire", store.acquire(&run, "w1", TTL))?;
    all_writes_refused(store, &run, &old, "an old epoch of the current owner")?;
    ok("append with the current lease", store.append(&run, &entries(&[3]), Some(&mine)))?;
    ensure!(load_seqs(store, &run)? == [1, 2, 3], "the current holder's append did not land");
    Ok(())
}

pub(super) fn forged_lease_fenced(store: &dyn LeasableStore, _: &ManualClock) -> Outcome {
    let run = run_id("forged");
    let lease = ok("acquire", store.acquire(&run, "w1", TTL))?;
    ok("append", store.append(&run, &entries(&[1]), Some(&lease)))?;
    let foreign_owner = Lease { owner: "w2".into(), ..lease.clone() };
    all_writes_refused(store, &run, &foreign_owner, "the current epoch but another owner")?;
    let future_epoch = Lease { epoch: lease.epoch + 1, ..lease.clone() };
    all_writes_refused(store, &run, &future_epoch, "an epoch never granted")?;
    let never = run_id("forged-never-leased");
    ok("append unleased", store.append(&never, &entries(&[1]), None))?;
    let invented = Lease { run_id: never.clone(), owner: "w1".into(), epoch: 1 };
    all_writes_refused(store, &never, &invented, "a lease on a run never leased")?;
    Ok(())
}

pub(super) fn expiry_frees_the_run(store: &dyn LeasableStore, clock: &ManualClock) -> Outcome {
    let run = run_id("expiry");
    let lease = ok("acquire", store.acquire(&run, "w1", Duration::from_millis(1_000)))?;
    clock.advance(999);
    refused("acquire 1 ms before expiry", store.acquire(&run, "w2", TTL), "LeaseHeld", lease_held)?;
    ok("append 1 ms before expiry", store.append(&run, &entries(&[1]), Some(&lease)))?;
    clock.advance(1);
    // Expired, and nobody has taken the run yet: the lease is still not current.
    all_writes_refused(store, &run, &lease, "an expired lease")?;
    let next = ok("acquire at expiry", store.acquire(&run, "w2", TTL))?;
    ensure!(next.epoch > lease.epoch, "the epoch after expiry did not grow");
    Ok(())
}

pub(super) fn renew_keeps_held(store: &dyn LeasableStore, clock: &ManualClock) -> Outcome {
    let run = run_id("renew");
    let lease = ok("acquire", store.acquire(&run, "w1", Duration::from_millis(1_000)))?;
    for round in 1..=3 {
        clock.advance(800);
        ok(&format!("renew #{round}"), store.renew(&lease, Duration::from_millis(1_000)))?;
    }
    clock.advance(999);
    refused("acquire of a renewed lease", store.acquire(&run, "w2", TTL), "LeaseHeld", lease_held)?;
    ok("append with a renewed lease", store.append(&run, &entries(&[1]), Some(&lease)))?;
    clock.advance(1);
    refused("renew after expiry", store.renew(&lease, TTL), "LeaseHeld", lease_held)?;
    Ok(())
}

pub(super) fn release_frees_the_run(store: &dyn LeasableStore, _: &ManualClock) -> Outcome {
    let run = run_id("release");
    let lease = ok("acquire", store.acquire(&run, "w1", TTL))?;
    ok("append", store.append(&run, &entries(&[1]), Some(&lease)))?;
    ok("release", store.release(&lease))?;
    all_writes_refused(store, &run, &lease, "a released lease")?;
    let next = ok("acquire after release", store.acquire(&run, "w2", TTL))?;
    ensure!(next.epoch > lease.epoch, "the epoch after release did not grow");
    ensure!(load_seqs(store, &run)? == [1], "release changed the journal");
    Ok(())
}

pub(super) fn lease_guards_only_its_run(store: &dyn LeasableStore, _: &ManualClock) -> Outcome {
    let (a, b, c) = (run_id("scope-a"), run_id("scope-b"), run_id("scope-c"));
    let lease_a = ok("acquire a", store.acquire(&a, "w", TTL))?;
    let lease_b = ok("acquire b", store.acquire(&b, "w", TTL))?;
    ok("append to b", store.append(&b, &entries(&[1]), Some(&lease_b)))?;
    ok("put_meta of b", store.put_meta(&meta("scope-b", RunStatus::Running, 1), Some(&lease_b)))?;
    // b is leased (to the same owner, even at the same epoch number perhaps); c is not.
    for target in [&b, &c] {
        let before = ok("load", store.load(target))?;
        let meta_before = ok("get_meta", store.get_meta(target))?;
        refused(
            "append with another run's lease",
            store.append(target, &entries(&[2]), Some(&lease_a)),
            "LeaseHeld",
            lease_held,
        )?;
        refused(
            "put_meta with another run's lease",
            store.put_meta(&meta(target.as_str(), RunStatus::Error, 9), Some(&lease_a)),
            "LeaseHeld",
            lease_held,
        )?;
        refused(
            "delete with another run's lease",
            store.delete(target, Some(&lease_a)),
            "LeaseHeld",
            lease_held,
        )?;
        ensure!(ok("load", store.load(target))? == before, "a write with another run's lease became visible");
        ensure!(
            ok("get_meta", store.get_meta(target))? == meta_before,
            "another run's lease changed the meta"
        );
    }
    Ok(())
}

pub(super) fn unleased_writes_unfenced(store: &dyn LeasableStore, _: &ManualClock) -> Outcome {
    // No lease asserts the single-writer precondition: it is not checked against holders.
    let run = run_id("unleased");
    let _lease = ok("acquire", store.acquire(&run, "w1", TTL))?;
    ok("append without a lease", store.append(&run, &entries(&[1]), None))?;
    ok("put_meta without a lease", store.put_meta(&meta("unleased", RunStatus::Running, 1), None))?;
    ensure!(load_seqs(store, &run)? == [1], "an unleased append did not land");
    Ok(())
}

pub(super) fn exclusive_across_instances(store: &dyn LeasableStore, other: &dyn LeasableStore) -> Outcome {
    let run = run_id("across");
    let lease = ok("acquire", store.acquire(&run, "w1", TTL))?;
    refused("acquire from another instance", other.acquire(&run, "w2", TTL), "LeaseHeld", lease_held)?;
    ok("append with the lease", store.append(&run, &entries(&[1]), Some(&lease)))?;
    ok("release", store.release(&lease))?;
    let next = ok("acquire from another instance after release", other.acquire(&run, "w2", TTL))?;
    ensure!(next.epoch > lease.epoch, "the epoch did not grow across instances");
    refused(
        "acquire back while the other holds it",
        store.acquire(&run, "w1", TTL),
        "LeaseHeld",
        lease_held,
    )?;
    ok("append with the other instance's lease", other.append(&run, &entries(&[2]), Some(&next)))?;
    ok("delete with the lease", other.delete(&run, Some(&next)))?;
    let after = ok("acquire after delete", store.acquire(&run, "w1", TTL))?;
    ensure!(after.epoch > next.epoch, "the epoch did not grow across a delete");
    Ok(())
}

pub(super) fn take_over_from_a_dead_holder(store: &dyn LeasableStore, _: &ManualClock) -> Outcome {
    let run = run_id("take-over");
    ensure!(ok("holder of an unleased run", store.holder(&run))?.is_none(), "an unleased run has a holder");
    let dead = ok("acquire", store.acquire(&run, "w1", TTL))?;
    ok("append", store.append(&run, &entries(&[1]), Some(&dead)))?;
    if let Some(holder) = ok("holder", store.holder(&run))? {
        ensure!(holder == dead, "holder() says {holder:?}, not {dead:?}");
    }
    let next = ok("take over from the dead holder", store.take_over(&dead, "w2", TTL))?;
    ensure!(next.epoch > dead.epoch && next.owner == "w2", "take_over returned {next:?}");
    all_writes_refused(store, &run, &dead, "a lease taken over")?;
    // Only the named holder can be taken from: a live lease it does not name stays.
    refused(
        "take over naming a superseded lease",
        store.take_over(&dead, "w3", TTL),
        "LeaseHeld",
        lease_held,
    )?;
    ok("append with the new lease", store.append(&run, &entries(&[2]), Some(&next)))?;
    Ok(())
}
