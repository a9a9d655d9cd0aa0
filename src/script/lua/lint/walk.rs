//! The walk: scopes, statements, expressions and functions.
//!
//! A Lua closure sees every local around it by reference. The scope-sensitive rules read that:
//! each function body is a frame; a name resolved to a local of an outer frame is a capture of
//! every frame in between, and a write to it is a write that escapes each of them
//! (`parallel-capture-assign` reports those of a branch or stage). Loops record which outer
//! locals they reassign and which closures they make, for `loop-capture`.

use std::collections::HashSet;

use full_moon::ast::{
    Block, Expression, Field, FunctionBody, LastStmt, Parameter, Prefix, Stmt, Suffix, TableConstructor, Var,
};
use full_moon::node::Node;

use super::names::{self, SCRIPT_VARIABLES};
use super::syntax::span_diagnostic;
use super::values::{Pos, Static, ident, node_pos, peek_literal, string_literal, token_pos};
use crate::script::call_check::AgentCalls;
use crate::script::{Diagnostic, GLOBALS, LintContext, Severity, global, suggest};

/// Runs every rule over a parsed chunk.
pub(super) fn check(block: &Block, ctx: &LintContext, source: &str) -> Vec<Diagnostic> {
    let mut linter = Linter::new(ctx, source);
    linter.frames.push(Frame::default());
    linter.walk_block(block);
    linter.frames.pop();
    linter.diagnostics
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BindingKind {
    /// A `local`, a parameter or a loop variable.
    Local,
    /// `args` or `budget`, read-only.
    ScriptVariable,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Binding {
    pub(super) kind: BindingKind,
    /// Index of the frame (function body) that declared it.
    pub(super) frame: usize,
    /// The function it holds, when it was declared with one.
    pub(super) function: Option<usize>,
    /// The local whose table it may hold (`local c = counts`, `local t = tasks[1]`, the
    /// value variable of `for _, t in ipairs(tasks)`): a write through it is a write to that
    /// local's table (see `aliases`).
    pub(super) alias: Option<usize>,
    /// Its position among its function's parameters, when it is one.
    pub(super) param: Option<usize>,
}

impl Binding {
    fn new(kind: BindingKind, frame: usize) -> Binding {
        Binding { kind, frame, function: None, alias: None, param: None }
    }
}

#[derive(Debug, Clone)]
struct ScopeEntry {
    name: String,
    binding: usize,
}

/// A write to a local: an assignment, or a call that changes the table it holds.
#[derive(Debug, Clone)]
pub(super) struct Mutation {
    /// "assignment to", "table.insert() on", ...
    pub(super) what: String,
    /// The local written.
    pub(super) binding: usize,
    pub(super) name: String,
    pub(super) pos: Pos,
    pub(super) len: usize,
}

/// A use of an outer local inside a function.
#[derive(Debug, Clone)]
pub(super) struct Capture {
    pub(super) binding: usize,
    pub(super) name: String,
    pub(super) pos: Pos,
}

/// One function body being walked.
#[derive(Debug, Default)]
pub(super) struct Frame {
    /// Writes in this body (or bodies nested in it) to locals declared outside it.
    pub(super) escaping: Vec<Mutation>,
    /// Writes in this body (or bodies nested in it) to the tables its parameters hold, by
    /// parameter position.
    pub(super) param_writes: Vec<(usize, Mutation)>,
    /// Outer locals this body uses, first use each.
    captures: Vec<Capture>,
    /// Agent calls with all-literal arguments in this body, for `duplicate-agent-call`.
    pub(super) agent_calls: AgentCalls,
}

/// What lint learned about a function after walking its body.
#[derive(Debug, Default)]
pub(super) struct FunctionFacts {
    pub(super) escaping: Vec<Mutation>,
    /// Writes to the tables its parameters hold, by parameter position: a call writes the
    /// tables it passes there.
    pub(super) param_writes: Vec<(usize, Mutation)>,
    /// The frame the function was made in.
    pub(super) frame: usize,
}

/// A loop being walked.
#[derive(Debug)]
struct Loop {
    /// The frame the loop is in.
    frame: usize,
    /// Bindings below this index were declared before the loop.
    bindings_mark: usize,
    /// Outer locals the loop reassigns (in its own frame).
    assigned: HashSet<usize>,
    /// What each closure made in the loop and kept captures of the outer locals.
    closures: Vec<Vec<Capture>>,
}

pub(super) struct Linter<'c, 's> {
    pub(super) ctx: &'c LintContext,
    pub(super) source: &'s str,
    pub(super) diagnostics: Vec<Diagnostic>,
    scope: Vec<ScopeEntry>,
    pub(super) bindings: Vec<Binding>,
    pub(super) frames: Vec<Frame>,
    pub(super) functions: Vec<FunctionFacts>,
    loops: Vec<Loop>,
    /// Globals the script assigned (already reported), so their uses are not reported again.
    pub(super) assigned_globals: HashSet<String>,
    /// Set just before walking a function literal a global runs before it returns (a step
    /// body, a branch): such a function cannot outlive the loop it is made in.
    pub(super) immediate: bool,
}

/// What a name refers to where it is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Resolved {
    Local(usize),
    Script(usize),
    Global,
}

impl<'c, 's> Linter<'c, 's> {
    fn new(ctx: &'c LintContext, source: &'s str) -> Self {
        let mut linter = Linter {
            ctx,
            source,
            diagnostics: Vec::new(),
            scope: Vec::new(),
            bindings: Vec::new(),
            frames: Vec::new(),
            functions: Vec::new(),
            loops: Vec::new(),
            immediate: false,
            assigned_globals: HashSet::new(),
        };
        for name in SCRIPT_VARIABLES {
            linter.bindings.push(Binding::new(BindingKind::ScriptVariable, 0));
            linter.scope.push(ScopeEntry { name: name.to_owned(), binding: linter.bindings.len() - 1 });
        }
        linter
    }

    // ----- scope -----

    /// What `name` refers to here, recording a capture when it is an outer frame's local.
    pub(super) fn resolve(&mut self, name: &str, pos: Pos) -> Resolved {
        let Some(entry) = self.scope.iter().rev().find(|entry| entry.name == name) else {
            return Resolved::Global;
        };
        let binding = entry.binding;
        let declared = self.bindings[binding];
        if declared.kind == BindingKind::ScriptVariable {
            return Resolved::Script(binding);
        }
        for frame in self.frames.iter_mut().skip(declared.frame + 1) {
            if !frame.captures.iter().any(|capture| capture.binding == binding) {
                frame.captures.push(Capture { binding, name: name.to_owned(), pos });
            }
        }
        Resolved::Local(binding)
    }

    /// What `name` refers to, without recording anything.
    pub(super) fn lookup(&self, name: &str) -> Option<usize> {
        self.scope.iter().rev().find(|entry| entry.name == name).map(|entry| entry.binding)
    }

    /// The name a binding is in scope under.
    pub(super) fn lookup_name(&self, binding: usize) -> Option<String> {
        self.scope.iter().rev().find(|entry| entry.binding == binding).map(|entry| entry.name.clone())
    }

    fn declare(&mut self, name: &str, pos: Pos) -> usize {
        if global(name).is_some() || SCRIPT_VARIABLES.contains(&name) {
            let message = format!("local '{name}' hides the global of that name; rename it");
            self.error_at("forbidden", pos, Some(name.chars().count()), message);
        }
        let frame = self.frames.len().saturating_sub(1);
        self.bindings.push(Binding::new(BindingKind::Local, frame));
        let binding = self.bindings.len() - 1;
        self.scope.push(ScopeEntry { name: name.to_owned(), binding });
        binding
    }

    /// Records a write to a local on every frame between its declaration and here, and on the
    /// loops it was declared outside of when `reassign` (a plain `x = ...`).
    pub(super) fn record_mutation(
        &mut self,
        binding: usize,
        name: &str,
        pos: Pos,
        len: usize,
        what: String,
        reassign: bool,
    ) {
        let declared = self.bindings[binding];
        if declared.kind == BindingKind::ScriptVariable {
            let message =
                format!("'{name}' is read-only; copy what you need into a local first: local a = {name}.x");
            self.error_at("forbidden", pos, Some(len), message);
            return;
        }
        let mutation = Mutation { what, binding, name: name.to_owned(), pos, len };
        for frame in self.frames.iter_mut().skip(declared.frame + 1) {
            frame.escaping.push(mutation.clone());
        }
        if !reassign {
            // A write into the table the local holds: also one into the table it aliases, or
            // into the argument its function was called with.
            self.table_write_through(&mutation);
        }
        if reassign {
            let current = self.frames.len().saturating_sub(1);
            for open in &mut self.loops {
                if open.frame == current && binding < open.bindings_mark {
                    open.assigned.insert(binding);
                }
            }
        }
    }

    // ----- statements -----

    pub(super) fn walk_block(&mut self, block: &Block) {
        let mark = self.scope.len();
        self.walk_block_in_scope(block);
        self.scope.truncate(mark);
    }

    fn walk_block_in_scope(&mut self, block: &Block) {
        for stmt in block.stmts() {
            self.walk_stmt(stmt);
        }
        if let Some(LastStmt::Return(ret)) = block.last_stmt() {
            for expr in ret.returns() {
                self.walk_expr(expr);
            }
        }
    }

    fn walk_stmt(&mut self, stmt: &Stmt) {
        match stmt {
            Stmt::LocalAssignment(local) => {
                let shapes: Vec<Static> =
                    local.expressions().iter().map(|expr| self.walk_expr(expr)).collect();
                let aliases: Vec<Option<usize>> =
                    local.expressions().iter().map(|expr| self.table_of(expr)).collect();
                for (index, name) in local.names().iter().enumerate() {
                    let binding = self.declare(ident(name), token_pos(name));
                    if let Some(Static::Function(Some(id))) = shapes.get(index) {
                        self.bindings[binding].function = Some(*id);
                    }
                    self.bindings[binding].alias = aliases.get(index).copied().flatten();
                }
            }
            Stmt::Assignment(assignment) => {
                for expr in assignment.expressions() {
                    self.walk_expr(expr);
                }
                for var in assignment.variables() {
                    self.walk_target(var);
                }
            }
            Stmt::FunctionCall(call) => {
                self.walk_suffixed(call.prefix(), &call.suffixes().collect::<Vec<_>>());
            }
            Stmt::LocalFunction(function) => {
                let name = function.name();
                let binding = self.declare(ident(name), token_pos(name));
                let id = self.walk_function(function.body(), false);
                self.bindings[binding].function = Some(id);
            }
            Stmt::FunctionDeclaration(declaration) => {
                let name = declaration.name();
                let parts: Vec<_> = name.names().iter().collect();
                let is_method = name.method_name().is_some();
                if let Some(first) = parts.first() {
                    let text = ident(first);
                    let pos = token_pos(first);
                    let len = text.chars().count();
                    match self.resolve(text, pos) {
                        Resolved::Local(binding) => {
                            let plain = parts.len() == 1 && !is_method;
                            self.record_mutation(binding, text, pos, len, "assignment to".to_owned(), plain);
                        }
                        Resolved::Script(binding) => {
                            self.record_mutation(binding, text, pos, len, String::new(), false);
                        }
                        Resolved::Global if parts.len() == 1 && !is_method => {
                            self.global_write(text, pos, true);
                        }
                        Resolved::Global => self.read_global(text, pos, parts.get(1).map(|part| ident(part))),
                    }
                }
                self.walk_function(declaration.body(), is_method);
            }
            Stmt::NumericFor(numeric) => {
                self.walk_expr(numeric.start());
                self.walk_expr(numeric.end());
                if let Some(step) = numeric.step() {
                    self.walk_expr(step);
                }
                self.enter_loop();
                let mark = self.scope.len();
                self.declare(ident(numeric.index_variable()), token_pos(numeric.index_variable()));
                self.walk_block(numeric.block());
                self.scope.truncate(mark);
                self.exit_loop();
            }
            Stmt::GenericFor(generic) => {
                for expr in generic.expressions() {
                    self.walk_expr(expr);
                }
                self.enter_loop();
                let mark = self.scope.len();
                // `for _, t in ipairs(tasks)`: each value the loop binds is an element of tasks.
                let traversed = self.traversed_table(generic);
                for name in generic.names() {
                    let binding = self.declare(ident(name), token_pos(name));
                    self.bindings[binding].alias = traversed;
                }
                self.walk_block(generic.block());
                self.scope.truncate(mark);
                self.exit_loop();
            }
            Stmt::While(while_loop) => {
                self.enter_loop();
                self.walk_expr(while_loop.condition());
                self.walk_block(while_loop.block());
                self.exit_loop();
            }
            Stmt::Repeat(repeat) => {
                self.enter_loop();
                // The `until` condition sees the body's locals.
                let mark = self.scope.len();
                self.walk_block_in_scope(repeat.block());
                self.walk_expr(repeat.until());
                self.scope.truncate(mark);
                self.exit_loop();
            }
            Stmt::If(if_stmt) => {
                self.walk_expr(if_stmt.condition());
                self.walk_block(if_stmt.block());
                for else_if in if_stmt.else_if().into_iter().flatten() {
                    self.walk_expr(else_if.condition());
                    self.walk_block(else_if.block());
                }
                if let Some(block) = if_stmt.else_block() {
                    self.walk_block(block);
                }
            }
            Stmt::Do(do_block) => self.walk_block(do_block.block()),
            _ => {}
        }
    }

    /// The target of an assignment: a name, or a field or index of something.
    fn walk_target(&mut self, var: &Var) {
        match var {
            Var::Name(token) => {
                let name = ident(token);
                let pos = token_pos(token);
                match self.resolve(name, pos) {
                    Resolved::Local(binding) | Resolved::Script(binding) => {
                        let len = name.chars().count();
                        self.record_mutation(binding, name, pos, len, "assignment to".to_owned(), true);
                    }
                    Resolved::Global => self.global_write(name, pos, false),
                }
            }
            Var::Expression(expression) => {
                let suffixes: Vec<&Suffix> = expression.suffixes().collect();
                let (last, path) = match suffixes.split_last() {
                    Some((last, path)) => (Some(*last), path),
                    None => (None, &[][..]),
                };
                self.walk_suffixed(expression.prefix(), path);
                if let Some(Suffix::Index(full_moon::ast::Index::Brackets { expression, .. })) = last {
                    self.walk_expr(expression);
                }
                if let Some(Suffix::Index(full_moon::ast::Index::Dot { name, .. })) = last {
                    self.check_metatable_key(ident(name), token_pos(name));
                }
                if let Prefix::Name(root) = expression.prefix() {
                    let name = ident(root);
                    let pos = token_pos(root);
                    match self.lookup(name) {
                        Some(binding) => {
                            let len = name.chars().count();
                            self.record_mutation(binding, name, pos, len, "assignment to".to_owned(), false);
                        }
                        None if names::library(name).is_some() => {
                            let message = format!(
                                "the {name} library is read-only; keep your own functions in a local table"
                            );
                            self.error_at("forbidden", pos, Some(name.chars().count()), message);
                        }
                        None => {}
                    }
                }
            }
            _ => {}
        }
    }

    /// An assignment to a name no local declares.
    fn global_write(&mut self, name: &str, pos: Pos, function: bool) {
        let len = name.chars().count();
        if global(name).is_some() || names::BASE_FUNCTIONS.contains(&name) || names::library(name).is_some() {
            let message =
                format!("assignment to the global '{name}' replaces it; use a local of another name");
            self.error_at("forbidden", pos, Some(len), message);
            return;
        }
        if let Some(instead) = names::forbidden_global(name) {
            self.error_at("forbidden", pos, Some(len), format!("{name} is not available; {instead}"));
            return;
        }
        self.assigned_globals.insert(name.to_owned());
        let message = if function {
            format!(
                "function '{name}' would be a global; declare it local: local function {name}(...) ... end"
            )
        } else {
            let candidates: Vec<String> = self.scope.iter().map(|entry| entry.name.clone()).collect();
            match suggest::did_you_mean(name, candidates.iter().map(String::as_str)) {
                Some(candidate) => {
                    format!("assignment to undeclared variable '{name}' (did you mean '{candidate}'?)")
                }
                None => format!(
                    "assignment to undeclared variable '{name}'; declare it with local first: local {name} = ..."
                ),
            }
        };
        self.error_at("unknown-variable", pos, Some(len), message);
    }

    fn enter_loop(&mut self) {
        let frame = self.frames.len().saturating_sub(1);
        self.loops.push(Loop {
            frame,
            bindings_mark: self.bindings.len(),
            assigned: HashSet::new(),
            closures: Vec::new(),
        });
    }

    /// Reports each closure made in the loop that captures an outer local the loop reassigns.
    fn exit_loop(&mut self) {
        let Some(done) = self.loops.pop() else { return };
        for captures in &done.closures {
            for capture in captures {
                if done.assigned.contains(&capture.binding) {
                    let name = &capture.name;
                    let message = format!(
                        "closure captures '{name}', which the loop reassigns, by reference, so it sees the value \
                         when it runs, not when it was made; copy it first (local item = {name}) or fan out with \
                         parallel(items, function(item) ... end)"
                    );
                    self.error_at("loop-capture", capture.pos, Some(name.chars().count()), message);
                }
            }
        }
    }

    // ----- expressions -----

    /// Walks an expression and reports what it is, so a `local` can remember a function.
    pub(super) fn walk_expr(&mut self, expr: &Expression) -> Static {
        match expr {
            Expression::BinaryOperator { lhs, binop, rhs } => {
                let left = self.walk_expr(lhs);
                let right = self.walk_expr(rhs);
                let op = binop.token().token().to_string();
                if op == "+" && (is_text(&left) || is_text(&right)) {
                    let message = "+ adds numbers; join text with .. (\"total: \" .. n)".to_owned();
                    self.error_at("foreign-syntax", node_pos(binop), Some(1), message);
                }
                if op == ".." {
                    for (side, shape) in [(lhs, &left), (rhs, &right)] {
                        if matches!(shape, Static::Function(_)) {
                            self.function_text(node_pos(&**side), None);
                        }
                    }
                }
                peek_literal(expr).unwrap_or(Static::Unknown)
            }
            Expression::Parentheses { expression, .. } => self.walk_expr(expression),
            Expression::UnaryOperator { expression, .. } => {
                self.walk_expr(expression);
                peek_literal(expr).unwrap_or(Static::Unknown)
            }
            Expression::Function(function) => {
                Static::Function(Some(self.walk_function(function.body(), false)))
            }
            Expression::FunctionCall(call) => {
                self.walk_suffixed(call.prefix(), &call.suffixes().collect::<Vec<_>>())
            }
            Expression::TableConstructor(table) => {
                self.walk_table(table);
                peek_literal(expr).unwrap_or(Static::Unknown)
            }
            Expression::Var(Var::Name(token)) => {
                let name = ident(token);
                let pos = token_pos(token);
                match self.resolve(name, pos) {
                    Resolved::Local(binding) => match self.bindings[binding].function {
                        Some(id) => Static::Function(Some(id)),
                        None => Static::Unknown,
                    },
                    Resolved::Script(_) => Static::Unknown,
                    Resolved::Global => {
                        self.read_global(name, pos, None);
                        Static::Unknown
                    }
                }
            }
            Expression::Var(Var::Expression(var)) => {
                self.walk_suffixed(var.prefix(), &var.suffixes().collect::<Vec<_>>())
            }
            _ => peek_literal(expr).unwrap_or(Static::Unknown),
        }
    }

    pub(super) fn walk_table(&mut self, table: &TableConstructor) {
        for field in table.fields() {
            match field {
                Field::NoKey(value) => {
                    self.walk_expr(value);
                }
                Field::NameKey { key, value, .. } => {
                    self.check_metatable_key(ident(key), token_pos(key));
                    self.walk_expr(value);
                }
                Field::ExpressionKey { key, value, .. } => {
                    if let Expression::String(token) = &**key
                        && let Some(text) = string_literal(token)
                    {
                        self.check_metatable_key(&text, token_pos(token));
                    }
                    self.walk_expr(key);
                    self.walk_expr(value);
                }
                _ => {}
            }
        }
    }

    /// `__gc` and `__mode` make what runs, or what a table holds, depend on the garbage collector.
    fn check_metatable_key(&mut self, key: &str, pos: Pos) {
        let instead = match key {
            "__gc" => {
                "a __gc finalizer runs whenever the garbage collector decides, so a run could not replay it; \
                       do the work where it is needed (a <close> variable runs at scope exit)"
            }
            "__mode" => {
                "a weak table loses entries whenever the garbage collector decides, so a run could not \
                         replay it; use an ordinary table"
            }
            _ => return,
        };
        self.error_at(
            "forbidden",
            pos,
            Some(key.chars().count()),
            format!("{key} is not available; {instead}"),
        );
    }

    /// Reads a name no local declares: a cairn global, a kept builtin or library, or an error.
    /// `member` is the field read right after it, for a specific message (`os.time`).
    pub(super) fn read_global(&mut self, name: &str, pos: Pos, member: Option<&str>) {
        let len = name.chars().count();
        if global(name).is_some()
            || self.assigned_globals.contains(name)
            || names::BASE_FUNCTIONS.contains(&name)
            || names::BASE_VALUES.contains(&name)
            || names::library(name).is_some()
        {
            return;
        }
        if let Some(member) = member
            && let Some(instead) = names::forbidden_member(name, member)
        {
            let message = format!("{name}.{member} is not available; {instead}");
            self.error_at("forbidden", pos, Some(len + 1 + member.chars().count()), message);
            return;
        }
        if let Some(instead) = names::forbidden_global(name) {
            self.error_at("forbidden", pos, Some(len), format!("{name} is not available; {instead}"));
            return;
        }
        let (foreign, message) = self.unknown_name_message("variable", name, pos);
        let rule = if foreign { "foreign-syntax" } else { "unknown-variable" };
        self.error_at(rule, pos, Some(len), message);
    }

    /// "unknown variable 'x' (did you mean 'y'?)", or with what to write instead; true when
    /// the name is a habit from another language (a `foreign-syntax` finding).
    pub(super) fn unknown_name_message(&self, kind: &str, name: &str, pos: Pos) -> (bool, String) {
        if kind == "variable" && self.after_floor_division(pos) {
            let message =
                format!("unknown variable '{name}'; comments start with -- in Lua (// is floor division)");
            return (true, message);
        }
        if let Some(hint) = names::foreign_global_hint(name) {
            return (true, format!("unknown {kind} '{name}'; {hint}"));
        }
        let locals: Vec<&str> = self.scope.iter().map(|entry| entry.name.as_str()).collect();
        let candidates = locals
            .iter()
            .copied()
            .chain(GLOBALS.iter().map(|global| global.name))
            .chain(names::BASE_FUNCTIONS.iter().copied())
            .chain(names::LIBRARIES.iter().map(|(library, _)| *library));
        let message = match suggest::did_you_mean(name, candidates) {
            Some(candidate) => format!("unknown {kind} '{name}' (did you mean '{candidate}'?)"),
            None if kind == "variable" => {
                format!("unknown variable '{name}'; declare it with local first (the run's input is args)")
            }
            None => format!(
                "unknown function '{name}'; the globals are {}, and Lua's string, table, math and utf8 libraries",
                GLOBALS.iter().map(|global| global.name).collect::<Vec<_>>().join(", ")
            ),
        };
        (false, message)
    }

    /// Whether the text before `pos` on its line ends with `//`: a comment written the C way,
    /// which Lua reads as floor division by the words after it.
    fn after_floor_division(&self, pos: Pos) -> bool {
        let Some(line) = self.source.lines().nth(pos.0.saturating_sub(1) as usize) else { return false };
        let before: String = line.chars().take(pos.1.saturating_sub(1) as usize).collect();
        before.trim_end().ends_with("//")
    }

    /// Walks a function body in a new frame and returns the index of what was learned.
    /// `method` declares the implicit `self`.
    pub(super) fn walk_function(&mut self, body: &FunctionBody, method: bool) -> usize {
        let immediate = std::mem::take(&mut self.immediate);
        let mark = self.scope.len();
        self.frames.push(Frame::default());
        if method {
            let frame = self.frames.len() - 1;
            self.bindings.push(Binding::new(BindingKind::Local, frame));
            self.scope.push(ScopeEntry { name: "self".to_owned(), binding: self.bindings.len() - 1 });
        }
        for (index, parameter) in body.parameters().iter().enumerate() {
            if let Parameter::Name(name) = parameter {
                let binding = self.declare(ident(name), token_pos(name));
                self.bindings[binding].param = Some(index);
            }
        }
        self.walk_block(body.block());
        let frame = self.frames.pop().unwrap_or_default();
        self.scope.truncate(mark);
        if !immediate {
            for open in &mut self.loops {
                let captured: Vec<Capture> = frame
                    .captures
                    .iter()
                    .filter(|capture| capture.binding < open.bindings_mark)
                    .cloned()
                    .collect();
                if !captured.is_empty() {
                    open.closures.push(captured);
                }
            }
        }
        let made_in = self.frames.len().saturating_sub(1);
        self.functions.push(FunctionFacts {
            escaping: frame.escaping,
            param_writes: frame.param_writes,
            frame: made_in,
        });
        self.functions.len() - 1
    }

    // ----- reporting -----

    pub(super) fn error_at(&mut self, rule_id: &str, pos: Pos, len: Option<usize>, message: String) {
        self.report(Severity::Error, rule_id, pos, len, message);
    }

    pub(super) fn report(
        &mut self,
        severity: Severity,
        rule_id: &str,
        pos: Pos,
        len: Option<usize>,
        message: String,
    ) {
        let mut diagnostic = span_diagnostic(rule_id, message, pos.0, pos.1, len);
        diagnostic.severity = severity;
        self.diagnostics.push(diagnostic);
    }

    /// Text made from a function: its address, different in every process.
    pub(super) fn function_text(&mut self, pos: Pos, len: Option<usize>) {
        let message = "a function's text is its address, which differs in every process, so a run using it \
                       could not be replayed; put what the text should say in a string (or call the function \
                       and use its result)"
            .to_owned();
        self.error_at("closure-text", pos, len, message);
    }
}

/// Whether a shape is text.
fn is_text(shape: &Static) -> bool {
    matches!(shape, Static::Known(serde_json::Value::String(_)) | Static::Type("string"))
}

/// Where any node starts (re-exported for the call checks).
pub(super) fn pos_of(node: &impl Node) -> Pos {
    node_pos(node)
}

impl Linter<'_, '_> {
    /// Reports every write a step body makes to a local from outside it: a replay serves the
    /// step's value without running the body, so the write would be lost (the runtime refuses
    /// it too: what a step body captured is read-only inside it).
    pub(super) fn report_step_writes(&mut self, function: Option<usize>) {
        let Some(facts) = function.and_then(|id| self.functions.get(id)) else { return };
        let messages: Vec<(Pos, usize, String)> = facts
            .escaping
            .iter()
            .map(|m| (m.pos, m.len, crate::script::captured::step_write_message(&m.what, &m.name)))
            .collect();
        for (pos, len, message) in messages {
            self.error_at("step-capture-assign", pos, Some(len), message);
        }
    }
}
