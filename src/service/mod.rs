//! L6: `cairn serve`, the HTTP service over an engine and its store's run queue. Submitted
//! scripts are queued and driven by the server's in-process workers (or any `cairn worker` on
//! the same store); clients follow a run live over Server-Sent Events read from the store's
//! journal, so a run driven by another process streams the same way.
//!
//! One concept per file: `error` the `{code, message}` body (every error is JSON),
//! `auth` the bearer tokens and their scopes, `guard` the refusal of drive-by requests
//! (`Host`, cross-site, non-JSON bodies), `limits` the accept loop's bounds and the body
//! read timeout, `runs` the run routes, `turns` an agent call's turns, `plan` a planner goal's run, `events` the SSE stream, `metrics` the Prometheus text,
//! `openapi` the OpenAPI document, `inspector` the browser inspector at `/`, `state` what every
//! handler shares (the options, the router's state, a store call off the async threads).

mod auth;
mod error;
mod events;
mod guard;
mod inspector;
mod limits;
mod metrics;
mod openapi;
mod plan;
mod runs;
mod state;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_scale;
mod turns;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

use crate::Engine;

pub use auth::{ApiToken, Caller, Scope};
pub use error::ApiError;
pub use guard::AllowedHosts;
pub use limits::{ConnectionLimits, serve};
use state::AppState;
pub use state::{PLANNING_AT_ONCE, ServiceOptions};

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
    ("get", "/v1/runs/{id}/calls/{seq}/turns"),
];

/// Every response says its type is what it declares.
async fn nosniff(mut response: axum::response::Response) -> axum::response::Response {
    response
        .headers_mut()
        .insert(axum::http::header::X_CONTENT_TYPE_OPTIONS, axum::http::HeaderValue::from_static("nosniff"));
    response
}

/// The service's router over `engine` (whose store must keep a run queue for submissions).
/// Called inside a tokio runtime, it also picks up the planner goals a stopped server left
/// mid-plan.
pub fn router(engine: Engine, options: ServiceOptions) -> Router {
    let max_body = options.max_body_bytes;
    let body_limits = limits::BodyLimits { max_bytes: max_body, timeout: options.body_timeout };
    let allowed_hosts = Arc::new(options.allowed_hosts.clone());
    let tokens: Arc<[ApiToken]> = options.tokens.clone().into();
    let state = AppState {
        engine,
        options: Arc::new(options),
        planning: Arc::new(tokio::sync::Semaphore::new(PLANNING_AT_ONCE)),
        resolving: Arc::new(std::sync::Mutex::new(())),
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
        .route("/v1/runs/{id}/calls/{seq}/turns", get(turns::turns))
        .route_layer(axum::middleware::from_fn_with_state(tokens, auth::require_token));
    // Outermost first: errors become JSON, drive-by requests are refused before anything
    // else, then the body is read within its time limit.
    Router::new()
        .route("/healthz", get(|| async { axum::Json(serde_json::json!({ "ok": true })) }))
        // The inspector's page and assets are public; the API it reads takes the token.
        .route("/", get(inspector::index))
        .route("/inspector.js", get(inspector::script))
        .route("/inspector.css", get(inspector::style))
        .merge(guarded)
        .fallback(|| async { ApiError::new(axum::http::StatusCode::NOT_FOUND, "not_found", "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                axum::http::StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this route does not take that method",
            )
        })
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(body_limits, limits::read_body_in_time))
        .layer(axum::middleware::from_fn_with_state(allowed_hosts, guard::refuse_drive_by))
        .layer(axum::middleware::from_fn(error::json_errors))
        .layer(axum::middleware::map_response(nosniff))
        .with_state(state)
}
