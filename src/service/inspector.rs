//! The browser inspector at `/`: one HTML page, its script and its style, built into the
//! binary (no CDN, no build step). The page reads the API under `/v1` with the bearer token
//! the person enters once (kept in `sessionStorage`, sent as `Authorization`, never in a
//! URL); every text from a model, tool or script is rendered with `textContent`.
//!
//! Every response here carries a strict `Content-Security-Policy` (no inline script, nothing
//! but this origin) and `X-Content-Type-Options: nosniff`.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

/// The page's policy: its own origin only, no inline script or style, no framing.
pub(super) const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
frame-ancestors 'none'";

const INDEX: &str = include_str!("inspector/index.html");
const SCRIPT: &str = include_str!("inspector/inspector.js");
const STYLE: &str = include_str!("inspector/inspector.css");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `GET /`: the page.
pub(super) async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

/// `GET /inspector.js`.
pub(super) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /inspector.css`.
pub(super) async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_no_inline_script_and_no_other_origin() {
        assert!(INDEX.contains("src=\"/inspector.js\""));
        // No inline script, no inline handler, nothing fetched from elsewhere.
        assert!(!INDEX.contains("<script>"), "inline script");
        let handler = INDEX.split(" on").skip(1).find(|rest| {
            let name: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
            !name.is_empty() && rest[name.len()..].trim_start().starts_with('=')
        });
        assert!(handler.is_none(), "an inline handler attribute: on{handler:?}");
        assert!(!INDEX.contains("http://") && !INDEX.contains("https://"), "another origin");
        // The script renders data as text only: no HTML sinks.
        for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("] {
            assert!(!SCRIPT.contains(sink), "the script uses {sink}");
        }
        assert!(CONTENT_SECURITY_POLICY.starts_with("default-src 'self'"));
    }
}
