//! Bounds on what a client can hold: how many connections are open at once, how long a
//! request's headers (and an idle keep-alive connection's next request) may take to arrive,
//! how long its body may take, and how long shutdown waits for the connections left.
//!
//! [`serve`] is the accept loop `cairn serve` runs (hyper's HTTP/1 connection with a timer,
//! so its header read timeout holds): a slowloris client that sends a header a byte at a
//! time, or opens connections and sends nothing, is cut off after `header_timeout`, and past
//! `max_connections` a new connection is closed at once instead of exhausting descriptors.
//! [`read_body_in_time`] answers 408 to a body that does not arrive within `body_timeout`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::error::ApiError;

/// The bounds of the accept loop.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections open at once; past it a new connection is closed at once.
    pub max_connections: usize,
    /// How long a request's headers may take to arrive, counted from the first read of a
    /// connection or, on a kept-alive connection, from the end of the last response: an idle
    /// connection is closed after it too.
    pub header_timeout: Duration,
    /// After shutdown is asked for, how long in-flight requests (and event streams, which end
    /// with a final event) have before their connections are dropped.
    pub grace: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            max_connections: 512,
            header_timeout: Duration::from_secs(10),
            grace: Duration::from_secs(10),
        }
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` fires; then accepts nothing
/// more, lets each connection finish its request (event streams end themselves on the same
/// token), and returns once they did or `limits.grace` passed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let mut connections = JoinSet::new();
    let mut refused = 0u64;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        while connections.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(e) => {
                // Out of descriptors, most likely: wait for some to close.
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            refused += 1;
            if refused.is_power_of_two() {
                tracing::warn!(
                    limit = limits.max_connections,
                    refused,
                    "too many open connections: closing new ones"
                );
            }
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (app, shutdown, header_timeout) = (app.clone(), shutdown.clone(), limits.header_timeout);
        connections.spawn(async move {
            let _permit = permit;
            let service = hyper_util::service::TowerToHyperService::new(app);
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(header_timeout);
            let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = shutdown.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    drop(listener);
    let drained =
        tokio::time::timeout(limits.grace, async { while connections.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(
            left = connections.len(),
            "connections still open after the shutdown grace period: dropped"
        );
    }
    connections.abort_all();
}

/// How large a request body may be and how long it may take.
#[derive(Debug, Clone, Copy)]
pub(super) struct BodyLimits {
    /// The largest body accepted, in bytes.
    pub max_bytes: usize,
    /// How long it may take to arrive.
    pub timeout: Duration,
}

/// Reads a request's whole body within `limits.timeout` (408 when it does not arrive in
/// time, 413 past `limits.max_bytes`), so a handler never waits on a slow client.
pub(super) async fn read_body_in_time(
    State(limits): State<BodyLimits>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared == Some(0) || (declared.is_none() && !headers.contains_key(header::TRANSFER_ENCODING)) {
        return next.run(request).await;
    }
    let max = limits.max_bytes;
    let too_large =
        || ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", "the request body is too large");
    if declared.is_some_and(|n| n > max as u64) {
        return too_large().into_response();
    }
    let (parts, body) = request.into_parts();
    match tokio::time::timeout(limits.timeout, axum::body::to_bytes(body, max)).await {
        Err(_) => {
            let mut response = ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!("the request body did not arrive within {} s", limits.timeout.as_secs_f64()),
            )
            .into_response();
            response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
            response
        }
        Ok(Err(e)) if e.to_string().contains("length limit") => too_large().into_response(),
        Ok(Err(e)) => ApiError::bad_request(format!("could not read the request body: {e}")).into_response(),
        Ok(Ok(bytes)) => next.run(Request::from_parts(parts, Body::from(bytes))).await,
    }
}
