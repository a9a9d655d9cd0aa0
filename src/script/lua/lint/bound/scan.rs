//! The pre-scan of the Lua call bound: the names whose value may change after they are bound,
//! anywhere in the script.

use std::collections::HashSet;

use full_moon::ast::{
    Block, Call, Expression, Field, FunctionArgs, Index, LastStmt, Prefix, Stmt, Suffix, TableConstructor,
    Var,
};

use crate::script::lua::lint::values::ident;

/// Collects the names whose value may change after they are bound, anywhere in the script:
/// assigned, the root of an assignment target (`t.x = ...`), the receiver of a method call,
/// an argument of a call that may change it (anything but the read-only functions), or
/// aliased (bound to another name or put in a table, where a change through the alias is out
/// of sight). The analysis treats an assigned name as unknown everywhere, and a changed one
/// as unknown unless it holds a string, number or boolean (which no reference can change).
#[derive(Debug, Default)]
pub(super) struct Changes {
    pub(super) assigned: HashSet<String>,
    pub(super) referenced: HashSet<String>,
}

pub(super) fn scan_block(block: &Block, out: &mut Changes) {
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
