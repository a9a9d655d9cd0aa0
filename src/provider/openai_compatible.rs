//! The OpenAI-compatible adapter: Chat Completions at any base URL, with an optional key
//! (Ollama, vLLM, llama.cpp, gateways).
//!
//! It speaks the same dialect as [`OpenAiChatProvider`] with the conservative defaults an
//! endpoint that cannot be introspected deserves: `max_tokens` rather than OpenAI's newer field,
//! no native structured output unless declared, and usage estimated (and marked approximate)
//! when the server reports none, as llama.cpp never does.

use std::fmt;
use std::time::Duration;

use futures::stream::BoxStream;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::http::ApiKey;
use super::openai_chat::{ChatDecoder, Dialect, OpenAiChatProvider};
use super::{Capabilities, ChatEvent, ChatRequest, Provider};
use crate::Error;

/// Chat Completions at a configurable base URL.
#[derive(Clone)]
pub struct OpenAiCompatibleProvider {
    inner: OpenAiChatProvider,
}

impl OpenAiCompatibleProvider {
    /// An adapter named `name` at `base_url` (up to and including `/v1`, e.g.
    /// `http://127.0.0.1:11434/v1`), with no key and conservative capabilities.
    ///
    /// # Errors
    /// `config` for an empty name or base URL; `internal` if the HTTP client cannot be built.
    pub fn new(name: &str, base_url: &str) -> Result<OpenAiCompatibleProvider, Error> {
        if name.trim().is_empty() || name.contains(':') {
            return Err(Error::config(format!("invalid provider name {name:?}")));
        }
        if base_url.trim().is_empty() {
            return Err(Error::config(format!("provider {name} has an empty base url")));
        }
        let inner = OpenAiChatProvider::build(name, base_url, None, Dialect::COMPATIBLE)?
            .with_capabilities(Capabilities::CONSERVATIVE);
        Ok(OpenAiCompatibleProvider { inner })
    }

    /// The adapter `OPENAI_BASE_URL` names (as "openai-compatible"), keyed from
    /// `OPENAI_API_KEY` when that is set. `None` when the base URL is unset.
    ///
    /// # Errors
    /// As [`OpenAiCompatibleProvider::new`].
    pub fn from_env() -> Result<Option<OpenAiCompatibleProvider>, Error> {
        let Ok(base_url) = std::env::var("OPENAI_BASE_URL") else { return Ok(None) };
        if base_url.trim().is_empty() {
            return Ok(None);
        }
        let provider = OpenAiCompatibleProvider::new("openai-compatible", &base_url)?;
        Ok(Some(match ApiKey::from_env("OPENAI_API_KEY") {
            Ok(key) => provider.with_api_key(key),
            Err(_) => provider,
        }))
    }

    /// Sends `key` as a bearer token.
    pub fn with_api_key(mut self, key: ApiKey) -> OpenAiCompatibleProvider {
        self.inner = self.inner.with_key(key);
        self
    }

    /// Declares what the endpoint's models support (native schema, tools, reasoning).
    pub fn with_capabilities(mut self, capabilities: Capabilities) -> OpenAiCompatibleProvider {
        self.inner = self.inner.with_capabilities(capabilities);
        self
    }

    /// Sets how long a stream may stay silent before it fails as a retryable `transport` error.
    pub fn with_idle_timeout(mut self, idle_timeout: Duration) -> OpenAiCompatibleProvider {
        self.inner = self.inner.with_idle_timeout(idle_timeout);
        self
    }

    /// Uses `client` for HTTP.
    pub fn with_client(mut self, client: reqwest::Client) -> OpenAiCompatibleProvider {
        self.inner = self.inner.with_client(client);
        self
    }

    /// Whether to send `stream_options.include_usage` (on by default; a strict server that
    /// rejects unknown fields needs it off).
    pub fn with_include_usage(mut self, include_usage: bool) -> OpenAiCompatibleProvider {
        self.inner = self.inner.with_include_usage(include_usage);
        self
    }

    /// The request body for `request`: a pure function of it.
    pub fn compile(&self, request: &ChatRequest) -> Value {
        self.inner.compile(request)
    }

    /// A fresh decoder for one response stream (see [`OpenAiChatProvider::decoder`]).
    pub fn decoder(&self, input_estimate: u64) -> ChatDecoder {
        self.inner.decoder(input_estimate)
    }
}

impl fmt::Debug for OpenAiCompatibleProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("OpenAiCompatibleProvider");
        self.inner.debug_fields(&mut s);
        s.finish_non_exhaustive()
    }
}

impl Provider for OpenAiCompatibleProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self, model: &str) -> Capabilities {
        self.inner.capabilities(model)
    }

    fn stream(&self, request: ChatRequest, cancel: CancellationToken) -> BoxStream<'static, ChatEvent> {
        self.inner.stream(request, cancel)
    }
}
