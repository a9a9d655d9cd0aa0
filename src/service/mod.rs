//! L6: `cairn serve`, the HTTP service over an engine and its store's run queue. Submitted
//! scripts are queued and driven by the server's in-process workers (or any `cairn worker` on
//! the same store); clients follow a run live over Server-Sent Events read from the store's
//! journal, so a run driven by another process streams the same way.
//!
//! One concept per file: [`error`] the `{code, message}` body, [`auth`] the bearer token,
//! [`runs`] the run routes, [`plan`] a planner goal's run, [`events`] the SSE stream, [`metrics`] the Prometheus text,
//! [`openapi`] the OpenAPI document.

pub mod auth;
pub mod error;
pub mod events;
pub mod metrics;
pub mod openapi;
pub mod plan;
pub mod runs;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

use crate::Engine;
use crate::money::Money;

pub use error::ApiError;

/// How the service behaves.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// The bearer token every route but `/healthz` requires; `None` leaves the routes open.
    pub token: Option<String>,
    /// The largest request body accepted, in bytes; a larger one is answered 413.
    pub max_body_bytes: usize,
    /// The largest budget a submitted run may ask for; a run that asks none gets it.
    pub max_budget: Option<Money>,
    /// How often an event stream looks at the store while nothing wakes it: the fallback
    /// when a change is not notified (SQLite written by another process; a lost PostgreSQL
    /// notification connection). Writes this process makes, and PostgreSQL writes from
    /// any host, wake the stream at once.
    pub poll_interval: std::time::Duration,
}

impl Default for ServiceOptions {
    fn default() -> ServiceOptions {
        ServiceOptions {
            token: None,
            max_body_bytes: 1024 * 1024,
            max_budget: None,
            poll_interval: std::time::Duration::from_millis(50),
        }
    }
}

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    pub(crate) engine: Engine,
    pub(crate) options: Arc<ServiceOptions>,
    /// Bounds the planner goals planned at once (the rest wait their turn, queued).
    pub(crate) planning: Arc<tokio::sync::Semaphore>,
}

/// How many planner goals one server plans at once.
pub const PLANNING_AT_ONCE: usize = 4;

/// Every route of the service, as `(method, path)` in axum's path syntax: the OpenAPI
/// document's test checks each one appears there.
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/healthz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
    ("post", "/v1/runs"),
    ("get", "/v1/runs"),
    ("get", "/v1/runs/{id}"),
    ("get", "/v1/runs/{id}/journal"),
    ("get", "/v1/runs/{id}/events"),
    ("post", "/v1/runs/{id}/resolve/{key}"),
    ("post", "/v1/runs/{id}/cancel"),
    ("post", "/v1/runs/{id}/resume"),
];

/// The service's router over `engine` (whose store must keep a run queue for submissions).
/// Called inside a tokio runtime, it also picks up the planner goals a stopped server left
/// mid-plan.
pub fn router(engine: Engine, options: ServiceOptions) -> Router {
    let max_body = options.max_body_bytes;
    let state = AppState {
        engine,
        options: Arc::new(options),
        planning: Arc::new(tokio::sync::Semaphore::new(PLANNING_AT_ONCE)),
    };
    // Planner goals a stopped server left mid-plan are planned again here.
    if tokio::runtime::Handle::try_current().is_ok() {
        tokio::spawn(plan::recover(state.clone()));
    }
    let guarded = Router::new()
        .route("/metrics", get(metrics::metrics))
        .route("/openapi.json", get(openapi::document))
        .route("/v1/runs", post(runs::submit).get(runs::list))
        .route("/v1/runs/{id}", get(runs::show))
        .route("/v1/runs/{id}/journal", get(runs::journal))
        .route("/v1/runs/{id}/events", get(events::events))
        .route("/v1/runs/{id}/resolve/{key}", post(runs::resolve))
        .route("/v1/runs/{id}/cancel", post(runs::cancel))
        .route("/v1/runs/{id}/resume", post(runs::resume))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), auth::require_token));
    Router::new()
        .route("/healthz", get(|| async { axum::Json(serde_json::json!({ "ok": true })) }))
        .merge(guarded)
        .fallback(|| async { ApiError::new(axum::http::StatusCode::NOT_FOUND, "not_found", "no such route") })
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(state)
}
