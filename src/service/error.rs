//! The service's error body: `{code, message}` with the HTTP status that fits the error's kind.

use axum::Json;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::error::{Error, ErrorCode};

/// An error answered to an HTTP client.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    details: Option<Value>,
    /// Seconds after which the same request may succeed (`Retry-After`), for a 503.
    retry_after: Option<u64>,
}

impl ApiError {
    /// An error with a status, a wire code and a message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into(), details: None, retry_after: None }
    }

    /// 400: the request is malformed or invalid.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 404: no such run.
    pub fn unknown_run(run: &str) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("unknown run {run}"))
    }

    /// 409: the run is in a state that forbids the request.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 409: the wait was closed by an earlier resolution; `winner` is the value that won.
    pub fn already_resolved(key: &str, winner: Option<Value>) -> ApiError {
        ApiError::new(
            StatusCode::CONFLICT,
            "already_resolved",
            format!("the wait on {key:?} was already resolved; the first resolution wins"),
        )
        .with_details(json!({ "key": key, "value": winner }))
    }

    /// Adds machine-readable details (a rejected script's diagnostics).
    pub fn with_details(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }

    /// Says (`Retry-After`) that the same request may succeed after `seconds`.
    pub fn with_retry_after(mut self, seconds: u64) -> ApiError {
        self.retry_after = Some(seconds);
        self
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        let status = match e.code {
            ErrorCode::Validation => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::Config => StatusCode::BAD_REQUEST,
            ErrorCode::RunBusy => StatusCode::CONFLICT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let code = match e.code {
            ErrorCode::Validation => "script_rejected",
            ErrorCode::Config => "bad_request",
            ErrorCode::RunBusy => "run_busy",
            _ => "internal",
        };
        ApiError::new(status, code, e.to_string())
    }
}

impl From<crate::store::Error> for ApiError {
    fn from(e: crate::store::Error) -> ApiError {
        ApiError::from(Error::from(e))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({ "code": self.code, "message": self.message });
        if let Some(details) = self.details {
            body["details"] = details;
        }
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from(seconds));
        }
        response
    }
}

/// Makes every error response JSON: what axum or hyper answer on their own (405, a path or
/// query that does not parse, a body past its limit) becomes `{code, message}` with the same
/// status and headers (`Allow`, `WWW-Authenticate`).
pub(super) async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    if json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096)
        .await
        .map(|b| crate::text::for_terminal_line(String::from_utf8_lossy(&b).trim()).into_owned())
        .unwrap_or_default();
    let code = match status.as_u16() {
        400 => "bad_request",
        404 => "not_found",
        405 => "method_not_allowed",
        408 => "request_timeout",
        413 => "payload_too_large",
        415 => "unsupported_media_type",
        422 => "unprocessable",
        500..=599 => "internal",
        _ => "error",
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_ascii_lowercase()
    } else {
        text
    };
    let mut out = ApiError::new(status, code, message).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}
