//! The Rhai call bound's pre-scan: the script's functions and closures by name, and the
//! variables written anywhere (whose values the walk treats as unknown).

use std::collections::{HashMap, HashSet};

use ::rhai::{AST, ASTNode, Dynamic, Expr, FnPtr, ImmutableString, Stmt, StmtBlock};

use crate::script::rhai::sandbox::MUTATING_METHODS;

// ----- functions -----

/// A script function's (or closure's) parameters and top-level statements.
pub(super) struct Body {
    pub(super) params: Vec<ImmutableString>,
    pub(super) statements: Vec<Stmt>,
}

/// The script's functions by name and arity, and closures by name.
pub(super) struct Functions {
    pub(super) bodies: HashMap<(ImmutableString, usize), Body>,
    pub(super) by_name: HashMap<ImmutableString, Vec<usize>>,
}

impl Functions {
    pub(super) fn of(ast: &AST) -> Functions {
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

    pub(super) fn has(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }
}

// ----- the pre-scan: variables written anywhere -----

/// Collects the names of variables assigned or changed in place anywhere in the statement.
pub(super) fn scan_stmt(stmt: &Stmt, functions: &Functions, out: &mut HashSet<ImmutableString>) {
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

pub(super) fn scan_block(block: &StmtBlock, functions: &Functions, out: &mut HashSet<ImmutableString>) {
    for stmt in block.statements() {
        scan_stmt(stmt, functions, out);
    }
}

pub(super) fn scan_expr(expr: &Expr, functions: &Functions, out: &mut HashSet<ImmutableString>) {
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
pub(super) fn chain_calls(expr: &Expr, pick: &dyn Fn(&str) -> bool) -> bool {
    match expr {
        Expr::MethodCall(call, _) => pick(call.name.as_str()),
        Expr::Dot(chain, ..) | Expr::Index(chain, ..) => {
            chain_calls(&chain.lhs, pick) || chain_calls(&chain.rhs, pick)
        }
        _ => false,
    }
}

/// The leftmost variable of an assignment target or chain.
pub(super) fn root_name(expr: &Expr) -> Option<ImmutableString> {
    match expr {
        Expr::Variable(variable, ..) => Some(variable.1.clone()),
        Expr::Dot(chain, ..) | Expr::Index(chain, ..) => root_name(&chain.lhs),
        _ => None,
    }
}

/// The anonymous function a function-pointer constant names, if it is a closure.
pub(super) fn closure_name(value: &Dynamic) -> Option<ImmutableString> {
    let pointer = value.read_lock::<FnPtr>()?;
    pointer.is_anonymous().then(|| pointer.fn_name().into())
}

/// The block Rhai builds for a capturing closure: `Share(captured…)` then
/// `curry(Fn("anon$…"), captured…)`: the function's name and the captured variables.
pub(super) fn closure_parts(block: &StmtBlock) -> Option<(ImmutableString, Vec<&Expr>)> {
    let [Stmt::Share(_), Stmt::Expr(expr)] = block.statements() else { return None };
    let Expr::FnCall(call, _) = &**expr else { return None };
    if call.name.as_str() != "curry" {
        return None;
    }
    let (first, captured) = call.args.split_first()?;
    let Expr::DynamicConstant(pointer, _) = first else { return None };
    Some((closure_name(pointer)?, captured.iter().collect()))
}
