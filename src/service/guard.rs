//! Refusals of drive-by requests, before any route runs: a web page a person visits must not
//! be able to reach the service through their browser.
//!
//! - `Host` must name the service (421 otherwise): the listen address, `localhost` for a
//!   loopback one, or a configured name (`--allowed-host`, `[server] allowed_hosts`). This
//!   stops DNS rebinding, where a page's own name is pointed at 127.0.0.1 to read the API.
//!   A service listening on an unspecified address (`0.0.0.0`) without configured names
//!   accepts any `Host` (it requires a token there).
//! - A request that changes something (any method but GET, HEAD, OPTIONS) is refused (403)
//!   when the browser marks it cross-site (`Sec-Fetch-Site` other than `same-origin` or
//!   `none`) or its `Origin` is not the service's own.
//! - A request body must be JSON (`Content-Type: application/json` or `…+json`; 415
//!   otherwise), so a cross-site `text/plain` or form POST, which a browser sends without
//!   asking, is never read.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// Which `Host` values the service answers.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts {
    /// `host` (any port) or `host:port`, lowercase; empty accepts any host.
    names: Vec<String>,
}

impl AllowedHosts {
    /// Any host (a library router, a test).
    pub fn any() -> AllowedHosts {
        AllowedHosts::default()
    }

    /// The hosts a service listening on `addr` answers, plus `extra` names (`host` or
    /// `host:port`). An unspecified address with no extra names answers any host.
    pub fn for_listen(addr: std::net::SocketAddr, extra: &[String]) -> AllowedHosts {
        let mut names: Vec<String> = extra.iter().map(|n| n.trim().to_ascii_lowercase()).collect();
        let ip = addr.ip();
        if ip.is_unspecified() && names.is_empty() {
            return AllowedHosts::any();
        }
        let port = addr.port();
        let mut add = |host: String| {
            names.push(format!("{host}:{port}"));
            if port == 80 {
                names.push(host);
            }
        };
        match ip {
            std::net::IpAddr::V4(v4) => add(v4.to_string()),
            std::net::IpAddr::V6(v6) => add(format!("[{v6}]")),
        }
        if ip.is_loopback() {
            add("localhost".into());
        }
        AllowedHosts { names }
    }

    /// Whether `authority` (a `Host` value, `host[:port]`) is one of them.
    pub fn allows(&self, authority: &str) -> bool {
        if self.names.is_empty() {
            return true;
        }
        let authority = authority.trim().to_ascii_lowercase();
        let host = host_part(&authority);
        // A name without a port matches the host on any port.
        self.names.iter().any(|name| *name == authority || name == host)
    }
}

/// The host of `host[:port]` (an IPv6 literal keeps its brackets).
fn host_part(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority.find(']').map_or(authority, |end| &authority[..=end]);
    }
    authority.rsplit_once(':').map_or(authority, |(host, _)| host)
}

/// The authority (`host[:port]`) of an `Origin` value; `None` for `null` or a malformed one.
fn origin_authority(origin: &str) -> Option<&str> {
    let (scheme, rest) = origin.split_once("://")?;
    if !matches!(scheme, "http" | "https") || rest.is_empty() || rest.contains('/') {
        return None;
    }
    Some(rest)
}

fn refuse(status: StatusCode, code: &'static str, message: impl Into<String>) -> Response {
    ApiError::new(status, code, message).into_response()
}

/// Whether a `Content-Type` value is JSON.
fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Whether the request carries a body (a non-zero length, or a chunked one).
fn has_body(headers: &HeaderMap) -> bool {
    if headers.contains_key(header::TRANSFER_ENCODING) {
        return true;
    }
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .is_some_and(|n| n > 0)
}

/// The checks, in order: `Host`, then (for a request that changes something) the browser's
/// cross-site marks, then the body's type.
pub(super) async fn refuse_drive_by(
    State(allowed): State<std::sync::Arc<AllowedHosts>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()));
    match host.as_deref() {
        Some(host) if allowed.allows(host) => {}
        Some(host) => {
            return refuse(
                StatusCode::MISDIRECTED_REQUEST,
                "host_not_allowed",
                format!(
                    "Host {:?} is not a name of this service (add it with --allowed-host)",
                    crate::text::for_terminal_line(host)
                ),
            );
        }
        None => return refuse(StatusCode::BAD_REQUEST, "bad_request", "the request names no Host"),
    }
    let safe = matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if !safe {
        if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
            && !matches!(site.trim().to_ascii_lowercase().as_str(), "same-origin" | "none")
        {
            return refuse(
                StatusCode::FORBIDDEN,
                "cross_site_refused",
                "a cross-site request cannot change anything here",
            );
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let own = match (origin.to_str().ok().and_then(origin_authority), host.as_deref()) {
                (Some(authority), Some(host)) => {
                    authority.eq_ignore_ascii_case(host) && allowed.allows(authority)
                }
                _ => false,
            };
            if !own {
                return refuse(
                    StatusCode::FORBIDDEN,
                    "cross_site_refused",
                    "a request from another origin cannot change anything here",
                );
            }
        }
        let content_type = headers.get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap_or(""));
        match content_type {
            Some(ct) if !is_json(ct) => {
                return refuse(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    "the request body must be JSON (Content-Type: application/json)",
                );
            }
            None if has_body(headers) => {
                return refuse(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    "the request body must be JSON (Content-Type: application/json)",
                );
            }
            _ => {}
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_listen_answers_its_address_and_localhost_only() {
        let hosts = AllowedHosts::for_listen("127.0.0.1:7420".parse().unwrap(), &[]);
        assert!(hosts.allows("127.0.0.1:7420"));
        assert!(hosts.allows("LOCALHOST:7420"));
        assert!(!hosts.allows("attacker.example:7420"));
        assert!(!hosts.allows("127.0.0.1:9999"));
        let named = AllowedHosts::for_listen("127.0.0.1:7420".parse().unwrap(), &["cairn.example".into()]);
        assert!(named.allows("cairn.example"));
        assert!(named.allows("cairn.example:443"));
        let v6 = AllowedHosts::for_listen("[::1]:7420".parse().unwrap(), &[]);
        assert!(v6.allows("[::1]:7420"));
        assert!(AllowedHosts::for_listen("0.0.0.0:7420".parse().unwrap(), &[]).allows("anything:1"));
    }

    #[test]
    fn json_types_and_origins() {
        assert!(is_json("application/json; charset=utf-8"));
        assert!(is_json("application/merge-patch+json"));
        assert!(!is_json("text/plain"));
        assert!(!is_json("application/x-www-form-urlencoded"));
        assert_eq!(origin_authority("http://127.0.0.1:7420"), Some("127.0.0.1:7420"));
        assert_eq!(origin_authority("null"), None);
    }
}
