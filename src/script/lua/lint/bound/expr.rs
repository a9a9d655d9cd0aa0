//! The Lua call bound's walk of expressions: tables, suffix chains, calls of cairn globals and of
//! the script's functions, fan-outs, and the site record of each `agent(...)` call.

use super::*;

impl<'a> Walker<'a> {
    // ----- expressions -----

    pub(super) fn expr(&mut self, expr: &'a Expression) -> Bound<(Count, Abs<'a>)> {
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

    pub(super) fn table(&mut self, table: &'a TableConstructor) -> Bound<(Count, Abs<'a>)> {
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
            match crate::script::lua::lint::values::peek_table(table) {
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

    pub(super) fn arg(&mut self, arg: &ArgExpr<'a>) -> Bound<(Count, Abs<'a>)> {
        match arg {
            ArgExpr::Expr(expr) => self.expr(expr),
            ArgExpr::Table(table) => self.table(table),
            ArgExpr::Str(value) => Ok((Count::default(), Abs::Json(value.clone()))),
        }
    }

    /// A prefix and its suffixes: field reads, and calls counted by what they call.
    pub(super) fn suffixed(
        &mut self,
        prefix: &'a Prefix,
        suffixes: &[&'a Suffix],
    ) -> Bound<(Count, Abs<'a>)> {
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

    pub(super) fn args(&mut self, args: &[ArgExpr<'a>]) -> Bound<(Count, Vec<Abs<'a>>)> {
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
    pub(super) fn opaque_call(&mut self, args: &[ArgExpr<'a>]) -> Bound<(Count, Abs<'a>)> {
        let (count, values) = self.args(args)?;
        for value in &values {
            self.lose(value, (1, 1), Place::Argument)?;
        }
        Ok((count, Abs::Unknown))
    }

    /// A call of a name no local holds: a cairn global, a base function, or something unknown.
    pub(super) fn global_call(
        &mut self,
        name: &str,
        pos: Pos,
        args: &[ArgExpr<'a>],
    ) -> Bound<(Count, Abs<'a>)> {
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
    pub(super) fn fan_out(
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
    pub(super) fn call(
        &mut self,
        func: &Rc<Func<'a>>,
        args: Vec<Abs<'a>>,
        pos: Pos,
    ) -> Bound<(Count, Abs<'a>)> {
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
    pub(super) fn record_site(&mut self, pos: Pos, prompt: Option<&Abs<'a>>, options: Option<&ArgExpr<'a>>) {
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
    pub(super) fn static_value(&self, expr: &'a Expression) -> Option<Value> {
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
