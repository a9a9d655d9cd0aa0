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

use std::collections::{HashMap, HashSet};

use ::rhai::{
    AST, ASTFlags, ASTNode, Dynamic, Expr, FnCallExpr, FnPtr, ImmutableString, Position, Stmt, StmtBlock,
};
use serde_json::Value;

use super::line_column;
use super::sandbox::{BUILTIN_FUNCTIONS, MUTATING_METHODS, SCRIPT_VARIABLES, is_builtin};
use crate::script::{
    Diagnostic, GLOBALS, Global, LOG_LEVELS, LintContext, PARALLEL_MAP_FORM, Param, ParamKind, Severity,
    global, option_schema, suggest,
};

/// Runs every rule over a parsed script.
pub(super) fn check(ast: &AST, ctx: &LintContext) -> Vec<Diagnostic> {
    let functions = Functions::of(ast);
    let mut linter = Linter::new(ctx, &functions);
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
    /// Agent calls with all-literal arguments seen in this body, by canonical text, with the
    /// line of the first, for `duplicate-agent-call`.
    agent_calls: HashMap<String, u32>,
    /// The named function this body is (or is nested in): such bodies cannot see `args` or
    /// `budget`, since Rhai functions do not see the script's scope.
    function: Option<ImmutableString>,
}

impl Frame {
    fn new(scope_base: usize, function: Option<ImmutableString>) -> Frame {
        Frame { scope_base, escaping: Vec::new(), agent_calls: HashMap::new(), function }
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
}

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
    diagnostics: Vec<Diagnostic>,
    scope: Vec<ScopeEntry>,
    bindings: Vec<Binding>,
    frames: Vec<Frame>,
    closures: Vec<ClosureFacts>,
    /// Closures whose bodies have been walked (or are being walked, which also stops a
    /// closure from being entered from inside itself).
    visited: HashSet<ImmutableString>,
}

/// How many scope entries at the bottom are the script variables, visible in every body.
const SCRIPT_VARIABLE_COUNT: usize = SCRIPT_VARIABLES.len();

impl<'c, 'f> Linter<'c, 'f> {
    fn new(ctx: &'c LintContext, functions: &'f Functions) -> Self {
        let mut linter = Linter {
            ctx,
            functions,
            diagnostics: Vec::new(),
            scope: Vec::new(),
            bindings: Vec::new(),
            frames: Vec::new(),
            closures: Vec::new(),
            visited: HashSet::new(),
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
                let shape = self.walk_expr(init);
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

    /// Walks an expression and reports what it is, so a `let` can remember a closure.
    fn walk_expr(&mut self, expr: &Expr) -> Static {
        match expr {
            Expr::DynamicConstant(value, _) => match closure_name(value) {
                Some(name) => Static::Closure(self.visit_closure(&name, &[])),
                None => Static::Unknown,
            },
            Expr::Stmt(block) => match closure_parts(block) {
                Some((name, captures)) => Static::Closure(self.visit_closure(&name, &captures)),
                None => {
                    self.walk_block(block);
                    Static::Unknown
                }
            },
            Expr::InterpolatedString(parts, _) | Expr::Array(parts, _) => {
                for part in parts {
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
                self.peek(expr)
            }
            Expr::FnCall(call, pos) => self.visit_call(call, *pos, Receiver::None),
            Expr::MethodCall(call, pos) => self.visit_call(call, *pos, Receiver::Unknown),
            Expr::Dot(chain, ..) | Expr::Index(chain, ..) => {
                let root = root_variable(&chain.lhs);
                self.walk_expr(&chain.lhs);
                let receiver = match (expr, &chain.rhs) {
                    (Expr::Dot(..), Expr::MethodCall(..)) => Receiver::Expr(&chain.lhs),
                    _ => Receiver::Unknown,
                };
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
        let mut aliases = Vec::with_capacity(captures.len());
        for (captured, captured_pos) in captures {
            self.check_visible(captured, *captured_pos);
            let entry = self.resolve(captured).cloned();
            if let Some(entry) = &entry
                && self.bindings[entry.binding].kind == BindingKind::LoopVariable
                && !entry.captured
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
        self.closures.push(ClosureFacts { escaping: frame });
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

    // ----- calls -----

    fn visit_call(&mut self, call: &FnCallExpr, pos: Position, receiver: Receiver<'_>) -> Static {
        let name = call.name.as_str();
        let mut args: Vec<Arg<'_>> = Vec::with_capacity(call.args.len() + 1);
        match receiver {
            Receiver::None => {}
            Receiver::Unknown => args.push(Arg { expr: None, walked: true }),
            Receiver::Expr(expr) => args.push(Arg { expr: Some(expr), walked: true }),
        }
        args.extend(call.args.iter().map(|expr| Arg { expr: Some(expr), walked: false }));
        let is_method = !matches!(receiver, Receiver::None);

        if call.op_token.is_some() || !::rhai::is_valid_identifier(name) {
            self.walk_args(&args);
            return Static::Unknown;
        }
        if !call.namespace.is_empty() && call.namespace.root() != "global" {
            let message =
                format!("'{}::{name}' is not available; scripts have no modules", call.namespace.root());
            self.error_at("forbidden", pos, None, message);
            self.walk_args(&args);
            return Static::Unknown;
        }
        let user_defined =
            self.functions.names.contains(name) || (!is_method && self.resolve(name).is_some());
        if !user_defined && let Some(instead) = forbidden(name) {
            let message = format!("{name}() is not available; {instead}");
            self.error_at("forbidden", pos, Some(name.chars().count()), message);
            self.walk_args(&args);
            return Static::Unknown;
        }
        if !user_defined && let Some(global) = global(name) {
            if !(name == "log" && is_math_log(&args)) {
                return self.check_global(global, &args, pos);
            }
        } else if !user_defined && !self.is_known_function(name, is_method) {
            let candidates = GLOBALS
                .iter()
                .map(|global| global.name)
                .chain(BUILTIN_FUNCTIONS.iter().copied())
                .chain(self.functions.names.iter().map(ImmutableString::as_str));
            let kind = if is_method { "method" } else { "function" };
            let message = match suggest::did_you_mean(name, candidates) {
                Some(candidate) => format!("unknown {kind} '{name}' (did you mean '{candidate}'?)"),
                None => format!(
                    "unknown {kind} '{name}'; the globals are {}, and rhai's builtins for strings, arrays, \
                     maps and math",
                    global_names()
                ),
            };
            self.error_at("unknown-function", pos, Some(name.chars().count()), message);
        } else if name == "call" && !is_method {
            self.check_fn_pointer_call(&args, pos);
        } else if name == "Fn" && !is_method {
            self.check_fn_pointer_name(&args);
        }
        self.walk_args(&args);
        Static::Unknown
    }

    fn is_known_function(&self, name: &str, is_method: bool) -> bool {
        is_builtin(name)
            || self.functions.names.contains(name)
            || (is_method && matches!(name, "spent" | "remaining"))
    }

    /// Rhai reserves `call(fn_ptr, ...)` for calling a function pointer; a string first
    /// argument means the host-function global was meant.
    fn check_fn_pointer_call(&mut self, args: &[Arg<'_>], pos: Position) {
        let first = args.first().and_then(|arg| arg.expr).map(|expr| self.peek(expr));
        if let Some(Static::Known(Value::String(_)) | Static::Type("string")) = first {
            let message = "call() calls a function pointer in rhai; call a host function with \
                           host_call(name, args, opts?)"
                .to_owned();
            self.error_at("unknown-function", pos, Some(4), message);
        }
    }

    /// `Fn("name")` builds a pointer from a name: the name must be a function the script can call.
    fn check_fn_pointer_name(&mut self, args: &[Arg<'_>]) {
        let Some(Expr::StringConstant(target, pos)) = args.first().and_then(|arg| arg.expr) else { return };
        let target = target.as_str();
        if let Some(instead) = forbidden(target) {
            self.error_at("forbidden", *pos, None, format!("{target}() is not available; {instead}"));
        } else if global(target).is_none() && !self.is_known_function(target, false) {
            let message = format!("Fn(\"{target}\") names no function the script can call");
            self.error_at("unknown-function", *pos, None, message);
        }
    }

    fn walk_args(&mut self, args: &[Arg<'_>]) {
        for arg in args {
            self.walk_arg(arg);
        }
    }

    fn walk_arg(&mut self, arg: &Arg<'_>) -> Static {
        match arg.expr {
            Some(expr) if !arg.walked => self.walk_expr(expr),
            Some(expr) => self.peek(expr),
            None => Static::Unknown,
        }
    }

    /// Checks a call of a cairn global: arity, each argument against its parameter, and the
    /// names it refers to.
    fn check_global(&mut self, global: &'static Global, args: &[Arg<'_>], pos: Position) -> Static {
        let Some(params) = self.params_for(global, args) else {
            self.walk_args(args);
            return Static::Unknown;
        };
        let (min, max) = arity(params);
        if args.len() < min || args.len() > max {
            let expected = match (min, max) {
                (0, 0) => "no arguments".to_owned(),
                (min, max) if min == max => format!("{min} argument{}", if min == 1 { "" } else { "s" }),
                (min, max) if max == min + 1 => format!("{min} or {max} arguments"),
                (min, max) => format!("{min} to {max} arguments"),
            };
            let message =
                format!("{} takes {expected} ({}), got {}", global.name, global.signature, args.len());
            self.error_at("arity", pos, Some(global.name.len()), message);
            self.walk_args(args);
            return Static::Unknown;
        }
        for (param, arg) in params.iter().zip(args) {
            self.check_arg(global, param, arg);
        }
        let first_literal = match args.first().and_then(|arg| arg.expr) {
            Some(Expr::StringConstant(text, pos)) => Some((text.as_str(), *pos)),
            _ => None,
        };
        match global.name {
            "host_call" => {
                if let Some((name, pos)) = first_literal {
                    self.check_registered(Registry::HostFunction, name, pos);
                }
            }
            "workflow" => {
                if let Some((name, pos)) = first_literal {
                    self.check_registered(Registry::Workflow, name, pos);
                }
            }
            "log" => {
                if let Some((level, pos)) = first_literal
                    && !LOG_LEVELS.contains(&level)
                {
                    let message = format!(
                        "log level '{level}' is not one of {}{}",
                        LOG_LEVELS.join(", "),
                        suggest::suffix(level, LOG_LEVELS)
                    );
                    self.error_at("arg-type", pos, None, message);
                }
            }
            "agent" => self.check_duplicate_agent(args, pos),
            _ => {}
        }
        Static::Unknown
    }

    /// The parameters a call of `global` is checked against: `parallel` with a closure second
    /// is the map form. `None` when a `parallel` call could be either form, so only the
    /// arguments' own contents are checked.
    fn params_for(&self, global: &'static Global, args: &[Arg<'_>]) -> Option<&'static [Param]> {
        if global.name != "parallel" {
            return Some(global.params);
        }
        let second = args.get(1).and_then(|arg| arg.expr).map(|expr| self.peek(expr));
        match (args.len(), second) {
            (3, _) | (_, Some(Static::Closure(_))) => Some(PARALLEL_MAP_FORM),
            (2, Some(Static::Unknown)) => {
                // A computed second argument is options (list form) when the first is a list of
                // closures; otherwise it may be a closure the walk cannot see.
                let first_is_branches = match args.first().and_then(|arg| arg.expr) {
                    Some(Expr::Array(elements, _)) => {
                        elements.iter().any(|element| matches!(self.peek(element), Static::Closure(_)))
                    }
                    _ => false,
                };
                first_is_branches.then_some(global.params)
            }
            _ => Some(global.params),
        }
    }

    fn check_arg(&mut self, global: &Global, param: &Param, arg: &Arg<'_>) {
        let Some(expr) = arg.expr else { return };
        let place = Place::of(global, param);
        match param.kind {
            ParamKind::Text => {
                match self.peek(expr) {
                    Static::Closure(_) => self.closure_in_json(expr.position(), place),
                    Static::Known(Value::String(_)) | Static::Type("string") | Static::Unknown => {}
                    other => {
                        let message = format!("{place} must be a string, got {}", type_phrase(&other));
                        self.error_at("arg-type", expr.position(), None, message);
                    }
                }
                self.walk_arg(arg);
            }
            ParamKind::Json => self.check_json(arg, place),
            ParamKind::Items => {
                match self.peek(expr) {
                    Static::Known(Value::Array(_))
                    | Static::Type("array")
                    | Static::Unknown
                    | Static::Closure(_) => {}
                    other => {
                        let message = format!("{place} must be an array, got {}", type_phrase(&other));
                        self.error_at("arg-type", expr.position(), None, message);
                    }
                }
                self.check_json(arg, place);
            }
            ParamKind::Options => match expr {
                Expr::Map(map, _) if !arg.walked => {
                    let schema = global.options.unwrap_or(global.name);
                    for (key, value) in &map.0 {
                        self.check_option(global, schema, &key.name, key.pos, value);
                        self.check_json(&Arg { expr: Some(value), walked: false }, place);
                    }
                }
                _ => {
                    match self.peek(expr) {
                        Static::Closure(_) => self.closure_in_json(expr.position(), place),
                        Static::Known(Value::Object(_)) | Static::Type("object") | Static::Unknown => {}
                        other => {
                            let message = format!(
                                "{place} must be a map like #{{label: \"...\"}}, got {}",
                                type_phrase(&other)
                            );
                            self.error_at("arg-type", expr.position(), None, message);
                        }
                    }
                    self.walk_arg(arg);
                }
            },
            ParamKind::Body => {
                let shape = self.peek(expr);
                if matches!(shape, Static::Known(_) | Static::Type(_)) {
                    let message =
                        format!("{place} must be a closure like || {{ ... }}, got {}", type_phrase(&shape));
                    self.error_at("arg-type", expr.position(), None, message);
                }
                let walked = self.walk_arg(arg);
                if global.name == "parallel"
                    && let Static::Closure(id) = walked
                {
                    self.report_races(id, global.name);
                }
            }
            ParamKind::Branches | ParamKind::Stages => match expr {
                Expr::Array(elements, _) if !arg.walked => {
                    for element in elements {
                        let shape = self.peek(element);
                        if matches!(shape, Static::Known(_) | Static::Type(_)) {
                            let message = if param.kind == ParamKind::Branches {
                                format!(
                                    "each branch of {} must be a closure like || agent(...), got {}; to fan out \
                                     over data use parallel(items, |item| ...)",
                                    global.name,
                                    type_phrase(&shape)
                                )
                            } else {
                                format!(
                                    "each stage of {} must be a closure like |item| ..., got {}",
                                    global.name,
                                    type_phrase(&shape)
                                )
                            };
                            self.error_at("arg-type", element.position(), None, message);
                        }
                        if let Static::Closure(id) = self.walk_expr(element) {
                            self.report_races(id, global.name);
                        }
                    }
                }
                _ => {
                    let shape = self.peek(expr);
                    if matches!(shape, Static::Known(_) | Static::Type(_) | Static::Closure(_)) {
                        let message =
                            format!("{place} must be an array of closures, got {}", type_phrase(&shape));
                        self.error_at("arg-type", expr.position(), None, message);
                    }
                    self.walk_arg(arg);
                }
            },
        }
    }

    /// Checks a value that must be JSON: no closure anywhere in its literal structure.
    fn check_json(&mut self, arg: &Arg<'_>, place: Place<'_>) {
        let Some(expr) = arg.expr else { return };
        if arg.walked {
            if let Static::Closure(_) = self.peek(expr) {
                self.closure_in_json(expr.position(), place);
            }
            return;
        }
        match expr {
            Expr::Array(elements, _) => {
                for element in elements {
                    self.check_json(&Arg { expr: Some(element), walked: false }, place);
                }
            }
            Expr::Map(map, _) => {
                for (_, value) in &map.0 {
                    self.check_json(&Arg { expr: Some(value), walked: false }, place);
                }
            }
            _ => {
                if let Static::Closure(_) = self.walk_expr(expr) {
                    self.closure_in_json(expr.position(), place);
                }
            }
        }
    }

    fn closure_in_json(&mut self, pos: Position, place: Place<'_>) {
        let message = format!(
            "a closure cannot go in {place}: only JSON values cross into the engine; closures go only in \
             parallel branches, pipeline stages, and step and phase bodies"
        );
        self.error_at("closure-in-options", pos, None, message);
    }

    /// Checks one `key: value` of an options map against the global's schema.
    fn check_option(
        &mut self,
        global: &Global,
        schema_name: &str,
        key: &str,
        key_pos: Position,
        value: &Expr,
    ) {
        let Some(schema) = option_schema(schema_name) else { return };
        let properties = schema.get("properties").and_then(Value::as_object);
        let Some(property) = properties.and_then(|properties| properties.get(key)) else {
            let names =
                properties.map(|properties| properties.keys().map(String::as_str).collect::<Vec<_>>());
            let names = names.unwrap_or_default();
            let message = match suggest::did_you_mean(key, names.iter().copied()) {
                Some(candidate) => {
                    format!("unknown option '{key}' for {} (did you mean '{candidate}'?)", global.name)
                }
                None => format!("unknown option '{key}' for {}; it takes {}", global.name, names.join(", ")),
            };
            self.error_at("unknown-option", key_pos, Some(key.chars().count()), message);
            return;
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
        let expected = schema_types(property);
        let must_be = |found: &str| {
            let expected: Vec<&str> = expected.iter().map(|name| article(name)).collect();
            format!(" must be {}, got {}", expected.join(" or "), article(found))
        };
        let known = match self.peek(value) {
            Static::Known(known) => known,
            Static::Type(found) if !type_matches(&expected, found) => return Some(must_be(found)),
            Static::Type(_) | Static::Closure(_) | Static::Unknown => return None,
        };
        if !type_matches(&expected, json_type(&known)) {
            return Some(must_be(json_type(&known)));
        }
        let Some(problem) = option_problem(schema_name, key, &known) else {
            // Both `schema` options hold a JSON Schema, which must itself be valid.
            if key == "schema"
                && let Err(error) = jsonschema::meta::validate(&known)
            {
                return Some(format!(" is not a valid JSON Schema: {}", super::sentence(&error.to_string())));
            }
            return None;
        };
        let allowed: Vec<&str> = property
            .get("enum")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        Some(match &known {
            Value::String(text) if !allowed.is_empty() => {
                let quoted: Vec<String> = allowed.iter().map(|value| format!("\"{value}\"")).collect();
                let suggestion = suggest::suffix(text, allowed.iter().copied());
                format!(" must be one of {}, got \"{text}\"{suggestion}", quoted.join(", "))
            }
            Value::String(text) if property.get("pattern").is_some() => {
                let description = property.get("description").and_then(Value::as_str).unwrap_or_default();
                format!(": \"{text}\" is malformed; {description}")
            }
            _ => format!(": {problem}"),
        })
    }

    /// Reports a literal name the engine has not registered.
    fn check_registered(&mut self, registry: Registry, name: &str, pos: Position) {
        let (names, rule, noun, plural) = match registry {
            Registry::Profile => (Some(&self.ctx.profiles), "unknown-profile", "profile", "profiles"),
            Registry::Toolset => (Some(&self.ctx.toolsets), "unknown-toolset", "toolset", "toolsets"),
            Registry::HostFunction => {
                (Some(&self.ctx.host_functions), "unknown-host-function", "host function", "host functions")
            }
            Registry::Workflow => {
                (Some(&self.ctx.child_workflows), "unknown-workflow", "workflow", "workflows")
            }
            Registry::Model => (self.ctx.models.as_ref(), "unknown-model", "model", "models"),
        };
        let Some(names) = names else { return };
        if names.contains(name) {
            return;
        }
        let message = if names.is_empty() {
            format!("unknown {noun} '{name}'; no {plural} are registered")
        } else {
            match suggest::did_you_mean(name, names.iter().map(String::as_str)) {
                Some(candidate) => format!("unknown {noun} '{name}' (did you mean '{candidate}'?)"),
                None => {
                    let listed: Vec<&str> = names.iter().take(12).map(String::as_str).collect();
                    let more = if names.len() > listed.len() { ", ..." } else { "" };
                    format!("unknown {noun} '{name}'; registered {plural}: {}{more}", listed.join(", "))
                }
            }
        };
        self.error_at(rule, pos, None, message);
    }

    /// Warns on an agent call whose literal arguments repeat an earlier call in the same body
    /// with no `key` to tell them apart: the journal would tell them apart only by order.
    fn check_duplicate_agent(&mut self, args: &[Arg<'_>], pos: Position) {
        let mut values = Vec::with_capacity(args.len());
        for arg in args {
            let Some(Static::Known(value)) = arg.expr.map(|expr| self.peek(expr)) else { return };
            values.push(value);
        }
        if values.get(1).and_then(|options| options.get("key")).is_some() {
            return;
        }
        let canonical = Value::Array(values).to_string();
        let (line, _) = line_column(pos);
        let Some(frame) = self.frames.last_mut() else { return };
        match frame.agent_calls.get(&canonical) {
            Some(first_line) => {
                let message = format!(
                    "this agent call repeats the identical call on line {first_line}; the journal tells them \
                     apart only by order, so give each a distinct key option (key: \"...\")"
                );
                self.report(Severity::Warning, "duplicate-agent-call", pos, Some(5), message);
            }
            None => {
                frame.agent_calls.insert(canonical, line);
            }
        }
    }

    /// Reports every write a closure run concurrently makes to a variable from outside it.
    fn report_races(&mut self, closure: Option<usize>, global: &str) {
        let Some(facts) = closure.and_then(|id| self.closures.get(id)) else { return };
        let (site, others, unit) = if global == "pipeline" {
            ("pipeline stage", "items", "stage")
        } else {
            ("parallel branch", "branches", "branch")
        };
        let messages: Vec<(Position, usize, String)> = facts
            .escaping
            .iter()
            .map(|mutation| {
                let message = format!(
                    "{} captured variable '{}' inside a {site} races with the other {others}; return a value \
                     from each {unit} and combine the results after {global} returns",
                    mutation.what, mutation.name
                );
                (mutation.pos, mutation.len, message)
            })
            .collect();
        for (pos, len, message) in messages {
            self.error_at("parallel-capture-assign", pos, Some(len), message);
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

/// The kinds of name a [`LintContext`] registers.
#[derive(Debug, Clone, Copy)]
enum Registry {
    Profile,
    Toolset,
    HostFunction,
    Workflow,
    Model,
}

fn arity(params: &[Param]) -> (usize, usize) {
    (params.iter().filter(|param| !param.optional).count(), params.len())
}

/// How a message names an argument position: "the prompt of agent", "the options of step".
/// Formatted only when a message needs it.
#[derive(Debug, Clone, Copy)]
struct Place<'g> {
    noun: &'static str,
    global: &'g str,
}

impl<'g> Place<'g> {
    fn of(global: &'g Global, param: &Param) -> Self {
        let noun = if param.kind == ParamKind::Options { "options" } else { param.name };
        Place { noun, global: global.name }
    }
}

impl std::fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the {} of {}", self.noun, self.global)
    }
}

/// The global names, comma-separated, for messages.
fn global_names() -> String {
    GLOBALS.iter().map(|global| global.name).collect::<Vec<_>>().join(", ")
}

/// `log(x)` and `log(x, base)` are Rhai's logarithm, not the cairn global: one argument that
/// is not text, or a number first.
fn is_math_log(args: &[Arg<'_>]) -> bool {
    match args.first().and_then(|arg| arg.expr) {
        Some(Expr::StringConstant(..) | Expr::InterpolatedString(..)) => false,
        Some(Expr::IntegerConstant(..) | Expr::FloatConstant(..)) => true,
        _ => args.len() == 1,
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

/// Why a literal option value fails its schema, if it does.
fn option_problem(schema_name: &str, key: &str, value: &Value) -> Option<String> {
    let validator =
        validators().iter().find(|(name, _)| *name == schema_name).map(|(_, validator)| validator)?;
    let mut instance = serde_json::Map::new();
    instance.insert(key.to_owned(), value.clone());
    let instance = Value::Object(instance);
    let error = validator.as_ref()?.iter_errors(&instance).next()?;
    Some(super::sentence(&error.to_string()))
}

/// One compiled validator per options schema, built once per process.
fn validators() -> &'static [(&'static str, Option<jsonschema::Validator>)] {
    static VALIDATORS: std::sync::OnceLock<Vec<(&'static str, Option<jsonschema::Validator>)>> =
        std::sync::OnceLock::new();
    VALIDATORS.get_or_init(|| {
        GLOBALS
            .iter()
            .filter_map(|global| global.options)
            .map(|name| (name, option_schema(name).and_then(|schema| jsonschema::validator_for(schema).ok())))
            .collect()
    })
}

/// The JSON types a property schema admits, from `type` or from its `enum` values.
fn schema_types(property: &Value) -> Vec<&'static str> {
    let names: Vec<&str> = match property.get("type") {
        Some(Value::String(name)) => vec![name.as_str()],
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
        _ => match property.get("enum").and_then(Value::as_array) {
            Some(values) => values.iter().map(json_type).collect(),
            None => Vec::new(),
        },
    };
    let mut types: Vec<&'static str> = names
        .into_iter()
        .filter_map(|name| match name {
            "string" => Some("string"),
            "array" => Some("array"),
            "object" => Some("object"),
            "boolean" => Some("boolean"),
            "integer" => Some("integer"),
            "number" => Some("number"),
            "null" => Some("null"),
            _ => None,
        })
        .collect();
    types.dedup();
    types
}

/// Whether a value of JSON type `found` fits a property admitting `expected` (nothing listed
/// admits anything; an integer is a number).
fn type_matches(expected: &[&str], found: &str) -> bool {
    expected.is_empty() || expected.contains(&found) || (found == "integer" && expected.contains(&"number"))
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(number) if number.is_i64() || number.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A JSON type name with its article, in the words scripts use ("a map", not "an object").
fn article(name: &str) -> &'static str {
    match name {
        "null" => "()",
        "boolean" => "a boolean",
        "integer" => "an integer",
        "number" => "a number",
        "string" => "a string",
        "array" => "an array",
        "object" => "a map",
        _ => "a value",
    }
}

/// "an integer", "a closure": what a static value is, for messages.
fn type_phrase(value: &Static) -> &'static str {
    match value {
        Static::Known(value) => article(json_type(value)),
        Static::Type(name) => article(name),
        Static::Closure(_) => "a closure",
        Static::Unknown => "a computed value",
    }
}

/// What to use instead of a function the sandbox leaves out on purpose.
fn forbidden(name: &str) -> Option<&'static str> {
    const TIME: &str = "use now(), the journaled clock (epoch milliseconds)";
    const RANDOM: &str = "use random(key?), the journaled random number in [0, 1)";
    const IO: &str = "scripts have no I/O; call a registered host function with host_call(name, args) or \
                      give an agent tools";
    let instead = match name {
        "eval" => "write the code directly; scripts cannot build code at run time",
        "print" | "debug" => "use log(level, msg, data?), which emits a run event",
        "sleep" | "wait" => "scripts never wait on the clock; use await_external(key) to wait for input",
        "exit" | "quit" | "abort" => "return the result as the script's last value, or throw an error",
        "timestamp" | "time" | "date" | "clock" | "elapsed" | "now_ms" | "system_time" | "unix_time"
        | "current_time" | "utc_now" => TIME,
        "rand" | "rand_int" | "rand_float" | "rand_bool" | "random_int" | "random_float" | "shuffle"
        | "sample" | "seed" => RANDOM,
        "uuid_v4" | "new_uuid" | "guid" => "use uuid(), the journaled id",
        "read_file" | "write_file" | "open_file" | "file" | "fs_read" | "fs_write" | "read_dir" | "http"
        | "http_get" | "http_post" | "fetch" | "request" | "env" | "get_env" | "env_var" | "exec"
        | "system" | "shell" | "command" | "run_command" => IO,
        _ => return None,
    };
    Some(instead)
}
