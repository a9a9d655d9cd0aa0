//! The paging checks: a journal read page by page, and the run listing read page by page,
//! give exactly what one whole read gives, in the same order, with no page over its limit.

use super::fixtures::{Outcome, ensure, entries, entry, meta, ok, raw, run_id, seqs};
use crate::store::{JournalStore, RawEntry, RunCursor, RunFilter, RunStatus};

pub(super) fn load_page_reads_bounded_pages(store: &dyn JournalStore) -> Outcome {
    let (run, other) = (run_id("paged"), run_id("paged-other"));
    let written: Vec<u64> = (1..=23).map(|n| n * 3).collect();
    ok("append", store.append(&other, &entries(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]), None))?;
    for chunk in written.chunks(5) {
        ok("append", store.append(&run, &entries(chunk), None))?;
    }
    for (after, limit, want) in [
        (0, 4, &[3, 6, 9, 12][..]),
        (4, 2, &[6, 9]),
        (6, 1, &[9]),
        (66, 10, &[69]),
        (69, 10, &[]),
        (u64::MAX, 10, &[]),
        (0, 0, &[]),
    ] {
        let page = ok("load_page", store.load_page(&run, after, limit))?;
        ensure!(
            page == entries(want),
            "load_page(after {after}, limit {limit}) returned {:?}, not {want:?}",
            seqs(&page)
        );
    }
    for limit in [1, 7, 23, 100] {
        let mut read = Vec::new();
        let mut after = 0;
        loop {
            let page = ok("load_page", store.load_page(&run, after, limit))?;
            ensure!(page.len() <= limit, "a page of limit {limit} held {} entries", page.len());
            let Some(last) = page.last() else { break };
            after = last.seq();
            let short = page.len() < limit;
            read.extend(page);
            if short {
                break;
            }
        }
        ensure!(read == entries(&written), "paging by {limit} read {:?}, not the journal", seqs(&read));
    }
    ensure!(
        ok("load_page", store.load_page(&run_id("paged-unknown"), 0, 10))?.is_empty(),
        "load_page of an unknown run is not empty"
    );
    Ok(())
}

pub(super) fn list_runs_pages(store: &dyn JournalStore) -> Outcome {
    // Ties on created_at_ms, so the cursor's run id part is what orders a page boundary.
    let mut all = Vec::new();
    for n in 0..17_i64 {
        let status = if n % 3 == 0 { RunStatus::Error } else { RunStatus::Ok };
        let mut record = meta(&format!("page-{n:02}"), status, 1_000 + n / 4);
        if n % 2 == 0 {
            record.tags = vec!["even".into()];
        }
        ok("put_meta", store.put_meta(&record, None))?;
        all.push(record);
    }
    for filter in [
        RunFilter::default(),
        RunFilter { statuses: vec![RunStatus::Error], ..RunFilter::default() },
        RunFilter { tags: vec!["even".into()], ..RunFilter::default() },
        RunFilter { statuses: vec![RunStatus::Ok], tags: vec!["even".into()], ..RunFilter::default() },
    ] {
        let whole = ok("list_runs", store.list_runs(&filter))?;
        for limit in [1, 3, 5, 100] {
            let mut paged = Vec::new();
            let mut page_filter = RunFilter { limit: Some(limit), ..filter.clone() };
            loop {
                let page = ok("list_runs", store.list_runs(&page_filter))?;
                ensure!(page.len() <= limit, "a listing page of limit {limit} held {} runs", page.len());
                let Some(last) = page.last() else { break };
                page_filter.after = Some(RunCursor::of(last));
                paged.extend(page);
            }
            ensure!(
                paged == whole,
                "paging {filter:?} by {limit} listed {:?}, not {:?}",
                paged.iter().map(|m| m.run_id.as_str()).collect::<Vec<_>>(),
                whole.iter().map(|m| m.run_id.as_str()).collect::<Vec<_>>()
            );
        }
    }
    // A cursor whose run is gone still pages: it is a position, not a reference.
    let cursor = RunCursor::of(&all[9]);
    ok("delete", store.delete(&all[9].run_id, None))?;
    let after =
        ok("list_runs", store.list_runs(&RunFilter { after: Some(cursor.clone()), ..RunFilter::default() }))?;
    let want: Vec<&str> =
        ["page-08", "page-07", "page-06", "page-05", "page-04", "page-03", "page-02", "page-01", "page-00"]
            .to_vec();
    let got: Vec<&str> = after.iter().map(|m| m.run_id.as_str()).collect();
    ensure!(got == want, "listing after the deleted run's cursor {cursor} gave {got:?}, not {want:?}");
    ensure!(
        cursor.to_string().parse::<RunCursor>().ok() == Some(cursor.clone()),
        "cursor {cursor} does not round-trip through its text"
    );
    Ok(())
}

/// An entry whose payload is `pad` bytes long, so a journal of a few dozen spans pages of a
/// file store's reads.
fn padded(seq: u64, tag: &str, pad: usize) -> RawEntry {
    let filler = "x".repeat(pad);
    raw(
        seq,
        &format!(
            r#"{{"seq":{seq},"hash_version":1,"kind":"step","status":"ok","value":{{"tag":"{tag}","pad":"{filler}"}}}}"#
        ),
    )
}

pub(super) fn load_entry_reads_by_seq(store: &dyn JournalStore) -> Outcome {
    let (run, other) = (run_id("by-seq"), run_id("by-seq-other"));
    // Gaps, several batches, and entries big enough to span a file store's read chunks.
    let written: Vec<u64> = (1..=60).map(|n| n * 2 + n / 10).collect();
    let first: Vec<RawEntry> = written.iter().map(|&seq| padded(seq, "first", 3_000)).collect();
    for chunk in first.chunks(7) {
        ok("append", store.append(&run, chunk, None))?;
    }
    ok("append", store.append(&other, &entries(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]), None))?;
    let check_all = |want: &[RawEntry], order: &mut dyn Iterator<Item = usize>| -> Outcome {
        for index in order {
            let wanted = &want[index];
            let got = ok("load_entry", store.load_entry(&run, wanted.seq()))?;
            ensure!(got.as_ref() == Some(wanted), "load_entry({}) returned {got:?}", wanted.seq());
        }
        Ok(())
    };
    // Forward, backward and scattered: a reader serving values out of order.
    check_all(&first, &mut (0..first.len()))?;
    check_all(&first, &mut (0..first.len()).rev())?;
    check_all(&first, &mut (0..first.len()).map(|i| (i * 37) % first.len()))?;
    let stored: std::collections::HashSet<u64> = written.iter().copied().collect();
    let last = written.last().copied().unwrap_or(0);
    for seq in (0..=last + 3).filter(|seq| !stored.contains(seq)).chain([u64::MAX]) {
        let got = ok("load_entry", store.load_entry(&run, seq))?;
        ensure!(got.is_none(), "load_entry({seq}) of a seq the run does not hold returned {got:?}");
    }
    ensure!(
        ok("load_entry", store.load_entry(&run_id("by-seq-unknown"), 1))?.is_none(),
        "load_entry of an unknown run is not None"
    );
    ensure!(
        ok("load_entry", store.load_entry(&other, 13))? == Some(entry(13)),
        "load_entry read another run's journal"
    );
    // Read your writes: what is appended after the reads is read too.
    let more: Vec<RawEntry> = (1..=5).map(|n| padded(last + n, "more", 100)).collect();
    ok("append", store.append(&run, &more, None))?;
    for wanted in &more {
        let got = ok("load_entry", store.load_entry(&run, wanted.seq()))?;
        ensure!(
            got.as_ref() == Some(wanted),
            "after an append, load_entry({}) returned {got:?}",
            wanted.seq()
        );
    }
    let page = ok("load_page", store.load_page(&run, last, 10))?;
    ensure!(page == more, "after an append, load_page(after {last}) returned {:?}", seqs(&page));
    // A run deleted and written again is read as it is now, not as it was.
    ok("delete", store.delete(&run, None))?;
    ensure!(
        ok("load_entry", store.load_entry(&run, written[30]))?.is_none(),
        "a deleted run's entry was read"
    );
    let again: Vec<RawEntry> = (1..=40).map(|seq| padded(seq, "again", 1_500)).collect();
    ok("append", store.append(&run, &again, None))?;
    check_all(&again, &mut (0..again.len()).rev())?;
    let paged = ok("load_page", store.load_page(&run, 20, 100))?;
    ensure!(paged == again[20..], "after the run was written again, load_page returned {:?}", seqs(&paged));
    Ok(())
}
