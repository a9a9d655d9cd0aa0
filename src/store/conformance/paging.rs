//! The paging checks: a journal read page by page, and the run listing read page by page,
//! give exactly what one whole read gives, in the same order, with no page over its limit.

use super::fixtures::{Outcome, ensure, entries, meta, ok, run_id, seqs};
use crate::store::{JournalStore, RunCursor, RunFilter, RunStatus};

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
