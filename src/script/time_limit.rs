//! The script-time limit both dialects' guards check: past `max`, a live run stops; a
//! reproduction of the settled run is judged as `engine::script_clock` says (the one rule for
//! bounds timing decides), asked at most every twentieth of the limit.

use std::sync::Mutex;
use std::time::Duration;

use crate::engine::{PastLimit, REPRODUCTION_MARGIN, ScriptClock};
use crate::error::{Error, ErrorCode};

/// The limit, with the run it bounds.
#[derive(Debug)]
pub(crate) struct TimeLimit {
    max: Duration,
    /// The run's clock handle (`None`: a script with no run behind it, as in unit tests).
    clock: Option<ScriptClock>,
    /// The script time until which a reproduction found behind its run is not asked again.
    behind_until: Mutex<Duration>,
}

impl TimeLimit {
    pub(crate) fn new(max: Duration, clock: Option<ScriptClock>) -> TimeLimit {
        TimeLimit { max, clock, behind_until: Mutex::new(Duration::ZERO) }
    }

    /// The error that ends the run once `used` script time is past the limit; `None` while it
    /// may go on. The caller latches it and, if its latch took this error, calls
    /// [`TimeLimit::stopped`].
    pub(crate) fn check(&self, used: Duration) -> Option<Error> {
        if used <= self.max {
            return None;
        }
        let verdict = self.clock.as_ref().map_or(PastLimit::Stop, |clock| {
            let mut until = self.behind_until.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if used < *until {
                return PastLimit::Behind;
            }
            let verdict = clock.past_limit();
            if verdict == PastLimit::Behind {
                *until = used + (self.max / 20).max(Duration::from_millis(5));
            }
            verdict
        });
        let stop = match verdict {
            PastLimit::Stop => true,
            PastLimit::Behind | PastLimit::Margin => used > self.max.saturating_mul(REPRODUCTION_MARGIN),
        };
        stop.then(|| {
            Error::new(
                ErrorCode::SandboxLimit,
                format!(
                    "the script ran longer than its script-time limit of {:.1} s (time spent waiting for \
                     model calls and other engine work is not counted; comparing, indexing or \
                     switching on long strings takes time the operation budget does not see); do less \
                     work in the script",
                    self.max.as_secs_f64()
                ),
            )
        })
    }

    /// The limit's error ended the run: its settlement says so.
    pub(crate) fn stopped(&self) {
        if let Some(clock) = &self.clock {
            clock.tripped();
        }
    }
}
