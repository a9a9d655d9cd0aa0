//! HTTP plumbing the adapters share: the redacting [`ApiKey`], the client, and the one place
//! that turns HTTP statuses and provider error bodies into typed [`Error`]s.
//!
//! Classification reads the status and the provider's structured `type`/`code` fields, never
//! the message text: a 400 whose message talks about context length is `validation` unless the
//! provider's code says `context_length_exceeded`.

use std::fmt;
use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::{Error, ErrorCode};

/// A credential. Its `Debug` and `Display` never show it, and errors are scrubbed of it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key given by the host (a vault, a per-tenant secret).
    pub fn new(key: impl Into<String>) -> ApiKey {
        ApiKey(key.into())
    }

    /// Reads the key from the environment variable `var`.
    ///
    /// # Errors
    /// `config` when the variable is unset or empty (the message names the variable, never a value).
    pub fn from_env(var: &str) -> Result<ApiKey, Error> {
        match std::env::var(var) {
            Ok(key) if !key.trim().is_empty() => Ok(ApiKey(key.trim().to_owned())),
            _ => Err(Error::config(format!("the environment variable {var} holds no api key"))),
        }
    }

    /// The secret itself, for the one header that carries it.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

/// What every HTTP adapter carries besides its credential: the name it is registered under,
/// where it sends requests, the client, and how long a stream may stay silent.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub(crate) name: String,
    pub(crate) base_url: String,
    pub(crate) client: reqwest::Client,
    pub(crate) idle_timeout: Duration,
    /// The fault simulator's view of the client side of each attempt (`None` outside it).
    pub(crate) probe: Option<std::sync::Arc<super::probe::AttemptProbe>>,
}

impl Endpoint {
    /// `name` at `base_url`, with the default client and idle timeout.
    pub(crate) fn new(name: &str, base_url: &str) -> Result<Endpoint, Error> {
        Ok(Endpoint {
            name: name.to_owned(),
            base_url: trim_base_url(base_url),
            client: default_client()?,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            probe: None,
        })
    }

    /// Adds the endpoint's fields (and the redacted key) to an adapter's `Debug`.
    pub(crate) fn debug_fields(&self, f: &mut fmt::DebugStruct<'_, '_>, api_key: &dyn fmt::Debug) {
        f.field("name", &self.name)
            .field("base_url", &redact_url(&self.base_url))
            .field("api_key", api_key)
            .field("idle_timeout", &self.idle_timeout);
    }
}

impl Endpoint {
    /// The URL of `path` under the base URL: the path joined before the query, so
    /// `https://host/v1?key=k` and `chat/completions` give `https://host/v1/chat/completions?key=k`.
    pub(crate) fn url(&self, path: &str) -> String {
        join_url(&self.base_url, path)
    }
}

/// `path` joined to `base`'s path, before its query and fragment.
pub(crate) fn join_url(base: &str, path: &str) -> String {
    match url::Url::parse(base) {
        Ok(mut url) => {
            let joined = format!("{}/{}", url.path().trim_end_matches('/'), path.trim_start_matches('/'));
            url.set_path(&joined);
            url.into()
        }
        Err(_) => format!("{}/{}", base.trim_end_matches('/'), path.trim_start_matches('/')),
    }
}

/// Checks that `base_url` is an absolute http(s) URL with a host; says why not.
pub(crate) fn parse_base_url(base_url: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(base_url.trim()).map_err(|e| format!("not an absolute URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("the scheme must be http or https, not {:?}", url.scheme()));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("the URL has no host".into());
    }
    Ok(url)
}

/// `url` with every query value (and any password) replaced by `[redacted]`, for anything
/// shown, journaled or recorded: a gateway key in `?key=...` never leaves the process.
pub(crate) fn redact_url(url: &str) -> String {
    redact_query_values(url).into_owned()
}

/// Every `?name=value` / `&name=value` in `text` with the value redacted, and any URL's
/// `user:password@` userinfo dropped.
fn redact_query_values(text: &str) -> std::borrow::Cow<'_, str> {
    static QUERY_VALUE: LazyLock<Option<Regex>> =
        LazyLock::new(|| Regex::new(r#"([?&][^=\s&#?/]+=)[^&\s#)\]}'"]+"#).ok());
    static USERINFO: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"(https?://)[^/@\s]+@").ok());
    let (Some(query), Some(userinfo)) = (QUERY_VALUE.as_ref(), USERINFO.as_ref()) else {
        return std::borrow::Cow::Borrowed(text);
    };
    if !text.contains('=') && !text.contains('@') {
        return std::borrow::Cow::Borrowed(text);
    }
    let text = query.replace_all(text, "${1}[redacted]");
    match userinfo.replace_all(&text, "${1}[redacted]@") {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(owned) => std::borrow::Cow::Owned(owned),
    }
}

/// A base URL as adapters join paths to it: without a trailing slash.
pub(crate) fn trim_base_url(base_url: &str) -> String {
    base_url.trim_end_matches('/').to_owned()
}

/// The base URL the environment variable `var` names, when it is set and not blank.
pub(crate) fn base_url_from_env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|url| !url.trim().is_empty())
}

/// The builder methods every HTTP adapter offers over its [`Endpoint`] (a field named
/// `endpoint`): one definition instead of one copy per adapter. `$base_url_doc` says what
/// part of the URL the adapter expects.
macro_rules! endpoint_builders {
    ($adapter:ty, $base_url_doc:literal) => {
        #[doc = $base_url_doc]
        pub fn with_base_url(mut self, base_url: impl Into<String>) -> $adapter {
            self.endpoint.base_url = $crate::provider::http::trim_base_url(&base_url.into());
            self
        }

        /// Registers the adapter under another name (the model-ref prefix).
        pub fn with_name(mut self, name: impl Into<String>) -> $adapter {
            self.endpoint.name = name.into();
            self
        }

        /// Sets how long a stream may stay silent before it fails as a retryable `transport` error.
        pub fn with_idle_timeout(mut self, idle_timeout: std::time::Duration) -> $adapter {
            self.endpoint.idle_timeout = idle_timeout;
            self
        }

        /// Numbers every request in a header and records, client-side, which went unanswered
        /// (the fault simulator's judge of attempts the server cannot see).
        #[allow(dead_code)]
        pub(crate) fn with_attempt_probe(
            mut self,
            probe: std::sync::Arc<$crate::provider::AttemptProbe>,
        ) -> $adapter {
            self.endpoint.probe = Some(probe);
            self
        }

        /// Uses `client` for HTTP (proxies, custom roots).
        pub fn with_client(mut self, client: reqwest::Client) -> $adapter {
            self.endpoint.client = client;
            self
        }
    };
}
pub(crate) use endpoint_builders;

/// Builds the HTTP client the adapters use by default: rustls, a bounded connect time, and
/// no overall timeout (a stream may legitimately run for minutes; the idle timeout bounds it).
pub(crate) fn default_client() -> Result<reqwest::Client, Error> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .build()
        .map_err(|err| Error::internal(format!("cannot build the http client: {err}")))
}

/// The default idle timeout: how long a stream may stay silent before it counts as stalled.
pub(crate) const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// What an error message may say about the call: the provider's name, and the credential to
/// scrub from anything the provider echoes back.
#[derive(Clone, Debug)]
pub(crate) struct ErrorContext {
    pub(crate) provider: String,
    pub(crate) secret: Option<ApiKey>,
}

impl ErrorContext {
    /// Removes the credential from a message, should a provider or library echo it, and any
    /// other key-shaped string (an endpoint may echo a key this adapter never held).
    pub(crate) fn scrub(&self, message: &str) -> String {
        static KEY_SHAPED: LazyLock<Option<Regex>> =
            LazyLock::new(|| Regex::new(r"\b(sk|rk|pk)-[A-Za-z0-9_\-]{12,}").ok());
        let mut message = match KEY_SHAPED.as_ref() {
            Some(regex) => regex.replace_all(message, "[redacted]").into_owned(),
            None => message.to_owned(),
        };
        // A URL's query values (`?key=...` of hosted gateways) are secrets too.
        message = redact_query_values(&message).into_owned();
        if let Some(secret) = &self.secret {
            let key = secret.expose();
            if key.len() >= 4 && message.contains(key) {
                message = message.replace(key, "[redacted]");
            }
        }
        message
    }

    /// A connection-level failure: always a retryable `transport` error.
    pub(crate) fn transport(&self, err: &reqwest::Error) -> Error {
        let what = if err.is_connect() {
            "cannot connect"
        } else if err.is_timeout() {
            "timed out"
        } else if err.is_body() || err.is_decode() {
            "the response body broke off"
        } else {
            "the request failed"
        };
        // reqwest's Display includes the URL (never a header), and the chain says why.
        let mut detail = err.to_string();
        let mut source = std::error::Error::source(err);
        while let Some(cause) = source {
            detail.push_str(": ");
            detail.push_str(&cause.to_string());
            source = cause.source();
        }
        Error::new(ErrorCode::Transport, self.scrub(&format!("{}: {what}: {detail}", self.provider)))
    }
}

/// Turns a non-success HTTP answer into a typed error.
pub(crate) fn classify_http(
    ctx: &ErrorContext,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
) -> Error {
    let detail = ErrorDetail::from_body(body);
    let code = status.as_u16();
    let kind = detail.kind();
    let (error_code, retryable) = match (code, kind) {
        (_, Some(kind)) if kind_is(kind, &["context_length_exceeded"]) => (ErrorCode::ContextOverflow, false),
        (_, Some(kind)) if kind_is(kind, &["insufficient_quota", "billing_error"]) => {
            (ErrorCode::ProviderRateLimit, false)
        }
        (401 | 403, _) => (ErrorCode::ProviderAuth, false),
        (404, _) => (ErrorCode::Config, false),
        (408 | 409, _) => (ErrorCode::ProviderUnavailable, true),
        (429, _) => (ErrorCode::ProviderRateLimit, true),
        (500..=599, _) => (ErrorCode::ProviderUnavailable, true),
        _ => (ErrorCode::Validation, false),
    };
    let message = detail.describe(format!("{} returned http {code}", ctx.provider));
    let mut error = Error::new(error_code, ctx.scrub(&message));
    error.retryable = retryable;
    if matches!(error_code, ErrorCode::ProviderRateLimit | ErrorCode::ProviderUnavailable)
        && let Some(ms) = retry_after_ms(headers)
    {
        error = error.with_retry_after_ms(ms);
    }
    error
}

/// Classifies an error reported inside a stream (an `error` event) by its type or code.
pub(crate) fn classify_stream_error(ctx: &ErrorContext, value: &Value) -> Error {
    let detail = ErrorDetail::from_value(value);
    let kind = detail.kind();
    let (code, retryable) = match kind {
        Some(kind) => kind_code(kind),
        // An error the server did not name is a server-side fault mid-stream.
        None => (ErrorCode::ProviderUnavailable, true),
    };
    let message = detail.describe(format!("{} stream error", ctx.provider));
    let mut error = Error::new(code, ctx.scrub(&message));
    error.retryable = retryable;
    error
}

/// Maps a provider's error type or code (Anthropic `error.type`, OpenAI `error.code`/`type`).
fn kind_code(kind: &str) -> (ErrorCode, bool) {
    match kind {
        "context_length_exceeded" => (ErrorCode::ContextOverflow, false),
        "rate_limit_error" | "rate_limit_exceeded" | "tokens" | "requests" => {
            (ErrorCode::ProviderRateLimit, true)
        }
        "insufficient_quota" | "billing_error" => (ErrorCode::ProviderRateLimit, false),
        "authentication_error" | "permission_error" | "invalid_api_key" | "invalid_authentication" => {
            (ErrorCode::ProviderAuth, false)
        }
        "not_found_error" | "model_not_found" => (ErrorCode::Config, false),
        "invalid_request_error" | "request_too_large" | "invalid_prompt" | "invalid_value" => {
            (ErrorCode::Validation, false)
        }
        "content_filter" | "content_policy_violation" => (ErrorCode::ContentFilter, false),
        // overloaded_error, api_error, server_error, timeout_error and anything unnamed: a
        // server-side fault that a later attempt may not meet.
        _ => (ErrorCode::ProviderUnavailable, true),
    }
}

fn kind_is(kind: &str, names: &[&str]) -> bool {
    names.contains(&kind)
}

/// The structured fields of a provider error body.
struct ErrorDetail {
    /// OpenAI's `code` (the most specific name), when present.
    code: Option<String>,
    /// Anthropic's and OpenAI's `type`.
    kind: Option<String>,
    message: Option<String>,
}

impl ErrorDetail {
    fn from_body(body: &[u8]) -> ErrorDetail {
        match serde_json::from_slice::<Value>(body) {
            Ok(value) => ErrorDetail::from_value(&value),
            Err(_) => {
                let text = String::from_utf8_lossy(body);
                let text = text.trim();
                ErrorDetail { code: None, kind: None, message: (!text.is_empty()).then(|| text.to_owned()) }
            }
        }
    }

    /// Reads `{"error": {...}}`, `{"type":"error","error":{...}}` or a bare `{code, message}`.
    fn from_value(value: &Value) -> ErrorDetail {
        let inner = match value.get("error") {
            Some(inner) if inner.is_object() => inner,
            _ => value,
        };
        let text = |key: &str| inner.get(key).and_then(Value::as_str).map(str::to_owned);
        let kind = text("type").filter(|t| t != "error");
        ErrorDetail { code: text("code"), kind, message: text("message") }
    }

    /// The most specific name: the code where there is one, else the type.
    /// `head`, then the error's type or code and its (truncated) message where given.
    fn describe(&self, mut head: String) -> String {
        if let Some(kind) = self.kind() {
            head.push_str(": ");
            head.push_str(kind);
        }
        if let Some(text) = &self.message {
            head.push_str(": ");
            head.push_str(&truncate(text, 500));
        }
        head
    }

    fn kind(&self) -> Option<&str> {
        self.code.as_deref().filter(|c| !c.is_empty()).or(self.kind.as_deref())
    }
}

/// The provider's requested delay before a retry: `retry-after-ms` (OpenAI, Anthropic) or the
/// delta-seconds form of `Retry-After`. Anything else (an HTTP date, decimals, signs) is
/// treated as absent, so the core's own backoff applies.
pub(crate) fn retry_after_ms(headers: &HeaderMap) -> Option<u64> {
    const MAX_MS: u64 = 24 * 60 * 60 * 1000;
    if let Some(ms) = headers.get("retry-after-ms").and_then(|v| v.to_str().ok()).and_then(parse_delta) {
        return Some(ms.min(MAX_MS));
    }
    let seconds =
        headers.get(reqwest::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(parse_delta)?;
    Some(seconds.saturating_mul(1000).min(MAX_MS))
}

/// RFC 9110 delta-seconds: one or more digits, optionally padded with spaces or tabs.
fn parse_delta(value: &str) -> Option<u64> {
    let digits = value.trim_matches(|c| c == ' ' || c == '\t');
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // A value too large for u64 is still a (huge) delay; it is clamped by the caller.
    Some(digits.parse::<u64>().unwrap_or(u64::MAX))
}

/// Cuts `text` to at most `max` characters, on a character boundary.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    fn ctx() -> ErrorContext {
        ErrorContext { provider: "openai".into(), secret: Some(ApiKey::new("sk-secret-123")) }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn retry_after_accepts_only_delta_seconds() {
        assert_eq!(retry_after_ms(&headers(&[("retry-after", "7")])), Some(7000));
        assert_eq!(retry_after_ms(&headers(&[("retry-after", " \t12 ")])), Some(12_000));
        assert_eq!(retry_after_ms(&headers(&[("retry-after-ms", "250"), ("retry-after", "9")])), Some(250));
        for bad in ["", "1.5", "-1", "+3", "0x10", "Wed, 21 Oct 2015 07:28:00 GMT", "1e3"] {
            assert_eq!(retry_after_ms(&headers(&[("retry-after", bad)])), None, "{bad:?}");
        }
        assert_eq!(retry_after_ms(&headers(&[("retry-after", "99999999999999999999999")])), Some(86_400_000));
    }

    #[test]
    fn statuses_map_to_codes() {
        let none = HeaderMap::new();
        let cases = [
            (401, "", ErrorCode::ProviderAuth, false),
            (403, "", ErrorCode::ProviderAuth, false),
            (404, "", ErrorCode::Config, false),
            (429, "", ErrorCode::ProviderRateLimit, true),
            (500, "", ErrorCode::ProviderUnavailable, true),
            (502, "", ErrorCode::ProviderUnavailable, true),
            (503, "", ErrorCode::ProviderUnavailable, true),
            (
                529,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                ErrorCode::ProviderUnavailable,
                true,
            ),
            (
                400,
                r#"{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
                ErrorCode::ContextOverflow,
                false,
            ),
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
                ErrorCode::Validation,
                false,
            ),
            (
                429,
                r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#,
                ErrorCode::ProviderRateLimit,
                false,
            ),
        ];
        for (status, body, code, retryable) in cases {
            let err = classify_http(&ctx(), StatusCode::from_u16(status).unwrap(), &none, body.as_bytes());
            assert_eq!((err.code, err.retryable), (code, retryable), "{status} {body}");
        }
    }

    #[test]
    fn paths_join_before_the_query_and_query_values_are_redacted() {
        assert_eq!(join_url("https://h/v1?key=k", "chat/completions"), "https://h/v1/chat/completions?key=k");
        assert_eq!(join_url("https://h/v1/", "responses"), "https://h/v1/responses");
        assert_eq!(join_url("https://h", "v1/messages"), "https://h/v1/messages");
        assert_eq!(
            redact_url("https://u:pw@h/v1?key=k&b=2#f"),
            "https://[redacted]@h/v1?key=[redacted]&b=[redacted]#f"
        );
        assert_eq!(
            ctx().scrub("failed for url (http://h/v1/x?key=abc)"),
            "failed for url (http://h/v1/x?key=[redacted])"
        );
        assert!(parse_base_url("127.0.0.1:8080/v1").is_err());
        assert!(parse_base_url("file:///etc").is_err());
        assert!(parse_base_url("http://127.0.0.1:8080/v1").is_ok());
    }

    #[test]
    fn credentials_are_scrubbed_from_messages() {
        let body = br#"{"error":{"message":"Incorrect API key provided: sk-secret-123","type":"invalid_request_error","code":"invalid_api_key"}}"#;
        let err = classify_http(&ctx(), StatusCode::UNAUTHORIZED, &HeaderMap::new(), body);
        assert_eq!(err.code, ErrorCode::ProviderAuth);
        assert!(!err.message.contains("sk-secret-123"), "{}", err.message);
        assert!(err.message.contains("[redacted]"));
        assert_eq!(format!("{:?}", ApiKey::new("sk-secret-123")), "ApiKey([redacted])");
    }

    #[test]
    fn rate_limit_carries_retry_after() {
        let err = classify_http(
            &ctx(),
            StatusCode::TOO_MANY_REQUESTS,
            &headers(&[("retry-after", "3")]),
            b"slow down",
        );
        assert_eq!(err.retry_after_ms, Some(3000));
        assert!(err.message.contains("slow down"));
    }
}
