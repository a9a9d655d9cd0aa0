//! Script options, dialect-neutral: an options object (already JSON) validated against its
//! global's schema in `dialect/` (the same schemas lint checks) and turned into the engine's
//! option structs, so Rhai and Lua key and route calls alike.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;

use crate::engine::{AgentOptions, OnError, ParallelOptions, RetryPolicy};
use crate::error::Error;
use crate::model::InvocationRole;
use crate::money::Money;
use crate::script::option_schema;

/// Validates an options object against the global's schema.
pub(crate) fn validate(global: &str, value: Value) -> Result<Value, Error> {
    let Some(schema) = option_schema(global) else { return Ok(value) };
    static VALIDATORS: OnceLock<Mutex<HashMap<String, Arc<jsonschema::Validator>>>> = OnceLock::new();
    let cache = VALIDATORS.get_or_init(Default::default);
    let validator = {
        let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
        match cache.get(global) {
            Some(v) => v.clone(),
            None => {
                let v =
                    Arc::new(jsonschema::validator_for(schema).map_err(|e| {
                        Error::internal(format!("the {global} options schema is invalid: {e}"))
                    })?);
                cache.insert(global.to_owned(), v.clone());
                v
            }
        }
    };
    let problems: Vec<String> =
        validator.iter_errors(&value).map(|e| format!("at '{}': {e}", e.instance_path())).collect();
    if !problems.is_empty() {
        return Err(Error::validation(format!("invalid {global} options: {}", problems.join("; "))));
    }
    Ok(value)
}

pub(crate) fn str_opt(opts: &Value, key: &str) -> Option<String> {
    opts.get(key).and_then(Value::as_str).map(str::to_owned)
}

pub(crate) fn on_error(opts: &Value) -> Option<OnError> {
    match opts.get("on_error").and_then(Value::as_str) {
        Some("null") => Some(OnError::Null),
        Some("throw") => Some(OnError::Throw),
        _ => None,
    }
}

pub(crate) fn usd(opts: &Value, key: &str) -> Result<Option<Money>, Error> {
    opts.get(key)
        .and_then(Value::as_f64)
        .map(|x| Money::from_usd(x).map_err(|e| Error::validation(format!("{key}: {e}"))))
        .transpose()
}

pub(crate) fn agent(opts: &Value) -> Result<AgentOptions, Error> {
    let retry = opts.get("retry").map(|r| RetryPolicy {
        max_attempts: r.get("max_attempts").and_then(Value::as_u64).unwrap_or(4) as u32,
        initial_backoff: Duration::from_millis(
            r.get("initial_backoff_ms").and_then(Value::as_u64).unwrap_or(250),
        ),
        max_backoff: r.get("max_backoff_ms").and_then(Value::as_u64).map(Duration::from_millis),
    });
    Ok(AgentOptions {
        label: str_opt(opts, "label"),
        key: str_opt(opts, "key"),
        profile: str_opt(opts, "profile"),
        model: str_opt(opts, "model"),
        effort: str_opt(opts, "effort"),
        schema: opts.get("schema").cloned(),
        system: str_opt(opts, "system"),
        max_turns: opts.get("max_turns").and_then(Value::as_u64).map(|n| n as u32),
        max_output_tokens: opts.get("max_output_tokens").and_then(Value::as_u64).map(|n| n as u32),
        on_error: on_error(opts),
        full: opts.get("result").and_then(Value::as_str) == Some("full"),
        memoize_outcome: opts.get("memoize_outcome").and_then(Value::as_bool).unwrap_or(false),
        est_cost: usd(opts, "est_cost")?,
        role: opts.get("role").and_then(Value::as_str).and_then(InvocationRole::parse),
        timeout: opts.get("timeout_ms").and_then(Value::as_u64).map(Duration::from_millis),
        retry,
        tools: opts
            .get("tools")
            .and_then(Value::as_array)
            .map(|tools| tools.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default(),
        max_tool_calls: opts.get("max_tool_calls").and_then(Value::as_u64).map(|n| n as u32),
        max_context_tokens: opts.get("max_context_tokens").and_then(Value::as_u64),
    })
}

pub(crate) fn parallel(opts: &Value) -> ParallelOptions {
    ParallelOptions {
        settle: opts.get("settle").and_then(Value::as_bool).unwrap_or(false),
        concurrency: opts.get("concurrency").and_then(Value::as_u64).map(|n| n.clamp(1, 10_000) as usize),
        on_error: on_error(opts),
        label: str_opt(opts, "label"),
        bodies: None,
    }
}

/// The identity of a fan-out's code ([`ParallelOptions::bodies`]) from the source identity of
/// each of its branches or stages, in order; `None` when one of them has none.
pub(crate) fn fanout_code<I: IntoIterator<Item = Option<String>>>(bodies: I) -> Option<String> {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for body in bodies {
        hasher.update(body?.as_bytes());
        hasher.update(b"\n");
    }
    Some(hex::encode(hasher.finalize()))
}
