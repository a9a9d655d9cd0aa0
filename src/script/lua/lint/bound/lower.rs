//! The Lua front end of the cost bound: a parsed chunk lowered into the bound's shape
//! (`script/bound/shape.rs`), which the one analysis walks.
//!
//! Lua's reading of each construct: a numeric `for` iterates its steps, a generic `for` over
//! `ipairs`/`pairs` of a value iterates its pairs (any other iterator has no static length),
//! a condition never picks a branch (its value is not read), a table's keyed fields go where
//! the bound does not follow them, a call of a name no local holds is a cairn global, and an
//! `agent` call's options are read from its table constructor's fields.

use std::collections::HashMap;

use full_moon::ast::{
    self, Call, Expression, Field, FunctionArgs, FunctionBody, Index, LastStmt, Parameter, Prefix, Stmt,
    Suffix, TableConstructor, Var,
};
use serde_json::Value;

use super::super::values::{Static, ident, node_pos, peek_literal, peek_table, string_literal, token_pos};
use super::scan::Changes;
use crate::script::bound::reason::{Construct, Place};
use crate::script::bound::shape::{
    Access, BinaryOp, Block, Change, Dialect, Effect, FnValue, For, Function, Kind, Node, OptionValue, Over,
    PathKey, Root, SeesArgs, Shape, SiteOptions, TableField, UnaryOp, While,
};

/// The shape of a parsed chunk, given the names it changes anywhere.
pub(super) fn lower(chunk: &ast::Block, changes: &Changes) -> Shape {
    let mut lowerer = Lowerer { functions: Vec::new(), in_function: false };
    let main = lowerer.block(chunk);
    let mut changed = HashMap::new();
    for name in &changes.referenced {
        changed.insert(name.clone(), Change::UnlessScalar);
    }
    for name in &changes.assigned {
        changed.insert(name.clone(), Change::Always);
    }
    Shape {
        main,
        functions: lowerer.functions,
        named: HashMap::new(),
        implicit: Vec::new(),
        changed,
        args_known: true,
        dialect: Dialect::Lua,
    }
}

struct Lowerer {
    functions: Vec<Function>,
    /// Whether the block being lowered is a function's (its `return` values leave it).
    in_function: bool,
}

impl Lowerer {
    fn block(&mut self, block: &ast::Block) -> Block {
        let stmts = block.stmts().map(|stmt| self.stmt(stmt)).collect();
        let ret = match block.last_stmt() {
            Some(LastStmt::Return(ret)) => {
                let values = ret.returns().iter().map(|expr| self.expr(expr)).collect();
                Some(Box::new(Node::quiet((1, 1), Kind::Return { values, checked: self.in_function })))
            }
            _ => None,
        };
        Block { stmts, ret, at: (1, 1) }
    }

    fn function(&mut self, body: &FunctionBody) -> usize {
        let params = body
            .parameters()
            .iter()
            .filter_map(|parameter| match parameter {
                Parameter::Name(name) => Some(ident(name).to_owned()),
                _ => None,
            })
            .collect();
        let outer = std::mem::replace(&mut self.in_function, true);
        let block = self.block(body.block());
        self.in_function = outer;
        self.functions.push(Function { params, body: block, sees_args: SeesArgs::Always });
        self.functions.len() - 1
    }

    fn stmt(&mut self, stmt: &Stmt) -> Node {
        let kind = match stmt {
            Stmt::LocalAssignment(local) => Kind::Let {
                values: local.expressions().iter().map(|expr| self.expr(expr)).collect(),
                names: local.names().iter().map(|name| (ident(name).to_owned(), token_pos(name))).collect(),
            },
            Stmt::Assignment(assignment) => {
                let mut effects = Vec::new();
                for var in assignment.variables() {
                    if let Var::Expression(var) = var {
                        let node = self.chain(var.prefix(), var.suffixes(), node_pos(&**var), false);
                        effects.push(Effect { node, lose: None });
                    }
                }
                for expr in assignment.expressions() {
                    effects.push(Effect {
                        node: self.expr(expr),
                        lose: Some((node_pos(expr), Place::Assignment)),
                    });
                }
                Kind::Seq(effects)
            }
            Stmt::FunctionCall(call) => {
                Kind::Drop(Box::new(self.chain(call.prefix(), call.suffixes(), node_pos(call), false)))
            }
            Stmt::LocalFunction(function) => {
                let name = ident(function.name()).to_owned();
                let pos = token_pos(function.name());
                let id = self.function(function.body());
                let value = Node::quiet(pos, Kind::Function(FnValue::Body { id, name: Some(name.clone()) }));
                Kind::Let { names: vec![(name, pos)], values: vec![value] }
            }
            Stmt::FunctionDeclaration(declaration) => {
                let names: Vec<_> = declaration.name().names().iter().collect();
                let pos = names.first().map_or((1, 1), |name| token_pos(name));
                let id = self.function(declaration.body());
                let value = Node::quiet(pos, Kind::Function(FnValue::Body { id, name: None }));
                if names.len() == 1 && declaration.name().method_name().is_none() {
                    Kind::Let { names: vec![(ident(names[0]).to_owned(), pos)], values: vec![value] }
                } else {
                    Kind::Seq(vec![Effect { node: value, lose: Some((pos, Place::TableField)) }])
                }
            }
            Stmt::NumericFor(numeric) => Kind::For(For {
                over: Over::Steps {
                    start: Box::new(self.expr(numeric.start())),
                    end: Box::new(self.expr(numeric.end())),
                    step: numeric.step().map(|step| Box::new(self.expr(step))),
                },
                names: vec![(ident(numeric.index_variable()).to_owned(), (1, 1))],
                body: self.block(numeric.block()),
                at: token_pos(numeric.for_token()),
            }),
            Stmt::GenericFor(generic) => {
                let names = generic.names().iter().map(|name| (ident(name).to_owned(), (1, 1))).collect();
                let exprs: Vec<&Expression> = generic.expressions().iter().collect();
                let over = match self.pairs(&exprs) {
                    Some(over) => over,
                    None => Over::Iterator(exprs.iter().map(|expr| self.expr(expr)).collect()),
                };
                Kind::For(For {
                    over,
                    names,
                    body: self.block(generic.block()),
                    at: token_pos(generic.for_token()),
                })
            }
            Stmt::While(while_loop) => Kind::While(While {
                cond: Box::new(dropped(self.expr(while_loop.condition()))),
                body: self.block(while_loop.block()),
                runs_once: false,
                what: Construct::While,
                at: token_pos(while_loop.while_token()),
            }),
            Stmt::Repeat(repeat) => Kind::Repeat {
                body: self.block(repeat.block()),
                until: Box::new(self.expr(repeat.until())),
                at: token_pos(repeat.repeat_token()),
            },
            Stmt::If(if_stmt) => Kind::If {
                cond: Box::new(dropped(self.expr(if_stmt.condition()))),
                then: self.block(if_stmt.block()),
                else_ifs: if_stmt
                    .else_if()
                    .into_iter()
                    .flatten()
                    .map(|else_if| (self.expr(else_if.condition()), self.block(else_if.block())))
                    .collect(),
                otherwise: if_stmt.else_block().map(|block| self.block(block)).unwrap_or_default(),
            },
            Stmt::Do(inner) => Kind::Block(self.block(inner.block())),
            Stmt::Goto(goto) => {
                Kind::Goto { target: ident(goto.label_name()).to_owned(), at: token_pos(goto.goto_token()) }
            }
            Stmt::Label(label) => Kind::Label(ident(label.name()).to_owned()),
            _ => Kind::Const(Value::Null),
        };
        Node::new(node_pos(stmt), kind)
    }

    /// `ipairs(collection)` or `pairs(collection)`: the loop over the collection's pairs
    /// (unless a local holds the name, when it is an iterator over the expressions).
    fn pairs(&mut self, exprs: &[&Expression]) -> Option<Over> {
        let [Expression::FunctionCall(call)] = exprs else { return None };
        let Prefix::Name(token) = call.prefix() else { return None };
        let via = ident(token);
        if !matches!(via, "ipairs" | "pairs") {
            return None;
        }
        let suffixes: Vec<&Suffix> = call.suffixes().collect();
        let [Suffix::Call(Call::AnonymousCall(args))] = suffixes.as_slice() else { return None };
        let collection = self.args(args).into_iter().next()?;
        let otherwise = exprs.iter().map(|expr| self.expr(expr)).collect();
        Some(Over::Pairs { via: via.to_owned(), collection: Box::new(collection), otherwise })
    }

    fn expr(&mut self, expr: &Expression) -> Node {
        let at = node_pos(expr);
        let kind = match expr {
            Expression::Function(function) => {
                Kind::Function(FnValue::Body { id: self.function(function.body()), name: None })
            }
            Expression::FunctionCall(call) => return self.chain(call.prefix(), call.suffixes(), at, true),
            Expression::Var(Var::Name(token)) => Kind::Var(ident(token).to_owned()),
            Expression::Var(Var::Expression(var)) => {
                return self.chain(var.prefix(), var.suffixes(), at, true);
            }
            Expression::TableConstructor(table) => return self.table(table, at, true),
            Expression::Parentheses { expression, .. } => Kind::Also(Box::new(self.expr(expression))),
            Expression::UnaryOperator { unop, expression } => Kind::Unary {
                op: match unop {
                    ast::UnOp::Hash(_) => UnaryOp::Len,
                    ast::UnOp::Minus(_) => UnaryOp::Neg,
                    _ => UnaryOp::Other,
                },
                operand: Box::new(self.expr(expression)),
            },
            Expression::BinaryOperator { lhs, binop, rhs } => Kind::Binary {
                op: match binop.token().token().to_string().as_str() {
                    "+" => BinaryOp::Add,
                    "-" => BinaryOp::Sub,
                    "*" => BinaryOp::Mul,
                    "//" => BinaryOp::FloorDiv,
                    "and" => BinaryOp::And,
                    "or" => BinaryOp::Or,
                    _ => BinaryOp::Other,
                },
                lhs: Box::new(self.expr(lhs)),
                rhs: Box::new(self.expr(rhs)),
            },
            other => match peek_literal(other).and_then(known) {
                Some(value) => Kind::Const(value),
                None => Kind::Unknown,
            },
        };
        Node::new(at, kind)
    }

    /// A table constructor: its fields, and its value when every one is a literal.
    fn table(&mut self, table: &TableConstructor, at: (u32, u32), step: bool) -> Node {
        let mut fields = Vec::new();
        for field in table.fields() {
            match field {
                Field::NoKey(value) => fields.push(TableField::Item(self.expr(value))),
                Field::NameKey { value, .. } => {
                    fields.push(TableField::Keyed {
                        key: None,
                        value: self.expr(value),
                        at: node_pos(value),
                    });
                }
                Field::ExpressionKey { key, value, .. } => fields.push(TableField::Keyed {
                    key: Some(self.expr(key)),
                    value: self.expr(value),
                    at: node_pos(table),
                }),
                _ => {}
            }
        }
        let known = match peek_table(table) {
            Static::Known(value) => Some(value),
            _ => None,
        };
        Node { at, step, kind: Kind::Table { fields, known } }
    }

    /// A prefix and its suffixes: field reads, and calls counted by what they call.
    fn chain<'a>(
        &mut self,
        prefix: &Prefix,
        suffixes: impl Iterator<Item = &'a Suffix>,
        at: (u32, u32),
        step: bool,
    ) -> Node {
        let root = match prefix {
            Prefix::Name(token) => Root::Name { name: ident(token).to_owned(), at: token_pos(token) },
            Prefix::Expression(expr) => Root::Node(Box::new(self.expr(expr))),
            _ => Root::Node(Box::new(Node::quiet(at, Kind::Unknown))),
        };
        let mut steps = Vec::new();
        for suffix in suffixes {
            match suffix {
                Suffix::Index(Index::Dot { name, .. }) => steps.push(Access::Field(ident(name).to_owned())),
                Suffix::Index(Index::Brackets { expression, .. }) => {
                    steps.push(Access::Index { key: self.expr(expression), literal: false });
                }
                Suffix::Call(Call::AnonymousCall(args)) => {
                    let options = site_options(args);
                    steps.push(Access::Call { args: self.args(args), options });
                }
                Suffix::Call(Call::MethodCall(method)) => {
                    steps.push(Access::Opaque(self.args(method.args())))
                }
                _ => {}
            }
        }
        Node { at, step, kind: Kind::Chain { root, steps } }
    }

    /// A call's arguments, in any of Lua's call forms (a table or string argument counts no
    /// step of its own).
    fn args(&mut self, args: &FunctionArgs) -> Vec<Node> {
        match args {
            FunctionArgs::Parentheses { arguments, .. } => {
                arguments.iter().map(|arg| self.expr(arg)).collect()
            }
            FunctionArgs::TableConstructor(table) => vec![self.table(table, node_pos(table), false)],
            FunctionArgs::String(token) => {
                let value = string_literal(token).map_or(Value::Null, Value::String);
                vec![Node::quiet(token_pos(token), Kind::Const(value))]
            }
            _ => Vec::new(),
        }
    }
}

/// A node whose value is not read (a condition, which never picks a branch in Lua).
fn dropped(node: Node) -> Node {
    Node::quiet(node.at, Kind::Drop(Box::new(node)))
}

/// The JSON value of a literal: a known one, or `{}` as an empty list.
fn known(value: Static) -> Option<Value> {
    match value {
        Static::Known(value) => Some(value),
        Static::EmptyTable => Some(Value::Array(Vec::new())),
        _ => None,
    }
}

/// What an `agent` call's options argument (its second) says statically: a table
/// constructor's fields, each a literal, a name or path read at the call, or computed.
fn site_options(args: &FunctionArgs) -> SiteOptions {
    let FunctionArgs::Parentheses { arguments, .. } = args else { return SiteOptions::Absent };
    let table = match arguments.iter().nth(1) {
        None => return SiteOptions::Absent,
        Some(Expression::TableConstructor(table)) => table,
        Some(_) => return SiteOptions::Computed,
    };
    let mut fields = Vec::new();
    for field in table.fields() {
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
            Expression::Var(Var::Name(token)) => {
                OptionValue::Path { name: ident(token).to_owned(), keys: Vec::new() }
            }
            Expression::Var(Var::Expression(var)) => path(var),
            other => match peek_literal(other).and_then(known) {
                Some(value) => OptionValue::Known(value),
                None => OptionValue::Computed,
            },
        };
        fields.push((key, known));
    }
    SiteOptions::Fields(fields)
}

/// A name and the fields and literal keys after it, read at the call; computed when the
/// path calls anything.
fn path(var: &ast::VarExpression) -> OptionValue {
    let Prefix::Name(token) = var.prefix() else { return OptionValue::Computed };
    let mut keys = Vec::new();
    for suffix in var.suffixes() {
        keys.push(match suffix {
            Suffix::Index(Index::Dot { name, .. }) => PathKey::Field(ident(name).to_owned()),
            Suffix::Index(Index::Brackets { expression, .. }) => {
                PathKey::Index(peek_literal(expression).and_then(known))
            }
            _ => return OptionValue::Computed,
        });
    }
    OptionValue::Path { name: ident(token).to_owned(), keys }
}
