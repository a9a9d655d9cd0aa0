//! Options maps: each key against the global's JSON Schema, each statically known value against
//! its property, phrased for a repair prompt.

use ::rhai::{Expr, Position};
use serde_json::Value;

use super::calls::Registry;
use super::{Linter, Static};
use crate::script::rhai::sentence;
use crate::script::{GLOBALS, Global, option_schema, suggest};

impl Linter<'_, '_> {
    /// Checks one `key: value` of an options map against the global's schema.
    pub(super) fn check_option(
        &mut self,
        global: &Global,
        schema_name: &str,
        key: &str,
        key_pos: Position,
        value: &Expr,
    ) {
        let Some(schema) = option_schema(schema_name) else { return };
        let properties = schema.get("properties").and_then(Value::as_object);
        let Some(property) = properties.and_then(|properties| properties.get(key)) else {
            let names =
                properties.map(|properties| properties.keys().map(String::as_str).collect::<Vec<_>>());
            let names = names.unwrap_or_default();
            let message = match suggest::did_you_mean(key, names.iter().copied()) {
                Some(candidate) => {
                    format!("unknown option '{key}' for {} (did you mean '{candidate}'?)", global.name)
                }
                None => format!("unknown option '{key}' for {}; it takes {}", global.name, names.join(", ")),
            };
            self.error_at("unknown-option", key_pos, Some(key.chars().count()), message);
            return;
        };
        if let Some(problem) = self.option_value_problem(schema_name, key, property, value) {
            let message = format!("option '{key}' of {}{problem}", global.name);
            self.error_at("option-type", value.position(), None, message);
            return;
        }
        if global.name != "agent" {
            return;
        }
        match (key, value) {
            ("profile", Expr::StringConstant(name, pos)) => {
                self.check_registered(Registry::Profile, name, *pos)
            }
            ("model", Expr::StringConstant(name, pos)) => self.check_registered(Registry::Model, name, *pos),
            ("tools", Expr::Array(elements, _)) => {
                for element in elements {
                    if let Expr::StringConstant(name, pos) = element {
                        self.check_registered(Registry::Toolset, name, *pos);
                    }
                }
            }
            _ => {}
        }
    }

    /// Why a statically known option value breaks its property schema, phrased to follow
    /// "option 'key' of global"; only what is statically known is checked.
    fn option_value_problem(
        &self,
        schema_name: &str,
        key: &str,
        property: &Value,
        value: &Expr,
    ) -> Option<String> {
        let expected = schema_types(property);
        let must_be = |found: &str| {
            let expected: Vec<&str> = expected.iter().map(|name| article(name)).collect();
            format!(" must be {}, got {}", expected.join(" or "), article(found))
        };
        let known = match self.peek(value) {
            Static::Known(known) => known,
            Static::Type(found) if !type_matches(&expected, found) => return Some(must_be(found)),
            Static::Type(_) | Static::Closure(_) | Static::Unknown => return None,
        };
        if !type_matches(&expected, json_type(&known)) {
            return Some(must_be(json_type(&known)));
        }
        let Some(problem) = option_problem(schema_name, key, &known) else {
            // Both `schema` options hold a JSON Schema, which must itself be valid.
            if key == "schema"
                && let Err(error) = jsonschema::meta::validate(&known)
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
        Some(match &known {
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
fn schema_types(property: &Value) -> Vec<&'static str> {
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
fn type_matches(expected: &[&str], found: &str) -> bool {
    expected.is_empty() || expected.contains(&found) || (found == "integer" && expected.contains(&"number"))
}

fn json_type(value: &Value) -> &'static str {
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

/// A JSON type name with its article, in the words scripts use ("a map", not "an object").
fn article(name: &str) -> &'static str {
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

/// "an integer", "a closure": what a static value is, for messages.
pub(super) fn type_phrase(value: &Static) -> &'static str {
    match value {
        Static::Known(value) => article(json_type(value)),
        Static::Type(name) => article(name),
        Static::Closure(_) => "a closure",
        Static::Unknown => "a computed value",
    }
}
