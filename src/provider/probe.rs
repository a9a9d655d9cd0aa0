//! The client side of each wire attempt, as the fault simulator needs it: which requests went
//! unanswered. A test seam, set only on the adapters `cairn::testing::sim` builds.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The client side of each attempt, for the fault simulator (`cairn::testing::sim`), which
/// bills from the server's side and cannot see what the client received: every request is
/// numbered in the [`AttemptProbe::HEADER`] header, and the numbers of the requests that went
/// unanswered (`ChatEvent::Unanswered`) are kept.
#[derive(Debug, Default)]
pub(crate) struct AttemptProbe {
    next: AtomicU64,
    unanswered: Mutex<BTreeMap<u64, SentRequest>>,
}

/// What a request that went unanswered carried, for a simulator that never saw it arrive.
#[derive(Debug, Clone, Default)]
#[cfg_attr(not(feature = "sim"), allow(dead_code))]
pub(crate) struct SentRequest {
    /// The URL's path.
    pub(crate) path: String,
    /// The body.
    pub(crate) body: Vec<u8>,
}

impl SentRequest {
    /// What `request` carries (nothing for a request that cannot be built or has a streamed body).
    pub(crate) fn of(request: &reqwest::RequestBuilder) -> SentRequest {
        let Some(Ok(request)) = request.try_clone().map(reqwest::RequestBuilder::build) else {
            return SentRequest::default();
        };
        let body = request.body().and_then(reqwest::Body::as_bytes).map(<[u8]>::to_vec);
        SentRequest { path: request.url().path().to_owned(), body: body.unwrap_or_default() }
    }
}

impl AttemptProbe {
    /// The request header that carries an attempt's number.
    pub(crate) const HEADER: &'static str = "x-cairn-sim-attempt";

    /// Whether the request numbered `id` went unanswered.
    #[cfg_attr(not(feature = "sim"), allow(dead_code))]
    pub(crate) fn unanswered(&self, id: u64) -> bool {
        self.unanswered.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains_key(&id)
    }

    /// Every request that went unanswered, by number.
    #[cfg_attr(not(feature = "sim"), allow(dead_code))]
    pub(crate) fn unanswered_requests(&self) -> Vec<(u64, SentRequest)> {
        let unanswered = self.unanswered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        unanswered.iter().map(|(id, sent)| (*id, sent.clone())).collect()
    }

    /// The next request's number.
    pub(crate) fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::SeqCst)
    }

    /// Records that the request numbered `id` went unanswered.
    pub(crate) fn record_unanswered(&self, id: u64, sent: SentRequest) {
        self.unanswered.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id, sent);
    }
}
