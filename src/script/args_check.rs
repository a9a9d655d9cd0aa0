//! The dialect-neutral half of lint's `workflow-args` rule: a literal args map of
//! `workflow(NAME, args)` against the JSON Schema of the child's arguments (its `@args`
//! declaration, the names it reads, or what the host described), phrased for a repair prompt
//! with the form to write in the caller's dialect.
//!
//! Each dialect's linter collects the keys of the literal map and what each value statically
//! is ([`Shape`]); the judgement and the wording live here once, so a Rhai parent calling a
//! Lua child and the reverse are told the same thing.

use serde_json::Value;

use crate::script::LintContext;
use crate::script::rhai::diagnostic::sentence;
use crate::script::schema_check::{Shape, json_type, schema_types, type_matches};
use crate::script::suggest;

/// The dialect a finding is phrased for: how a map entry is written and a type is named.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Form {
    /// `": "` (Rhai `#{k: v}`) or `" = "` (Lua `{k = v}`).
    pub(crate) assign: &'static str,
    /// What the map is called: "map" or "table".
    pub(crate) map: &'static str,
    /// A JSON type with its article, in the dialect's words.
    pub(crate) article: fn(&str) -> &'static str,
}

/// One key of a literal args map, as the caller's linter sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ArgKey<'v> {
    /// The key.
    pub(crate) name: &'v str,
    /// What its value statically is.
    pub(crate) value: Shape<'v>,
}

/// One `workflow-args` finding: where it goes and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ArgsProblem {
    /// On the args map as a whole (a required arg it lacks).
    Map(String),
    /// On the key at this index (one the child does not take).
    Key(usize, String),
    /// On the value at this index (of the wrong type).
    Value(usize, String),
}

/// The findings for a literal args map given to the registered child `workflow`. `complete`
/// says the map's every key is known (no computed keys), so a missing one is really missing.
/// Nothing is reported for a child without a schema.
pub(crate) fn workflow_args_problems(
    ctx: &LintContext,
    workflow: &str,
    keys: &[ArgKey<'_>],
    complete: bool,
    form: Form,
) -> Vec<ArgsProblem> {
    let Some(schema) = ctx.workflow_args.get(workflow) else { return Vec::new() };
    let properties = schema.get("properties").and_then(Value::as_object);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    let takes = signature(schema, form);
    let mut problems = Vec::new();
    for (index, key) in keys.iter().enumerate() {
        match properties.and_then(|properties| properties.get(key.name)) {
            Some(property) => {
                if let Some(problem) = value_problem(property, key.value, form) {
                    problems.push(ArgsProblem::Value(
                        index,
                        format!("arg '{}' of workflow '{workflow}'{problem}; it takes {takes}", key.name),
                    ));
                }
            }
            None if closed => {
                let names =
                    properties.map(|p| p.keys().map(String::as_str).collect::<Vec<_>>()).unwrap_or_default();
                let message = match suggest::did_you_mean(key.name, names.iter().copied()) {
                    Some(candidate) => format!(
                        "workflow '{workflow}' takes no arg '{}' (did you mean '{candidate}'?); it takes {takes}",
                        key.name
                    ),
                    None => format!(
                        "workflow '{workflow}' takes no arg '{}'; it takes {takes}; remove it",
                        key.name
                    ),
                };
                problems.push(ArgsProblem::Key(index, message));
            }
            None => {}
        }
    }
    if complete {
        for name in required.iter().filter(|name| !keys.iter().any(|key| key.name == **name)) {
            let kind = properties
                .and_then(|p| p.get(*name))
                .map(|property| expected(property, form))
                .unwrap_or_else(|| "a value".to_owned());
            problems.push(ArgsProblem::Map(format!(
                "workflow '{workflow}' requires arg '{name}' ({kind}); add {name}{}... to its args {}; it takes {takes}",
                form.assign, form.map
            )));
        }
    }
    problems
}

/// "text: string, max_words?: integer": what a child takes, for messages.
fn signature(schema: &Value, form: Form) -> String {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return "any args".to_owned();
    };
    if properties.is_empty() {
        return format!("no args (pass an empty {})", form.map);
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let entries: Vec<String> = properties
        .iter()
        .map(|(name, property)| {
            let mark = if required.contains(&name.as_str()) { "" } else { "?" };
            let types = schema_types(property);
            let kind = if types.is_empty() {
                "any".to_owned()
            } else {
                types.iter().map(|t| if *t == "object" { "map" } else { t }).collect::<Vec<_>>().join(" | ")
            };
            format!("{name}{mark}: {kind}")
        })
        .collect();
    entries.join(", ")
}

/// "a string or an integer": what a property admits, in the dialect's words.
fn expected(property: &Value, form: Form) -> String {
    let types = schema_types(property);
    if types.is_empty() {
        return "any value".to_owned();
    }
    types.iter().map(|name| (form.article)(name)).collect::<Vec<_>>().join(" or ")
}

/// Why a statically known value breaks its property, phrased to follow "arg 'k' of workflow 'w'".
fn value_problem(property: &Value, value: Shape<'_>, form: Form) -> Option<String> {
    let types = schema_types(property);
    let found = match value {
        Shape::Known(known) => json_type(known),
        Shape::Type(found) => found,
        Shape::Opaque => return None,
    };
    if !type_matches(&types, found) {
        return Some(format!(" must be {}, got {}", expected(property, form), (form.article)(found)));
    }
    let Shape::Known(known) = value else { return None };
    let validator = jsonschema::validator_for(property).ok()?;
    let error = validator.iter_errors(known).next()?;
    Some(format!(": {}", sentence(&error.to_string())))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::script::schema_check::article;

    const RHAI: Form = Form { assign: ": ", map: "map", article };

    fn ctx() -> LintContext {
        let mut ctx = LintContext::empty();
        ctx.child_workflows.insert("summarize".into());
        let schema = json!({"type": "object", "additionalProperties": false, "required": ["text"], "properties": {
            "text": {"type": "string"}, "max_words": {"type": "integer", "minimum": 1}
        }});
        ctx.workflow_args.insert("summarize".into(), schema);
        ctx
    }

    #[test]
    fn missing_unknown_and_mistyped_args_are_each_reported_with_what_to_write() {
        let three = json!(3);
        let zero = json!(0);
        let keys = [
            ArgKey { name: "txt", value: Shape::Type("string") },
            ArgKey { name: "max_words", value: Shape::Type("string") },
        ];
        let problems = workflow_args_problems(&ctx(), "summarize", &keys, true, RHAI);
        assert_eq!(
            problems,
            [
                ArgsProblem::Key(
                    0,
                    "workflow 'summarize' takes no arg 'txt' (did you mean 'text'?); it takes max_words?: integer, \
                     text: string"
                        .into()
                ),
                ArgsProblem::Value(
                    1,
                    "arg 'max_words' of workflow 'summarize' must be an integer, got a string; it takes \
                     max_words?: integer, text: string"
                        .into()
                ),
                ArgsProblem::Map(
                    "workflow 'summarize' requires arg 'text' (a string); add text: ... to its args map; it takes \
                     max_words?: integer, text: string"
                        .into()
                ),
            ]
        );
        // Only what is seen is judged: an incomplete map lacks nothing, an opaque value has
        // any type, and a known value meets the rest of its schema.
        assert!(workflow_args_problems(&ctx(), "summarize", &[], false, RHAI).is_empty());
        let opaque = [
            ArgKey { name: "text", value: Shape::Opaque },
            ArgKey { name: "max_words", value: Shape::Known(&three) },
        ];
        assert!(workflow_args_problems(&ctx(), "summarize", &opaque, true, RHAI).is_empty());
        let low = [
            ArgKey { name: "text", value: Shape::Opaque },
            ArgKey { name: "max_words", value: Shape::Known(&zero) },
        ];
        let problems = workflow_args_problems(&ctx(), "summarize", &low, true, RHAI);
        assert!(
            matches!(&problems[..], [ArgsProblem::Value(1, m)] if m.contains("minimum of 1")),
            "{problems:?}"
        );
        // A child without a schema is not checked.
        assert!(workflow_args_problems(&ctx(), "audit", &keys, true, RHAI).is_empty());
    }
}
