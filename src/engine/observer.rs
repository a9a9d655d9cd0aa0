//! Run observers: what an embedder (or the CLI's OpenTelemetry exporter) registers on the
//! engine to watch every run segment it drives, whichever path started it (`run`, `resume`,
//! a worker's claim, the service).

use super::events::EventStream;
use crate::store::RunId;

/// Watches every run segment the engine drives.
pub trait RunObserver: Send + Sync {
    /// A segment is starting: `events` streams all of its events from the first one
    /// (`run:start`) to `run:end`, then ends. Called before the segment emits anything; it
    /// must not block (spawn a task to read the stream).
    fn segment_started(&self, run_id: &RunId, events: EventStream);

    /// Whether events should carry message content: a turn's conversation (`turn:start`'s
    /// `input`) and its answer (`turn:end`'s `output`). Off by default: prompts may be private.
    fn wants_content(&self) -> bool {
        false
    }
}
