//! `phase` and `log`: cosmetic structure. A phase groups events and cost under a name and adds
//! no scope segment, so it never changes a call's identity; a log line is an event, never
//! journaled.

use std::future::Future;
use std::sync::Arc;

use serde_json::Value;

use super::ctx::Ctx;
use super::events::EventKind;
use crate::error::Error;

impl Ctx {
    /// A context inside phase `name`, with its start event emitted; pair with [`Ctx::end_phase`].
    pub(crate) fn begin_phase(&self, name: &str) -> Ctx {
        let mut inner = self.clone();
        inner.phase = Some(Arc::from(name));
        inner.span = self.run.new_span();
        inner.parent_span = Some(self.span);
        self.run.emit((inner.span, Some(self.span)), false, || EventKind::PhaseStart { name: name.into() });
        inner
    }

    /// Emits the end of the phase `inner` was begun for.
    pub(crate) fn end_phase(&self, inner: &Ctx) {
        let name = inner.phase.as_deref().unwrap_or_default().to_owned();
        self.run.emit((inner.span, Some(self.span)), false, || EventKind::PhaseEnd { name });
    }

    /// Runs `body` inside a named phase: events and cost are grouped under it; identity is
    /// unaffected.
    ///
    /// # Errors
    /// The body's error.
    pub async fn phase<F, Fut, T>(&self, name: &str, body: F) -> Result<T, Error>
    where
        F: FnOnce(Ctx) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let inner = self.begin_phase(name);
        let result = body(inner.clone()).await;
        self.end_phase(&inner);
        result
    }

    /// Emits a log event (not journaled).
    pub fn log(&self, level: &str, message: &str, data: Option<Value>) {
        self.run.emit((self.span, self.parent_span), false, || EventKind::Log {
            level: level.into(),
            message: message.into(),
            data,
        });
    }
}
