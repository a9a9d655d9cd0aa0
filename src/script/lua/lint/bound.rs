//! The Lua dialect's static call bound: an abstract run of the parsed script that counts, per
//! `agent(...)` call site, how many times it can run at most. The same rules as the Rhai one.
//!
//! Counts multiply through nesting: a numeric `for` over literal bounds (or bounds read from
//! `args`, whose values are given) runs its body once per step; a generic `for` over
//! `ipairs`/`pairs` of a literal table or an `args` value runs it once per element;
//! `parallel(items, f)` and `pipeline(items, stages)` run their functions once per item;
//! `parallel({branches})` runs each branch once; `step` and `phase` bodies, and the function
//! given to `pcall`, run once; `if` counts its largest branch (per site); a call of a local
//! function counts its body at that call, with the arguments it is given. `break`, `return` and
//! `goto` only lower counts and are ignored.
//!
//! Values are tracked as far as they are static: JSON literals, `args` paths, lengths, lists
//! of functions, and functions bound with `local` to a name that is never assigned anywhere
//! (by name).
//!
//! Unbounded: a `while` or `repeat` loop, or a `goto` back to a label, whose body calls
//! agents; a loop or fan-out over a value of unknown size whose body calls agents; a loop over
//! any other iterator (`gmatch`, a custom one) whose body calls agents; a child `workflow` (its
//! calls are not in the script); `orchestrate` (it plans its calls at run time); recursion; a
//! function that calls agents stored where the analysis cannot follow it (in a changed name, a
//! table field, a return value, an argument of anything but a cairn global or a local function).
//!
//! The invariant that keeps it sound: an unknown value is never a function that calls agents,
//! because such a function is reported unbounded wherever it would turn unknown. Calling an
//! unknown value therefore counts nothing.

mod expr;
mod scan;
mod stmt;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::rc::Rc;

use full_moon::ast::{
    Block, Call, Expression, Field, FunctionArgs, FunctionBody, Index, LastStmt, Parameter, Prefix, Stmt,
    Suffix, TableConstructor, Var,
};
use serde_json::Value;

use super::values::{Pos, Static, ident, node_pos, peek_literal, string_literal, token_pos};
use super::{MAX_SOURCE_SIZE, on_parser_stack, syntax};
use crate::script::bound::count::SiteCounts as Count;
use crate::script::bound::reason::{Construct, Place, Reason};
use crate::script::bound::sites::{self, Options, Sites};
use crate::script::bound::{CallBound, Known, guard};
use scan::{Changes, scan_block};

/// Loops over at most this many known elements are re-walked per element when one walk with an
/// unknown element cannot bound the body.
const PER_ELEMENT_LIMIT: usize = 64;

/// The most statements and expressions one analysis visits before it gives up.
const MAX_STEPS: u64 = 2_000_000;

/// The most function calls inlined inside one another.
const MAX_INLINE_DEPTH: usize = 64;

/// The call bound of `source` given `args`. A script that does not parse is unbounded at the
/// parse error's position (lint reports it).
pub fn call_bound(source: &str, args: &Value) -> CallBound {
    guard::catching(|| {
        if source.len() > MAX_SOURCE_SIZE {
            return Reason::TooLarge.at(1, 1);
        }
        if let Some(reason) = crate::script::source::over_limits(
            source,
            MAX_SOURCE_SIZE,
            crate::script::source::BOUND_MAX_TOKENS,
        ) {
            return CallBound::Unbounded { reason, line: 1, column: 1 };
        }
        let scan = syntax::scan(source);
        if let Some(fatal) = scan.fatal {
            return Reason::Parse(fatal.message).at(fatal.line, fatal.column);
        }
        on_parser_stack(scan.nesting, || {
            let parsed = syntax::parse(source);
            if let Some(error) = parsed.errors().first() {
                let (start, _) = error.range();
                let line = u32::try_from(start.line()).unwrap_or(u32::MAX).max(1);
                let column = u32::try_from(start.character()).unwrap_or(u32::MAX).max(1);
                return Reason::Parse(error.error_message().to_string()).at(line, column);
            }
            bound_of(parsed.ast().nodes(), args)
        })
        .unwrap_or_else(guard::internal)
    })
}

/// The call bound of a parsed chunk.
fn bound_of(block: &Block, args: &Value) -> CallBound {
    let mut mutated = Changes::default();
    scan_block(block, &mut mutated);
    let mut walker = Walker {
        args: args.clone(),
        mutated,
        scope: Vec::new(),
        sites: Sites::default(),
        active: Vec::new(),
        probes: HashMap::new(),
        steps: 0,
        labels: Vec::new(),
        backward_goto: None,
    };
    match walker.block(block) {
        Ok(count) => walker.sites.finish(count),
        Err(unbounded) => unbounded.reason.at(unbounded.pos.0, unbounded.pos.1),
    }
}

// ----- counts -----

/// Why the count has no static bound, and where.
#[derive(Debug, Clone)]
struct Unbounded {
    reason: Reason,
    pos: Pos,
}

type Bound<T> = Result<T, Unbounded>;

fn unbounded<T>(pos: Pos, reason: Reason) -> Bound<T> {
    Err(Unbounded { reason, pos })
}

// ----- abstract values -----

/// What the analysis knows of a value.
#[derive(Debug, Clone)]
enum Abs<'a> {
    /// A JSON value known exactly (a literal, or read from `args`).
    Json(Value),
    /// A table of known length whose elements are unknown.
    Sized(u64),
    /// A list literal holding something other than JSON (functions).
    List(Rc<Vec<Abs<'a>>>),
    /// A function.
    Func(Rc<Func<'a>>),
    /// Unknown data: never a function that calls agents (see the module docs).
    Unknown,
}

/// A function value: its body and the scope it was made in.
#[derive(Debug)]
struct Func<'a> {
    body: &'a FunctionBody,
    scope: Rc<Vec<(String, Abs<'a>)>>,
    /// The name a `local function` sees itself by.
    name: Option<String>,
    pos: Pos,
}

impl<'a> Abs<'a> {
    fn int(&self) -> Option<i64> {
        match self {
            Abs::Json(value) => value.as_i64(),
            _ => None,
        }
    }

    /// How many elements `ipairs`/`pairs` over it yields, when known.
    fn len(&self) -> Option<u64> {
        match self {
            Abs::Json(Value::Array(items)) => Some(items.len() as u64),
            Abs::Json(Value::Object(map)) => Some(map.len() as u64),
            Abs::Sized(n) => Some(*n),
            Abs::List(items) => Some(items.len() as u64),
            _ => None,
        }
    }

    /// Its (key, value) pairs in iteration order, when known and few.
    fn pairs(&self) -> Option<Vec<(Abs<'a>, Abs<'a>)>> {
        match self {
            Abs::Json(Value::Array(items)) if items.len() <= PER_ELEMENT_LIMIT => Some(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| (Abs::Json(Value::from(i + 1)), Abs::Json(item.clone())))
                    .collect(),
            ),
            Abs::Json(Value::Object(map)) if map.len() <= PER_ELEMENT_LIMIT => {
                // The runtime's `pairs` iterates in sorted key order.
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                Some(
                    entries
                        .into_iter()
                        .map(|(k, v)| (Abs::Json(Value::String(k.clone())), Abs::Json(v.clone())))
                        .collect(),
                )
            }
            Abs::List(items) => Some(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| (Abs::Json(Value::from(i + 1)), item.clone()))
                    .collect(),
            ),
            _ => None,
        }
    }

    /// A field or element, by a known key (Lua lists count from 1).
    fn member(&self, key: &Abs<'a>) -> Abs<'a> {
        match (self, key) {
            (Abs::Json(Value::Object(map)), Abs::Json(Value::String(name))) => {
                Abs::Json(map.get(name).cloned().unwrap_or(Value::Null))
            }
            (Abs::Json(Value::Array(items)), Abs::Json(index)) => match index.as_i64() {
                Some(i) if i >= 1 => {
                    items.get((i - 1) as usize).cloned().map_or(Abs::Json(Value::Null), Abs::Json)
                }
                _ => Abs::Unknown,
            },
            (Abs::List(items), Abs::Json(index)) => match index.as_i64() {
                Some(i) if i >= 1 => items.get((i - 1) as usize).cloned().unwrap_or(Abs::Unknown),
                _ => Abs::Unknown,
            },
            _ => Abs::Unknown,
        }
    }

    fn functions(&self) -> Vec<Rc<Func<'a>>> {
        match self {
            Abs::Func(func) => vec![func.clone()],
            Abs::List(items) => items.iter().flat_map(Abs::functions).collect(),
            _ => Vec::new(),
        }
    }
}

fn from_static(value: Static) -> Abs<'static> {
    match value {
        Static::Known(value) => Abs::Json(value),
        Static::EmptyTable => Abs::Json(Value::Array(Vec::new())),
        _ => Abs::Unknown,
    }
}

// ----- the abstract run -----

/// One argument, in any of Lua's call forms.
enum ArgExpr<'a> {
    Expr(&'a Expression),
    Table(&'a TableConstructor),
    Str(Value),
}

fn arg_exprs(args: &FunctionArgs) -> Vec<ArgExpr<'_>> {
    match args {
        FunctionArgs::Parentheses { arguments, .. } => arguments.iter().map(ArgExpr::Expr).collect(),
        FunctionArgs::TableConstructor(table) => vec![ArgExpr::Table(table)],
        FunctionArgs::String(token) => {
            vec![ArgExpr::Str(string_literal(token).map_or(Value::Null, Value::String))]
        }
        _ => Vec::new(),
    }
}

struct Walker<'a> {
    args: Value,
    mutated: Changes,
    scope: Vec<(String, Abs<'a>)>,
    sites: Sites,
    /// The functions being inlined, innermost last (for recursion).
    active: Vec<*const FunctionBody>,
    /// Whether a function calls agents, by body, once probed.
    probes: HashMap<*const FunctionBody, bool>,
    steps: u64,
    /// Labels of the enclosing blocks seen so far: a `goto` to one of them jumps back.
    labels: Vec<String>,
    /// A `goto` back to a label, not yet matched with its block.
    backward_goto: Option<(String, Pos)>,
}
