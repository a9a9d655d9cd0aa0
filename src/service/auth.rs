//! Bearer tokens with scopes: every route but `/healthz` requires `Authorization: Bearer
//! <token>` (the scheme in any case, RFC 9110) when the service has tokens, compared in
//! constant time. Each token is named and holds scopes: `read` (list, show, journal, events),
//! `write` (submit, resolve, cancel, resume) and `metrics` (`/metrics`); any valid token reads
//! `/openapi.json`. The name of the token a request used reaches its handler as a [`Caller`].

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// List runs, show one, read its journal, follow its events.
    Read,
    /// Submit runs, resolve waits, cancel and resume runs.
    Write,
    /// Scrape `/metrics`.
    Metrics,
}

impl Scope {
    /// Its name on the wire and in `cairn.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Metrics => "metrics",
        }
    }

    /// Every scope (what the single `CAIRN_SERVER_TOKEN` holds).
    pub const ALL: [Scope; 3] = [Scope::Read, Scope::Write, Scope::Metrics];
}

/// One accepted bearer token.
#[derive(Clone)]
pub struct ApiToken {
    /// Its name (the environment variable's, or its `[server.tokens.NAME]`), recorded as a
    /// `token:NAME` tag on the runs it submits.
    pub name: String,
    /// The secret clients send.
    pub secret: String,
    /// What it may do.
    pub scopes: Vec<Scope>,
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiToken").field("name", &self.name).field("scopes", &self.scopes).finish()
    }
}

/// The name of the token a request was authorized by (`None` when the service has none).
#[derive(Debug, Clone, Default)]
pub struct Caller(pub Option<String>);

/// The scope a route needs; `None` for one any valid token may read (`/openapi.json`).
fn scope_of(method: &Method, path: &str) -> Option<Scope> {
    if path == "/metrics" {
        Some(Scope::Metrics)
    } else if path == "/openapi.json" {
        None
    } else if method == Method::GET || method == Method::HEAD {
        Some(Scope::Read)
    } else {
        Some(Scope::Write)
    }
}

/// The credentials of an `Authorization` value: `Bearer <token>`, the scheme in any case.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, rest) = value.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
}

/// Answers 401 unless the request carries one of the service's tokens (or the service has
/// none), 403 when that token lacks the route's scope.
pub(super) async fn require_token(
    State(tokens): State<Arc<[ApiToken]>>,
    mut request: Request,
    next: Next,
) -> Response {
    if tokens.is_empty() {
        request.extensions_mut().insert(Caller(None));
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer)
        .unwrap_or("");
    // Every token is compared, so the time taken does not tell which one matched.
    let mut matched = None;
    for token in tokens.iter() {
        if constant_time_eq(given.as_bytes(), token.secret.as_bytes()) && !given.is_empty() {
            matched = Some(token);
        }
    }
    let Some(token) = matched else {
        let mut response =
            ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "a valid bearer token is required")
                .into_response();
        response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        return response;
    };
    if let Some(needed) = scope_of(request.method(), request.uri().path())
        && !token.scopes.contains(&needed)
    {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("token {:?} lacks the {:?} scope this route needs", token.name, needed.as_str()),
        )
        .into_response();
    }
    request.extensions_mut().insert(Caller(Some(token.name.clone())));
    next.run(request).await
}

/// Whether `a == b`, in time that depends on their lengths only.
pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_whole_tokens() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"secret"));
    }

    #[test]
    fn the_scheme_is_case_insensitive() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer abc"), Some("abc"));
        assert_eq!(bearer("BEARER  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearerabc"), None);
    }

    #[test]
    fn routes_need_their_scope() {
        assert_eq!(scope_of(&Method::GET, "/metrics"), Some(Scope::Metrics));
        assert_eq!(scope_of(&Method::GET, "/v1/runs/x/events"), Some(Scope::Read));
        assert_eq!(scope_of(&Method::POST, "/v1/runs/x/cancel"), Some(Scope::Write));
        assert_eq!(scope_of(&Method::GET, "/openapi.json"), None);
    }
}
