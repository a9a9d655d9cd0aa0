//! Calls and field paths: cairn globals checked against their signatures and option schemas,
//! the names they refer to, the kept parts of Lua's standard library, the writes a call makes
//! to the table it is given, and the functions the sandbox leaves out on purpose.

mod check;

use full_moon::ast::{Call, Expression, Field, FunctionArgs, Index, Prefix, Suffix, TableConstructor};
use full_moon::tokenizer::TokenReference;
use serde_json::Value;

use super::names::{self, BUDGET_METHODS};
use super::values::{
    Pos, Static, ident, lua_article, peek_literal, peek_table, string_literal, token_pos, type_phrase,
};
use super::walk::{BindingKind, Linter, Resolved, pos_of};
use crate::script::args_check::{ArgKey, ArgsProblem, Form, workflow_args_problems};
use crate::script::call_check::{self, Place, Problem, Seen, Words};
use crate::script::schema_check::{self, Registry, Shape, registered_problem};
use crate::script::{Global, Param, ParamKind, Severity, global, suggest};

/// One argument of a call, in any of Lua's three call forms.
#[derive(Debug, Clone, Copy)]
pub(super) enum Arg<'a> {
    Expr(&'a Expression),
    /// `f "text"`.
    Str(&'a TokenReference),
    /// `f {...}`.
    Table(&'a TableConstructor),
}

impl<'a> Arg<'a> {
    fn pos(&self) -> Pos {
        match self {
            Arg::Expr(expr) => pos_of(*expr),
            Arg::Str(token) => token_pos(token),
            Arg::Table(table) => pos_of(*table),
        }
    }

    fn table(&self) -> Option<&'a TableConstructor> {
        match self {
            Arg::Expr(Expression::TableConstructor(table)) => Some(table),
            Arg::Table(table) => Some(table),
            _ => None,
        }
    }

    fn is_function_literal(&self) -> bool {
        matches!(self, Arg::Expr(Expression::Function(_)))
    }

    /// The literal string it is, with its position.
    fn string(&self) -> Option<(String, Pos)> {
        let token: &TokenReference = match *self {
            Arg::Expr(Expression::String(token)) | Arg::Str(token) => token,
            _ => return None,
        };
        Some((string_literal(token)?, token_pos(token)))
    }

    /// A root local or global name it is (`x` or `x.y[1]`), for writes through calls.
    pub(super) fn root_name(&self) -> Option<&'a TokenReference> {
        match self {
            Arg::Expr(Expression::Var(full_moon::ast::Var::Name(token))) => Some(token),
            Arg::Expr(Expression::Var(full_moon::ast::Var::Expression(var))) => match var.prefix() {
                Prefix::Name(token) => Some(token),
                _ => None,
            },
            _ => None,
        }
    }
}

fn args_of(args: &FunctionArgs) -> (Vec<Arg<'_>>, bool) {
    match args {
        FunctionArgs::Parentheses { arguments, .. } => {
            let list: Vec<Arg<'_>> = arguments.iter().map(Arg::Expr).collect();
            // A call or `...` last expands to any number of values.
            let open = match arguments.iter().last() {
                Some(Expression::FunctionCall(_)) => true,
                Some(Expression::Symbol(token)) => token.token().to_string() == "...",
                _ => false,
            };
            (list, open)
        }
        FunctionArgs::String(token) => (vec![Arg::Str(token)], false),
        FunctionArgs::TableConstructor(table) => (vec![Arg::Table(table)], false),
        _ => (Vec::new(), true),
    }
}

/// What a call's callee is, as far as a field path shows it.
#[derive(Debug, Clone)]
enum Callee {
    /// A local holding a function (or anything), by binding.
    Local(usize),
    /// A cairn global.
    Global(&'static Global),
    /// A kept base function (`tostring`, `pairs`, ...).
    Base(String),
    /// A function of a kept library (`table.insert`).
    Member(String, String),
    /// `budget.spent` or `budget.remaining`.
    Budget,
    /// Anything else.
    Unknown,
}

impl Linter<'_, '_> {
    /// Walks `prefix` followed by `suffixes` (a call, a field read, a method call chain) and
    /// checks every call in it.
    pub(super) fn walk_suffixed(&mut self, prefix: &Prefix, suffixes: &[&Suffix]) -> Static {
        let mut callee = Callee::Unknown;
        // The root name when the path so far is `name` or `name.field`.
        let mut path: Option<(String, Pos, Option<String>)> = None;
        let mut root: Option<(String, Pos)> = None;
        let mut shape = Static::Unknown;
        match prefix {
            Prefix::Name(token) => {
                let name = ident(token).to_owned();
                let pos = token_pos(token);
                let called_directly = matches!(suffixes.first(), Some(Suffix::Call(Call::AnonymousCall(_))));
                let member = match suffixes.first() {
                    Some(Suffix::Index(Index::Dot { name, .. })) => Some(ident(name).to_owned()),
                    _ => None,
                };
                let computed_global_index = matches!(name.as_str(), "_G" | "_ENV")
                    && matches!(suffixes.first(), Some(Suffix::Index(Index::Brackets { expression, .. }))
                        if !matches!(**expression, Expression::String(_)));
                match self.resolve(&name, pos) {
                    Resolved::Local(binding) => {
                        callee = Callee::Local(binding);
                        if let Some(id) = self.bindings[binding].function {
                            shape = Static::Function(Some(id));
                        }
                    }
                    Resolved::Script(_) => {}
                    Resolved::Global if computed_global_index => {
                        let message = format!(
                            "{name}[...] with a computed name hides from lint which function runs (a global such \
                             as parallel reached this way escapes every check); call the function by name"
                        );
                        self.error_at("dynamic-fn", pos, Some(name.chars().count()), message);
                    }
                    Resolved::Global => {
                        if let Some(global) = global(&name) {
                            callee = Callee::Global(global);
                        } else if names::BASE_FUNCTIONS.contains(&name.as_str()) {
                            callee = Callee::Base(name.clone());
                        } else if called_directly
                            && !self.assigned_globals.contains(&name)
                            && names::library(&name).is_none()
                            && names::forbidden_global(&name).is_none()
                            && !names::BASE_VALUES.contains(&name.as_str())
                        {
                            let (foreign, message) = self.unknown_name_message("function", &name, pos);
                            let rule = if foreign { "foreign-syntax" } else { "unknown-function" };
                            self.error_at(rule, pos, Some(name.chars().count()), message);
                        } else {
                            self.read_global(&name, pos, member.as_deref());
                        }
                    }
                }
                root = Some((name.clone(), pos));
                path = Some((name, pos, None));
            }
            Prefix::Expression(expr) => {
                shape = self.walk_expr(expr);
            }
            _ => {}
        }
        for suffix in suffixes {
            match suffix {
                Suffix::Index(Index::Dot { name, .. }) => {
                    let field = ident(name).to_owned();
                    path = match path.take() {
                        Some((root_name, root_pos, None)) => {
                            callee = self.member_callee(&root_name, root_pos, &field, name);
                            Some((root_name, root_pos, Some(field)))
                        }
                        _ => {
                            callee = Callee::Unknown;
                            None
                        }
                    };
                    shape = Static::Unknown;
                }
                Suffix::Index(Index::Brackets { expression, .. }) => {
                    self.walk_expr(expression);
                    path = None;
                    callee = Callee::Unknown;
                    shape = Static::Unknown;
                }
                Suffix::Call(Call::AnonymousCall(args)) => {
                    let (args, open) = args_of(args);
                    let pos = path.as_ref().map_or_else(|| args.first().map_or((1, 1), Arg::pos), |p| p.1);
                    shape = self.visit_call(&callee, &args, open, pos);
                    path = None;
                    callee = Callee::Unknown;
                }
                Suffix::Call(Call::MethodCall(method)) => {
                    let name = ident(method.name());
                    let pos = token_pos(method.name());
                    let (args, _) = args_of(method.args());
                    self.visit_method(name, pos, root.as_ref(), path.is_some());
                    self.walk_args(&args);
                    path = None;
                    callee = Callee::Unknown;
                    shape = Static::Unknown;
                }
                _ => {}
            }
        }
        shape
    }

    /// The callee `root.field` names, reporting fields of libraries that do not exist or are
    /// left out.
    fn member_callee(
        &mut self,
        root: &str,
        root_pos: Pos,
        field: &str,
        field_token: &TokenReference,
    ) -> Callee {
        if self.lookup(root).is_some() && root != "budget" {
            return Callee::Unknown;
        }
        if root == "budget"
            && self
                .lookup("budget")
                .is_some_and(|b| self.bindings[b].kind == super::walk::BindingKind::ScriptVariable)
        {
            if BUDGET_METHODS.contains(&field) {
                return Callee::Budget;
            }
            let message = format!("budget has no '{field}'; it has spent() and remaining()");
            self.error_at("unknown-function", token_pos(field_token), Some(field.chars().count()), message);
            return Callee::Unknown;
        }
        let Some(functions) = names::library(root) else { return Callee::Unknown };
        if let Some(instead) = names::forbidden_member(root, field) {
            let message = format!("{root}.{field} is not available; {instead}");
            let len = root.chars().count() + 1 + field.chars().count();
            self.error_at("forbidden", root_pos, Some(len), message);
            return Callee::Unknown;
        }
        if functions.contains(&field) {
            return Callee::Member(root.to_owned(), field.to_owned());
        }
        let full = format!("{root}.{field}");
        let (rule, message) = match names::foreign_member_hint(root, field) {
            Some(hint) => ("foreign-syntax", format!("unknown function '{full}'; {hint}")),
            None => match suggest::did_you_mean(field, functions.iter().copied()) {
                Some(candidate) => (
                    "unknown-function",
                    format!("unknown function '{full}' (did you mean '{root}.{candidate}'?)"),
                ),
                None => (
                    "unknown-function",
                    format!("unknown function '{full}'; the {root} library has {}", functions.join(", ")),
                ),
            },
        };
        self.error_at(rule, token_pos(field_token), Some(field.chars().count()), message);
        Callee::Unknown
    }

    /// A method call `x:name(...)`: a write to `x` unless it is a string method, and a hint for
    /// methods other languages have.
    fn visit_method(&mut self, name: &str, pos: Pos, root: Option<&(String, Pos)>, on_path: bool) {
        if names::is_string_method(name) {
            return;
        }
        if let Some(hint) = names::foreign_method_hint(name)
            && !self.defines_method(name)
        {
            self.error_at(
                "foreign-syntax",
                pos,
                Some(name.chars().count()),
                format!("unknown method ':{name}'; {hint}"),
            );
            return;
        }
        if let Some((root_name, _)) = root
            && on_path
            && let Some(binding) = self.lookup(root_name)
            // A method of `args` or `budget` reads them (`budget:spent()`); writes are direct.
            && self.bindings[binding].kind != BindingKind::ScriptVariable
        {
            let len = name.chars().count();
            self.record_mutation(binding, root_name, pos, len, format!(":{name}() on"), false);
        }
    }

    /// Whether the script defines a function field or method of this name anywhere.
    fn defines_method(&self, name: &str) -> bool {
        self.source.lines().any(|line| {
            (line.contains("function")
                && (line.contains(&format!(":{name}(")) || line.contains(&format!(".{name}("))))
                || line.contains(&format!("{name} = function"))
                || line.contains(&format!("{name}=function"))
        })
    }

    pub(super) fn walk_args(&mut self, args: &[Arg<'_>]) {
        for arg in args {
            self.walk_arg(arg);
        }
    }

    fn walk_arg(&mut self, arg: &Arg<'_>) -> Static {
        match arg {
            Arg::Expr(expr) => self.walk_expr(expr),
            Arg::Str(token) => match string_literal(token) {
                Some(text) => Static::Known(Value::String(text)),
                None => Static::Type("string"),
            },
            Arg::Table(table) => {
                self.walk_table(table);
                peek_table(table)
            }
        }
    }

    /// Checks the args of `workflow(name, args)` against the child's schema, when they are a
    /// table constructor: its `name = value` and `["name"] = value` fields (any other field
    /// hides which keys it has, so nothing is reported missing).
    fn check_workflow_args(&mut self, name: &str, arg: &Arg<'_>) {
        let Some(table) = arg.table() else { return };
        let mut complete = true;
        let mut fields: Vec<(String, Pos, Pos, Static)> = Vec::new();
        for field in table.fields() {
            let (key, key_pos, value) = match field {
                Field::NameKey { key, value, .. } => (ident(key).to_owned(), token_pos(key), &**value),
                Field::ExpressionKey { key, value, .. } => match &**key {
                    Expression::String(token) => match string_literal(token) {
                        Some(text) => (text, token_pos(token), &**value),
                        None => {
                            complete = false;
                            continue;
                        }
                    },
                    _ => {
                        complete = false;
                        continue;
                    }
                },
                _ => {
                    complete = false;
                    continue;
                }
            };
            let shape = self.peek_arg(&Arg::Expr(value));
            fields.push((key, key_pos, pos_of(value), shape));
        }
        let keys: Vec<ArgKey<'_>> = fields
            .iter()
            .map(|(key, _, _, shape)| ArgKey {
                name: key,
                value: match shape {
                    Static::Known(known) => Shape::Known(known),
                    Static::Type(found) => Shape::Type(found),
                    Static::EmptyTable | Static::Function(_) | Static::Unknown => Shape::Opaque,
                },
            })
            .collect();
        let form = Form { assign: " = ", map: "table", article: lua_article };
        let problems = workflow_args_problems(self.ctx, name, &keys, complete, form);
        for problem in problems {
            match problem {
                ArgsProblem::Map(message) => self.error_at("workflow-args", arg.pos(), None, message),
                ArgsProblem::Key(index, message) => {
                    let (key, pos, _, _) = &fields[index];
                    self.error_at("workflow-args", *pos, Some(key.chars().count()), message);
                }
                ArgsProblem::Value(index, message) => {
                    let pos = fields[index].2;
                    self.error_at("workflow-args", pos, None, message);
                }
            }
        }
    }

    /// What an argument is, without walking it.
    fn peek_arg(&self, arg: &Arg<'_>) -> Static {
        match arg {
            Arg::Expr(Expression::Var(full_moon::ast::Var::Name(token))) => {
                match self.lookup(ident(token)).and_then(|binding| self.bindings[binding].function) {
                    Some(id) => Static::Function(Some(id)),
                    None => Static::Unknown,
                }
            }
            Arg::Expr(expr) => peek_literal(expr).unwrap_or(Static::Unknown),
            Arg::Str(token) => match string_literal(token) {
                Some(text) => Static::Known(Value::String(text)),
                None => Static::Type("string"),
            },
            Arg::Table(table) => peek_table(table),
        }
    }

    /// Checks a call by what its callee is, and walks its arguments.
    fn visit_call(&mut self, callee: &Callee, args: &[Arg<'_>], open: bool, pos: Pos) -> Static {
        match callee {
            Callee::Global(global) => return self.check_global(global, args, open, pos),
            Callee::Local(binding) => {
                self.closure_call_writes(*binding, pos);
                self.argument_writes(*binding, args);
            }
            Callee::Base(name) if name == "tostring" => {
                if let Some(first) = args.first()
                    && matches!(self.peek_arg(first), Static::Function(_))
                {
                    self.function_text(first.pos(), None);
                }
                self.walk_args(args);
                return Static::Type("string");
            }
            Callee::Member(library, name) => {
                let target = match (library.as_str(), name.as_str()) {
                    ("table", "insert" | "remove" | "sort") => args.first(),
                    ("table", "move") => args.get(4).or_else(|| args.first()),
                    _ => None,
                };
                if let Some(token) = target.and_then(Arg::root_name) {
                    let root = ident(token);
                    if let Some(binding) = self.lookup(root) {
                        let what = format!("{library}.{name}() on");
                        self.record_mutation(
                            binding,
                            root,
                            token_pos(token),
                            root.chars().count(),
                            what,
                            false,
                        );
                    }
                }
                if library == "string" && name == "format" {
                    for arg in args.iter().skip(1) {
                        if matches!(self.peek_arg(arg), Static::Function(_)) {
                            self.function_text(arg.pos(), None);
                        }
                    }
                }
            }
            Callee::Base(_) | Callee::Budget | Callee::Unknown => {}
        }
        self.callback_writes(args, pos);
        self.walk_args(args);
        Static::Unknown
    }

    /// A call of the function a local holds: each write it makes to a local from outside it
    /// happens here too.
    pub(super) fn closure_call_writes(&mut self, binding: usize, pos: Pos) {
        let Some(facts) = self.bindings[binding].function.and_then(|id| self.functions.get(id)) else {
            return;
        };
        // Called through a local declared deeper than the function was made (`local r = note`
        // inside a branch), its writes still escape every body in between.
        let callee_frame = self.bindings[binding].frame.min(facts.frame);
        let name = self.binding_name(binding);
        let mutations: Vec<_> = facts.escaping.clone();
        for mutation in mutations {
            let declared = self.bindings[mutation.binding].frame;
            let relayed = super::walk::Mutation {
                what: format!("calling '{name}', which writes"),
                pos,
                len: name.chars().count(),
                ..mutation
            };
            for frame in self.frames.iter_mut().skip(declared.max(callee_frame) + 1) {
                frame.escaping.push(relayed.clone());
            }
        }
    }

    fn binding_name(&self, binding: usize) -> String {
        self.lookup_name(binding).unwrap_or_else(|| "function".to_owned())
    }
}
