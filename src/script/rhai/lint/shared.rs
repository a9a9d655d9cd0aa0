//! Indirect writes to shared state, and text that hides what runs.
//!
//! `parallel-capture-assign` sees writes lexically inside a branch; these checks follow the
//! routes a write takes out of sight: a closure stored in a variable and called in the branch
//! (its writes escape where it is called), through an alias (`let r = note; r.call(x)`) or
//! handed to a builtin or function that calls it (`xs.map(add)`), a user-defined method that changes `this` called on
//! a captured variable, and `for_each` whose closure assigns `this`. The runtime refuses every
//! such write anyway (captured values are read-only in a branch); lint says so before the run.
//!
//! `dynamic-fn` reports `Fn(...)` with a computed name, which hides from lint which function
//! runs; `closure-text` warns on text made from a closure (`name()`, `to_debug()`, `${f}`),
//! which is always `<closure>`.

use ::rhai::{Expr, FnCallExpr, ImmutableString, Position, Stmt};

use super::this::writes_this;
use super::{Linter, Mutation, Static, closure_name, closure_parts};

/// The closure a literal argument creates, by its internal name.
fn literal_closure(expr: &Expr) -> Option<ImmutableString> {
    match expr {
        Expr::DynamicConstant(value, _) => closure_name(value),
        Expr::Stmt(block) => closure_parts(block).map(|(name, _)| name),
        _ => None,
    }
}

impl Linter<'_, '_> {
    /// A method call on a variable: records the writes it makes out of sight.
    pub(super) fn check_indirect_write(
        &mut self,
        call: &FnCallExpr,
        pos: Position,
        root: &(ImmutableString, Position),
    ) {
        let name = call.name.as_str();
        let len = name.chars().count();
        if self.functions.names.contains(name) && self.this_writers.contains(name) {
            self.record_mutation(&root.0, pos, len, format!("{name}() (a method that changes this) on"));
        } else if name == "for_each"
            && let Some(closure) = call.args.first().and_then(literal_closure)
            && self.functions.closures.get(&closure).is_some_and(|f| writes_this(&f.body))
        {
            self.record_mutation(&root.0, pos, len, "for_each() assigning this on".to_owned());
        } else if name == "call" {
            self.closure_call_writes(&root.0, pos, len);
        }
    }

    /// A call of the closure held by `variable` (`f.call(x)` or `f(x)`): each write the
    /// closure makes to a variable from outside it happens here too, and escapes every body
    /// between the closure variable's declaration and here.
    pub(super) fn closure_call_writes(&mut self, variable: &ImmutableString, pos: Position, len: usize) {
        let Some(entry) = self.resolve(variable) else { return };
        let binding = self.bindings[entry.binding];
        let Some(facts) = binding.closure.and_then(|id| self.closures.get(id)) else { return };
        // Called through an alias declared deeper (`let r = note;` inside a branch), the
        // closure's writes still escape every body between where it was made and here.
        let outermost = binding.frame.min(facts.frame);
        let mutations: Vec<Mutation> = facts
            .escaping
            .iter()
            .map(|m| Mutation {
                what: format!("calling '{variable}', which writes"),
                name: m.name.clone(),
                pos,
                len,
            })
            .collect();
        for frame in self.frames.iter_mut().skip(outermost + 1) {
            frame.escaping.extend(mutations.iter().cloned());
        }
    }

    /// `Fn(name)` whose name is computed.
    pub(super) fn check_dynamic_fn(&mut self, first: Option<&Expr>, pos: Position) {
        let literal = matches!(first, Some(Expr::StringConstant(..)) | None);
        if !literal {
            let message = "Fn() with a computed name hides from lint which function runs (a global such as \
                           parallel reached this way escapes every check); name the function literally, \
                           Fn(\"name\"), or pass the closure itself"
                .to_owned();
            self.error_at("dynamic-fn", pos, Some(2), message);
        }
    }

    /// Text made from a closure: `f.name()`, `f.to_debug()`, `f.to_string()`, `f.name`.
    pub(super) fn check_closure_text(&mut self, method: &str, receiver: &Expr, pos: Position) {
        if !matches!(self.peek(receiver), Static::Closure(_)) {
            return;
        }
        if method == "name" {
            // A name is asked for to dispatch on it or to label with it; a closure's is always
            // `<closure>`, so whatever is built on it is wrong on every run.
            let message =
                "a closure has no name: name() is always <closure>, so nothing can dispatch or label \
                           on it; call the closure itself, or put the label in a string"
                    .to_owned();
            self.error_at("closure-text", pos, Some(method.chars().count()), message);
        } else if matches!(method, "to_debug" | "to_string") {
            self.closure_text_warning(pos, Some(method.chars().count()));
        }
    }

    /// `${f}` of a closure in an interpolated string.
    pub(super) fn check_interpolated_closure(&mut self, part: &Expr) {
        // Each `${...}` is a block; a lone expression in it is what is printed.
        let part = match part {
            Expr::Stmt(block) => match block.statements() {
                [Stmt::Expr(expr)] => &**expr,
                _ => return,
            },
            other => other,
        };
        if matches!(self.peek(part), Static::Closure(_)) {
            self.closure_text_warning(part.position(), None);
        }
    }

    fn closure_text_warning(&mut self, pos: Position, len: Option<usize>) {
        let message =
            "a closure's text is always <closure>: it says nothing about the closure; put what the \
                       text should say in a string (or call the closure and use its result)"
                .to_owned();
        self.report(crate::script::Severity::Warning, "closure-text", pos, len, message);
    }
}

impl Linter<'_, '_> {
    /// Reports every write a step body makes to a variable from outside it: a replay serves
    /// the step's value without running the body, so the write would be lost (the runtime
    /// refuses it too: what a step body captured is read-only inside it).
    pub(super) fn report_step_writes(&mut self, closure: Option<usize>) {
        let Some(facts) = closure.and_then(|id| self.closures.get(id)) else { return };
        let messages: Vec<(Position, usize, String)> = facts
            .escaping
            .iter()
            .map(|mutation| {
                (
                    mutation.pos,
                    mutation.len,
                    crate::script::captured::step_write_message(&mutation.what, &mutation.name),
                )
            })
            .collect();
        for (pos, len, message) in messages {
            self.error_at("step-capture-assign", pos, Some(len), message);
        }
    }
}
