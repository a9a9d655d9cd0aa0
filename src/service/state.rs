//! What every handler of the service shares: its options, the state the router hands each
//! handler, and how a handler runs a store call off the async threads.

use std::sync::Arc;

use axum::http::StatusCode;

use super::auth::ApiToken;
use super::error::ApiError;
use super::guard::AllowedHosts;
use crate::Engine;
use crate::money::Money;

/// How the service behaves.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// The bearer tokens every route but `/healthz` accepts, each with its scopes; none
    /// leaves the routes open.
    pub tokens: Vec<ApiToken>,
    /// The `Host` values answered (421 for any other).
    pub allowed_hosts: AllowedHosts,
    /// The largest request body accepted, in bytes; a larger one is answered 413.
    pub max_body_bytes: usize,
    /// The largest budget a submitted run may ask for; a run that asks none gets it.
    pub max_budget: Option<Money>,
    /// How often an event stream looks at the store while nothing wakes it: the fallback
    /// when a change is not notified (SQLite written by another process; a lost PostgreSQL
    /// notification connection). Writes this process makes, and PostgreSQL writes from
    /// any host, wake the stream at once.
    pub poll_interval: std::time::Duration,
    /// How long a request body may take to arrive (408 after).
    pub body_timeout: std::time::Duration,
    /// Fired when the server shuts down: every event stream sends a final `shutdown` event
    /// and ends, so connections close within the grace period.
    pub shutdown: tokio_util::sync::CancellationToken,
}

impl Default for ServiceOptions {
    fn default() -> ServiceOptions {
        ServiceOptions {
            tokens: Vec::new(),
            allowed_hosts: AllowedHosts::any(),
            max_body_bytes: 1024 * 1024,
            max_budget: None,
            poll_interval: std::time::Duration::from_millis(50),
            body_timeout: std::time::Duration::from_secs(30),
            shutdown: tokio_util::sync::CancellationToken::new(),
        }
    }
}

/// What every handler shares.
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    pub(crate) engine: Engine,
    pub(crate) options: Arc<ServiceOptions>,
    /// Bounds the planner goals planned at once (the rest wait their turn, queued).
    pub(crate) planning: Arc<tokio::sync::Semaphore>,
    /// Resolutions run one at a time in this server, so of two racing resolutions of one wait
    /// the second sees the first's (in the journal or the run's inbox) and is told it lost.
    pub(crate) resolving: Arc<std::sync::Mutex<()>>,
}

/// How many planner goals one server plans at once.
pub const PLANNING_AT_ONCE: usize = 4;

/// Runs a store call off the async threads.
pub(crate) async fn blocking<T, F>(state: &AppState, f: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&crate::Engine) -> Result<T, ApiError> + Send + 'static,
{
    let engine = state.engine.clone();
    tokio::task::spawn_blocking(move || f(&engine)).await.map_err(|e| {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("a task failed: {e}"))
    })?
}
