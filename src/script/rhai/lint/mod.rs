//! The lint rules: one pass over a parsed script that walks every statement, follows each
//! closure into its body where the closure is created, and reports what it finds.
//!
//! Rhai compiles a closure `|x| body` into an anonymous script function whose parameters are
//! the captured variables followed by the declared ones. A closure that captures nothing is a
//! function-pointer constant; one that captures is the expression `curry(Fn("anon$…"),
//! captured…)` inside a block that first marks the captured variables shared (`Stmt::Share`).
//! Capture is by reference: the closure and the enclosing scope see one value. The
//! scope-sensitive rules read exactly that: `loop-capture` looks at what each captured name
//! resolves to where the closure is created, and `parallel-capture-assign` follows captured
//! names into the body, where they alias the outer binding, and collects the writes that escape
//! each closure.
//!
//! Function bodies are reached through single-function clones of the AST walked with
//! [`AST::walk`], since Rhai exposes a function's body only to its own walker.
//!
//! This file holds the walk (scopes, statements, expressions, closures); `calls` checks calls
//! of globals and functions, and `options` checks options maps against the schemas.

mod calls;
mod escapes;
mod foreign;
mod options;
mod recover;
mod scan;
mod shared;
mod this;

pub(super) use recover::analyze;

use std::collections::{HashMap, HashSet};

use ::rhai::{AST, ASTFlags, ASTNode, Dynamic, Expr, FnPtr, ImmutableString, Position, Stmt, StmtBlock};
use serde_json::Value;

use super::diagnostic::line_column;
use super::sandbox::{MUTATING_METHODS, SCRIPT_VARIABLES};
use crate::script::call_check::AgentCalls;
use crate::script::{Diagnostic, LintContext, Severity, global};

/// Runs every rule over a parsed script.
/// `assumed` names functions declared on lines the recovery blanked, which calls may use.
fn check(ast: &AST, ctx: &LintContext, assumed: &HashSet<String>) -> Vec<Diagnostic> {
    let functions = Functions::of(ast);
    let mut linter = Linter::new(ctx, &functions, assumed);
    linter.frames.push(Frame::new(SCRIPT_VARIABLE_COUNT, None));
    for stmt in ast.statements() {
        linter.walk_stmt(stmt);
    }
    linter.frames.pop();
    linter.scope.truncate(SCRIPT_VARIABLE_COUNT);
    for function in &functions.named {
        linter.check_function_name(function);
        linter.walk_function(function, &[], true);
    }
    // Every closure is reached from where it is created; this catches any the walk could not
    // place, so no body goes unchecked.
    for function in functions.closures.values() {
        if !linter.visited.contains(&function.name) {
            linter.walk_function(function, &[], false);
        }
    }
    linter.diagnostics
}

/// A script function (named, or a closure's anonymous function) and a clone of the AST holding
/// only it, whose walk visits exactly its body.
struct Function {
    name: ImmutableString,
    params: Vec<ImmutableString>,
    body: AST,
    /// Where the body starts, for diagnostics about the function itself.
    pos: Position,
}

/// The script's functions: named ones in definition order, closures by their unique names.
struct Functions {
    named: Vec<Function>,
    closures: HashMap<ImmutableString, Function>,
    /// Names of the named functions, for call resolution.
    names: HashSet<ImmutableString>,
}

impl Functions {
    fn of(ast: &AST) -> Functions {
        let mut named = Vec::new();
        let mut closures = HashMap::new();
        for def in ast.iter_fn_def() {
            let arity = def.params.len();
            // Not `clone_functions_only_filtered`: in rhai 1.27 it copies every function,
            // unfiltered, into an AST that has none yet.
            let mut body = ast.clone_functions_only();
            body.retain_functions(|_, _, name, params| name == def.name.as_str() && params == arity);
            let function = Function {
                name: def.name.clone(),
                params: def.params.iter().cloned().collect(),
                body,
                pos: def.body.start_position(),
            };
            if def.name.starts_with("anon$") {
                closures.insert(def.name.clone(), function);
            } else {
                named.push(function);
            }
        }
        // Definition order, so diagnostics about functions come out in a stable order.
        named.sort_by_key(|function| line_column(function.pos));
        let names = named.iter().map(|function| function.name.clone()).collect();
        Functions { named, closures, names }
    }
}

/// The kind of a variable binding, as the scope rules need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BindingKind {
    /// `let`, `const`, a parameter or a `catch` variable.
    Local,
    /// The variable (or counter) of a `for` loop: one slot reassigned on every iteration.
    LoopVariable,
    /// `args` or `budget`.
    ScriptVariable,
}

#[derive(Debug, Clone, Copy)]
struct Binding {
    kind: BindingKind,
    /// Index of the frame (function or closure body) that declared it.
    frame: usize,
    /// The closure it was initialised with, when its initialiser was a closure literal.
    closure: Option<usize>,
}

/// A name in scope. A closure's captured parameters alias the outer binding (`captured`), so a
/// write inside the closure is a write to the outer variable.
#[derive(Debug, Clone)]
struct ScopeEntry {
    name: ImmutableString,
    binding: usize,
    captured: bool,
}

/// One function or closure body being walked.
#[derive(Debug)]
struct Frame {
    /// Scope entries below this index belong to enclosing bodies and are invisible here.
    scope_base: usize,
    /// Writes in this body (or bodies nested in it) to variables declared outside it.
    escaping: Vec<Mutation>,
    /// Agent calls with all-literal arguments seen in this body, for `duplicate-agent-call`.
    agent_calls: AgentCalls,
    /// The named function this body is (or is nested in): such bodies cannot see `args` or
    /// `budget`, since Rhai functions do not see the script's scope.
    function: Option<ImmutableString>,
}

impl Frame {
    fn new(scope_base: usize, function: Option<ImmutableString>) -> Frame {
        Frame { scope_base, escaping: Vec::new(), agent_calls: AgentCalls::default(), function }
    }
}

/// A write to a variable: an assignment, or a builtin method that changes its receiver.
#[derive(Debug, Clone)]
struct Mutation {
    /// "assignment to" or "push() on".
    what: String,
    name: ImmutableString,
    pos: Position,
    /// Length of the text at `pos` the finding covers (the variable or the method name).
    len: usize,
}

/// What lint knows of a closure after walking its body.
#[derive(Debug, Default)]
struct ClosureFacts {
    /// Writes inside it to variables captured from outside it.
    escaping: Vec<Mutation>,
    /// The frame the closure was made in: its writes escape every body inside that one
    /// where it is called, whatever variable (an alias) it is called through.
    frame: usize,
}

/// Where a closure value goes, which decides whether its writes to captured variables can race.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    /// Stored (pushed, put in an array or map), passed to a function, assigned or returned:
    /// lint cannot see where it runs, so it may reach `parallel` or `pipeline`.
    Escapes,
    /// Run here, in order: a step or phase body, an argument of a builtin that calls it, the
    /// receiver of a method.
    Sequential,
    /// The initialiser of a `let`: each use of the variable is checked instead.
    Bound,
    /// Where it is already reported: a parallel branch or stage (a race), or JSON (no closures).
    Reported,
}

/// The builtins that call a closure argument before they return; every other function that
/// takes a closure may keep it (`push`, `curry`, `+`).
const SEQUENTIAL_CALLERS: &[&str] = &[
    "all",
    "call",
    "dedup",
    "drain",
    "filter",
    "find",
    "find_map",
    "for_each",
    "index_of",
    "map",
    "order_by",
    "reduce",
    "reduce_rev",
    "retain",
    "some",
    "sort",
    "sort_by",
    "zip",
];

/// The statically known shape of an expression.
#[derive(Debug, Clone, PartialEq)]
enum Static {
    /// A literal whose JSON value is known.
    Known(Value),
    /// A value of known JSON type whose content is not known (an interpolated string, an array
    /// with a computed element).
    Type(&'static str),
    /// A closure, with the index of its facts when lint walked its body.
    Closure(Option<usize>),
    /// Anything computed.
    Unknown,
}

/// The receiver of a method call, passed as the first argument.
#[derive(Debug, Clone, Copy)]
enum Receiver<'e> {
    /// A plain function call.
    None,
    /// A method call on a value further down a chain.
    Unknown,
    /// A method call on this (already walked) expression.
    Expr(&'e Expr),
}

/// One argument of a call: its expression (unknown for a receiver inside a chain) and whether
/// the walk already visited it.
#[derive(Debug, Clone, Copy)]
struct Arg<'e> {
    expr: Option<&'e Expr>,
    walked: bool,
}

struct Linter<'c, 'f> {
    ctx: &'c LintContext,
    functions: &'f Functions,
    /// Functions declared on lines the recovery blanked: calls of them are not reported.
    assumed: &'c HashSet<String>,
    diagnostics: Vec<Diagnostic>,
    scope: Vec<ScopeEntry>,
    bindings: Vec<Binding>,
    frames: Vec<Frame>,
    closures: Vec<ClosureFacts>,
    /// Closures whose bodies have been walked (or are being walked, which also stops a
    /// closure from being entered from inside itself).
    visited: HashSet<ImmutableString>,
    /// Named functions that change `this` (called as methods, they write their receiver).
    this_writers: HashSet<ImmutableString>,
    /// Set just before walking a closure literal a cairn global runs before it returns (a
    /// `parallel` branch or map-form body, a `pipeline` stage, a `step` or `phase` body), taken
    /// by that closure: it cannot outlive the loop iteration it was made in, so capturing the
    /// loop variable is no hazard. Its result crosses as JSON, so no closure escapes through it.
    immediate: bool,
}

/// How many scope entries at the bottom are the script variables, visible in every body.
const SCRIPT_VARIABLE_COUNT: usize = SCRIPT_VARIABLES.len();

impl<'c, 'f> Linter<'c, 'f> {
    fn new(ctx: &'c LintContext, functions: &'f Functions, assumed: &'c HashSet<String>) -> Self {
        let mut linter = Linter {
            ctx,
            functions,
            assumed,
            diagnostics: Vec::new(),
            scope: Vec::new(),
            bindings: Vec::new(),
            frames: Vec::new(),
            closures: Vec::new(),
            visited: HashSet::new(),
            immediate: false,
            this_writers: functions
                .named
                .iter()
                .filter(|function| this::writes_this(&function.body))
                .map(|function| function.name.clone())
                .collect(),
        };
        for name in SCRIPT_VARIABLES {
            linter.bindings.push(Binding { kind: BindingKind::ScriptVariable, frame: 0, closure: None });
            linter.scope.push(ScopeEntry {
                name: name.into(),
                binding: linter.bindings.len() - 1,
                captured: false,
            });
        }
        linter
    }

    // ----- scope -----

    fn resolve(&self, name: &str) -> Option<&ScopeEntry> {
        let base = self.frames.last().map_or(0, |frame| frame.scope_base).max(SCRIPT_VARIABLE_COUNT);
        self.scope[base..]
            .iter()
            .rev()
            .chain(&self.scope[..SCRIPT_VARIABLE_COUNT])
            .find(|entry| entry.name.as_str() == name)
    }

    fn declare(&mut self, name: ImmutableString, kind: BindingKind, closure: Option<usize>) {
        let frame = self.frames.len().saturating_sub(1);
        self.bindings.push(Binding { kind, frame, closure });
        self.scope.push(ScopeEntry { name, binding: self.bindings.len() - 1, captured: false });
    }

    /// Records a write, on every body between the variable's declaration and here: for each of
    /// them it is a write to a variable from outside.
    fn record_mutation(&mut self, name: &ImmutableString, pos: Position, len: usize, what: String) {
        let Some(entry) = self.resolve(name) else { return };
        let binding = self.bindings[entry.binding];
        if binding.kind == BindingKind::ScriptVariable {
            let message =
                format!("'{name}' is read-only; copy what you need into a variable first: let a = {name};");
            self.error_at("forbidden", pos, Some(len), message);
            return;
        }
        let declared_in = binding.frame;
        let mutation = Mutation { what, name: name.clone(), pos, len };
        for frame in self.frames.iter_mut().skip(declared_in + 1) {
            frame.escaping.push(mutation.clone());
        }
    }

    /// Reports a read of `args` or `budget` inside a named function, which cannot see them.
    fn check_visible(&mut self, name: &str, pos: Position) {
        let Some(entry) = self.resolve(name) else { return };
        if self.bindings[entry.binding].kind != BindingKind::ScriptVariable {
            return;
        }
        let Some(function) = self.frames.last().and_then(|frame| frame.function.clone()) else { return };
        let message = format!(
            "'{name}' is not visible inside fn {function}, which sees only its parameters; pass what it \
             needs as an argument"
        );
        self.error_at("unknown-variable", pos, Some(name.chars().count()), message);
    }

    // ----- statements -----

    fn walk_block(&mut self, block: &StmtBlock) {
        let mark = self.scope.len();
        for stmt in block.statements() {
            self.walk_stmt(stmt);
        }
        self.scope.truncate(mark);
    }

    fn walk_stmt(&mut self, stmt: &Stmt) {
        match stmt {
            Stmt::Var(var, flags, pos) => {
                let (ident, init, _) = &**var;
                if flags.intersects(ASTFlags::EXPORTED) {
                    self.error_at(
                        "forbidden",
                        *pos,
                        None,
                        "export is not available; the script's last value is its result".to_owned(),
                    );
                }
                let shape = self.walk_expr_as(init, Use::Bound);
                let closure = match shape {
                    Static::Closure(id) => id,
                    _ => None,
                };
                self.declare(ident.name.clone(), BindingKind::Local, closure);
            }
            Stmt::Assignment(assignment) => {
                let (_, binary) = &**assignment;
                self.walk_expr(&binary.rhs);
                let root = root_variable(&binary.lhs);
                if let Expr::Dot(chain, ..) | Expr::Index(chain, ..) = &binary.lhs {
                    self.walk_chain(&chain.rhs, Receiver::Unknown, root.clone());
                }
                if let Some((name, pos)) = root {
                    self.record_mutation(&name, pos, name.chars().count(), "assignment to".to_owned());
                }
            }
            Stmt::FnCall(call, pos) => {
                self.visit_call(call, *pos, Receiver::None);
            }
            Stmt::Expr(expr) => {
                self.walk_expr(expr);
            }
            Stmt::Block(block) => self.walk_block(block),
            Stmt::If(flow, _) => {
                self.walk_expr(&flow.expr);
                self.walk_block(&flow.body);
                self.walk_block(&flow.branch);
            }
            Stmt::While(flow, _) | Stmt::Do(flow, _, _) => {
                self.walk_expr(&flow.expr);
                self.walk_block(&flow.body);
            }
            Stmt::For(for_loop, _) => {
                let (variable, counter, flow) = &**for_loop;
                self.walk_expr(&flow.expr);
                let mark = self.scope.len();
                self.declare(variable.name.clone(), BindingKind::LoopVariable, None);
                if let Some(counter) = counter {
                    self.declare(counter.name.clone(), BindingKind::LoopVariable, None);
                }
                self.walk_block(&flow.body);
                self.scope.truncate(mark);
            }
            Stmt::TryCatch(flow, _) => {
                self.walk_block(&flow.body);
                let mark = self.scope.len();
                if let Expr::Variable(variable, ..) = &flow.expr {
                    self.declare(variable.1.clone(), BindingKind::Local, None);
                }
                self.walk_block(&flow.branch);
                self.scope.truncate(mark);
            }
            Stmt::Switch(switch, _) => {
                let (expr, cases) = &**switch;
                self.walk_expr(expr);
                for case in &cases.expressions {
                    self.walk_expr(&case.lhs);
                    self.walk_expr(&case.rhs);
                }
            }
            Stmt::Return(expr, ..) | Stmt::BreakLoop(expr, ..) => {
                if let Some(expr) = expr {
                    self.walk_expr(expr);
                }
            }
            Stmt::Import(import, pos) => {
                self.error_at(
                    "forbidden",
                    *pos,
                    None,
                    "import is not available; scripts have no modules, only the cairn globals".to_owned(),
                );
                self.walk_expr(&import.0);
            }
            Stmt::Export(_, pos) => {
                self.error_at(
                    "forbidden",
                    *pos,
                    None,
                    "export is not available; the script's last value is its result".to_owned(),
                );
            }
            _ => {}
        }
    }

    // ----- expressions -----

    /// Walks an expression and reports what it is, so a `let` can remember a closure. A
    /// closure found here escapes (see [`Use`]).
    fn walk_expr(&mut self, expr: &Expr) -> Static {
        self.walk_expr_as(expr, Use::Escapes)
    }

    /// Walks an expression whose value, if it is a closure, goes where `used` says.
    fn walk_expr_as(&mut self, expr: &Expr, used: Use) -> Static {
        match expr {
            Expr::DynamicConstant(value, _) => match closure_name(value) {
                Some(name) => {
                    let id = self.visit_closure(&name, &[]);
                    self.check_escape(id, used);
                    Static::Closure(id)
                }
                None => Static::Unknown,
            },
            Expr::Stmt(block) => match closure_parts(block) {
                Some((name, captures)) => {
                    let id = self.visit_closure(&name, &captures);
                    self.check_escape(id, used);
                    Static::Closure(id)
                }
                None => {
                    self.walk_block(block);
                    Static::Unknown
                }
            },
            Expr::InterpolatedString(parts, _) | Expr::Array(parts, _) => {
                let interpolated = matches!(expr, Expr::InterpolatedString(..));
                for part in parts {
                    if interpolated {
                        self.check_interpolated_closure(part);
                    }
                    self.walk_expr(part);
                }
                Static::Unknown
            }
            Expr::Map(map, _) => {
                for (_, value) in &map.0 {
                    self.walk_expr(value);
                }
                Static::Unknown
            }
            Expr::Variable(variable, _, pos) => {
                self.check_visible(&variable.1, *pos);
                let shape = self.peek(expr);
                if let Static::Closure(id) = shape {
                    self.check_escape(id, used);
                }
                shape
            }
            Expr::FnCall(call, pos) => self.visit_call(call, *pos, Receiver::None),
            Expr::MethodCall(call, pos) => self.visit_call(call, *pos, Receiver::Unknown),
            Expr::Dot(chain, ..) | Expr::Index(chain, ..) => {
                let root = root_variable(&chain.lhs);
                // A closure is not stored by calling a method on it, except `curry`, which
                // returns it with arguments bound.
                let receiver_use = match &chain.rhs {
                    Expr::MethodCall(call, _) if call.name.as_str() == "curry" => Use::Escapes,
                    _ => Use::Sequential,
                };
                self.walk_expr_as(&chain.lhs, receiver_use);
                let receiver = match (expr, &chain.rhs) {
                    (Expr::Dot(..), Expr::MethodCall(..)) => Receiver::Expr(&chain.lhs),
                    _ => Receiver::Unknown,
                };
                if let (Expr::Dot(..), Expr::Property(property, pos)) = (expr, &chain.rhs) {
                    self.check_closure_text(property.2.as_str(), &chain.lhs, *pos);
                }
                self.walk_chain(&chain.rhs, receiver, root);
                Static::Unknown
            }
            Expr::And(operands, _) | Expr::Or(operands, _) | Expr::Coalesce(operands, _) => {
                for operand in operands.iter() {
                    self.walk_expr(operand);
                }
                Static::Unknown
            }
            _ => Static::Unknown,
        }
    }

    /// Walks the right side of a `.` or `[]` chain. Rhai nests a chain to the right, with index
    /// expressions on the left of inner nodes; only the first method call's receiver is known.
    fn walk_chain(&mut self, expr: &Expr, receiver: Receiver<'_>, root: Option<(ImmutableString, Position)>) {
        match expr {
            Expr::Property(..) => {}
            Expr::MethodCall(call, pos) => {
                if let Some((name, _)) = &root
                    && MUTATING_METHODS.contains(&call.name.as_str())
                {
                    self.record_mutation(
                        name,
                        *pos,
                        call.name.chars().count(),
                        format!("{}() on", call.name),
                    );
                }
                if let Some(root) = &root {
                    self.check_indirect_write(call, *pos, root);
                }
                if let Receiver::Expr(receiver) = receiver {
                    self.check_closure_text(call.name.as_str(), receiver, *pos);
                }
                self.visit_call(call, *pos, receiver);
            }
            Expr::Dot(chain, ..) | Expr::Index(chain, ..) => {
                self.walk_chain(&chain.lhs, receiver, root.clone());
                self.walk_chain(&chain.rhs, Receiver::Unknown, root);
            }
            other => {
                self.walk_expr(other);
            }
        }
    }

    /// Walks a closure's body in a new frame whose captured parameters alias the bindings they
    /// capture, and returns the index of what was learned about it.
    fn visit_closure(
        &mut self,
        name: &ImmutableString,
        captures: &[(ImmutableString, Position)],
    ) -> Option<usize> {
        let immediate = std::mem::take(&mut self.immediate);
        let mut aliases = Vec::with_capacity(captures.len());
        for (captured, captured_pos) in captures {
            self.check_visible(captured, *captured_pos);
            let entry = self.resolve(captured).cloned();
            if let Some(entry) = &entry
                && self.bindings[entry.binding].kind == BindingKind::LoopVariable
                && !entry.captured
                && !immediate
            {
                let message = format!(
                    "closure captures the for-loop variable '{captured}' by reference, so it sees the loop's \
                     last value; fan out with parallel(items, |item| ...) or copy it first (let item = {captured};)"
                );
                self.error_at("loop-capture", *captured_pos, Some(captured.chars().count()), message);
            }
            aliases.push(entry.map(|entry| entry.binding));
        }
        let functions = self.functions;
        let function = functions.closures.get(name)?;
        if self.visited.contains(name) {
            return None;
        }
        Some(self.walk_function(function, &aliases, false))
    }

    /// Walks a function or closure body in a new frame; the first parameters alias `aliases`.
    /// `named` is true for a function declared with `fn`, false for a closure.
    fn walk_function(&mut self, function: &Function, aliases: &[Option<usize>], named: bool) -> usize {
        self.visited.insert(function.name.clone());
        let scope_base = self.scope.len();
        let enclosing = if named {
            Some(function.name.clone())
        } else {
            self.frames.last().and_then(|frame| frame.function.clone())
        };
        self.frames.push(Frame::new(scope_base, enclosing));
        for (index, param) in function.params.iter().enumerate() {
            match aliases.get(index).copied().flatten() {
                Some(binding) => self.scope.push(ScopeEntry { name: param.clone(), binding, captured: true }),
                None => self.declare(param.clone(), BindingKind::Local, None),
            }
        }
        function.body.walk(&mut |path: &[ASTNode]| {
            if let [ASTNode::Stmt(stmt)] = path {
                self.walk_stmt(stmt);
            }
            true
        });
        let frame = self.frames.pop().map(|frame| frame.escaping).unwrap_or_default();
        self.scope.truncate(scope_base);
        let made_in = self.frames.len().saturating_sub(1);
        self.closures.push(ClosureFacts { escaping: frame, frame: made_in });
        self.closures.len() - 1
    }

    /// A named function must not take a global's name: it would silently replace the global.
    fn check_function_name(&mut self, function: &Function) {
        if global(&function.name).is_some() {
            let message =
                format!("function '{}' redefines the global of that name; rename it", function.name);
            self.error_at("forbidden", function.pos, None, message);
        }
    }

    // ----- static values -----

    /// What an expression statically is, without walking it.
    fn peek(&self, expr: &Expr) -> Static {
        match expr {
            Expr::StringConstant(text, _) => Static::Known(Value::String(text.to_string())),
            Expr::CharConstant(c, _) => Static::Known(Value::String(c.to_string())),
            Expr::IntegerConstant(n, _) => Static::Known(Value::from(*n)),
            Expr::FloatConstant(f, _) => match serde_json::Number::from_f64(**f) {
                Some(number) => Static::Known(Value::Number(number)),
                None => Static::Type("number"),
            },
            Expr::BoolConstant(b, _) => Static::Known(Value::Bool(*b)),
            Expr::Unit(_) => Static::Known(Value::Null),
            Expr::InterpolatedString(..) => Static::Type("string"),
            Expr::Array(elements, _) => {
                let mut values = Vec::with_capacity(elements.len());
                for element in elements {
                    match self.peek(element) {
                        Static::Known(value) => values.push(value),
                        _ => return Static::Type("array"),
                    }
                }
                Static::Known(Value::Array(values))
            }
            Expr::Map(map, _) => {
                let mut values = serde_json::Map::new();
                for (key, value) in &map.0 {
                    match self.peek(value) {
                        Static::Known(value) => values.insert(key.name.to_string(), value),
                        _ => return Static::Type("object"),
                    };
                }
                Static::Known(Value::Object(values))
            }
            Expr::DynamicConstant(value, _) => {
                if value.is_fnptr() {
                    Static::Closure(None)
                } else {
                    match ::rhai::serde::from_dynamic::<Value>(value) {
                        Ok(value) => Static::Known(value),
                        Err(_) => Static::Unknown,
                    }
                }
            }
            Expr::Stmt(block) if closure_parts(block).is_some() => Static::Closure(None),
            Expr::Variable(variable, ..) => match self.resolve(&variable.1) {
                Some(entry) => match self.bindings[entry.binding].closure {
                    Some(id) => Static::Closure(Some(id)),
                    None => Static::Unknown,
                },
                None => Static::Unknown,
            },
            _ => Static::Unknown,
        }
    }

    // ----- reporting -----

    fn error_at(&mut self, rule_id: &str, pos: Position, len: Option<usize>, message: String) {
        self.report(Severity::Error, rule_id, pos, len, message);
    }

    fn report(
        &mut self,
        severity: Severity,
        rule_id: &str,
        pos: Position,
        len: Option<usize>,
        message: String,
    ) {
        let (line, column) = line_column(pos);
        let end_column = len.map(|len| column.saturating_add(u32::try_from(len).unwrap_or(u32::MAX)));
        self.diagnostics.push(Diagnostic {
            rule_id: rule_id.to_owned(),
            message,
            line,
            column,
            end_line: end_column.map(|_| line),
            end_column,
            severity,
        });
    }
}

/// The leftmost variable of an assignment target or method chain: `a` in `a.b[0].c`.
fn root_variable(expr: &Expr) -> Option<(ImmutableString, Position)> {
    match expr {
        Expr::Variable(variable, _, pos) => Some((variable.1.clone(), *pos)),
        Expr::Dot(chain, ..) | Expr::Index(chain, ..) => root_variable(&chain.lhs),
        _ => None,
    }
}

/// The anonymous function a function-pointer constant names, if it is a closure.
/// Whether `expr` is a closure literal (`|x| ...`, with or without captures).
fn is_closure_literal(expr: &Expr) -> bool {
    match expr {
        Expr::DynamicConstant(value, _) => closure_name(value).is_some(),
        Expr::Stmt(block) => closure_parts(block).is_some(),
        _ => false,
    }
}

fn closure_name(value: &Dynamic) -> Option<ImmutableString> {
    let pointer = value.read_lock::<FnPtr>()?;
    pointer.is_anonymous().then(|| pointer.fn_name().into())
}

/// Recognises the block Rhai builds for a capturing closure: `Share(captured…)` then
/// `curry(Fn("anon$…"), captured…)`. Returns the function's name and the captured variables
/// with the position of their first use in the body.
fn closure_parts(block: &StmtBlock) -> Option<(ImmutableString, Vec<(ImmutableString, Position)>)> {
    let [Stmt::Share(_), Stmt::Expr(expr)] = block.statements() else { return None };
    let Expr::FnCall(call, _) = &**expr else { return None };
    if call.name.as_str() != "curry" {
        return None;
    }
    let (first, captured) = call.args.split_first()?;
    let Expr::DynamicConstant(pointer, _) = first else { return None };
    let name = closure_name(pointer)?;
    let captured = captured
        .iter()
        .filter_map(|arg| match arg {
            Expr::Variable(variable, _, pos) => Some((variable.1.clone(), *pos)),
            _ => None,
        })
        .collect();
    Some((name, captured))
}
