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

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use ::rhai::{AST, ASTNode, Dynamic, Expr, FnPtr, ImmutableString, Position, Stmt, StmtBlock};
use serde_json::Value;

use super::line_column;
use super::sandbox::{MUTATING_METHODS, SandboxLimits, compile_scope, parser_engine};
use crate::script::bound::count::SiteCounts as Count;
use crate::script::bound::reason::{Construct, Place, Reason};
use crate::script::bound::sites::{self, Options, Sites};
use crate::script::bound::{AgentSite, CallBound, Known, guard};

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

// ----- functions -----

/// A script function's (or closure's) parameters and top-level statements.
struct Body {
    params: Vec<ImmutableString>,
    statements: Vec<Stmt>,
}

/// The script's functions by name and arity, and closures by name.
struct Functions {
    bodies: HashMap<(ImmutableString, usize), Body>,
    by_name: HashMap<ImmutableString, Vec<usize>>,
}

impl Functions {
    fn of(ast: &AST) -> Functions {
        let mut bodies = HashMap::new();
        let mut by_name: HashMap<ImmutableString, Vec<usize>> = HashMap::new();
        for def in ast.iter_fn_def() {
            let arity = def.params.len();
            // Rhai exposes a function's body only to the walker of an AST holding it (see lint).
            let mut only = ast.clone_functions_only();
            only.retain_functions(|_, _, name, params| name == def.name.as_str() && params == arity);
            let mut statements = Vec::new();
            only.walk(&mut |path: &[ASTNode]| {
                if let [ASTNode::Stmt(stmt)] = path {
                    statements.push((*stmt).clone());
                }
                true
            });
            let params = def.params.iter().cloned().collect();
            bodies.insert((def.name.clone(), arity), Body { params, statements });
            by_name.entry(def.name.clone()).or_default().push(arity);
        }
        Functions { bodies, by_name }
    }

    fn has(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// A function by name: the one of that arity, else (closures have unique names) the only one.
    fn get(&self, name: &ImmutableString, arity: usize) -> Option<&Body> {
        self.bodies.get(&(name.clone(), arity)).or_else(|| match self.by_name.get(name)?.as_slice() {
            [only] => self.bodies.get(&(name.clone(), *only)),
            _ => None,
        })
    }
}

// ----- the pre-scan: variables written anywhere -----

/// Collects the names of variables assigned or changed in place anywhere in the statement.
fn scan_stmt(stmt: &Stmt, functions: &Functions, out: &mut HashSet<ImmutableString>) {
    match stmt {
        Stmt::Assignment(assignment) => {
            let (_, binary) = &**assignment;
            if let Some(name) = root_name(&binary.lhs) {
                out.insert(name);
            }
            scan_expr(&binary.lhs, functions, out);
            scan_expr(&binary.rhs, functions, out);
        }
        Stmt::Var(var, ..) => scan_expr(&var.1, functions, out),
        Stmt::FnCall(call, _) => call.args.iter().for_each(|arg| scan_expr(arg, functions, out)),
        Stmt::Expr(expr) => scan_expr(expr, functions, out),
        Stmt::Block(block) => scan_block(block, functions, out),
        Stmt::If(flow, _) | Stmt::While(flow, _) | Stmt::Do(flow, ..) | Stmt::TryCatch(flow, _) => {
            scan_expr(&flow.expr, functions, out);
            scan_block(&flow.body, functions, out);
            scan_block(&flow.branch, functions, out);
        }
        Stmt::For(for_loop, _) => {
            let flow = &for_loop.2;
            scan_expr(&flow.expr, functions, out);
            scan_block(&flow.body, functions, out);
        }
        Stmt::Switch(switch, _) => {
            scan_expr(&switch.0, functions, out);
            for case in &switch.1.expressions {
                scan_expr(&case.lhs, functions, out);
                scan_expr(&case.rhs, functions, out);
            }
        }
        Stmt::Return(Some(expr), ..) | Stmt::BreakLoop(Some(expr), ..) => scan_expr(expr, functions, out),
        _ => {}
    }
}

fn scan_block(block: &StmtBlock, functions: &Functions, out: &mut HashSet<ImmutableString>) {
    for stmt in block.statements() {
        scan_stmt(stmt, functions, out);
    }
}

fn scan_expr(expr: &Expr, functions: &Functions, out: &mut HashSet<ImmutableString>) {
    match expr {
        Expr::Stmt(block) => scan_block(block, functions, out),
        Expr::InterpolatedString(parts, _) | Expr::Array(parts, _) => {
            parts.iter().for_each(|part| scan_expr(part, functions, out));
        }
        Expr::Map(map, _) => map.0.iter().for_each(|(_, value)| scan_expr(value, functions, out)),
        Expr::FnCall(call, _) | Expr::MethodCall(call, _) => {
            call.args.iter().for_each(|arg| scan_expr(arg, functions, out));
        }
        Expr::Dot(chain, ..) | Expr::Index(chain, ..) => {
            // A method that changes its receiver: a builtin one, or a script function (which may
            // write `this`), or `for_each` (whose closure may).
            if let Some(name) = root_name(&chain.lhs)
                && chain_calls(&chain.rhs, &|method| {
                    MUTATING_METHODS.contains(&method) || method == "for_each" || functions.has(method)
                })
            {
                out.insert(name);
            }
            scan_expr(&chain.lhs, functions, out);
            scan_expr(&chain.rhs, functions, out);
        }
        Expr::And(operands, _) | Expr::Or(operands, _) | Expr::Coalesce(operands, _) => {
            operands.iter().for_each(|operand| scan_expr(operand, functions, out));
        }
        _ => {}
    }
}

/// Whether a chain's right side calls a method `pick` accepts.
fn chain_calls(expr: &Expr, pick: &dyn Fn(&str) -> bool) -> bool {
    match expr {
        Expr::MethodCall(call, _) => pick(call.name.as_str()),
        Expr::Dot(chain, ..) | Expr::Index(chain, ..) => {
            chain_calls(&chain.lhs, pick) || chain_calls(&chain.rhs, pick)
        }
        _ => false,
    }
}

/// The leftmost variable of an assignment target or chain.
fn root_name(expr: &Expr) -> Option<ImmutableString> {
    match expr {
        Expr::Variable(variable, ..) => Some(variable.1.clone()),
        Expr::Dot(chain, ..) | Expr::Index(chain, ..) => root_name(&chain.lhs),
        _ => None,
    }
}

/// The anonymous function a function-pointer constant names, if it is a closure.
fn closure_name(value: &Dynamic) -> Option<ImmutableString> {
    let pointer = value.read_lock::<FnPtr>()?;
    pointer.is_anonymous().then(|| pointer.fn_name().into())
}

/// The block Rhai builds for a capturing closure: `Share(captured…)` then
/// `curry(Fn("anon$…"), captured…)`: the function's name and the captured variables.
fn closure_parts(block: &StmtBlock) -> Option<(ImmutableString, Vec<&Expr>)> {
    let [Stmt::Share(_), Stmt::Expr(expr)] = block.statements() else { return None };
    let Expr::FnCall(call, _) = &**expr else { return None };
    if call.name.as_str() != "curry" {
        return None;
    }
    let (first, captured) = call.args.split_first()?;
    let Expr::DynamicConstant(pointer, _) = first else { return None };
    Some((closure_name(pointer)?, captured.iter().collect()))
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

impl Walker<'_> {
    fn step(&mut self, pos: Position) -> Bound<()> {
        if self.active.len() > MAX_CALL_DEPTH {
            return unbounded(pos, Reason::TooDeep);
        }
        self.steps += 1;
        if self.steps > self.step_limit {
            return unbounded(pos, Reason::TooComplex);
        }
        Ok(())
    }

    /// Script functions Rhai calls implicitly (getters, setters, operators) cannot be followed:
    /// any that calls agents makes the script unbounded.
    fn implicit_functions(&mut self) -> Bound<()> {
        let implicit: Vec<ImmutableString> = self
            .functions
            .by_name
            .keys()
            .filter(|name| {
                !name.starts_with("anon$")
                    && (!name.chars().all(|c| c.is_alphanumeric() || c == '_')
                        || IMPLICIT_NAMES.contains(&name.as_str()))
            })
            .cloned()
            .collect();
        for name in implicit {
            let callable = Callable { target: Target::Script(name.clone()), captured: Vec::new() };
            if self.calls_agents(&callable, Position::NONE)? {
                return unbounded(Position::NONE, Reason::Implicit(name.to_string()));
            }
        }
        Ok(())
    }

    // ----- scope -----

    fn lookup(&self, name: &str) -> Abs {
        if self.mutated.contains(name) {
            return Abs::Unknown;
        }
        let frame = self.frames.last();
        let base = frame.map_or(0, |frame| frame.base);
        if let Some((_, value)) = self.scope[base..].iter().rev().find(|(n, _)| n.as_str() == name) {
            return value.clone();
        }
        match name {
            "args" if frame.is_some_and(|frame| frame.sees_script) => Abs::Json(self.args.clone()),
            _ => Abs::Unknown,
        }
    }

    /// Whether `args` here is the run's args (not shadowed, reassigned or out of sight).
    fn sees_script_args(&self) -> bool {
        let Some(frame) = self.frames.last() else { return false };
        frame.sees_script
            && !self.mutated.contains("args")
            && !self.scope[frame.base..].iter().any(|(name, _)| name.as_str() == "args")
    }

    /// Binds a variable; a value bound to a variable written elsewhere turns unknown, so a
    /// closure that calls agents may not go there.
    fn declare(&mut self, name: ImmutableString, value: Abs, pos: Position) -> Bound<()> {
        let value = if self.mutated.contains(&name) { self.lose(value, pos)? } else { value };
        self.scope.push((name, value));
        Ok(())
    }

    /// Turns a value unknown, refusing when it holds a closure that calls agents.
    fn lose(&mut self, value: Abs, pos: Position) -> Bound<Abs> {
        self.escape(&value, pos)?;
        Ok(Abs::Unknown)
    }

    fn escape(&mut self, value: &Abs, pos: Position) -> Bound<()> {
        match value {
            Abs::Closure(callable) => {
                if self.calls_agents(callable, pos)? {
                    return unbounded(pos, Reason::Escape(Place::Unfollowed));
                }
                Ok(())
            }
            Abs::Array(items) => items.iter().try_for_each(|item| self.escape(item, pos)),
            Abs::Map(entries) => entries.iter().try_for_each(|(_, value)| self.escape(value, pos)),
            _ => Ok(()),
        }
    }

    /// Whether calling the closure (with unknown arguments) may call agents.
    fn calls_agents(&mut self, callable: &Callable, pos: Position) -> Bound<bool> {
        let name = match &callable.target {
            // `Fn("agent")` and the globals that run what they are given.
            Target::Global(name) => return Ok(AGENT_GLOBALS.contains(&name.as_str())),
            Target::Script(name) => name.clone(),
        };
        let arities = self.functions.by_name.get(&name).cloned().unwrap_or_default();
        let sites = self.sites.clone();
        let mut agentic = false;
        for arity in arities {
            let unknown = vec![Abs::Unknown; arity.saturating_sub(callable.captured.len())];
            let probe = Callable { target: callable.target.clone(), captured: callable.captured.clone() };
            match self.invoke(&probe, &unknown, pos) {
                Ok(count) if count.is_zero() => {}
                _ => agentic = true,
            }
        }
        // A probe: what it learned of options is not from a real call.
        self.sites = sites;
        Ok(agentic)
    }

    // ----- statements -----

    /// Walks statements in a scope of their own; the value is the last statement's (a block's
    /// value), every other statement's value is dropped.
    fn statements(&mut self, statements: &[Stmt]) -> Bound<(Count, Abs)> {
        let mark = self.scope.len();
        let mut total = Count::default();
        let mut last = Abs::Json(Value::Null);
        for stmt in statements {
            let previous = std::mem::replace(&mut last, Abs::Json(Value::Null));
            self.lose(previous, stmt.position())?;
            let (count, value) = self.stmt(stmt)?;
            total.add(&count);
            last = value;
        }
        self.scope.truncate(mark);
        Ok((total, last))
    }

    /// A block whose value is not used.
    fn block(&mut self, block: &StmtBlock) -> Bound<Count> {
        let (count, value) = self.statements(block.statements())?;
        self.lose(value, block.position())?;
        Ok(count)
    }

    /// A block and its value.
    fn block_value(&mut self, block: &StmtBlock) -> Bound<(Count, Abs)> {
        self.statements(block.statements())
    }

    fn stmt(&mut self, stmt: &Stmt) -> Bound<(Count, Abs)> {
        self.step(stmt.position())?;
        let unit = || Abs::Json(Value::Null);
        Ok(match stmt {
            Stmt::Var(var, _, pos) => {
                let (ident, init, _) = &**var;
                let (count, value) = self.expr(init)?;
                self.declare(ident.name.clone(), value, *pos)?;
                (count, unit())
            }
            Stmt::Assignment(assignment) => {
                let (_, binary) = &**assignment;
                let (mut count, value) = self.expr(&binary.rhs)?;
                self.lose(value, binary.rhs.position())?;
                let (target, _) = self.expr(&binary.lhs)?;
                count.add(&target);
                (count, unit())
            }
            Stmt::FnCall(call, pos) => self.call(call, *pos, None)?,
            Stmt::Expr(expr) => self.expr(expr)?,
            Stmt::Block(block) => self.block_value(block)?,
            Stmt::If(flow, _) => {
                let (mut count, condition) = self.expr(&flow.expr)?;
                // A condition known before the run (from literals and args) picks its branch.
                let (branch, value) = match condition {
                    Abs::Json(Value::Bool(true)) => self.block_value(&flow.body)?,
                    Abs::Json(Value::Bool(false)) => self.block_value(&flow.branch)?,
                    _ => {
                        let (mut branch, then) = self.block_value(&flow.body)?;
                        let (other, otherwise) = self.block_value(&flow.branch)?;
                        branch.max_with(&other);
                        (branch, self.join(then, otherwise, flow.expr.position())?)
                    }
                };
                count.add(&branch);
                (count, value)
            }
            Stmt::While(flow, pos) | Stmt::Do(flow, _, pos) => {
                let (mut count, condition) = self.expr(&flow.expr)?;
                let body = self.block(&flow.body)?;
                count.add(&body);
                // `while false` never runs its body, `do .. while false` once.
                let once = matches!(condition, Abs::Json(Value::Bool(false)));
                if count.is_zero() || once {
                    return Ok((
                        if once && matches!(stmt, Stmt::While(..)) { Count::default() } else { count },
                        unit(),
                    ));
                }
                let what = match (stmt, &flow.expr) {
                    (Stmt::While(..), Expr::Unit(_)) => Construct::Loop,
                    (Stmt::While(..), _) => Construct::While,
                    _ => Construct::Do,
                };
                return unbounded(*pos, Reason::Loop(what));
            }
            Stmt::For(for_loop, pos) => {
                let (variable, counter, flow) = &**for_loop;
                let (mut count, iterable) = self.expr(&flow.expr)?;
                let names = (variable.name.clone(), counter.as_ref().map(|c| c.name.clone()));
                let body =
                    self.iterate(&iterable, *pos, &Construct::For, &mut |walker, element, index| {
                        let mark = walker.scope.len();
                        walker.declare(names.0.clone(), element, *pos)?;
                        if let Some(counter) = &names.1 {
                            walker.declare(counter.clone(), index, *pos)?;
                        }
                        let count = walker.block(&flow.body);
                        walker.scope.truncate(mark);
                        count
                    })?;
                count.add(&body);
                (count, unit())
            }
            Stmt::TryCatch(flow, _) => {
                let (mut count, tried) = self.block_value(&flow.body)?;
                let mark = self.scope.len();
                if let Expr::Variable(variable, ..) = &flow.expr {
                    self.declare(variable.1.clone(), Abs::Unknown, flow.expr.position())?;
                }
                let (caught, fallback) = self.block_value(&flow.branch)?;
                self.scope.truncate(mark);
                count.add(&caught);
                (count, self.join(tried, fallback, flow.expr.position())?)
            }
            Stmt::Switch(switch, _) => {
                let (expr, cases) = &**switch;
                let (mut count, _) = self.expr(expr)?;
                let mut branches = Count::default();
                let mut value: Option<Abs> = None;
                for case in &cases.expressions {
                    let (condition, _) = self.expr(&case.lhs)?;
                    count.add(&condition);
                    let (branch, result) = self.expr(&case.rhs)?;
                    branches.max_with(&branch);
                    value = Some(match value {
                        Some(value) => self.join(value, result, case.rhs.position())?,
                        None => result,
                    });
                }
                count.add(&branches);
                // No case may match: the value may be ().
                let value = match value {
                    Some(value) => self.join(value, unit(), expr.position())?,
                    None => unit(),
                };
                (count, value)
            }
            Stmt::Return(Some(expr), ..) | Stmt::BreakLoop(Some(expr), ..) => {
                let (count, value) = self.expr(expr)?;
                self.lose(value, expr.position())?;
                (count, Abs::Unknown)
            }
            Stmt::Import(import, _) => (self.expr(&import.0)?.0, Abs::Unknown),
            _ => (Count::default(), unit()),
        })
    }

    /// A value that is one of two: the value when both are the same, else what both share
    /// (a length bound), else unknown.
    fn join(&mut self, a: Abs, b: Abs, pos: Position) -> Bound<Abs> {
        if let (Abs::Json(x), Abs::Json(y)) = (&a, &b)
            && x == y
        {
            return Ok(a);
        }
        let both = (a.len(), b.len());
        self.lose(a, pos)?;
        self.lose(b, pos)?;
        Ok(match both {
            (Some(x), Some(y)) => Abs::Sized(x.max(y)),
            _ => Abs::Unknown,
        })
    }

    /// Runs `body` once per element of `iterable`: one walk with an unknown element, times the
    /// length; or, when that cannot bound it (or the elements are closures), one walk per known
    /// element.
    fn iterate(
        &mut self,
        iterable: &Abs,
        pos: Position,
        what: &Construct,
        body: &mut dyn FnMut(&mut Self, Abs, Abs) -> Bound<Count>,
    ) -> Bound<Count> {
        // Element by element when the elements are known and few, so what a site's options
        // say per element (an interpolated prompt, a nested size) stays known; within a step
        // budget, past which one walk with an unknown element is the fallback.
        if let Some(elements) = iterable.elements() {
            let (sites, steps, limit) = (self.sites.clone(), self.steps, self.step_limit);
            self.step_limit = limit.min(steps.saturating_add(PER_ELEMENT_STEPS));
            let mut result = Ok(Count::default());
            for (index, element) in elements.into_iter().enumerate() {
                match body(self, element, Abs::Json(Value::from(index))) {
                    Ok(count) => {
                        if let Ok(total) = &mut result {
                            total.add(&count);
                        }
                    }
                    Err(error) => {
                        result = Err(error);
                        break;
                    }
                }
            }
            self.step_limit = limit;
            match result {
                Err(error)
                    if error.reason.is_exhaustion()
                        && self.step_limit > steps.saturating_add(PER_ELEMENT_STEPS)
                        && !iterable.holds_closures() =>
                {
                    self.sites = sites;
                    self.steps = steps;
                }
                other => return other,
            }
        }
        if iterable.holds_closures() {
            self.escape(iterable, pos)?;
            return unbounded(pos, Reason::Unfollowable(what.clone()));
        }
        let count = body(self, Abs::Unknown, Abs::Unknown)?;
        if count.is_zero() {
            return Ok(count);
        }
        match iterable.len() {
            Some(n) => Ok(count.scaled(n)),
            None => unbounded(pos, Reason::UnknownSize(what.clone())),
        }
    }

    // ----- expressions -----

    fn exprs(&mut self, exprs: &[Expr]) -> Bound<(Count, Vec<Abs>)> {
        let mut count = Count::default();
        let mut values = Vec::with_capacity(exprs.len());
        for expr in exprs {
            let (c, value) = self.expr(expr)?;
            count.add(&c);
            values.push(value);
        }
        Ok((count, values))
    }

    fn expr(&mut self, expr: &Expr) -> Bound<(Count, Abs)> {
        self.step(expr.position())?;
        let none = Count::default();
        Ok(match expr {
            Expr::StringConstant(text, _) => (none, Abs::Json(Value::String(text.to_string()))),
            Expr::CharConstant(c, _) => (none, Abs::Json(Value::String(c.to_string()))),
            Expr::IntegerConstant(n, _) => (none, Abs::Json(Value::from(*n))),
            Expr::FloatConstant(f, _) => (
                none,
                serde_json::Number::from_f64(**f).map_or(Abs::Unknown, |n| Abs::Json(Value::Number(n))),
            ),
            Expr::BoolConstant(b, _) => (none, Abs::Json(Value::Bool(*b))),
            Expr::Unit(_) => (none, Abs::Json(Value::Null)),
            Expr::DynamicConstant(value, _) => match closure_name(value) {
                Some(name) => (
                    none,
                    Abs::Closure(Rc::new(Callable { target: Target::Script(name), captured: Vec::new() })),
                ),
                None => (none, ::rhai::serde::from_dynamic::<Value>(value).map_or(Abs::Unknown, Abs::Json)),
            },
            Expr::Stmt(block) => match closure_parts(block) {
                Some((name, captured)) => {
                    let captured = captured.into_iter().map(|expr| self.peek(expr)).collect();
                    (none, Abs::Closure(Rc::new(Callable { target: Target::Script(name), captured })))
                }
                None => self.block_value(block)?,
            },
            Expr::InterpolatedString(parts, pos) => {
                let (count, values) = self.exprs(parts)?;
                let mut text = String::new();
                let mut known = true;
                for value in values {
                    match value {
                        Abs::Json(Value::String(part)) => text.push_str(&part),
                        Abs::Json(Value::Null) => {}
                        Abs::Json(other) => text.push_str(&other.to_string()),
                        other => {
                            self.lose(other, *pos)?;
                            known = false;
                        }
                    }
                }
                (count, if known { Abs::Json(Value::String(text)) } else { Abs::Unknown })
            }
            Expr::Array(items, _) => {
                let (count, values) = self.exprs(items)?;
                let value = if values.iter().all(|v| matches!(v, Abs::Json(_))) {
                    Abs::Json(Value::Array(
                        values
                            .into_iter()
                            .filter_map(|v| if let Abs::Json(v) = v { Some(v) } else { None })
                            .collect(),
                    ))
                } else if values.iter().any(Abs::holds_closures) {
                    Abs::Array(Rc::new(values))
                } else {
                    Abs::Unknown
                };
                (count, value)
            }
            Expr::Map(map, _) => {
                let mut count = Count::default();
                let mut entries = Vec::with_capacity(map.0.len());
                for (key, value) in &map.0 {
                    let (c, v) = self.expr(value)?;
                    count.add(&c);
                    entries.push((key.name.to_string(), v));
                }
                let value = if entries.iter().all(|(_, v)| matches!(v, Abs::Json(_))) {
                    let object = entries
                        .into_iter()
                        .filter_map(|(k, v)| if let Abs::Json(v) = v { Some((k, v)) } else { None })
                        .collect();
                    Abs::Json(Value::Object(object))
                } else {
                    Abs::Map(Rc::new(entries))
                };
                (count, value)
            }
            Expr::Variable(variable, ..) => (none, self.lookup(&variable.1)),
            Expr::FnCall(call, pos) => self.call(call, *pos, None)?,
            Expr::MethodCall(call, pos) => {
                // A method call outside a chain has no receiver we know.
                self.call(call, *pos, Some(Abs::Unknown))?
            }
            Expr::Dot(chain, ..) | Expr::Index(chain, ..) => {
                let dot = matches!(expr, Expr::Dot(..));
                // A path into `args` is followed by reference: only what it reaches is copied.
                if let Expr::Variable(variable, ..) = &chain.lhs
                    && variable.1.as_str() == "args"
                    && self.sees_script_args()
                {
                    let args: &Value = self.args;
                    return Ok(match args_path(args, dot, &chain.rhs) {
                        (value, None) => (none, Abs::Json(value.clone())),
                        (value, Some((dot, rest))) => self.chain(Abs::Json(value.clone()), dot, rest)?,
                    });
                }
                let (count, base) = self.expr(&chain.lhs)?;
                let (rest, value) = self.chain(base, dot, &chain.rhs)?;
                let mut count = count;
                count.add(&rest);
                (count, value)
            }
            Expr::And(operands, _) | Expr::Or(operands, _) | Expr::Coalesce(operands, _) => {
                // Every operand counted (short-circuiting only lowers counts).
                let (count, values) = self.exprs(operands)?;
                let bools: Option<Vec<bool>> = values
                    .iter()
                    .map(|v| if let Abs::Json(Value::Bool(b)) = v { Some(*b) } else { None })
                    .collect();
                let value = match (expr, bools) {
                    (Expr::And(..), Some(bools)) => Abs::Json(Value::Bool(bools.iter().all(|b| *b))),
                    (Expr::Or(..), Some(bools)) => Abs::Json(Value::Bool(bools.iter().any(|b| *b))),
                    _ => Abs::Unknown,
                };
                for value in values {
                    self.lose(value, expr.position())?;
                }
                (count, value)
            }
            _ => (none, Abs::Unknown),
        })
    }

    /// What an expression statically is, without counting (for captured variables).
    fn peek(&self, expr: &Expr) -> Abs {
        match expr {
            Expr::Variable(variable, ..) => self.lookup(&variable.1),
            _ => Abs::Unknown,
        }
    }

    /// Applies the right side of a chain to `base`: `dot` says whether it is reached by `.`
    /// (a property or a method) or by `[]` (an index).
    fn chain(&mut self, base: Abs, dot: bool, rhs: &Expr) -> Bound<(Count, Abs)> {
        match rhs {
            Expr::Dot(chain, ..) | Expr::Index(chain, ..) => {
                let (mut count, value) = self.access(base, dot, &chain.lhs)?;
                let (rest, value) = self.chain(value, matches!(rhs, Expr::Dot(..)), &chain.rhs)?;
                count.add(&rest);
                Ok((count, value))
            }
            other => self.access(base, dot, other),
        }
    }

    fn access(&mut self, base: Abs, dot: bool, accessor: &Expr) -> Bound<(Count, Abs)> {
        match (dot, accessor) {
            (true, Expr::Property(property, _)) => {
                Ok((Count::default(), base.member(&Abs::Json(Value::String(property.2.to_string())))))
            }
            (true, Expr::MethodCall(call, pos)) => self.call(call, *pos, Some(base)),
            (_, index) => {
                let (count, key) = self.expr(index)?;
                let value = base.member(&key);
                if matches!(value, Abs::Unknown) {
                    // An element picked by an unknown index: the array must hold no closure
                    // that calls agents.
                    self.escape(&base, accessor.position())?;
                }
                Ok((count, value))
            }
        }
    }

    // ----- calls -----

    /// A call: `receiver` is the value a method is called on.
    fn call(
        &mut self,
        call: &::rhai::FnCallExpr,
        pos: Position,
        receiver: Option<Abs>,
    ) -> Bound<(Count, Abs)> {
        let (mut count, mut args) = self.exprs(&call.args)?;
        let name = call.name.clone();
        let method = receiver.is_some();
        if let Some(receiver) = receiver {
            args.insert(0, receiver);
        }
        let (more, value) = self.apply(&name, args, pos, method, call.op_token.is_some())?;
        count.add(&more);
        Ok((count, value))
    }

    /// Calls `name` with evaluated arguments (a method's receiver first).
    fn apply(
        &mut self,
        name: &ImmutableString,
        args: Vec<Abs>,
        pos: Position,
        method: bool,
        operator: bool,
    ) -> Bound<(Count, Abs)> {
        let none = Count::default();
        if operator {
            return Ok((none, self.operator(name, args, pos)?));
        }
        // A script function of that name and arity (Rhai prefers it over a builtin). A method
        // call `x.f(a)` is `f(a)` with `this` = x, or else `f(x, a)`.
        if !name.starts_with("anon$") {
            let has = |arity: usize| self.functions.bodies.contains_key(&(name.clone(), arity));
            let this_style = method && has(args.len() - 1);
            if this_style || has(args.len()) {
                let callable = Callable { target: Target::Script(name.clone()), captured: Vec::new() };
                let mut args = args;
                if this_style {
                    // `this` is not a parameter the body can be given: unknown inside.
                    let receiver = args.remove(0);
                    self.lose(receiver, pos)?;
                }
                return Ok((self.invoke(&callable, &args, pos)?, Abs::Unknown));
            }
        }
        let (line, column) = line_column(pos);
        let mut args = args;
        match (name.as_str(), args.len()) {
            ("agent", 1 | 2) => {
                let site = self.site(&args, (line, column));
                self.sites.record(site);
                for arg in args {
                    self.lose(arg, pos)?;
                }
                Ok((Count::one((line, column)), Abs::Unknown))
            }
            ("parallel", 1 | 2) if !matches!(args.get(1), Some(Abs::Closure(_))) => {
                // The list form: every branch once.
                let branches = args.remove(0);
                for opts in args {
                    self.lose(opts, pos)?;
                }
                Ok((self.each_closure(&branches, pos, Construct::Parallel)?, Abs::Unknown))
            }
            ("parallel", 2 | 3) => {
                let items = args.remove(0);
                let body = args.remove(0);
                for opts in args {
                    self.lose(opts, pos)?;
                }
                let Abs::Closure(body) = body else { return Ok((none, Abs::Unknown)) };
                let count = self.iterate(&items, pos, &Construct::Parallel, &mut |walker, item, _| {
                    walker.invoke(&body, &[item], pos)
                })?;
                Ok((count, Abs::Unknown))
            }
            ("pipeline", 2 | 3) => {
                let items = args.remove(0);
                let stages = args.remove(0);
                for opts in args {
                    self.lose(opts, pos)?;
                }
                // Every item through every stage; a stage's input is the previous stage's
                // output, unknown to the bound (the first stage's is the item).
                let count = self.iterate(&items, pos, &Construct::Pipeline, &mut |walker, item, _| {
                    let Some(stages) = stage_list(&stages) else {
                        return walker.each_closure(&stages, pos, Construct::Pipeline);
                    };
                    let mut total = Count::default();
                    for (index, stage) in stages.iter().enumerate() {
                        let input = if index == 0 { item.clone() } else { Abs::Unknown };
                        if let Abs::Closure(stage) = stage {
                            total.add(&walker.invoke(stage, &[input], pos)?);
                        }
                    }
                    Ok(total)
                })?;
                Ok((count, Abs::Unknown))
            }
            ("step", 2 | 3) | ("phase", 2) => {
                let body = args.remove(1);
                for other in args {
                    self.lose(other, pos)?;
                }
                match body {
                    Abs::Closure(body) => Ok((self.invoke(&body, &[], pos)?, Abs::Unknown)),
                    _ => Ok((none, Abs::Unknown)),
                }
            }
            ("workflow", 2 | 3) => {
                let child = match args.first() {
                    Some(Abs::Json(Value::String(child))) => Some(child.clone()),
                    _ => None,
                };
                unbounded(pos, Reason::ChildWorkflow(child))
            }
            ("orchestrate", 1 | 2) => unbounded(pos, Reason::Orchestrate),
            ("call", n) if n >= 1 => {
                let callee = args.remove(0);
                match callee {
                    Abs::Closure(callee) => Ok((self.invoke(&callee, &args, pos)?, Abs::Unknown)),
                    _ => {
                        for arg in args {
                            self.lose(arg, pos)?;
                        }
                        Ok((none, Abs::Unknown))
                    }
                }
            }
            ("Fn", 1) => match &args[0] {
                Abs::Json(Value::String(target)) => {
                    let target: ImmutableString = target.as_str().into();
                    let target = if self.functions.has(&target) {
                        Target::Script(target)
                    } else {
                        Target::Global(target)
                    };
                    Ok((none, Abs::Closure(Rc::new(Callable { target, captured: Vec::new() }))))
                }
                _ => unbounded(pos, Reason::ComputedFnName),
            },
            ("type_of", 1) => Ok((
                none,
                match &args[0] {
                    Abs::Json(value) => Abs::Json(Value::String(type_name(value).to_owned())),
                    Abs::Closure(_) => Abs::Json(Value::String("Fn".to_owned())),
                    _ => Abs::Unknown,
                },
            )),
            ("len", 1) => Ok((none, args[0].len().map_or(Abs::Unknown, |n| Abs::Json(Value::from(n))))),
            ("keys" | "values", 1) => Ok((
                none,
                match &args[0] {
                    Abs::Json(Value::Object(map)) => Abs::Json(Value::Array(if name.as_str() == "keys" {
                        map.keys().cloned().map(Value::String).collect()
                    } else {
                        map.values().cloned().collect()
                    })),
                    _ => Abs::Unknown,
                },
            )),
            ("range", 2) => Ok((
                none,
                match (args[0].int(), args[1].int()) {
                    (Some(start), Some(end)) => Abs::Range(start, end),
                    _ => Abs::Unknown,
                },
            )),
            ("range", 3) => Ok((
                none,
                match (args[0].int(), args[1].int(), args[2].int()) {
                    (Some(start), Some(end), Some(step)) if step > 0 => {
                        let span = u64::try_from(end.saturating_sub(start)).unwrap_or(0);
                        Abs::Sized(span.div_ceil(step.unsigned_abs()))
                    }
                    _ => Abs::Unknown,
                },
            )),
            _ => {
                // A variable holding a closure, called like a function: `f(x)`.
                if !method && let Abs::Closure(callee) = self.lookup(name) {
                    return Ok((self.invoke(&callee, &args, pos)?, Abs::Unknown));
                }
                self.builtin(name, args, pos)
            }
        }
    }

    /// A builtin (or unknown) function: an array method that runs a closure per element counts
    /// it that many times; any other closure argument must not call agents.
    fn builtin(&mut self, name: &str, args: Vec<Abs>, pos: Position) -> Bound<(Count, Abs)> {
        let per_element = PER_ELEMENT_METHODS.contains(&name);
        let per_pair = PER_PAIR_METHODS.contains(&name);
        let mut count = Count::default();
        if (per_element || per_pair) && args.len() >= 2 {
            let receiver = &args[0];
            for closure in &args[1..] {
                let Abs::Closure(body) = closure else {
                    self.escape(closure, pos)?;
                    continue;
                };
                let mut each = self.iterate(
                    receiver,
                    pos,
                    &Construct::Method(name.to_owned()),
                    &mut |walker, item, index| walker.invoke(body, &[item, index], pos),
                )?;
                if per_pair {
                    each = each.scaled(receiver.len().unwrap_or(0));
                }
                count.add(&each);
            }
            return Ok((count, Abs::Unknown));
        }
        for arg in &args {
            self.escape(arg, pos)?;
        }
        Ok((count, Abs::Unknown))
    }

    /// Operators over static values: ranges, integer arithmetic, string and array `+`.
    fn operator(&mut self, name: &str, args: Vec<Abs>, pos: Position) -> Bound<Abs> {
        for arg in &args {
            self.escape(arg, pos)?;
        }
        let ints = (args.first().and_then(Abs::int), args.get(1).and_then(Abs::int));
        Ok(match (name, ints, args.as_slice()) {
            ("..", (Some(a), Some(b)), _) => Abs::Range(a, b),
            ("..=", (Some(a), Some(b)), _) => Abs::Range(a, b.saturating_add(1)),
            ("-", (Some(a), None), [_]) => Abs::Json(Value::from(a.saturating_neg())),
            ("+", (Some(a), Some(b)), _) => {
                a.checked_add(b).map_or(Abs::Unknown, |n| Abs::Json(Value::from(n)))
            }
            ("-", (Some(a), Some(b)), _) => {
                a.checked_sub(b).map_or(Abs::Unknown, |n| Abs::Json(Value::from(n)))
            }
            ("*", (Some(a), Some(b)), _) => {
                a.checked_mul(b).map_or(Abs::Unknown, |n| Abs::Json(Value::from(n)))
            }
            ("/", (Some(a), Some(b)), _) => {
                a.checked_div(b).map_or(Abs::Unknown, |n| Abs::Json(Value::from(n)))
            }
            ("!", _, [Abs::Json(Value::Bool(b))]) => Abs::Json(Value::Bool(!b)),
            ("==" | "!=" | "<" | ">" | "<=" | ">=", _, [Abs::Json(a), Abs::Json(b)]) => {
                compare(name, a, b).map_or(Abs::Unknown, |known| Abs::Json(Value::Bool(known)))
            }
            ("+", _, [Abs::Json(Value::String(a)), Abs::Json(Value::String(b))]) => {
                Abs::Json(Value::String(format!("{a}{b}")))
            }
            ("+", _, [Abs::Json(Value::Array(a)), Abs::Json(Value::Array(b))]) => {
                Abs::Json(Value::Array(a.iter().chain(b).cloned().collect()))
            }
            _ => Abs::Unknown,
        })
    }

    /// Every closure of a list (parallel branches, pipeline stages), once each.
    fn each_closure(&mut self, list: &Abs, pos: Position, what: Construct) -> Bound<Count> {
        match list {
            Abs::Array(items) => {
                let mut total = Count::default();
                for item in items.iter() {
                    if let Abs::Closure(body) = item {
                        total.add(&self.invoke(body, &[], pos)?);
                    }
                }
                Ok(total)
            }
            // JSON holds no closures: nothing runs.
            Abs::Json(_) => Ok(Count::default()),
            _ => unbounded(pos, Reason::Unfollowable(what)),
        }
    }

    /// Calls a closure or function with `args` after its captured values: its body's count.
    fn invoke(&mut self, callable: &Callable, args: &[Abs], pos: Position) -> Bound<Count> {
        let name = match &callable.target {
            Target::Script(name) => name.clone(),
            Target::Global(global) => {
                // `Fn("agent")` and the like: the global, called with these arguments.
                let mut all = callable.captured.clone();
                all.extend(args.iter().cloned());
                return Ok(self.apply(global, all, pos, false, false)?.0);
            }
        };
        let arity = callable.captured.len() + args.len();
        let functions = self.functions;
        let Some(body) = functions.get(&name, arity) else { return Ok(Count::default()) };
        if self.active.contains(&name) {
            let shown = (!name.starts_with("anon$")).then(|| name.to_string());
            return unbounded(pos, Reason::Recursion(shown));
        }
        let base = self.scope.len();
        let sees_script = name.starts_with("anon$") && self.frames.last().is_some_and(|f| f.sees_script);
        let values =
            callable.captured.iter().chain(args.iter()).cloned().chain(std::iter::repeat(Abs::Unknown));
        let params: Vec<(ImmutableString, Abs)> = body.params.iter().cloned().zip(values).collect();
        self.frames.push(Frame { base, sees_script });
        self.active.push(name);
        let mut result = Ok(());
        for (param, value) in params {
            if let Err(e) = self.declare(param, value, pos) {
                result = Err(e);
                break;
            }
        }
        let count = result.and_then(|()| self.statements(&body.statements)).and_then(|(count, value)| {
            // The function's result: a closure it returns is out of sight.
            self.lose(value, pos)?;
            Ok(count)
        });
        self.active.pop();
        self.frames.pop();
        self.scope.truncate(base);
        count
    }

    // ----- sites -----

    /// What an `agent(prompt, opts?)` call's arguments say.
    fn site(&self, args: &[Abs], pos: (u32, u32)) -> AgentSite {
        let prompt = match args.first() {
            Some(Abs::Json(Value::String(prompt))) => Known::Literal(prompt.clone()),
            _ => Known::Computed,
        };
        let options = match args.get(1) {
            None => Options::Absent,
            Some(Abs::Json(Value::Object(map))) => Options::Fields(
                map.iter().map(|(key, value)| (key.clone(), Known::Literal(value.clone()))).collect(),
            ),
            Some(Abs::Map(entries)) => Options::Fields(
                entries
                    .iter()
                    .map(|(key, value)| {
                        let value = match value {
                            Abs::Json(value) => Known::Literal(value.clone()),
                            _ => Known::Computed,
                        };
                        (key.clone(), value)
                    })
                    .collect(),
            ),
            Some(_) => Options::Computed,
        };
        sites::site(pos, prompt, options)
    }
}

/// Follows the static part of a chain into a JSON value by reference: properties after `.`,
/// literal keys and indexes in `[]`. Returns what it reached and the rest of the chain (with how
/// it is reached) from the first accessor it could not follow.
fn args_path<'v, 'e>(
    mut value: &'v Value,
    mut dot: bool,
    mut node: &'e Expr,
) -> (&'v Value, Option<(bool, &'e Expr)>) {
    static NULL: Value = Value::Null;
    loop {
        let (accessor, next) = match node {
            Expr::Dot(chain, ..) => (&chain.lhs, Some((true, &chain.rhs))),
            Expr::Index(chain, ..) => (&chain.lhs, Some((false, &chain.rhs))),
            leaf => (leaf, None),
        };
        let reached = match (dot, accessor, value) {
            // A map's missing property reads as ().
            (true, Expr::Property(property, _), Value::Object(map)) => {
                Some(map.get(property.2.as_str()).unwrap_or(&NULL))
            }
            (false, Expr::StringConstant(key, _), Value::Object(map)) => {
                Some(map.get(key.as_str()).unwrap_or(&NULL))
            }
            (false, Expr::IntegerConstant(index, _), Value::Array(items)) => {
                index_of(items.len(), *index).and_then(|i| items.get(i))
            }
            _ => None,
        };
        let Some(reached) = reached else { return (value, Some((dot, node))) };
        value = reached;
        match next {
            Some((next_dot, rest)) => {
                dot = next_dot;
                node = rest;
            }
            None => return (value, None),
        }
    }
}

/// A comparison of two JSON values, when Rhai's answer is certain: integers, strings, booleans
/// and `()` (which equals only itself).
fn compare(operator: &str, a: &Value, b: &Value) -> Option<bool> {
    use std::cmp::Ordering;
    let order = match (a, b) {
        (Value::Null, Value::Null) => Some(Ordering::Equal),
        (Value::Null, _) | (_, Value::Null) => None,
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        (Value::Number(x), Value::Number(y)) => Some(x.as_i64()?.cmp(&y.as_i64()?)),
        _ => None,
    };
    match (operator, order) {
        ("==", Some(order)) => Some(order == Ordering::Equal),
        ("!=", Some(order)) => Some(order != Ordering::Equal),
        ("==", None) if a.is_null() || b.is_null() => Some(false),
        ("!=", None) if a.is_null() || b.is_null() => Some(true),
        ("<", Some(order)) => Some(order == Ordering::Less),
        (">", Some(order)) => Some(order == Ordering::Greater),
        ("<=", Some(order)) => Some(order != Ordering::Greater),
        (">=", Some(order)) => Some(order != Ordering::Less),
        _ => None,
    }
}

/// Rhai's `type_of` of a JSON value.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "()",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() => "i64",
        Value::Number(_) => "f64",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "map",
    }
}

/// The stages of a pipeline, when they are a list the bound can follow.
fn stage_list(stages: &Abs) -> Option<Vec<Abs>> {
    match stages {
        Abs::Array(items) => Some(items.to_vec()),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
