//! The Rhai dialect's static call bound: the parsed script lowered into the bound's shape
//! (`bound/lower.rs`) and walked by the one analysis both dialects share
//! (`script/bound/eval.rs`, where the rules and the reasons are).
//!
//! What Rhai's constructs mean to the bound: a `for` loop over a literal range, array or
//! string, or over an `args` value, runs its body once per element; `parallel`, `pipeline`,
//! `step` and `phase` run their closures where they are called, as do the array methods that
//! run a closure per element (`map`, `filter`, ...; `sort` per pair); `if` and `switch` count
//! their largest branch per site, a condition known before the run picks its branch;
//! `try`/`catch` counts both; a call of a script function or closure counts its body at that
//! call. A variable assigned or changed anywhere in the script (by name) is unknown
//! everywhere (`bound/scan.rs`); functions Rhai calls by itself (getters, setters, operators,
//! `to_string`) may not call agents.

use std::collections::HashSet;

use ::rhai::AST;
use serde_json::Value;

use super::diagnostic::{line_column, sentence};
use super::sandbox::{SandboxLimits, compile_scope, parser_engine};
use crate::script::bound::reason::Reason;
use crate::script::bound::{CallBound, eval, guard};
use scan::{Functions, scan_stmt};

mod lower;
mod scan;

/// The analysis thread's stack.
const BOUND_STACK: usize = 64 << 20;

/// The call bound of `source` given `args`. A script that does not parse is unbounded at the
/// parse error's position (lint reports it).
pub(crate) fn call_bound(source: &str, args: &Value) -> CallBound {
    // On a thread of its own with a stack sized for the deepest walk the limits allow (48
    // nested calls of bodies nested 64 deep), whatever stack the caller runs on.
    guard::on_own_stack(BOUND_STACK, || analyze(source, args))
}

/// Parses and bounds.
fn analyze(source: &str, args: &Value) -> CallBound {
    if let Some(reason) =
        crate::script::source::over_limits(source, 1 << 20, crate::script::source::BOUND_MAX_TOKENS)
    {
        return CallBound::Unbounded { reason, line: 1, column: 1 };
    }
    let engine = parser_engine(&SandboxLimits::STANDARD);
    match engine.compile_with_scope(&compile_scope(), source) {
        Ok(ast) => bound_of(&ast, args),
        Err(error) => {
            let (line, column) = line_column(error.position());
            Reason::Parse(sentence(&error.0.to_string())).at(line, column)
        }
    }
}

/// The call bound of a parsed script.
pub(crate) fn bound_of(ast: &AST, args: &Value) -> CallBound {
    let functions = Functions::of(ast);
    let mut mutated = HashSet::new();
    for stmt in ast.statements() {
        scan_stmt(stmt, &functions, &mut mutated);
    }
    for body in functions.bodies.values() {
        for stmt in &body.statements {
            scan_stmt(stmt, &functions, &mut mutated);
        }
    }
    eval::call_bound(&lower::lower(ast, &functions, &mutated), args)
}

#[cfg(test)]
mod tests;
