//! The client side of each wire attempt, as the fault simulator needs it: which requests went
//! unanswered. A test seam, set only on the adapters `cairn::testing::sim` builds.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The client side of each attempt, for the fault simulator (`cairn::testing::sim`), which
/// bills from the server's side and cannot see what the client received: every request is
/// numbered in the [`AttemptProbe::HEADER`] header, and the numbers of the requests that went
/// unanswered (`ChatEvent::Unanswered`) are kept.
#[derive(Debug, Default)]
pub(crate) struct AttemptProbe {
    next: AtomicU64,
    unanswered: Mutex<HashSet<u64>>,
}

impl AttemptProbe {
    /// The request header that carries an attempt's number.
    pub(crate) const HEADER: &'static str = "x-cairn-sim-attempt";

    /// Whether the request numbered `id` went unanswered.
    #[cfg_attr(not(feature = "sim"), allow(dead_code))]
    pub(crate) fn unanswered(&self, id: u64) -> bool {
        self.unanswered.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(&id)
    }

    /// The next request's number.
    pub(crate) fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::SeqCst)
    }

    /// Records that the request numbered `id` went unanswered.
    pub(crate) fn record_unanswered(&self, id: u64) {
        self.unanswered.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id);
    }
}
