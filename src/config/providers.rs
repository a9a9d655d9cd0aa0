//! The `[providers.*]` and `[profiles.*]` tables of `cairn.toml`, and how each becomes a
//! provider or an agent profile.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::engine::AgentProfile;
use crate::error::{Error, ErrorCode};
use crate::model::ModelRef;
use crate::money::Money;
use crate::provider::anthropic::AnthropicProvider;
use crate::provider::echo::EchoProvider;
use crate::provider::openai_chat::OpenAiChatProvider;
use crate::provider::openai_compatible::OpenAiCompatibleProvider;
use crate::provider::openai_responses::OpenAiResponsesProvider;
use crate::provider::{ApiKey, Provider};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProviderConfig {
    /// `anthropic`, `openai`, `openai-responses`, `openai-compatible` or `echo`.
    pub(crate) kind: String,
    pub(crate) base_url: Option<String>,
    /// The environment variable holding the key.
    pub(crate) api_key_env: Option<String>,
    pub(crate) idle_timeout_ms: Option<u64>,
    /// Echo only: a latency per call.
    pub(crate) latency_ms: Option<u64>,
    /// Prices in USD per million tokens for this provider's models (`model = [in, out]` or
    /// `model = { input, output, cache_read, cache_write, max_output }`).
    #[serde(default)]
    pub(crate) prices: BTreeMap<String, super::prices::PriceSpec>,
    /// A price for every model of this provider not in `prices` (e.g. a demo price for echo).
    #[serde(default)]
    pub(crate) price: Option<super::prices::PriceSpec>,
    /// openai-compatible only: what the server's models support (native structured output,
    /// tools, reasoning); unset fields keep the conservative default.
    #[serde(default)]
    pub(crate) capabilities: Option<CapabilitiesConfig>,
    /// At most this many concurrent model calls of a run to this provider (e.g. 1 for a
    /// llama.cpp server, which serves one request at a time and interrupts the one in flight
    /// when another arrives).
    pub(crate) concurrency: Option<usize>,
    /// The context window of this provider's models, in tokens (prompt and output together),
    /// e.g. 4096 for a llama.cpp server started with `--n_ctx 4096`: the planner writes for a
    /// small window with its compact card.
    pub(crate) context_window: Option<u64>,
}

/// `capabilities = { native_schema = true, tools = true }` in a provider table.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CapabilitiesConfig {
    pub(crate) native_schema: Option<bool>,
    pub(crate) tools: Option<bool>,
    pub(crate) reasoning: Option<bool>,
}

impl CapabilitiesConfig {
    /// `base` with the declared fields replaced.
    pub(crate) fn over(self, base: crate::provider::Capabilities) -> crate::provider::Capabilities {
        crate::provider::Capabilities {
            native_schema: self.native_schema.unwrap_or(base.native_schema),
            tools: self.tools.unwrap_or(base.tools),
            reasoning: self.reasoning.unwrap_or(base.reasoning),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProfileConfig {
    #[serde(default)]
    pub(crate) description: String,
    pub(crate) model: Option<String>,
    pub(crate) system: Option<String>,
    pub(crate) max_turns: Option<u32>,
    pub(crate) max_output_tokens: Option<u32>,
    pub(crate) est_cost_usd: Option<f64>,
    #[serde(default)]
    pub(crate) tools: Vec<String>,
    #[serde(default)]
    pub(crate) fallbacks: Vec<String>,
    #[serde(default)]
    pub(crate) permissions: Option<crate::agent::PermissionsConfig>,
    pub(crate) max_context_tokens: Option<u64>,
}

pub(crate) fn parse_model(text: &str, at: &str) -> Result<ModelRef, Error> {
    ModelRef::parse(text).map_err(|e| Error::config(format!("{at}: {e}")))
}

impl ProviderConfig {
    pub(crate) fn build(&self, name: &str, keyless: bool) -> Result<Arc<dyn Provider>, Error> {
        let key = |default_env: &str| -> Result<Option<ApiKey>, Error> {
            let var = self.api_key_env.as_deref().unwrap_or(default_env);
            if var.is_empty() {
                return Ok(None);
            }
            Ok(ApiKey::from_env(var).ok())
        };
        let need_key = |default_env: &str| -> Result<ApiKey, Error> {
            if keyless {
                // Never sent: a keyless engine makes no model call.
                return Ok(key(default_env)?.unwrap_or_else(|| ApiKey::new("unset")));
            }
            key(default_env)?.ok_or_else(|| {
                let var = self.api_key_env.as_deref().unwrap_or(default_env);
                Error::new(ErrorCode::Config, format!("providers.{name}: set {var} to its API key"))
            })
        };
        let idle = self.idle_timeout_ms.map(Duration::from_millis);
        if self.capabilities.is_some() && self.kind != "openai-compatible" {
            return Err(Error::config(format!(
                "providers.{name}.capabilities: only an openai-compatible provider takes declared capabilities ({} models' are known)",
                self.kind
            )));
        }
        // The endpoint settings a table may override, applied alike to every keyed adapter.
        macro_rules! with_overrides {
            ($provider:expr) => {{
                let mut p = $provider;
                if let Some(url) = &self.base_url {
                    p = p.with_base_url(url.clone());
                }
                if let Some(idle) = idle {
                    p = p.with_idle_timeout(idle);
                }
                Arc::new(p)
            }};
        }
        let provider: Arc<dyn Provider> = match self.kind.as_str() {
            "anthropic" => {
                with_overrides!(AnthropicProvider::new(need_key("ANTHROPIC_API_KEY")?)?.with_name(name))
            }
            "openai" => {
                with_overrides!(OpenAiChatProvider::new(need_key("OPENAI_API_KEY")?)?.with_name(name))
            }
            "openai-responses" => {
                with_overrides!(OpenAiResponsesProvider::new(need_key("OPENAI_API_KEY")?)?.with_name(name))
            }
            "openai-compatible" => {
                let url = self.base_url.as_deref().ok_or_else(|| {
                    Error::config(format!("providers.{name}: an openai-compatible provider needs base_url"))
                })?;
                let mut p = OpenAiCompatibleProvider::new(name, url)?;
                if let Some(key) = key("")? {
                    p = p.with_api_key(key);
                }
                if let Some(idle) = idle {
                    p = p.with_idle_timeout(idle);
                }
                if let Some(declared) = self.capabilities {
                    p = p.with_capabilities(declared.over(crate::provider::Capabilities::CONSERVATIVE));
                }
                Arc::new(p)
            }
            "echo" => {
                if name != "echo" {
                    return Err(Error::config(format!(
                        "providers.{name}: the echo provider must be named echo"
                    )));
                }
                let p = EchoProvider::new();
                Arc::new(match self.latency_ms {
                    Some(ms) => p.with_latency(Duration::from_millis(ms)),
                    None => p,
                })
            }
            other => {
                return Err(Error::config(format!(
                    "providers.{name}: unknown kind {other:?} (use anthropic, openai, openai-responses, openai-compatible or echo)"
                )));
            }
        };
        Ok(match self.context_window {
            Some(tokens) => Arc::new(crate::provider::WithContextWindow::new(provider, tokens)),
            None => provider,
        })
    }
}

impl ProfileConfig {
    /// The limits serde cannot check, as the script's agent options check them (`max_turns`
    /// 1 to 256, token bounds positive), and `tools` naming configured toolsets.
    pub(crate) fn validate(
        &self,
        name: &str,
        toolsets: &BTreeMap<String, toml::Table>,
    ) -> Result<(), String> {
        if let Some(n) = self.max_turns
            && !(1..=256).contains(&n)
        {
            return Err(format!("profiles.{name}.max_turns = {n}: must be within 1..=256"));
        }
        if self.max_output_tokens == Some(0) {
            return Err(format!("profiles.{name}.max_output_tokens = 0: must be positive"));
        }
        if self.max_context_tokens == Some(0) {
            return Err(format!("profiles.{name}.max_context_tokens = 0: must be positive"));
        }
        for tool in &self.tools {
            if !toolsets.contains_key(tool) {
                let known: Vec<&str> = toolsets.keys().map(String::as_str).collect();
                let known = if known.is_empty() { "none is configured".to_owned() } else { known.join(", ") };
                return Err(format!(
                    "profiles.{name}.tools: unknown toolset {tool:?} (configured toolsets: {known})"
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn build(&self, name: &str) -> Result<AgentProfile, Error> {
        Ok(AgentProfile {
            description: self.description.clone(),
            model: self
                .model
                .as_deref()
                .map(|m| parse_model(m, &format!("profiles.{name}.model")))
                .transpose()?,
            system: self.system.clone(),
            max_output_tokens: self.max_output_tokens,
            max_turns: self.max_turns,
            est_cost: self
                .est_cost_usd
                .map(|usd| {
                    Money::from_usd(usd)
                        .map_err(|e| Error::config(format!("profiles.{name}.est_cost_usd: {e}")))
                })
                .transpose()?,
            tools: self.tools.clone(),
            fallbacks: self
                .fallbacks
                .iter()
                .map(|m| parse_model(m, &format!("profiles.{name}.fallbacks")))
                .collect::<Result<_, _>>()?,
            permissions: self
                .permissions
                .as_ref()
                .map(|p| p.build(&format!("profiles.{name}.permissions")))
                .transpose()?,
            max_context_tokens: self.max_context_tokens,
        })
    }
}
