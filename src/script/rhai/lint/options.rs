//! Options maps: each key against the global's JSON Schema, each statically known value against
//! its property, phrased for a repair prompt.

use ::rhai::{Expr, Position};
use serde_json::Value;

use super::calls::Registry;
use super::{Linter, Static};
use crate::script::Global;
use crate::script::schema_check::{self, Shape, article, json_type};

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
        let property = match schema_check::option_property(global.name, schema_name, key) {
            None => return,
            Some(Ok(property)) => property,
            Some(Err(message)) => {
                self.error_at("unknown-option", key_pos, Some(key.chars().count()), message);
                return;
            }
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
        let shape = self.peek(value);
        let shape = match &shape {
            Static::Known(known) => Shape::Known(known),
            Static::Type(found) => Shape::Type(found),
            Static::Closure(_) | Static::Unknown => Shape::Opaque,
        };
        schema_check::option_value_problem(schema_name, key, property, shape, article)
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
