//! The dialect-neutral half of lint's option and name checks: an options key against the
//! global's JSON Schema, a statically known option value against its property, and a literal
//! name against what the engine registered, each phrased for a repair prompt.
//!
//! Each dialect's linter decides what an expression statically is ([`Shape`]) and where to
//! report; the wording lives here once, so both dialects say the same thing.

use serde_json::Value;

use crate::script::rhai::diagnostic::sentence;
use crate::script::{GLOBALS, LintContext, option_schema, suggest};

/// What a linter knows statically about an option value.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Shape<'v> {
    /// A literal whose JSON value is known.
    Known(&'v Value),
    /// A value of a known JSON type ("string", "array", ...) whose content is not known.
    Type(&'static str),
    /// A closure, or anything computed: not checked here.
    Opaque,
}

/// The property schema of `key` in the options of `schema_name`, or the `unknown-option`
/// message when the schema does not list it. `None` when the global takes no options.
pub(crate) fn option_property(
    global: &str,
    schema_name: &str,
    key: &str,
) -> Option<Result<&'static Value, String>> {
    let schema = option_schema(schema_name)?;
    let properties = schema.get("properties").and_then(Value::as_object);
    if let Some(property) = properties.and_then(|properties| properties.get(key)) {
        return Some(Ok(property));
    }
    let names = properties.map(|properties| properties.keys().map(String::as_str).collect::<Vec<_>>());
    let names = names.unwrap_or_default();
    let message = match suggest::did_you_mean(key, names.iter().copied()) {
        Some(candidate) => format!("unknown option '{key}' for {global} (did you mean '{candidate}'?)"),
        None => format!("unknown option '{key}' for {global}; it takes {}", names.join(", ")),
    };
    Some(Err(message))
}

/// Why a statically known option value breaks its property schema, phrased to follow
/// "option 'key' of global"; only what is statically known is checked. `article` names a JSON
/// type in the dialect's words ([`article`] for Rhai).
pub(crate) fn option_value_problem(
    schema_name: &str,
    key: &str,
    property: &Value,
    value: Shape<'_>,
    article: fn(&str) -> &'static str,
) -> Option<String> {
    let expected = schema_types(property);
    let must_be = |found: &str| {
        let expected: Vec<&str> = expected.iter().map(|name| article(name)).collect();
        format!(" must be {}, got {}", expected.join(" or "), article(found))
    };
    let known = match value {
        Shape::Known(known) => known,
        Shape::Type(found) if !type_matches(&expected, found) => return Some(must_be(found)),
        Shape::Type(_) | Shape::Opaque => return None,
    };
    if !type_matches(&expected, json_type(known)) {
        return Some(must_be(json_type(known)));
    }
    let Some(problem) = option_problem(schema_name, key, known) else {
        // Both `schema` options hold a JSON Schema, which must itself be valid.
        if key == "schema"
            && let Err(error) = jsonschema::meta::validate(known)
        {
            return Some(format!(" is not a valid JSON Schema: {}", sentence(&error.to_string())));
        }
        return None;
    };
    let allowed: Vec<&str> = property
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    Some(match known {
        Value::String(text) if !allowed.is_empty() => {
            let quoted: Vec<String> = allowed.iter().map(|value| format!("\"{value}\"")).collect();
            let suggestion = suggest::suffix(text, allowed.iter().copied());
            format!(" must be one of {}, got \"{text}\"{suggestion}", quoted.join(", "))
        }
        Value::String(text) if property.get("pattern").is_some() => {
            let description = property.get("description").and_then(Value::as_str).unwrap_or_default();
            format!(": \"{text}\" is malformed; {description}")
        }
        _ => format!(": {problem}"),
    })
}

/// The kinds of name a [`LintContext`] registers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Registry {
    Profile,
    Toolset,
    HostFunction,
    Workflow,
    Model,
}

/// The rule and message for a literal name the engine has not registered, if it is not.
pub(crate) fn registered_problem(
    ctx: &LintContext,
    registry: Registry,
    name: &str,
) -> Option<(&'static str, String)> {
    let (names, rule, noun, plural) = match registry {
        Registry::Profile => (Some(&ctx.profiles), "unknown-profile", "profile", "profiles"),
        Registry::Toolset => (Some(&ctx.toolsets), "unknown-toolset", "toolset", "toolsets"),
        Registry::HostFunction => {
            (Some(&ctx.host_functions), "unknown-host-function", "host function", "host functions")
        }
        Registry::Workflow => (Some(&ctx.child_workflows), "unknown-workflow", "workflow", "workflows"),
        Registry::Model => (ctx.models.as_ref(), "unknown-model", "model", "models"),
    };
    let names = names?;
    if names.contains(name) {
        return None;
    }
    let message = if names.is_empty() {
        format!("unknown {noun} '{name}'; no {plural} are registered")
    } else {
        match suggest::did_you_mean(name, names.iter().map(String::as_str)) {
            Some(candidate) => format!("unknown {noun} '{name}' (did you mean '{candidate}'?)"),
            None => {
                let listed: Vec<&str> = names.iter().take(12).map(String::as_str).collect();
                let more = if names.len() > listed.len() { ", ..." } else { "" };
                format!("unknown {noun} '{name}'; registered {plural}: {}{more}", listed.join(", "))
            }
        }
    };
    Some((rule, message))
}

/// Why a literal option value fails its schema, if it does.
fn option_problem(schema_name: &str, key: &str, value: &Value) -> Option<String> {
    let validator =
        validators().iter().find(|(name, _)| *name == schema_name).map(|(_, validator)| validator)?;
    let mut instance = serde_json::Map::new();
    instance.insert(key.to_owned(), value.clone());
    let instance = Value::Object(instance);
    let error = validator.as_ref()?.iter_errors(&instance).next()?;
    Some(sentence(&error.to_string()))
}

/// One compiled validator per options schema, built once per process.
fn validators() -> &'static [(&'static str, Option<jsonschema::Validator>)] {
    static VALIDATORS: std::sync::OnceLock<Vec<(&'static str, Option<jsonschema::Validator>)>> =
        std::sync::OnceLock::new();
    VALIDATORS.get_or_init(|| {
        GLOBALS
            .iter()
            .filter_map(|global| global.options)
            .map(|name| (name, option_schema(name).and_then(|schema| jsonschema::validator_for(schema).ok())))
            .collect()
    })
}

/// The JSON types a property schema admits, from `type` or from its `enum` values.
pub(crate) fn schema_types(property: &Value) -> Vec<&'static str> {
    let names: Vec<&str> = match property.get("type") {
        Some(Value::String(name)) => vec![name.as_str()],
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
        _ => match property.get("enum").and_then(Value::as_array) {
            Some(values) => values.iter().map(json_type).collect(),
            None => Vec::new(),
        },
    };
    let mut types: Vec<&'static str> = names
        .into_iter()
        .filter_map(|name| match name {
            "string" => Some("string"),
            "array" => Some("array"),
            "object" => Some("object"),
            "boolean" => Some("boolean"),
            "integer" => Some("integer"),
            "number" => Some("number"),
            "null" => Some("null"),
            _ => None,
        })
        .collect();
    types.dedup();
    types
}

/// Whether a value of JSON type `found` fits a property admitting `expected` (nothing listed
/// admits anything; an integer is a number).
pub(crate) fn type_matches(expected: &[&str], found: &str) -> bool {
    expected.is_empty() || expected.contains(&found) || (found == "integer" && expected.contains(&"number"))
}

/// The JSON type name of a value.
pub(crate) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(number) if number.is_i64() || number.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A JSON type name with its article, in the words Rhai scripts use ("a map", not "an object").
pub(crate) fn article(name: &str) -> &'static str {
    match name {
        "null" => "()",
        "boolean" => "a boolean",
        "integer" => "an integer",
        "number" => "a number",
        "string" => "a string",
        "array" => "an array",
        "object" => "a map",
        _ => "a value",
    }
}
