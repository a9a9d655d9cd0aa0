//! A journal read page by page: the one way a reader that may meet a long journal (a resume,
//! `cairn replay`, `cairn inspect`, the service's run and journal routes, the event stream's
//! backlog) goes through it, holding one page at a time instead of the whole journal.

use super::{JournalStore, RawEntry, Result, RunId};

/// How many entries a page holds unless a reader asks otherwise: a few hundred kilobytes of
/// a typical journal.
pub const PAGE_ENTRIES: usize = 512;

/// The pages of one run's journal after a seq, in order: each a [`JournalStore::load_page`].
/// Ends after the first short page (or the first failed read, which it yields).
#[derive(Debug)]
pub struct JournalPages<'s> {
    store: &'s dyn JournalStore,
    run: RunId,
    after: u64,
    limit: usize,
    done: bool,
}

impl<'s> JournalPages<'s> {
    /// The pages of `run`'s journal after seq `after`, `limit` entries each (at least one).
    pub fn new(store: &'s dyn JournalStore, run: &RunId, after: u64, limit: usize) -> JournalPages<'s> {
        JournalPages { store, run: run.clone(), after, limit: limit.max(1), done: false }
    }

    /// The seq of the last entry read so far (the `after` it started from before any).
    pub fn last_seq(&self) -> u64 {
        self.after
    }
}

impl Iterator for JournalPages<'_> {
    type Item = Result<Vec<RawEntry>>;

    fn next(&mut self) -> Option<Result<Vec<RawEntry>>> {
        if self.done {
            return None;
        }
        match self.store.load_page(&self.run, self.after, self.limit) {
            Err(err) => {
                self.done = true;
                Some(Err(err))
            }
            Ok(page) => {
                self.done = page.len() < self.limit;
                let last = page.last()?;
                self.after = last.seq();
                Some(Ok(page))
            }
        }
    }
}

/// The seq of the run's last entry (0 for an empty or unknown journal), read page by page.
///
/// # Errors
/// The store's read failure.
pub fn last_seq(store: &dyn JournalStore, run: &RunId) -> Result<u64> {
    let mut pages = JournalPages::new(store, run, 0, PAGE_ENTRIES);
    for page in pages.by_ref() {
        page?;
    }
    Ok(pages.last_seq())
}
