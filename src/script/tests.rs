//! Tests of the dialect as data: the schemas are well-formed, the card's option lists are the
//! schemas' (`UPDATE_EXPECT=1` rewrites them from the schemas), and the card's examples lint
//! clean.

use std::path::Path;

use serde_json::Value;

use super::*;

#[test]
fn every_options_schema_is_a_closed_valid_json_schema() {
    for global in GLOBALS {
        let Some(name) = global.options else { continue };
        let schema = option_schema(name).unwrap_or_else(|| panic!("no schema for {name}"));
        assert!(jsonschema::meta::is_valid(schema), "{name} is not a valid JSON Schema");
        assert_eq!(schema["type"], "object", "{name}");
        assert_eq!(schema["additionalProperties"], false, "{name} must reject unknown options");
        let properties = schema["properties"].as_object().expect("properties");
        assert!(!properties.is_empty(), "{name}");
        for (key, property) in properties {
            assert!(
                key.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{name}.{key} is not snake_case"
            );
            let description = property["description"].as_str().unwrap_or_default();
            assert!(!description.is_empty(), "{name}.{key} has no description");
            assert!(
                description.starts_with(|c: char| !c.is_uppercase()) && !description.ends_with('.'),
                "{name}.{key}: descriptions are lowercase with no final period"
            );
        }
    }
}

/// Every global must be registrable under its name: Rhai reserves some (`call`, `eval`, `print`)
/// for itself, which is why the host-function global is `host_call`.
#[test]
fn every_global_name_is_a_callable_rhai_name() {
    for global in GLOBALS {
        assert!(::rhai::is_valid_function_name(global.name), "{} is reserved in rhai", global.name);
    }
    assert!(!::rhai::is_valid_function_name("call"));
}

#[test]
fn option_schema_answers_by_global_name() {
    assert!(option_schema("agent").is_some());
    assert_eq!(option_schema("host_call"), option_schema("call"));
    assert!(option_schema("phase").is_none());
    assert!(option_schema("nope").is_none());
    assert_eq!(SCHEMA_SOURCES.len(), GLOBALS.iter().filter(|global| global.options.is_some()).count());
}

#[test]
fn diagnostics_serialize_in_the_wire_shape() {
    let mut diagnostic = Diagnostic {
        rule_id: "forbidden".into(),
        message: "eval() is not available".into(),
        line: 2,
        column: 1,
        end_line: None,
        end_column: None,
        severity: Severity::Error,
    };
    assert_eq!(
        serde_json::to_string(&diagnostic).expect("serializes"),
        r#"{"rule_id":"forbidden","message":"eval() is not available","line":2,"column":1,"severity":"error"}"#
    );
    diagnostic.end_line = Some(2);
    diagnostic.end_column = Some(5);
    diagnostic.severity = Severity::Warning;
    let json = serde_json::to_value(&diagnostic).expect("serializes");
    assert_eq!(json["end_column"], 5);
    assert_eq!(json["severity"], "warning");
    assert_eq!(serde_json::from_value::<Diagnostic>(json).expect("round-trips"), diagnostic);
}

#[test]
fn the_card_lists_every_global_and_the_schemas_options() {
    let card = api_card();
    for global in GLOBALS {
        assert!(
            card.contains(&format!("### {}\n", global.signature)),
            "the card lacks ### {}",
            global.signature
        );
    }
    let regenerated = regenerate_option_blocks(card);
    if regenerated != card {
        if std::env::var_os("UPDATE_EXPECT").is_some() {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("dialect/card.md");
            std::fs::write(path, &regenerated).expect("writable card");
        } else {
            panic!("dialect/card.md option lists differ from the schemas; run with UPDATE_EXPECT=1");
        }
    }
}

#[test]
fn the_card_examples_lint_clean() {
    let mut ctx = LintContext::empty();
    ctx.profiles = ["researcher", "writer"].map(String::from).into();
    let mut examples = 0;
    for block in api_card().split("```rhai\n").skip(1) {
        let source = block.split("```").next().unwrap_or_default();
        let diagnostics = rhai::lint(source, &ctx);
        assert!(diagnostics.is_empty(), "card example:\n{source}\n{diagnostics:#?}");
        examples += 1;
    }
    assert_eq!(examples, 2);
}

/// Rewrites each `<!-- options: NAME -->` ... `<!-- end options -->` block from the schema.
fn regenerate_option_blocks(card: &str) -> String {
    const OPEN: &str = "<!-- options: ";
    const CLOSE: &str = "<!-- end options -->";
    let mut out = String::new();
    let mut rest = card;
    while let Some(start) = rest.find(OPEN) {
        let header_end = start + rest[start..].find("-->\n").expect("closed marker") + 4;
        let name = rest[start + OPEN.len()..header_end - 5].trim();
        let end = rest[header_end..].find(CLOSE).expect("end marker") + header_end;
        out.push_str(&rest[..header_end]);
        out.push_str(&render_options(option_schema(name).unwrap_or_else(|| panic!("no schema {name}"))));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// One line per option: name, type and description.
fn render_options(schema: &Value) -> String {
    let mut out = String::new();
    for (key, property) in schema["properties"].as_object().expect("properties") {
        let description = property["description"].as_str().unwrap_or_default();
        out.push_str(&format!("- `{key}` ({}): {description}\n", render_type(property)));
    }
    out
}

fn render_type(property: &Value) -> String {
    if let Some(values) = property["enum"].as_array() {
        return values.iter().map(Value::to_string).collect::<Vec<_>>().join(" | ");
    }
    let bounds = match (property.get("minimum"), property.get("maximum")) {
        (Some(min), Some(max)) => format!(", {min} to {max}"),
        (Some(min), None) => format!(" >= {min}"),
        _ => String::new(),
    };
    match property["type"].as_str().unwrap_or_default() {
        "object" => "map".to_owned(),
        "array" => match property["items"]["type"].as_str() {
            Some(item) => format!("array of {item}s"),
            None => "array".to_owned(),
        },
        other => format!("{other}{bounds}"),
    }
}

#[test]
fn the_card_names_only_real_builtins() {
    let card = api_card();
    let section =
        card.split("## Builtins").nth(1).and_then(|rest| rest.split("\n## ").next()).expect("section");
    let names: Vec<&str> = section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|code| !code.is_empty() && code.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    assert!(names.len() > 30, "{names:?}");
    for name in names {
        assert!(rhai::sandbox::is_builtin(name), "the card names '{name}', which is no builtin");
    }
}
