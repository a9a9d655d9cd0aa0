//! The Rhai dialect's static call bound: an abstract run of the parsed script that counts, per
//! `agent(...)` call site, how many times it can run at most.
//!
//! Counts multiply through nesting: a `for` loop over a literal range or array, or over an
//! `args` value (the run's `args` are given, so their sizes are known), runs its body once per
//! element; `parallel(items, f)` and `pipeline(items, stages)` run their closures once per item;
//! `parallel([branches])` runs each branch once; `step` and `phase` bodies run once; `if` and
//! `switch` count their largest branch (per site); `try`/`catch` counts both; a call of a script
//! function or of a closure counts its body at that call, with the arguments it is given.
//! `break` and `return` only lower counts and are ignored.
//!
//! Values are tracked as far as they are static: JSON literals, `args` paths, ranges, lengths,
//! and closures bound with `let` to a variable that is never reassigned. A variable that is
//! assigned or changed anywhere in the script (by name) is unknown everywhere.
//!
//! Unbounded: a `while`, `loop` or `do` loop whose body or condition calls agents; a loop or
//! fan-out over a value of unknown size whose body calls agents; a child `workflow` (its calls
//! are not in the script); recursion; a closure that calls agents stored where the analysis
//! cannot follow it (in a reassigned variable, a map, a return value, an argument of a builtin
//! other than the array methods that run a closure per element); `Fn` with a computed name.
//!
//! The invariant that keeps it sound: an unknown value is never a closure that calls agents,
//! because such a closure is reported unbounded wherever it would turn unknown. Calling an
//! unknown value therefore counts nothing.

use std::collections::HashSet;
use std::rc::Rc;

use ::rhai::{AST, Expr, ImmutableString, Position, Stmt, StmtBlock};
use serde_json::Value;

use super::line_column;
use super::sandbox::{SandboxLimits, compile_scope, parser_engine};
use crate::script::bound::count::SiteCounts as Count;
use crate::script::bound::reason::{Construct, Place, Reason};
use crate::script::bound::sites::{self, Options, Sites};
use crate::script::bound::{AgentSite, CallBound, Known, guard};
use scan::{Functions, scan_stmt};

mod apply;
mod scan;
mod walk;

/// Loops over at most this many known elements are re-walked per element when one walk with an
/// unknown element cannot bound the body.
const PER_ELEMENT_LIMIT: usize = 64;

/// The most AST nodes one per-element walk of a loop may visit before the loop is walked once
/// with an unknown element instead.
const PER_ELEMENT_STEPS: u64 = 20_000;

/// The most AST nodes one analysis visits before it gives up (nested per-element walks and
/// inlined functions multiply the work).
const MAX_STEPS: u64 = 2_000_000;

/// The analysis thread's stack.
const BOUND_STACK: usize = 64 << 20;

/// Nested function and closure calls the walk follows (the sandbox allows 48 call levels).
const MAX_CALL_DEPTH: usize = 48;

/// Globals that call agents themselves or run what they are given: a pointer to one (`Fn("agent")`)
/// must not go where the bound cannot follow it.
const AGENT_GLOBALS: &[&str] = &["agent", "workflow", "orchestrate", "parallel", "pipeline", "step", "phase"];

/// Functions Rhai calls by itself: an interpolation or a string `+` calls `to_string`.
const IMPLICIT_NAMES: &[&str] = &["to_string", "to_debug", "print", "debug"];

/// Builtin array methods that run a closure once per element (at most).
const PER_ELEMENT_METHODS: &[&str] = &[
    "map",
    "filter",
    "for_each",
    "all",
    "some",
    "find",
    "find_map",
    "retain",
    "drain",
    "index_of",
    "reduce",
    "reduce_rev",
    "dedup",
    "splice",
    "zip",
];

/// Builtin array methods that run a closure up to once per pair of elements.
const PER_PAIR_METHODS: &[&str] = &["sort", "sort_by", "order_by"];

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
            Reason::Parse(super::sentence(&error.0.to_string())).at(line, column)
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
    let mut walker = Walker {
        functions: &functions,
        mutated,
        args,
        sites: Sites::default(),
        scope: Vec::new(),
        frames: vec![Frame { base: 0, sees_script: true }],
        active: Vec::new(),
        steps: 0,
        step_limit: MAX_STEPS,
    };
    let result = walker
        .implicit_functions()
        .and_then(|()| walker.statements(ast.statements()))
        .and_then(|(count, value)| walker.lose(value, Position::NONE).map(|_| count));
    match result {
        Ok(count) => walker.sites.finish(count),
        Err(unbounded) => {
            let (line, column) = line_column(unbounded.pos);
            unbounded.reason.at(line, column)
        }
    }
}

// ----- counts -----

/// Why the count has no static bound, and where.
#[derive(Debug, Clone)]
struct Unbounded {
    reason: Reason,
    pos: Position,
}

type Bound<T> = Result<T, Unbounded>;

fn unbounded<T>(pos: Position, reason: Reason) -> Bound<T> {
    Err(Unbounded { reason, pos })
}

// ----- abstract values -----

/// What the analysis knows of a value.
#[derive(Debug, Clone)]
enum Abs {
    /// A JSON value known exactly (a literal, or read from `args`).
    Json(Value),
    /// An integer range `start..end` (exclusive).
    Range(i64, i64),
    /// An iterable of known length whose elements are unknown.
    Sized(u64),
    /// An array literal holding something other than JSON (closures).
    Array(Rc<Vec<Abs>>),
    /// A map literal holding something other than JSON.
    Map(Rc<Vec<(String, Abs)>>),
    /// Something callable.
    Closure(Rc<Callable>),
    /// Unknown data: never a closure that calls agents (see the module docs).
    Unknown,
}

/// A callable value.
#[derive(Debug)]
struct Callable {
    target: Target,
    /// The values of a closure's captured variables, in parameter order.
    captured: Vec<Abs>,
}

#[derive(Debug, Clone)]
enum Target {
    /// A closure's anonymous function, or a script function by `Fn("name")`.
    Script(ImmutableString),
    /// A global by `Fn("agent")` and the like.
    Global(ImmutableString),
}

impl Abs {
    fn int(&self) -> Option<i64> {
        match self {
            Abs::Json(value) => value.as_i64(),
            _ => None,
        }
    }

    /// How many elements iterating it yields, when known.
    fn len(&self) -> Option<u64> {
        match self {
            Abs::Json(Value::Array(items)) => Some(items.len() as u64),
            Abs::Json(Value::String(text)) => Some(text.chars().count() as u64),
            Abs::Range(start, end) => Some(u64::try_from(end.saturating_sub(*start)).unwrap_or(0)),
            Abs::Sized(n) => Some(*n),
            Abs::Array(items) => Some(items.len() as u64),
            _ => None,
        }
    }

    /// Its elements, when known and few.
    fn elements(&self) -> Option<Vec<Abs>> {
        match self {
            Abs::Json(Value::Array(items)) if items.len() <= PER_ELEMENT_LIMIT => {
                Some(items.iter().cloned().map(Abs::Json).collect())
            }
            Abs::Json(Value::String(text)) if text.chars().count() <= PER_ELEMENT_LIMIT => {
                Some(text.chars().map(|c| Abs::Json(Value::String(c.to_string()))).collect())
            }
            Abs::Range(start, end) if end.saturating_sub(*start) <= PER_ELEMENT_LIMIT as i64 => {
                Some((*start..*end).map(|n| Abs::Json(Value::from(n))).collect())
            }
            Abs::Array(items) => Some(items.to_vec()),
            _ => None,
        }
    }

    /// Whether it holds closures (whose calls must be followed element by element).
    fn holds_closures(&self) -> bool {
        match self {
            Abs::Closure(_) => true,
            Abs::Array(items) => items.iter().any(Abs::holds_closures),
            Abs::Map(entries) => entries.iter().any(|(_, value)| value.holds_closures()),
            _ => false,
        }
    }

    /// A field or element, by a known key.
    fn member(&self, key: &Abs) -> Abs {
        match (self, key) {
            // A map's missing property reads as ().
            (Abs::Json(Value::Object(map)), Abs::Json(Value::String(name))) => {
                Abs::Json(map.get(name).cloned().unwrap_or(Value::Null))
            }
            (Abs::Json(Value::Array(items)), Abs::Json(index)) => index
                .as_i64()
                .and_then(|i| index_of(items.len(), i))
                .and_then(|i| items.get(i).cloned())
                .map_or(Abs::Unknown, Abs::Json),
            (Abs::Array(items), Abs::Json(index)) => index
                .as_i64()
                .and_then(|i| index_of(items.len(), i))
                .and_then(|i| items.get(i).cloned())
                .unwrap_or(Abs::Unknown),
            (Abs::Map(entries), Abs::Json(Value::String(name))) => entries
                .iter()
                .rev()
                .find(|(key, _)| key == name)
                .map_or(Abs::Unknown, |(_, value)| value.clone()),
            _ => Abs::Unknown,
        }
    }
}

/// Rhai's index rule: negative indexes count from the end.
fn index_of(len: usize, index: i64) -> Option<usize> {
    if index >= 0 {
        usize::try_from(index).ok()
    } else {
        len.checked_sub(usize::try_from(index.unsigned_abs()).ok()?)
    }
}

// ----- the walk -----

/// One function or closure body being walked.
struct Frame {
    /// Scope entries below this index belong to enclosing bodies and are invisible here.
    base: usize,
    /// Whether `args` and `budget` are visible (not inside a `fn`).
    sees_script: bool,
}

struct Walker<'f> {
    functions: &'f Functions,
    /// Variables written somewhere: their values are unknown everywhere.
    mutated: HashSet<ImmutableString>,
    args: &'f Value,
    /// What each site's options say, merged over every context it was reached in.
    sites: Sites,
    scope: Vec<(ImmutableString, Abs)>,
    frames: Vec<Frame>,
    /// Functions being walked, to catch recursion.
    active: Vec<ImmutableString>,
    steps: u64,
    /// Where `steps` stops the walk.
    step_limit: u64,
}

#[cfg(test)]
mod tests;
