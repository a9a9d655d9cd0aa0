//! Options maps: each key against the global's JSON Schema, each statically known value against
//! its property, phrased for a repair prompt.

use ::rhai::{Expr, Position};
use serde_json::Value;

use super::calls::Registry;
use super::{Linter, Static};
use crate::script::Global;
use crate::script::args_check::{ArgKey, ArgsProblem, Form, workflow_args_problems};
use crate::script::schema_check::{self, Shape, article, json_type};

/// How `workflow-args` findings are phrased for a Rhai caller.
const RHAI_FORM: Form = Form { assign: ": ", map: "map", article };

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

    /// Checks the args of `workflow(name, args)` against the child's schema, when the map is a
    /// literal (or a value known statically).
    pub(super) fn check_workflow_args(&mut self, name: &str, expr: &Expr) {
        let shapes: Vec<Static>;
        let known: Value;
        let (keys, places): (Vec<ArgKey<'_>>, Vec<(Position, Position, usize)>) = match expr {
            Expr::Map(map, _) => {
                shapes = map.0.iter().map(|(_, value)| self.peek(value)).collect();
                map.0
                    .iter()
                    .zip(&shapes)
                    .map(|((key, value), shape)| {
                        let key_len = key.name.chars().count();
                        (
                            ArgKey { name: key.name.as_str(), value: shape_of(shape) },
                            (key.pos, value.position(), key_len),
                        )
                    })
                    .unzip()
            }
            _ => match self.peek(expr) {
                Static::Known(value @ Value::Object(_)) => {
                    known = value;
                    let Value::Object(object) = &known else { return };
                    let pos = expr.position();
                    object
                        .iter()
                        .map(|(key, value)| (ArgKey { name: key, value: Shape::Known(value) }, (pos, pos, 0)))
                        .unzip()
                }
                _ => return,
            },
        };
        for problem in workflow_args_problems(self.ctx, name, &keys, true, RHAI_FORM) {
            match problem {
                ArgsProblem::Map(message) => self.error_at("workflow-args", expr.position(), None, message),
                ArgsProblem::Key(index, message) => {
                    let (pos, _, len) = places[index];
                    self.error_at("workflow-args", pos, (len > 0).then_some(len), message);
                }
                ArgsProblem::Value(index, message) => {
                    let (_, pos, _) = places[index];
                    self.error_at("workflow-args", pos, None, message);
                }
            }
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
        schema_check::option_value_problem(schema_name, key, property, shape_of(&shape), article)
    }
}

/// What a static value tells the schema checks.
fn shape_of(value: &Static) -> Shape<'_> {
    match value {
        Static::Known(known) => Shape::Known(known),
        Static::Type(found) => Shape::Type(found),
        Static::Closure(_) | Static::Unknown => Shape::Opaque,
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
