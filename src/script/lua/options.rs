//! Options tables: converted to JSON, with the empty tables a schema expects as objects read
//! as `{}`; validation and the engine's option structs are the dialect-neutral
//! `script::options`, shared with Rhai.

use serde_json::Value;

use crate::script::option_schema;
pub(super) use crate::script::options::{agent, on_error, parallel, str_opt, usd, validate};

/// Empty tables inside an options object that the schema (or JSON Schema itself, for a
/// `schema` option) says are objects: `{}` there means `{}`, not `[]`.
pub(super) fn objects_where_expected(global: &str, value: &mut Value) {
    let schema = option_schema(global);
    fix(value, schema, false);
}

fn fix(value: &mut Value, schema: Option<&Value>, json_schema: bool) {
    let Value::Object(map) = value else { return };
    for (key, item) in map.iter_mut() {
        let declared = schema.and_then(|s| s.get("properties")).and_then(|p| p.get(key));
        let expects_object = declared
            .and_then(|d| d.get("type"))
            .is_some_and(|t| t == "object" || t.as_array().is_some_and(|a| a.iter().any(|x| x == "object")));
        let schema_map_key = json_schema
            && matches!(key.as_str(), "properties" | "patternProperties" | "$defs" | "definitions");
        if item.as_array().is_some_and(Vec::is_empty) && (expects_object || schema_map_key) {
            *item = Value::Object(serde_json::Map::new());
        }
        let inner_is_schema = json_schema || key == "schema";
        match item {
            Value::Object(_) => fix(item, declared, inner_is_schema),
            Value::Array(items) if inner_is_schema => {
                for item in items {
                    fix(item, None, true);
                }
            }
            _ => {}
        }
    }
}
