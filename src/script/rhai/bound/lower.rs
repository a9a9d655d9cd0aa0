//! The Rhai front end of the cost bound: a parsed script lowered into the bound's shape
//! (`script/bound/shape.rs`), which the one analysis walks.
//!
//! Rhai's reading of each construct: a `for` loop iterates the elements of a value (an
//! array, a string's characters, a range), a condition known before the run picks its
//! branch, functions are global by name and arity and see only their parameters, a closure
//! captures the variables it names, `args` is followed by reference along a literal path,
//! and a call by name is the script's function, a cairn global, a closure a variable holds,
//! or a builtin, in that order.

use std::collections::{HashMap, HashSet};

use ::rhai::{AST, Expr, FnCallExpr, ImmutableString, Position, Stmt, StmtBlock};
use serde_json::Value;

use super::scan::{Functions, closure_name, closure_parts};
use crate::script::bound::reason::{Construct, Place};
use crate::script::bound::shape::{
    Access, Block, Change, Dialect, Effect, FnValue, For, Function, Kind, LogicOp, Node, Over, Pos, Root,
    SeesArgs, Shape, While,
};
use crate::script::rhai::diagnostic::line_column;

/// Functions Rhai calls by itself: an interpolation or a string `+` calls `to_string`.
const IMPLICIT_NAMES: &[&str] = &["to_string", "to_debug", "print", "debug"];

/// The shape of a parsed script, given its functions and the variables it writes anywhere.
pub(super) fn lower(ast: &AST, functions: &Functions, mutated: &HashSet<ImmutableString>) -> Shape {
    let mut lowered = Vec::new();
    let mut named: HashMap<String, Vec<usize>> = HashMap::new();
    for (name, arities) in &functions.by_name {
        for arity in arities {
            let Some(body) = functions.bodies.get(&(name.clone(), *arity)) else { continue };
            let sees_args = if name.starts_with("anon$") { SeesArgs::AsCaller } else { SeesArgs::Never };
            lowered.push(Function {
                params: body.params.iter().map(ToString::to_string).collect(),
                body: statements(&body.statements, (1, 1)),
                sees_args,
            });
            named.entry(name.to_string()).or_default().push(lowered.len() - 1);
        }
    }
    let mut implicit: Vec<String> = functions
        .by_name
        .keys()
        .filter(|name| {
            !name.starts_with("anon$")
                && (!name.chars().all(|c| c.is_alphanumeric() || c == '_')
                    || IMPLICIT_NAMES.contains(&name.as_str()))
        })
        .map(ToString::to_string)
        .collect();
    implicit.sort();
    Shape {
        main: statements(ast.statements(), (1, 1)),
        functions: lowered,
        named,
        implicit,
        changed: mutated.iter().map(|name| (name.to_string(), Change::Always)).collect(),
        args_known: !mutated.contains("args"),
        dialect: Dialect::Rhai,
    }
}

fn pos(position: Position) -> Pos {
    line_column(position)
}

fn statements(stmts: &[Stmt], at: Pos) -> Block {
    Block { stmts: stmts.iter().map(stmt).collect(), ret: None, at }
}

fn block(block: &StmtBlock) -> Block {
    statements(block.statements(), pos(block.position()))
}

fn stmt(stmt: &Stmt) -> Node {
    let kind = match stmt {
        Stmt::Var(var, _, at) => {
            let (ident, init, _) = &**var;
            Kind::Let { names: vec![(ident.name.to_string(), pos(*at))], values: vec![expr(init)] }
        }
        Stmt::Assignment(assignment) => {
            let (_, binary) = &**assignment;
            Kind::Seq(vec![
                Effect {
                    node: expr(&binary.rhs),
                    lose: Some((pos(binary.rhs.position()), Place::Unfollowed)),
                },
                Effect { node: expr(&binary.lhs), lose: None },
            ])
        }
        Stmt::FnCall(call, _) => call_kind(call, false),
        Stmt::Expr(inner) => Kind::Also(Box::new(expr(inner))),
        Stmt::Block(inner) => Kind::Block(block(inner)),
        Stmt::If(flow, _) => Kind::If {
            cond: Box::new(expr(&flow.expr)),
            then: block(&flow.body),
            else_ifs: Vec::new(),
            otherwise: block(&flow.branch),
        },
        Stmt::While(flow, at) | Stmt::Do(flow, _, at) => {
            let what = match (stmt, &flow.expr) {
                (Stmt::While(..), Expr::Unit(_)) => Construct::Loop,
                (Stmt::While(..), _) => Construct::While,
                _ => Construct::Do,
            };
            Kind::While(While {
                cond: Box::new(expr(&flow.expr)),
                body: block(&flow.body),
                runs_once: matches!(stmt, Stmt::Do(..)),
                what,
                at: pos(*at),
            })
        }
        Stmt::For(for_loop, at) => {
            let (variable, counter, flow) = &**for_loop;
            let mut names = vec![(variable.name.to_string(), pos(*at))];
            if let Some(counter) = counter {
                names.push((counter.name.to_string(), pos(*at)));
            }
            Kind::For(For {
                over: Over::Elements(Box::new(expr(&flow.expr))),
                names,
                body: block(&flow.body),
                at: pos(*at),
            })
        }
        Stmt::TryCatch(flow, _) => {
            let at = pos(flow.expr.position());
            let catch = match &flow.expr {
                Expr::Variable(variable, ..) => Some((variable.1.to_string(), at)),
                _ => None,
            };
            Kind::Try { body: block(&flow.body), catch, handler: block(&flow.branch), at }
        }
        Stmt::Switch(switch, _) => {
            let (subject, cases) = &**switch;
            Kind::Switch {
                subject: Box::new(expr(subject)),
                cases: cases.expressions.iter().map(|case| (expr(&case.lhs), expr(&case.rhs))).collect(),
            }
        }
        Stmt::Return(Some(value), ..) | Stmt::BreakLoop(Some(value), ..) => {
            Kind::Return { values: vec![expr(value)], checked: true }
        }
        Stmt::Import(import, _) => Kind::Drop(Box::new(expr(&import.0))),
        _ => Kind::Const(Value::Null),
    };
    Node::new(pos(stmt.position()), kind)
}

/// A call: an operator, a function call, or (with `method`) a method call whose receiver
/// is not known.
fn call_kind(call: &FnCallExpr, method: bool) -> Kind {
    let args = call.args.iter().map(expr).collect();
    if call.op_token.is_some() {
        Kind::Operator { name: call.name.to_string(), args }
    } else {
        Kind::Call { name: call.name.to_string(), args, method }
    }
}

fn expr(expr: &Expr) -> Node {
    let at = pos(expr.position());
    let kind = match expr {
        Expr::StringConstant(text, _) => Kind::Const(Value::String(text.to_string())),
        Expr::CharConstant(c, _) => Kind::Const(Value::String(c.to_string())),
        Expr::IntegerConstant(n, _) => Kind::Const(Value::from(*n)),
        Expr::FloatConstant(f, _) => match serde_json::Number::from_f64(**f) {
            Some(number) => Kind::Const(Value::Number(number)),
            None => Kind::Unknown,
        },
        Expr::BoolConstant(b, _) => Kind::Const(Value::Bool(*b)),
        Expr::Unit(_) => Kind::Const(Value::Null),
        Expr::DynamicConstant(value, _) => match closure_name(value) {
            Some(name) => Kind::Function(FnValue::Named { name: name.to_string(), captured: Vec::new() }),
            None => match ::rhai::serde::from_dynamic::<Value>(value) {
                Ok(value) => Kind::Const(value),
                Err(_) => Kind::Unknown,
            },
        },
        Expr::Stmt(inner) => match closure_parts(inner) {
            Some((name, captured)) => Kind::Function(FnValue::Named {
                name: name.to_string(),
                captured: captured
                    .into_iter()
                    .map(|expr| match expr {
                        Expr::Variable(variable, ..) => Some(variable.1.to_string()),
                        _ => None,
                    })
                    .collect(),
            }),
            None => Kind::Block(block(inner)),
        },
        Expr::InterpolatedString(parts, _) => Kind::Text(parts.iter().map(self::expr).collect()),
        Expr::Array(items, _) => Kind::List(items.iter().map(self::expr).collect()),
        Expr::Map(map, _) => {
            Kind::Map(map.0.iter().map(|(key, value)| (key.name.to_string(), self::expr(value))).collect())
        }
        Expr::Variable(variable, ..) => Kind::Var(variable.1.to_string()),
        Expr::FnCall(call, _) => call_kind(call, false),
        Expr::MethodCall(call, _) => call_kind(call, true),
        Expr::Dot(chain, ..) | Expr::Index(chain, ..) => {
            let root = match &chain.lhs {
                Expr::Variable(variable, ..) if variable.1.as_str() == "args" => {
                    Root::Args(Box::new(self::expr(&chain.lhs)))
                }
                lhs => Root::Node(Box::new(self::expr(lhs))),
            };
            let mut steps = Vec::new();
            accessors(matches!(expr, Expr::Dot(..)), &chain.rhs, &mut steps);
            Kind::Chain { root, steps }
        }
        Expr::And(operands, _) | Expr::Or(operands, _) | Expr::Coalesce(operands, _) => {
            let op = match expr {
                Expr::And(..) => LogicOp::And,
                Expr::Or(..) => LogicOp::Or,
                _ => LogicOp::Coalesce,
            };
            Kind::Logic { op, operands: operands.iter().map(self::expr).collect() }
        }
        _ => Kind::Unknown,
    };
    Node::new(at, kind)
}

/// The accessors of a chain's right side, in order: `dot` says whether the first is reached
/// by `.` (a property or a method) or by `[]` (an index).
fn accessors(dot: bool, rhs: &Expr, out: &mut Vec<Access>) {
    match rhs {
        Expr::Dot(chain, ..) | Expr::Index(chain, ..) => {
            out.push(access(dot, &chain.lhs));
            accessors(matches!(rhs, Expr::Dot(..)), &chain.rhs, out);
        }
        other => out.push(access(dot, other)),
    }
}

fn access(dot: bool, accessor: &Expr) -> Access {
    match (dot, accessor) {
        (true, Expr::Property(property, _)) => Access::Field(property.2.to_string()),
        (true, Expr::MethodCall(call, at)) => Access::Method {
            name: call.name.to_string(),
            args: call.args.iter().map(expr).collect(),
            at: pos(*at),
        },
        (_, index) => Access::Index {
            key: expr(index),
            literal: !dot && matches!(index, Expr::StringConstant(..) | Expr::IntegerConstant(..)),
        },
    }
}
