//! A declared context window: [`WithContextWindow`] wraps any provider and reports the window
//! its models were declared with (`context_window` in a cairn.toml provider table), for servers
//! that cannot be asked (a llama.cpp server started with `--n_ctx 4096` says nothing about it).

use std::sync::Arc;

use futures::stream::BoxStream;
use tokio_util::sync::CancellationToken;

use super::{Capabilities, ChatEvent, ChatRequest, Provider};

/// `inner`, reporting `tokens` as the context window of every model it serves. Everything
/// else (name, capabilities, the stream) is `inner`'s.
///
/// ```
/// use std::sync::Arc;
/// use cairn::provider::{Provider, WithContextWindow, echo::EchoProvider};
///
/// let provider = WithContextWindow::new(Arc::new(EchoProvider::new()), 4096);
/// assert_eq!(provider.context_window("default"), Some(4096));
/// assert_eq!(provider.name(), "echo");
/// ```
#[derive(Debug, Clone)]
pub struct WithContextWindow {
    inner: Arc<dyn Provider>,
    tokens: u64,
}

impl WithContextWindow {
    /// Wraps `inner`, declaring a window of `tokens` for its models.
    pub fn new(inner: Arc<dyn Provider>, tokens: u64) -> WithContextWindow {
        WithContextWindow { inner, tokens }
    }
}

impl Provider for WithContextWindow {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self, model: &str) -> Capabilities {
        self.inner.capabilities(model)
    }

    fn context_window(&self, _model: &str) -> Option<u64> {
        Some(self.tokens)
    }

    fn stream(&self, request: ChatRequest, cancel: CancellationToken) -> BoxStream<'static, ChatEvent> {
        self.inner.stream(request, cancel)
    }
}
