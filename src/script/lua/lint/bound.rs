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

use std::collections::{HashMap, HashSet};
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

// ----- the pre-scan: names changed anywhere -----

/// Collects the names whose value may change after they are bound, anywhere in the script:
/// assigned, the root of an assignment target (`t.x = ...`), the receiver of a method call,
/// an argument of a call that may change it (anything but the read-only functions), or
/// aliased (bound to another name or put in a table, where a change through the alias is out
/// of sight). The analysis treats an assigned name as unknown everywhere, and a changed one
/// as unknown unless it holds a string, number or boolean (which no reference can change).
#[derive(Debug, Default)]
struct Changes {
    assigned: HashSet<String>,
    referenced: HashSet<String>,
}

fn scan_block(block: &Block, out: &mut Changes) {
    for stmt in block.stmts() {
        match stmt {
            Stmt::Assignment(assignment) => {
                for var in assignment.variables() {
                    match var {
                        Var::Name(token) => {
                            out.assigned.insert(ident(token).to_owned());
                        }
                        Var::Expression(var) => {
                            if let Prefix::Name(token) = var.prefix() {
                                out.referenced.insert(ident(token).to_owned());
                            }
                            scan_suffixes(var.prefix(), var.suffixes(), out);
                        }
                        _ => {}
                    }
                }
                for expr in assignment.expressions() {
                    scan_aliased(expr, out);
                    scan_expr(expr, out);
                }
            }
            Stmt::FunctionDeclaration(declaration) => {
                let names: Vec<_> = declaration.name().names().iter().collect();
                if let Some(first) = names.first() {
                    // A global function declaration assigns its name (lint rejects it); a
                    // method declaration changes its table.
                    if names.len() == 1 && declaration.name().method_name().is_none() {
                        out.assigned.insert(ident(first).to_owned());
                    } else {
                        out.referenced.insert(ident(first).to_owned());
                    }
                }
                scan_block(declaration.body().block(), out);
            }
            Stmt::LocalAssignment(local) => {
                for expr in local.expressions() {
                    scan_aliased(expr, out);
                    scan_expr(expr, out);
                }
            }
            Stmt::LocalFunction(function) => scan_block(function.body().block(), out),
            Stmt::FunctionCall(call) => scan_suffixes(call.prefix(), call.suffixes(), out),
            Stmt::Do(inner) => scan_block(inner.block(), out),
            Stmt::While(inner) => {
                scan_expr(inner.condition(), out);
                scan_block(inner.block(), out);
            }
            Stmt::Repeat(inner) => {
                scan_block(inner.block(), out);
                scan_expr(inner.until(), out);
            }
            Stmt::NumericFor(inner) => {
                scan_expr(inner.start(), out);
                scan_expr(inner.end(), out);
                scan_block(inner.block(), out);
            }
            Stmt::GenericFor(inner) => {
                inner.expressions().iter().for_each(|expr| scan_expr(expr, out));
                scan_block(inner.block(), out);
            }
            Stmt::If(inner) => {
                scan_expr(inner.condition(), out);
                scan_block(inner.block(), out);
                for else_if in inner.else_if().into_iter().flatten() {
                    scan_expr(else_if.condition(), out);
                    scan_block(else_if.block(), out);
                }
                if let Some(block) = inner.else_block() {
                    scan_block(block, out);
                }
            }
            _ => {}
        }
    }
    if let Some(LastStmt::Return(ret)) = block.last_stmt() {
        ret.returns().iter().for_each(|expr| scan_expr(expr, out));
    }
}

/// Calls that never change their arguments.
fn is_read_only(callee: &str) -> bool {
    matches!(
        callee,
        "ipairs"
            | "pairs"
            | "next"
            | "type"
            | "tostring"
            | "tonumber"
            | "select"
            | "rawlen"
            | "rawequal"
            | "assert"
            | "error"
            | "agent"
            | "log"
            | "host_call"
            | "workflow"
            | "await_external"
            | "sleep"
            | "parallel"
            | "pipeline"
            | "step"
            | "phase"
            | "table.concat"
            | "table.unpack"
    ) || callee.starts_with("string.")
        || callee.starts_with("math.")
        || callee.starts_with("utf8.")
}

/// The root name of an expression that is a name or a path from one.
fn root_of(expr: &Expression) -> Option<&str> {
    match expr {
        Expression::Var(Var::Name(token)) => Some(ident(token)),
        Expression::Var(Var::Expression(var)) => match var.prefix() {
            Prefix::Name(token) => Some(ident(token)),
            _ => None,
        },
        Expression::Parentheses { expression, .. } => root_of(expression),
        _ => None,
    }
}

/// A bare name bound to another name (or put in a table): an alias.
fn scan_aliased(expr: &Expression, out: &mut Changes) {
    if let Expression::Var(Var::Name(token)) = expr {
        out.referenced.insert(ident(token).to_owned());
    }
}

fn scan_suffixes<'s>(prefix: &'s Prefix, suffixes: impl Iterator<Item = &'s Suffix>, out: &mut Changes) {
    let root = match prefix {
        Prefix::Name(token) => Some(ident(token)),
        Prefix::Expression(expr) => {
            scan_expr(expr, out);
            None
        }
        _ => None,
    };
    let mut path: Option<String> = root.map(str::to_owned);
    for suffix in suffixes {
        match suffix {
            Suffix::Index(Index::Dot { name, .. }) => {
                path = path.map(|path| format!("{path}.{}", ident(name)));
            }
            Suffix::Index(Index::Brackets { expression, .. }) => {
                scan_expr(expression, out);
                path = None;
            }
            Suffix::Call(call) => {
                let args = match call {
                    Call::AnonymousCall(args) => args,
                    Call::MethodCall(method) => {
                        if let Some(root) = root {
                            out.referenced.insert(root.to_owned());
                        }
                        method.args()
                    }
                    _ => continue,
                };
                let read_only =
                    matches!(call, Call::AnonymousCall(_)) && path.as_deref().is_some_and(is_read_only);
                match args {
                    FunctionArgs::Parentheses { arguments, .. } => {
                        for arg in arguments.iter() {
                            if !read_only && let Some(name) = root_of(arg) {
                                out.referenced.insert(name.to_owned());
                            }
                            scan_expr(arg, out);
                        }
                    }
                    FunctionArgs::TableConstructor(table) => scan_table(table, out),
                    _ => {}
                }
                path = None;
            }
            _ => {}
        }
    }
}

fn scan_table(table: &TableConstructor, out: &mut Changes) {
    for field in table.fields() {
        match field {
            Field::NoKey(value) => {
                scan_aliased(value, out);
                scan_expr(value, out);
            }
            Field::NameKey { value, .. } => {
                scan_aliased(value, out);
                scan_expr(value, out);
            }
            Field::ExpressionKey { key, value, .. } => {
                scan_expr(key, out);
                scan_aliased(value, out);
                scan_expr(value, out);
            }
            _ => {}
        }
    }
}

fn scan_expr(expr: &Expression, out: &mut Changes) {
    match expr {
        Expression::Function(function) => scan_block(function.body().block(), out),
        Expression::FunctionCall(call) => scan_suffixes(call.prefix(), call.suffixes(), out),
        Expression::Var(Var::Expression(var)) => scan_suffixes(var.prefix(), var.suffixes(), out),
        Expression::TableConstructor(table) => scan_table(table, out),
        Expression::BinaryOperator { lhs, rhs, .. } => {
            scan_expr(lhs, out);
            scan_expr(rhs, out);
        }
        Expression::UnaryOperator { expression, .. } | Expression::Parentheses { expression, .. } => {
            scan_expr(expression, out);
        }
        _ => {}
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

impl<'a> Walker<'a> {
    fn tick(&mut self, pos: Pos) -> Bound<()> {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return unbounded(pos, Reason::TooComplex);
        }
        Ok(())
    }

    fn lookup(&self, name: &str) -> Option<Abs<'a>> {
        if let Some((_, value)) = self.scope.iter().rev().find(|(n, _)| n == name) {
            return Some(value.clone());
        }
        (name == "args").then(|| Abs::Json(self.args.clone()))
    }

    /// Binds a name; a name assigned anywhere is unknown, so what it held must not be a
    /// function that calls agents.
    fn bind(&mut self, name: &str, value: Abs<'a>, pos: Pos) -> Bound<()> {
        let scalar =
            matches!(value, Abs::Json(Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_)));
        let value =
            if self.mutated.assigned.contains(name) || (self.mutated.referenced.contains(name) && !scalar) {
                self.lose(&value, pos, Place::ChangedVariable(name.to_owned()))?;
                Abs::Unknown
            } else {
                value
            };
        self.scope.push((name.to_owned(), value));
        Ok(())
    }

    /// A value goes where the analysis cannot follow it: unbounded if it holds a function that
    /// calls agents.
    fn lose(&mut self, value: &Abs<'a>, pos: Pos, place: Place) -> Bound<()> {
        for func in value.functions() {
            if self.calls_agents(&func)? {
                return unbounded(func.pos, Reason::Escape(place));
            }
        }
        let _ = pos;
        Ok(())
    }

    /// Whether calling the function (with unknown arguments) can call agents.
    fn calls_agents(&mut self, func: &Rc<Func<'a>>) -> Bound<bool> {
        let key: *const FunctionBody = func.body;
        if let Some(known) = self.probes.get(&key) {
            return Ok(*known);
        }
        if self.active.contains(&key) {
            return Ok(false);
        }
        let saved = std::mem::take(&mut self.sites);
        let result = self.call(func, Vec::new(), func.pos);
        let calls = match result {
            Ok((count, _)) => !count.is_zero(),
            Err(error) if error.reason.is_exhaustion() => return Err(error),
            Err(_) => true,
        };
        self.sites = saved;
        self.probes.insert(key, calls);
        Ok(calls)
    }

    fn block(&mut self, block: &'a Block) -> Bound<Count> {
        let mark = self.scope.len();
        let result = self.block_in_scope(block);
        self.scope.truncate(mark);
        result
    }

    fn block_in_scope(&mut self, block: &'a Block) -> Bound<Count> {
        let mut count = Count::default();
        let labels_mark = self.labels.len();
        let outer_goto = self.backward_goto.take();
        // The count since each label of this block, for a `goto` back to it (a loop).
        let mut since_label: Vec<(String, Count)> = Vec::new();
        for stmt in block.stmts() {
            let stmt_count = self.stmt(stmt)?;
            count.add(&stmt_count);
            for (_, since) in &mut since_label {
                since.add(&stmt_count);
            }
            if let Stmt::Label(label) = stmt {
                let name = ident(label.name()).to_owned();
                self.labels.push(name.clone());
                since_label.push((name, Count::default()));
            }
            if let Some((target, pos)) = self.backward_goto.clone()
                && let Some((_, since)) = since_label.iter().find(|(name, _)| *name == target)
            {
                if !since.is_zero() {
                    return unbounded(pos, Reason::Loop(Construct::Goto));
                }
                self.backward_goto = None;
            }
        }
        self.labels.truncate(labels_mark);
        if self.backward_goto.is_none() {
            self.backward_goto = outer_goto;
        }
        if let Some(LastStmt::Return(ret)) = block.last_stmt() {
            for expr in ret.returns() {
                let (c, value) = self.expr(expr)?;
                count.add(&c);
                if !self.active.is_empty() {
                    self.lose(&value, node_pos(expr), Place::ReturnValue)?;
                }
            }
        }
        Ok(count)
    }

    fn stmt(&mut self, stmt: &'a Stmt) -> Bound<Count> {
        self.tick(node_pos(stmt))?;
        match stmt {
            Stmt::LocalAssignment(local) => {
                let mut count = Count::default();
                let mut values = Vec::new();
                for expr in local.expressions() {
                    let (c, value) = self.expr(expr)?;
                    count.add(&c);
                    values.push(value);
                }
                for (index, name) in local.names().iter().enumerate() {
                    let value = values.get(index).cloned().unwrap_or(Abs::Unknown);
                    self.bind(ident(name), value, token_pos(name))?;
                }
                // Values without a name are dropped, never called.
                Ok(count)
            }
            Stmt::Assignment(assignment) => {
                let mut count = Count::default();
                for var in assignment.variables() {
                    if let Var::Expression(var) = var {
                        count.add(&self.suffixed(var.prefix(), &var.suffixes().collect::<Vec<_>>())?.0);
                    }
                }
                for expr in assignment.expressions() {
                    let (c, value) = self.expr(expr)?;
                    count.add(&c);
                    self.lose(&value, node_pos(expr), Place::Assignment)?;
                }
                Ok(count)
            }
            Stmt::FunctionCall(call) => {
                Ok(self.suffixed(call.prefix(), &call.suffixes().collect::<Vec<_>>())?.0)
            }
            Stmt::LocalFunction(function) => {
                let name = ident(function.name()).to_owned();
                let func = Func {
                    body: function.body(),
                    scope: Rc::new(self.scope.clone()),
                    name: Some(name.clone()),
                    pos: token_pos(function.name()),
                };
                self.bind(&name, Abs::Func(Rc::new(func)), token_pos(function.name()))?;
                Ok(Count::default())
            }
            Stmt::FunctionDeclaration(declaration) => {
                let names: Vec<_> = declaration.name().names().iter().collect();
                let pos = names.first().map_or((1, 1), |name| token_pos(name));
                let func = Abs::Func(Rc::new(Func {
                    body: declaration.body(),
                    scope: Rc::new(self.scope.clone()),
                    name: None,
                    pos,
                }));
                if names.len() == 1 && declaration.name().method_name().is_none() {
                    self.bind(ident(names[0]), func, pos)?;
                } else {
                    self.lose(&func, pos, Place::TableField)?;
                }
                Ok(Count::default())
            }
            Stmt::NumericFor(numeric) => {
                let mut count = Count::default();
                let (c, start) = self.expr(numeric.start())?;
                count.add(&c);
                let (c, end) = self.expr(numeric.end())?;
                count.add(&c);
                let step = match numeric.step() {
                    Some(step) => {
                        let (c, step) = self.expr(step)?;
                        count.add(&c);
                        step.int()
                    }
                    None => Some(1),
                };
                let name = ident(numeric.index_variable()).to_owned();
                let pos = token_pos(numeric.for_token());
                let block = numeric.block();
                let reason = Reason::UnknownBounds;
                let runs = match (start.int(), end.int(), step) {
                    (Some(start), Some(end), Some(step)) if step != 0 => {
                        let n = if step > 0 {
                            if end >= start { (end - start) / step + 1 } else { 0 }
                        } else if start >= end {
                            (start - end) / (-step) + 1
                        } else {
                            0
                        };
                        Some((start, step, u64::try_from(n).unwrap_or(0)))
                    }
                    _ => None,
                };
                let body = match runs {
                    Some((start, step, n)) if n as usize <= PER_ELEMENT_LIMIT => {
                        let elements =
                            (0..n as i64).map(|k| Abs::Json(Value::from(start + k * step))).collect();
                        self.per_element(pos, Some(elements), reason, |walker, value| {
                            walker.loop_body(&[(name.clone(), value)], block)
                        })?
                    }
                    Some((_, _, n)) => self.repeat_body(pos, n, |walker| {
                        walker.loop_body(&[(name.clone(), Abs::Unknown)], block)
                    })?,
                    None => self.per_element(pos, None, reason, |walker, value| {
                        walker.loop_body(&[(name.clone(), value)], block)
                    })?,
                };
                count.add(&body);
                Ok(count)
            }
            Stmt::GenericFor(generic) => {
                let mut count = Count::default();
                let names: Vec<String> = generic.names().iter().map(|name| ident(name).to_owned()).collect();
                let pos = token_pos(generic.for_token());
                let exprs: Vec<&Expression> = generic.expressions().iter().collect();
                let collection = match exprs.as_slice() {
                    [Expression::FunctionCall(call)] => self.iterated(call)?,
                    _ => None,
                };
                let (collection, c) = match collection {
                    Some((c, value)) => (Some(value), c),
                    None => {
                        let mut c = Count::default();
                        for expr in &exprs {
                            let (ec, value) = self.expr(expr)?;
                            c.add(&ec);
                            self.lose(&value, node_pos(*expr), Place::Iterator)?;
                        }
                        (None, c)
                    }
                };
                count.add(&c);
                let bind = |key: Abs<'a>, value: Abs<'a>| -> Vec<(String, Abs<'a>)> {
                    names
                        .iter()
                        .enumerate()
                        .map(|(i, name)| {
                            let value = match i {
                                0 => key.clone(),
                                1 => value.clone(),
                                _ => Abs::Unknown,
                            };
                            (name.clone(), value)
                        })
                        .collect()
                };
                let body = match collection {
                    Some(collection) => match collection.pairs() {
                        Some(pairs) => {
                            let elements =
                                pairs.into_iter().map(|(k, v)| Abs::List(Rc::new(vec![k, v]))).collect();
                            self.per_element(
                                pos,
                                Some(elements),
                                Reason::UnknownSize(Construct::For),
                                |walker, pair| {
                                    let key = pair.member(&Abs::Json(Value::from(1)));
                                    let value = pair.member(&Abs::Json(Value::from(2)));
                                    walker.loop_body(&bind(key, value), generic.block())
                                },
                            )?
                        }
                        None => match collection.len() {
                            Some(n) => self.repeat_body(pos, n, |walker| {
                                walker.loop_body(&bind(Abs::Unknown, Abs::Unknown), generic.block())
                            })?,
                            None => self.per_element(
                                pos,
                                None,
                                Reason::UnknownSize(Construct::For),
                                |walker, _| {
                                    walker.loop_body(&bind(Abs::Unknown, Abs::Unknown), generic.block())
                                },
                            )?,
                        },
                    },
                    None => self.per_element(pos, None, Reason::Iterator, |walker, _| {
                        walker.loop_body(&bind(Abs::Unknown, Abs::Unknown), generic.block())
                    })?,
                };
                count.add(&body);
                Ok(count)
            }
            Stmt::While(while_loop) => {
                let (mut count, _) = self.expr(while_loop.condition())?;
                count.add(&self.block(while_loop.block())?);
                if count.is_zero() {
                    return Ok(count);
                }
                let pos = token_pos(while_loop.while_token());
                unbounded(pos, Reason::Loop(Construct::While))
            }
            Stmt::Repeat(repeat) => {
                let mark = self.scope.len();
                let body = self.block_in_scope(repeat.block());
                let until = body.and_then(|mut count| {
                    let (c, _) = self.expr(repeat.until())?;
                    count.add(&c);
                    Ok(count)
                });
                self.scope.truncate(mark);
                let count = until?;
                if count.is_zero() {
                    return Ok(count);
                }
                let pos = token_pos(repeat.repeat_token());
                unbounded(pos, Reason::Loop(Construct::Repeat))
            }
            Stmt::If(if_stmt) => {
                let (mut count, _) = self.expr(if_stmt.condition())?;
                let mut branches = self.block(if_stmt.block())?;
                for else_if in if_stmt.else_if().into_iter().flatten() {
                    let (c, _) = self.expr(else_if.condition())?;
                    count.add(&c);
                    branches.max_with(&self.block(else_if.block())?);
                }
                if let Some(block) = if_stmt.else_block() {
                    branches.max_with(&self.block(block)?);
                }
                count.add(&branches);
                Ok(count)
            }
            Stmt::Do(inner) => self.block(inner.block()),
            Stmt::Goto(goto) => {
                let target = ident(goto.label_name()).to_owned();
                if self.labels.contains(&target) {
                    self.backward_goto = Some((target, token_pos(goto.goto_token())));
                }
                Ok(Count::default())
            }
            _ => Ok(Count::default()),
        }
    }

    /// The collection `ipairs(x)`/`pairs(x)` iterates, when the call is one of those.
    fn iterated(&mut self, call: &'a full_moon::ast::FunctionCall) -> Bound<Option<(Count, Abs<'a>)>> {
        let Prefix::Name(token) = call.prefix() else { return Ok(None) };
        let name = ident(token);
        if !matches!(name, "ipairs" | "pairs") || self.lookup(name).is_some() {
            return Ok(None);
        }
        let suffixes: Vec<&Suffix> = call.suffixes().collect();
        let [Suffix::Call(Call::AnonymousCall(args))] = suffixes.as_slice() else { return Ok(None) };
        let args = arg_exprs(args);
        let Some(first) = args.first() else { return Ok(None) };
        let (count, value) = self.arg(first)?;
        Ok(Some((count, value)))
    }

    /// Walks a loop body with the loop's names bound.
    fn loop_body(&mut self, bindings: &[(String, Abs<'a>)], block: &'a Block) -> Bound<Count> {
        let mark = self.scope.len();
        let result = self.bind_all(bindings.iter().cloned()).and_then(|()| self.block(block));
        self.scope.truncate(mark);
        result
    }

    fn bind_all(&mut self, bindings: impl Iterator<Item = (String, Abs<'a>)>) -> Bound<()> {
        for (name, value) in bindings {
            self.bind(&name, value, (1, 1))?;
        }
        Ok(())
    }

    /// A body run `n` times, walked once with unknown elements.
    fn repeat_body(
        &mut self,
        pos: Pos,
        n: u64,
        body: impl FnOnce(&mut Self) -> Bound<Count>,
    ) -> Bound<Count> {
        let _ = pos;
        Ok(body(self)?.scaled(n))
    }

    /// A body run once per element: walked once with an unknown element and scaled, or (when
    /// that cannot bound it and the elements are known and few) once per element. `elements`
    /// `None` means the count of runs is unknown: bounded only when the body calls no agents.
    fn per_element(
        &mut self,
        pos: Pos,
        elements: Option<Vec<Abs<'a>>>,
        unknown_reason: Reason,
        mut body: impl FnMut(&mut Self, Abs<'a>) -> Bound<Count>,
    ) -> Bound<Count> {
        let once = body(self, Abs::Unknown);
        match (once, elements) {
            (Ok(count), _) if count.is_zero() => Ok(count),
            (Ok(count), Some(elements)) => Ok(count.scaled(elements.len() as u64)),
            (Err(error), Some(elements)) if !error.reason.is_exhaustion() => {
                let mut total = Count::default();
                for element in elements {
                    total.add(&body(self, element)?);
                }
                Ok(total)
            }
            (Err(error), _) => Err(error),
            (Ok(_), None) => unbounded(pos, unknown_reason),
        }
    }

    // ----- expressions -----

    fn expr(&mut self, expr: &'a Expression) -> Bound<(Count, Abs<'a>)> {
        self.tick(node_pos(expr))?;
        match expr {
            Expression::Function(function) => {
                let func = Func {
                    body: function.body(),
                    scope: Rc::new(self.scope.clone()),
                    name: None,
                    pos: node_pos(expr),
                };
                Ok((Count::default(), Abs::Func(Rc::new(func))))
            }
            Expression::FunctionCall(call) => {
                self.suffixed(call.prefix(), &call.suffixes().collect::<Vec<_>>())
            }
            Expression::Var(Var::Name(token)) => {
                Ok((Count::default(), self.lookup(ident(token)).unwrap_or(Abs::Unknown)))
            }
            Expression::Var(Var::Expression(var)) => {
                self.suffixed(var.prefix(), &var.suffixes().collect::<Vec<_>>())
            }
            Expression::TableConstructor(table) => self.table(table),
            Expression::Parentheses { expression, .. } => self.expr(expression),
            Expression::UnaryOperator { unop, expression } => {
                let (count, value) = self.expr(expression)?;
                let value = match unop {
                    full_moon::ast::UnOp::Hash(_) => {
                        value.len().map_or(Abs::Unknown, |n| Abs::Json(Value::from(n)))
                    }
                    full_moon::ast::UnOp::Minus(_) => {
                        value.int().map_or(Abs::Unknown, |n| Abs::Json(Value::from(-n)))
                    }
                    _ => Abs::Unknown,
                };
                Ok((count, value))
            }
            Expression::BinaryOperator { lhs, binop, rhs } => {
                let (mut count, left) = self.expr(lhs)?;
                let (c, right) = self.expr(rhs)?;
                count.add(&c);
                let value = match (left.int(), right.int(), binop.token().token().to_string().as_str()) {
                    (Some(a), Some(b), "+") => {
                        a.checked_add(b).map_or(Abs::Unknown, |n| Abs::Json(Value::from(n)))
                    }
                    (Some(a), Some(b), "-") => {
                        a.checked_sub(b).map_or(Abs::Unknown, |n| Abs::Json(Value::from(n)))
                    }
                    (Some(a), Some(b), "*") => {
                        a.checked_mul(b).map_or(Abs::Unknown, |n| Abs::Json(Value::from(n)))
                    }
                    (Some(a), Some(b), "//") if b != 0 => Abs::Json(Value::from(a.div_euclid(b))),
                    _ => {
                        // `a or f`: either operand may be the value.
                        match binop.token().token().to_string().as_str() {
                            "and" | "or" => {
                                self.lose(&left, node_pos(&**lhs), Place::AndOr)?;
                                self.lose(&right, node_pos(&**rhs), Place::AndOr)?;
                                Abs::Unknown
                            }
                            _ => Abs::Unknown,
                        }
                    }
                };
                Ok((count, value))
            }
            other => Ok((Count::default(), peek_literal(other).map_or(Abs::Unknown, from_static))),
        }
    }

    fn table(&mut self, table: &'a TableConstructor) -> Bound<(Count, Abs<'a>)> {
        let mut count = Count::default();
        let mut list = Vec::new();
        let mut keyed = false;
        for field in table.fields() {
            match field {
                Field::NoKey(value) => {
                    let (c, value) = self.expr(value)?;
                    count.add(&c);
                    list.push(value);
                }
                Field::NameKey { value: expr, .. } => {
                    keyed = true;
                    let (c, value) = self.expr(expr)?;
                    count.add(&c);
                    self.lose(&value, node_pos(&**expr), Place::TableField)?;
                }
                Field::ExpressionKey { key, value, .. } => {
                    keyed = true;
                    let (c, _) = self.expr(key)?;
                    count.add(&c);
                    let (c, value) = self.expr(value)?;
                    count.add(&c);
                    self.lose(&value, node_pos(table), Place::TableField)?;
                }
                _ => {}
            }
        }
        let value = if keyed {
            match super::values::peek_table(table) {
                Static::Known(value) => Abs::Json(value),
                _ => Abs::Unknown,
            }
        } else if list.iter().all(|value| matches!(value, Abs::Json(_))) {
            Abs::Json(Value::Array(
                list.into_iter()
                    .map(|value| match value {
                        Abs::Json(value) => value,
                        _ => Value::Null,
                    })
                    .collect(),
            ))
        } else if list.iter().any(|value| matches!(value, Abs::Func(_) | Abs::List(_))) {
            Abs::List(Rc::new(list))
        } else {
            Abs::Sized(list.len() as u64)
        };
        Ok((count, value))
    }

    fn arg(&mut self, arg: &ArgExpr<'a>) -> Bound<(Count, Abs<'a>)> {
        match arg {
            ArgExpr::Expr(expr) => self.expr(expr),
            ArgExpr::Table(table) => self.table(table),
            ArgExpr::Str(value) => Ok((Count::default(), Abs::Json(value.clone()))),
        }
    }

    /// A prefix and its suffixes: field reads, and calls counted by what they call.
    fn suffixed(&mut self, prefix: &'a Prefix, suffixes: &[&'a Suffix]) -> Bound<(Count, Abs<'a>)> {
        let mut count = Count::default();
        // The global a bare name refers to, while the path is just that name.
        let (mut value, mut global): (Abs<'a>, Option<(&'a str, Pos)>) = match prefix {
            Prefix::Name(token) => {
                let name = ident(token);
                match self.lookup(name) {
                    Some(value) => (value, None),
                    None => (Abs::Unknown, Some((name, token_pos(token)))),
                }
            }
            Prefix::Expression(expr) => {
                let (c, value) = self.expr(expr)?;
                count.add(&c);
                (value, None)
            }
            _ => (Abs::Unknown, None),
        };
        for suffix in suffixes {
            match suffix {
                Suffix::Index(Index::Dot { name, .. }) => {
                    value = value.member(&Abs::Json(Value::String(ident(name).to_owned())));
                    global = None;
                }
                Suffix::Index(Index::Brackets { expression, .. }) => {
                    let (c, key) = self.expr(expression)?;
                    count.add(&c);
                    value = value.member(&key);
                    global = None;
                }
                Suffix::Call(Call::AnonymousCall(args)) => {
                    let args = arg_exprs(args);
                    let (c, result) = match global.take() {
                        Some((name, pos)) => self.global_call(name, pos, &args)?,
                        None => match &value {
                            Abs::Func(func) => {
                                let func = func.clone();
                                let (mut c, values) = self.args(&args)?;
                                let pos = func.pos;
                                let (body, result) = self.call(&func, values, pos)?;
                                c.add(&body);
                                (c, result)
                            }
                            _ => self.opaque_call(&args)?,
                        },
                    };
                    count.add(&c);
                    value = result;
                }
                Suffix::Call(Call::MethodCall(method)) => {
                    let args = arg_exprs(method.args());
                    let (c, _) = self.opaque_call(&args)?;
                    count.add(&c);
                    value = Abs::Unknown;
                    global = None;
                }
                _ => {}
            }
        }
        Ok((count, value))
    }

    fn args(&mut self, args: &[ArgExpr<'a>]) -> Bound<(Count, Vec<Abs<'a>>)> {
        let mut count = Count::default();
        let mut values = Vec::with_capacity(args.len());
        for arg in args {
            let (c, value) = self.arg(arg)?;
            count.add(&c);
            values.push(value);
        }
        Ok((count, values))
    }

    /// A call of something the analysis does not follow: its arguments are lost.
    fn opaque_call(&mut self, args: &[ArgExpr<'a>]) -> Bound<(Count, Abs<'a>)> {
        let (count, values) = self.args(args)?;
        for value in &values {
            self.lose(value, (1, 1), Place::Argument)?;
        }
        Ok((count, Abs::Unknown))
    }

    /// A call of a name no local holds: a cairn global, a base function, or something unknown.
    fn global_call(&mut self, name: &str, pos: Pos, args: &[ArgExpr<'a>]) -> Bound<(Count, Abs<'a>)> {
        match name {
            "agent" => {
                let (mut count, values) = self.args(args)?;
                self.record_site(pos, values.first(), args.get(1));
                count.add(&Count::one(pos));
                Ok((count, Abs::Unknown))
            }
            "step" | "phase" => {
                let (mut count, values) = self.args(args)?;
                if let Some(Abs::Func(func)) = values.get(1) {
                    let func = func.clone();
                    count.add(&self.call(&func, Vec::new(), pos)?.0);
                }
                Ok((count, Abs::Unknown))
            }
            "pcall" | "xpcall" => {
                let (mut count, values) = self.args(args)?;
                let (targets, rest): (Vec<&Abs<'a>>, Vec<Abs<'a>>) = if name == "pcall" {
                    (values.iter().take(1).collect(), values.iter().skip(1).cloned().collect())
                } else {
                    (values.iter().take(2).collect(), values.iter().skip(2).cloned().collect())
                };
                let funcs: Vec<Rc<Func<'a>>> = targets.iter().flat_map(|value| value.functions()).collect();
                for func in funcs {
                    count.add(&self.call(&func, rest.clone(), pos)?.0);
                }
                for value in &rest {
                    self.lose(value, pos, Place::PcallArgument)?;
                }
                Ok((count, Abs::Unknown))
            }
            "parallel" => {
                let (mut count, values) = self.args(args)?;
                match values.get(1) {
                    Some(Abs::Func(func)) => {
                        let func = func.clone();
                        let items = values.first().cloned().unwrap_or(Abs::Unknown);
                        count.add(&self.fan_out(pos, &items, &[func], Construct::Parallel)?);
                    }
                    _ => {
                        let branches = values.first().cloned().unwrap_or(Abs::Unknown);
                        for func in branches.functions() {
                            count.add(&self.call(&func, Vec::new(), pos)?.0);
                        }
                    }
                }
                Ok((count, Abs::Unknown))
            }
            "pipeline" => {
                let (mut count, values) = self.args(args)?;
                let items = values.first().cloned().unwrap_or(Abs::Unknown);
                let stages = values.get(1).map(Abs::functions).unwrap_or_default();
                count.add(&self.fan_out(pos, &items, &stages, Construct::Pipeline)?);
                Ok((count, Abs::Unknown))
            }
            "workflow" => {
                let (_, values) = self.args(args)?;
                let child = match values.first() {
                    Some(Abs::Json(Value::String(child))) => Some(child.clone()),
                    _ => None,
                };
                unbounded(pos, Reason::ChildWorkflow(child))
            }
            "orchestrate" => {
                self.args(args)?;
                unbounded(pos, Reason::Orchestrate)
            }
            _ => self.opaque_call(args),
        }
    }

    /// Runs each function once per item of `items` (the first with the item, the others with
    /// an unknown value: a stage's input is the previous stage's output).
    fn fan_out(
        &mut self,
        pos: Pos,
        items: &Abs<'a>,
        funcs: &[Rc<Func<'a>>],
        what: Construct,
    ) -> Bound<Count> {
        let mut total = Count::default();
        for (index, func) in funcs.iter().enumerate() {
            let elements: Option<Vec<Abs<'a>>> = match items.pairs() {
                Some(pairs) => Some(pairs.into_iter().map(|(_, value)| value).collect()),
                None => items.len().map(|n| vec![Abs::Unknown; n.min(PER_ELEMENT_LIMIT as u64 + 1) as usize]),
            };
            let n = items.len();
            let reason = Reason::UnknownSize(what.clone());
            let count = match (elements, n) {
                (Some(elements), Some(_)) if elements.len() <= PER_ELEMENT_LIMIT => {
                    self.per_element(pos, Some(elements), reason, |walker, item| {
                        let args = if index == 0 { vec![item] } else { Vec::new() };
                        Ok(walker.call(func, args, pos)?.0)
                    })?
                }
                (_, Some(n)) => {
                    self.repeat_body(pos, n, |walker| Ok(walker.call(func, Vec::new(), pos)?.0))?
                }
                _ => self
                    .per_element(pos, None, reason, |walker, _| Ok(walker.call(func, Vec::new(), pos)?.0))?,
            };
            total.add(&count);
        }
        Ok(total)
    }

    /// Inlines a call: the body walked in the function's scope with its parameters bound.
    fn call(&mut self, func: &Rc<Func<'a>>, args: Vec<Abs<'a>>, pos: Pos) -> Bound<(Count, Abs<'a>)> {
        let key: *const FunctionBody = func.body;
        if self.active.contains(&key) {
            return unbounded(func.pos, Reason::Recursion(func.name.clone()));
        }
        if self.active.len() >= MAX_INLINE_DEPTH {
            return unbounded(pos, Reason::TooDeep);
        }
        let saved = std::mem::replace(&mut self.scope, func.scope.as_ref().clone());
        if let Some(name) = &func.name {
            self.scope.push((name.clone(), Abs::Func(func.clone())));
        }
        let mut args = args.into_iter();
        let params: Vec<(String, Abs<'a>)> = func
            .body
            .parameters()
            .iter()
            .filter_map(|parameter| match parameter {
                Parameter::Name(name) => Some((ident(name).to_owned(), args.next().unwrap_or(Abs::Unknown))),
                _ => None,
            })
            .collect();
        self.active.push(key);
        let result = self.bind_all(params.into_iter()).and_then(|()| self.block(func.body.block()));
        self.active.pop();
        self.scope = saved;
        Ok((result?, Abs::Unknown))
    }

    /// Records what a site's literal prompt and options say.
    fn record_site(&mut self, pos: Pos, prompt: Option<&Abs<'a>>, options: Option<&ArgExpr<'a>>) {
        let prompt = match prompt {
            Some(Abs::Json(Value::String(text))) => Known::Literal(text.clone()),
            Some(_) => Known::Computed,
            None => Known::Unset,
        };
        let table = match options {
            None => None,
            Some(ArgExpr::Table(table)) => Some(*table),
            Some(ArgExpr::Expr(Expression::TableConstructor(table))) => Some(&**table),
            Some(_) => {
                self.sites.record(sites::site(pos, prompt, Options::Computed));
                return;
            }
        };
        let mut fields = Vec::new();
        for field in table.into_iter().flat_map(|table| table.fields().iter()) {
            let (key, value) = match field {
                Field::NameKey { key, value, .. } => (ident(key).to_owned(), &**value),
                Field::ExpressionKey { key, value, .. } => match &**key {
                    Expression::String(token) => match string_literal(token) {
                        Some(key) => (key, &**value),
                        None => continue,
                    },
                    _ => continue,
                },
                _ => continue,
            };
            let known = match value {
                Expression::Var(Var::Expression(_) | Var::Name(_)) => match self.static_value(value) {
                    Some(value) => Known::Literal(value),
                    None => Known::Computed,
                },
                other => match peek_literal(other) {
                    Some(Static::Known(value)) => Known::Literal(value),
                    Some(Static::EmptyTable) => Known::Literal(Value::Array(Vec::new())),
                    _ => Known::Computed,
                },
            };
            fields.push((key, known));
        }
        let options = if table.is_some() { Options::Fields(fields) } else { Options::Absent };
        self.sites.record(sites::site(pos, prompt, options));
    }

    /// The JSON value of a variable or `args` path, when the analysis knows it.
    fn static_value(&self, expr: &'a Expression) -> Option<Value> {
        match expr {
            Expression::Var(Var::Name(token)) => match self.lookup(ident(token))? {
                Abs::Json(value) => Some(value),
                _ => None,
            },
            Expression::Var(Var::Expression(var)) => {
                let Prefix::Name(token) = var.prefix() else { return None };
                let mut value = self.lookup(ident(token))?;
                for suffix in var.suffixes() {
                    value = match suffix {
                        Suffix::Index(Index::Dot { name, .. }) => {
                            value.member(&Abs::Json(Value::String(ident(name).to_owned())))
                        }
                        Suffix::Index(Index::Brackets { expression, .. }) => {
                            value.member(&peek_literal(expression).map_or(Abs::Unknown, from_static))
                        }
                        _ => return None,
                    };
                }
                match value {
                    Abs::Json(value) => Some(value),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Each site as (line, max calls), or the unbounded reason and line.
    fn counts(source: &str, args: Value) -> Result<Vec<(u32, u64)>, (String, u32)> {
        match call_bound(source, &args) {
            CallBound::Bounded { sites } => {
                Ok(sites.iter().map(|site| (site.line, site.max_calls)).collect())
            }
            CallBound::Unbounded { reason, line, .. } => Err((reason, line)),
        }
    }

    #[test]
    fn sequential_calls_and_literal_loops_multiply() {
        let source = "local a = agent(\"one\")\nfor i = 1, 3 do agent(\"x\" .. i) end\n\
                      for i = 10, 1, -2 do agent(\"y\") end\nfor _, t in ipairs({\"a\", \"b\"}) do agent(t) end\n\
                      for i = 1, 1000 do agent(\"z\") end\nreturn a";
        assert_eq!(counts(source, json!({})), Ok(vec![(1, 1), (2, 3), (3, 5), (4, 2), (5, 1000)]));
    }

    #[test]
    fn args_sizes_bound_loops_and_fan_outs() {
        let args =
            json!({"items": ["a", "b", "c"], "groups": [{"members": [1, 2]}, {"members": [3]}], "n": 4});
        let source = "for _, item in ipairs(args.items) do agent(item) end\n\
                      parallel(args.items, function(item) return agent(item) end)\n\
                      pipeline(args.items, {function(x) return agent(x) end, function(x) return agent(x) end})\n\
                      for _, g in ipairs(args.groups) do for _, m in ipairs(g.members) do agent(\"m\") end end\n\
                      for i = 1, args.n do agent(\"n\") end\n\
                      for i = 1, #args.items do agent(\"len\") end\nreturn 1";
        // Each pipeline stage is a site of its own on line 3.
        assert_eq!(counts(source, args), Ok(vec![(1, 3), (2, 3), (3, 3), (3, 3), (4, 3), (5, 4), (6, 3)]));
    }

    #[test]
    fn branches_bodies_and_functions_are_counted_where_they_run() {
        let source = "local function ask(q) return agent(q) end\n\
                      local r = parallel({function() return ask(\"a\") end, function() return agent(\"b\") end})\n\
                      step(\"s\", function() return ask(\"c\") end)\n\
                      phase(\"p\", function() return agent(\"d\") end)\n\
                      pcall(function() agent(\"e\") end)\n\
                      if args.flag then agent(\"f\") else agent(\"f\") agent(\"g\") end\n\
                      return r";
        // `ask` runs from a branch and from the step body; each side of the `if` is its own site.
        assert_eq!(
            counts(source, json!({})),
            Ok(vec![(1, 2), (2, 1), (4, 1), (5, 1), (6, 1), (6, 1), (6, 1)])
        );
    }

    #[test]
    fn unbounded_constructs_name_themselves_and_their_line() {
        let cases = [
            ("local i = 0\nwhile i < 3 do\n  agent(\"x\")\n  i = i + 1\nend\nreturn i", "`while` loop", 2),
            ("repeat\n  agent(\"x\")\nuntil true\nreturn 1", "`repeat` loop", 1),
            ("return workflow(\"audit\", {})", "child workflow", 1),
            ("return orchestrate(\"ship it\")", "orchestrator", 1),
            ("local function f(n)\n  agent(\"x\")\n  return f(n - 1)\nend\nreturn f(3)", "calls itself", 1),
            ("local t = {}\nfunction t.run() return agent(\"x\") end\nreturn t.run()", "table field", 2),
            ("for _, x in ipairs(args.missing) do agent(x) end\nreturn 1", "size is not known", 1),
            ("for w in string.gmatch(args.text, \"%a+\") do agent(w) end\nreturn 1", "iterator", 1),
            ("local f = function() return agent(\"x\") end\nf = nil\nreturn 1", "changed variable", 1),
            (
                "local fs = {}\ntable.insert(fs, function() return agent(\"x\") end)\nreturn parallel(fs)",
                "cannot follow",
                2,
            ),
            ("return parallel(args.items, function(x) return agent(x) end)", "size is not known", 1),
            ("return agent(\"x\"", "does not parse", 1),
            ("::top::\nagent(\"x\")\nif args.again then goto top end\nreturn 1", "`goto` loop", 3),
        ];
        for (source, reason, line) in cases {
            match counts(source, json!({"text": "a b"})) {
                Err((got, got_line)) => {
                    assert!(got.contains(reason), "{source}: {got}");
                    assert_eq!(got_line, line, "{source}: {got}");
                }
                Ok(sites) => panic!("{source}: bounded {sites:?}"),
            }
        }
    }

    #[test]
    fn tables_changed_anywhere_are_of_unknown_size() {
        for source in [
            "local t = {}\nt[#t + 1] = 1\nfor _, x in ipairs(t) do agent(\"x\") end\nreturn 1",
            "local t = {}\ntable.insert(t, 1)\nfor _, x in ipairs(t) do agent(\"x\") end\nreturn 1",
            "local t = {}\nlocal function fill(u) u[1] = 1 end\nfill(t)\nreturn parallel(t, function(x) return agent(x) end)",
            "local t = {}\nlocal u = t\nu[1] = 1\nreturn pipeline(t, {function(x) return agent(x) end})",
            "local t = {}\nlocal w = {t}\nw[1][1] = 1\nfor i = 1, #t do agent(\"x\") end\nreturn 1",
            "local t = {}\nt:add(1)\nfor _, x in ipairs(t) do agent(\"x\") end\nreturn 1",
        ] {
            assert!(counts(source, json!({})).is_err(), "{source}: {:?}", counts(source, json!({})));
        }
        // Reading a table (its length, a concat, a loop) leaves it known.
        let source = "local t = {\"a\", \"b\"}\nlog(\"info\", table.concat(t, \",\"))\n\
                      for _, x in ipairs(t) do agent(x) end\nreturn #t";
        assert_eq!(counts(source, json!({})), Ok(vec![(3, 2)]));
    }

    #[test]
    fn parameters_and_loop_variables_changed_anywhere_are_unknown() {
        let args = json!({"groups": [{"members": [1, 2]}]});
        let source = "for _, g in ipairs(args.groups) do\n  table.insert(g.members, 3)\n  \
                      for _, m in ipairs(g.members) do agent(\"m\") end\nend\nreturn 1";
        assert!(counts(source, args.clone()).is_err());
        let source = "local function run(list)\n  list[#list + 1] = 0\n  \
                      for _, x in ipairs(list) do agent(\"x\") end\nend\nrun({1, 2})\nreturn 1";
        assert!(counts(source, args).is_err());
    }

    #[test]
    fn forward_gotos_are_not_loops() {
        let source = "for i = 1, 3 do\n  if i == 2 then goto continue end\n  agent(\"x\")\n  ::continue::\nend\n\
                      ::again::\nlocal n = 0\nif n > 0 then goto again end\nreturn 1";
        assert_eq!(counts(source, json!({})), Ok(vec![(3, 3)]));
    }

    #[test]
    fn loops_without_agent_calls_are_fine_whatever_their_size() {
        let source = "local n = 0\nwhile n < 10 do n = n + 1 end\nfor _ in string.gmatch(\"a b\", \"%a\") do n = n + 1 end\n\
                      for _, x in ipairs(args.whatever) do n = n + 1 end\nreturn agent(\"done \" .. n)";
        assert_eq!(counts(source, json!({})), Ok(vec![(5, 1)]));
    }

    #[test]
    fn literal_options_reach_the_site() {
        let source = "local m = \"openai:gpt-5\"\n\
                      return agent(\"hi\", {max_turns = 3, tools = {\"web\"}, model = m, profile = args.p, role = compute()})";
        let CallBound::Bounded { sites } = call_bound(source, &json!({"p": "writer"})) else {
            panic!("unbounded")
        };
        let site = &sites[0];
        assert_eq!(site.prompt, Known::Literal("hi".to_owned()));
        assert_eq!(site.max_turns, Known::Literal(3));
        assert_eq!(site.tools, Known::Literal(vec!["web".to_owned()]));
        assert_eq!(site.model, Known::Literal("openai:gpt-5".to_owned()));
        assert_eq!(site.profile, Known::Literal("writer".to_owned()));
        assert_eq!(site.role, Known::Computed);
        assert_eq!(site.schema, Known::Unset);
    }

    #[test]
    fn hostile_sources_end_in_a_bound_or_a_reason() {
        let deep = format!("return {}1{}", "(".repeat(50_000), ")".repeat(50_000));
        assert!(counts(&deep, json!({})).is_err());
        // Nested literal loops multiply without overflow or unbounded work.
        let nested = "for a = 1, 1000000 do for b = 1, 1000000 do for c = 1, 1000000 do agent(\"x\") end end end\nreturn 1";
        assert_eq!(counts(nested, json!({})), Ok(vec![(1, 1_000_000_000_000_000_000)]));
        // Many functions calling each other in a chain stay within the inline depth.
        let mut chain = String::from("local function f0() return agent(\"x\") end\n");
        for i in 1..100 {
            chain.push_str(&format!("local function f{i}() return f{}() end\n", i - 1));
        }
        chain.push_str("return f99()");
        assert!(counts(&chain, json!({})).is_err());
    }
}
