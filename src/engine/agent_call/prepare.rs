//! What an agent call resolves before it is keyed and admitted: its profile, model, tools
//! and provider, its identity (and so its content key), and the first request it sends.

use std::sync::Arc;

use super::resolve::resolve_tools;
use crate::engine::AgentProfile;
use crate::engine::ctx::Ctx;
use crate::engine::identity::{AgentIdentity, ModelIdentity};
use crate::engine::options::AgentOptions;
use crate::error::Error;
use crate::journal::{self, ContentKey};
use crate::model::{InvocationRole, ModelRef};
use crate::provider::{CallMeta, ChatRequest, Message, Part, Provider, Role, ToolChoice};

/// A call's resolved parts: everything its identity and its request are made of.
pub(super) struct Resolved<'a> {
    pub(super) profile: Option<&'a AgentProfile>,
    pub(super) role: InvocationRole,
    pub(super) model: ModelRef,
    /// The model's `provider:name` text, spelled once: the identity, the price lookup, the
    /// journal and the events all use it.
    pub(super) model_name: String,
    pub(super) tools: Vec<Arc<dyn crate::agent::Tool>>,
    pub(super) provider: Arc<dyn Provider>,
    pub(super) schema_hash: Option<String>,
    pub(super) toolset_hash: Option<String>,
}

impl Ctx {
    /// Resolves a call's profile, model, tools and provider. Every error here goes through
    /// the call's error policy.
    pub(super) async fn resolve_call(
        &self,
        opts: &AgentOptions,
        extra_tools: &[Arc<dyn crate::agent::Tool>],
    ) -> Result<Resolved<'_>, Error> {
        let engine = &self.run.engine;
        let profile = match &opts.profile {
            Some(name) => match engine.profiles.get(name) {
                Some(profile) => Some(profile),
                None => return Err(Error::config(format!("unknown agent profile {name:?}"))),
            },
            None => None,
        };
        let role = opts.role.unwrap_or(InvocationRole::Loop);
        let model = match &opts.model {
            Some(text) => ModelRef::parse(text).map_err(|e| Error::config(e.to_string()))?,
            None => profile
                .and_then(|p| p.model.clone())
                .or_else(|| engine.defaults.get(&role).cloned())
                .unwrap_or_else(|| engine.default_model.clone()),
        };
        let toolset_names = if opts.tools.is_empty() {
            profile.map(|p| p.tools.clone()).unwrap_or_default()
        } else {
            opts.tools.clone()
        };
        let mut tools = resolve_tools(&engine.toolsets, &toolset_names).await?;
        tools.extend(extra_tools.iter().cloned());
        let Some(provider) = engine.providers.get(model.provider()).cloned() else {
            return Err(Error::config(format!("model {model} names an unregistered provider")));
        };
        let schema_hash = opts
            .schema
            .as_ref()
            .map(journal::schema_hash)
            .transpose()
            .map_err(|e| Error::validation(e.to_string()))?;
        let model_name = model.to_string();
        let toolset_hash = crate::agent::toolset_hash(&tools);
        Ok(Resolved { profile, role, model, model_name, tools, provider, schema_hash, toolset_hash })
    }
}

impl Resolved<'_> {
    /// The call's content key: `{profile, model + effort, prompt or key, schema hash,
    /// toolset hash}`.
    pub(super) fn key(&self, prompt: &str, opts: &AgentOptions) -> Result<ContentKey, Error> {
        let mut identity = AgentIdentity::new(
            prompt,
            opts.key.as_deref(),
            ModelIdentity { effort: opts.effort.as_deref(), spec: &self.model_name },
        );
        identity.agent_type = opts.profile.as_deref();
        identity.schema_hash = self.schema_hash.as_deref();
        identity.toolset_hash = self.toolset_hash.as_deref();
        identity.key()
    }

    /// What the call is keyed on, compactly, so a resume can explain a re-key.
    pub(super) fn summary(&self, prompt: &str, opts: &AgentOptions) -> journal::IdentitySummary {
        journal::IdentitySummary::of_agent(
            prompt,
            opts.key.as_deref(),
            opts.effort.as_deref(),
            self.schema_hash.as_deref(),
            self.toolset_hash.as_deref(),
        )
    }

    /// The call's first request.
    pub(super) fn request(&self, prompt: &str, opts: &AgentOptions) -> ChatRequest {
        let profile = self.profile;
        let system = opts.system.clone().or_else(|| profile.and_then(|p| p.system.clone()));
        let max_output_tokens = opts.max_output_tokens.or_else(|| profile.and_then(|p| p.max_output_tokens));
        ChatRequest {
            model: self.model.model().to_owned(),
            system,
            messages: vec![Message { role: Role::User, parts: vec![Part::Text(prompt.to_owned())] }],
            tools: Vec::new(),
            // The orchestrator acts only through its tools (it ends by calling `finish`), so
            // every turn must call one: a model that would answer in prose is held to a tool
            // call (on llama.cpp, grammar-constrained). Not part of the call's identity.
            tool_choice: if self.role == InvocationRole::Orchestrate {
                ToolChoice::Required
            } else {
                ToolChoice::Auto
            },
            max_output_tokens,
            temperature: None,
            response_schema: opts
                .schema
                .clone()
                .filter(|_| self.provider.capabilities(self.model.model()).native_schema),
            effort: opts.effort.clone(),
            meta: CallMeta { label: opts.label.clone(), agent_type: opts.profile.clone() },
        }
    }
}
