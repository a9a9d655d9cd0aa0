//! The Lua call bound's walk of statements: scopes, bindings, loops and their bodies.

use super::*;

impl<'a> Walker<'a> {
    pub(super) fn tick(&mut self, pos: Pos) -> Bound<()> {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return unbounded(pos, Reason::TooComplex);
        }
        Ok(())
    }

    pub(super) fn lookup(&self, name: &str) -> Option<Abs<'a>> {
        if let Some((_, value)) = self.scope.iter().rev().find(|(n, _)| n == name) {
            return Some(value.clone());
        }
        (name == "args").then(|| Abs::Json(self.args.clone()))
    }

    /// Binds a name; a name assigned anywhere is unknown, so what it held must not be a
    /// function that calls agents.
    pub(super) fn bind(&mut self, name: &str, value: Abs<'a>, pos: Pos) -> Bound<()> {
        let scalar =
            matches!(value, Abs::Json(Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_)));
        let value =
            if self.mutated.assigned.contains(name) || (self.mutated.referenced.contains(name) && !scalar) {
                self.lose(&value, pos, Place::ChangedVariable(name.to_owned()))?;
                Abs::Unknown
            } else {
                value
            };
        self.scope.push((name.to_owned(), value));
        Ok(())
    }

    /// A value goes where the analysis cannot follow it: unbounded if it holds a function that
    /// calls agents.
    pub(super) fn lose(&mut self, value: &Abs<'a>, pos: Pos, place: Place) -> Bound<()> {
        for func in value.functions() {
            if self.calls_agents(&func)? {
                return unbounded(func.pos, Reason::Escape(place));
            }
        }
        let _ = pos;
        Ok(())
    }

    /// Whether calling the function (with unknown arguments) can call agents.
    pub(super) fn calls_agents(&mut self, func: &Rc<Func<'a>>) -> Bound<bool> {
        let key: *const FunctionBody = func.body;
        if let Some(known) = self.probes.get(&key) {
            return Ok(*known);
        }
        if self.active.contains(&key) {
            return Ok(false);
        }
        let saved = std::mem::take(&mut self.sites);
        let result = self.call(func, Vec::new(), func.pos);
        let calls = match result {
            Ok((count, _)) => !count.is_zero(),
            Err(error) if error.reason.is_exhaustion() => return Err(error),
            Err(_) => true,
        };
        self.sites = saved;
        self.probes.insert(key, calls);
        Ok(calls)
    }

    pub(super) fn block(&mut self, block: &'a Block) -> Bound<Count> {
        let mark = self.scope.len();
        let result = self.block_in_scope(block);
        self.scope.truncate(mark);
        result
    }

    pub(super) fn block_in_scope(&mut self, block: &'a Block) -> Bound<Count> {
        let mut count = Count::default();
        let labels_mark = self.labels.len();
        let outer_goto = self.backward_goto.take();
        // The count since each label of this block, for a `goto` back to it (a loop).
        let mut since_label: Vec<(String, Count)> = Vec::new();
        for stmt in block.stmts() {
            let stmt_count = self.stmt(stmt)?;
            count.add(&stmt_count);
            for (_, since) in &mut since_label {
                since.add(&stmt_count);
            }
            if let Stmt::Label(label) = stmt {
                let name = ident(label.name()).to_owned();
                self.labels.push(name.clone());
                since_label.push((name, Count::default()));
            }
            if let Some((target, pos)) = self.backward_goto.clone()
                && let Some((_, since)) = since_label.iter().find(|(name, _)| *name == target)
            {
                if !since.is_zero() {
                    return unbounded(pos, Reason::Loop(Construct::Goto));
                }
                self.backward_goto = None;
            }
        }
        self.labels.truncate(labels_mark);
        if self.backward_goto.is_none() {
            self.backward_goto = outer_goto;
        }
        if let Some(LastStmt::Return(ret)) = block.last_stmt() {
            for expr in ret.returns() {
                let (c, value) = self.expr(expr)?;
                count.add(&c);
                if !self.active.is_empty() {
                    self.lose(&value, node_pos(expr), Place::ReturnValue)?;
                }
            }
        }
        Ok(count)
    }

    pub(super) fn stmt(&mut self, stmt: &'a Stmt) -> Bound<Count> {
        self.tick(node_pos(stmt))?;
        match stmt {
            Stmt::LocalAssignment(local) => {
                let mut count = Count::default();
                let mut values = Vec::new();
                for expr in local.expressions() {
                    let (c, value) = self.expr(expr)?;
                    count.add(&c);
                    values.push(value);
                }
                for (index, name) in local.names().iter().enumerate() {
                    let value = values.get(index).cloned().unwrap_or(Abs::Unknown);
                    self.bind(ident(name), value, token_pos(name))?;
                }
                // Values without a name are dropped, never called.
                Ok(count)
            }
            Stmt::Assignment(assignment) => {
                let mut count = Count::default();
                for var in assignment.variables() {
                    if let Var::Expression(var) = var {
                        count.add(&self.suffixed(var.prefix(), &var.suffixes().collect::<Vec<_>>())?.0);
                    }
                }
                for expr in assignment.expressions() {
                    let (c, value) = self.expr(expr)?;
                    count.add(&c);
                    self.lose(&value, node_pos(expr), Place::Assignment)?;
                }
                Ok(count)
            }
            Stmt::FunctionCall(call) => {
                Ok(self.suffixed(call.prefix(), &call.suffixes().collect::<Vec<_>>())?.0)
            }
            Stmt::LocalFunction(function) => {
                let name = ident(function.name()).to_owned();
                let func = Func {
                    body: function.body(),
                    scope: Rc::new(self.scope.clone()),
                    name: Some(name.clone()),
                    pos: token_pos(function.name()),
                };
                self.bind(&name, Abs::Func(Rc::new(func)), token_pos(function.name()))?;
                Ok(Count::default())
            }
            Stmt::FunctionDeclaration(declaration) => {
                let names: Vec<_> = declaration.name().names().iter().collect();
                let pos = names.first().map_or((1, 1), |name| token_pos(name));
                let func = Abs::Func(Rc::new(Func {
                    body: declaration.body(),
                    scope: Rc::new(self.scope.clone()),
                    name: None,
                    pos,
                }));
                if names.len() == 1 && declaration.name().method_name().is_none() {
                    self.bind(ident(names[0]), func, pos)?;
                } else {
                    self.lose(&func, pos, Place::TableField)?;
                }
                Ok(Count::default())
            }
            Stmt::NumericFor(numeric) => {
                let mut count = Count::default();
                let (c, start) = self.expr(numeric.start())?;
                count.add(&c);
                let (c, end) = self.expr(numeric.end())?;
                count.add(&c);
                let step = match numeric.step() {
                    Some(step) => {
                        let (c, step) = self.expr(step)?;
                        count.add(&c);
                        step.int()
                    }
                    None => Some(1),
                };
                let name = ident(numeric.index_variable()).to_owned();
                let pos = token_pos(numeric.for_token());
                let block = numeric.block();
                let reason = Reason::UnknownBounds;
                let runs = match (start.int(), end.int(), step) {
                    (Some(start), Some(end), Some(step)) if step != 0 => {
                        let n = if step > 0 {
                            if end >= start { (end - start) / step + 1 } else { 0 }
                        } else if start >= end {
                            (start - end) / (-step) + 1
                        } else {
                            0
                        };
                        Some((start, step, u64::try_from(n).unwrap_or(0)))
                    }
                    _ => None,
                };
                let body = match runs {
                    Some((start, step, n)) if n as usize <= PER_ELEMENT_LIMIT => {
                        let elements =
                            (0..n as i64).map(|k| Abs::Json(Value::from(start + k * step))).collect();
                        self.per_element(pos, Some(elements), reason, |walker, value| {
                            walker.loop_body(&[(name.clone(), value)], block)
                        })?
                    }
                    Some((_, _, n)) => self.repeat_body(pos, n, |walker| {
                        walker.loop_body(&[(name.clone(), Abs::Unknown)], block)
                    })?,
                    None => self.per_element(pos, None, reason, |walker, value| {
                        walker.loop_body(&[(name.clone(), value)], block)
                    })?,
                };
                count.add(&body);
                Ok(count)
            }
            Stmt::GenericFor(generic) => {
                let mut count = Count::default();
                let names: Vec<String> = generic.names().iter().map(|name| ident(name).to_owned()).collect();
                let pos = token_pos(generic.for_token());
                let exprs: Vec<&Expression> = generic.expressions().iter().collect();
                let collection = match exprs.as_slice() {
                    [Expression::FunctionCall(call)] => self.iterated(call)?,
                    _ => None,
                };
                let (collection, c) = match collection {
                    Some((c, value)) => (Some(value), c),
                    None => {
                        let mut c = Count::default();
                        for expr in &exprs {
                            let (ec, value) = self.expr(expr)?;
                            c.add(&ec);
                            self.lose(&value, node_pos(*expr), Place::Iterator)?;
                        }
                        (None, c)
                    }
                };
                count.add(&c);
                let bind = |key: Abs<'a>, value: Abs<'a>| -> Vec<(String, Abs<'a>)> {
                    names
                        .iter()
                        .enumerate()
                        .map(|(i, name)| {
                            let value = match i {
                                0 => key.clone(),
                                1 => value.clone(),
                                _ => Abs::Unknown,
                            };
                            (name.clone(), value)
                        })
                        .collect()
                };
                let body = match collection {
                    Some(collection) => match collection.pairs() {
                        Some(pairs) => {
                            let elements =
                                pairs.into_iter().map(|(k, v)| Abs::List(Rc::new(vec![k, v]))).collect();
                            self.per_element(
                                pos,
                                Some(elements),
                                Reason::UnknownSize(Construct::For),
                                |walker, pair| {
                                    let key = pair.member(&Abs::Json(Value::from(1)));
                                    let value = pair.member(&Abs::Json(Value::from(2)));
                                    walker.loop_body(&bind(key, value), generic.block())
                                },
                            )?
                        }
                        None => match collection.len() {
                            Some(n) => self.repeat_body(pos, n, |walker| {
                                walker.loop_body(&bind(Abs::Unknown, Abs::Unknown), generic.block())
                            })?,
                            None => self.per_element(
                                pos,
                                None,
                                Reason::UnknownSize(Construct::For),
                                |walker, _| {
                                    walker.loop_body(&bind(Abs::Unknown, Abs::Unknown), generic.block())
                                },
                            )?,
                        },
                    },
                    None => self.per_element(pos, None, Reason::Iterator, |walker, _| {
                        walker.loop_body(&bind(Abs::Unknown, Abs::Unknown), generic.block())
                    })?,
                };
                count.add(&body);
                Ok(count)
            }
            Stmt::While(while_loop) => {
                let (mut count, _) = self.expr(while_loop.condition())?;
                count.add(&self.block(while_loop.block())?);
                if count.is_zero() {
                    return Ok(count);
                }
                let pos = token_pos(while_loop.while_token());
                unbounded(pos, Reason::Loop(Construct::While))
            }
            Stmt::Repeat(repeat) => {
                let mark = self.scope.len();
                let body = self.block_in_scope(repeat.block());
                let until = body.and_then(|mut count| {
                    let (c, _) = self.expr(repeat.until())?;
                    count.add(&c);
                    Ok(count)
                });
                self.scope.truncate(mark);
                let count = until?;
                if count.is_zero() {
                    return Ok(count);
                }
                let pos = token_pos(repeat.repeat_token());
                unbounded(pos, Reason::Loop(Construct::Repeat))
            }
            Stmt::If(if_stmt) => {
                let (mut count, _) = self.expr(if_stmt.condition())?;
                let mut branches = self.block(if_stmt.block())?;
                for else_if in if_stmt.else_if().into_iter().flatten() {
                    let (c, _) = self.expr(else_if.condition())?;
                    count.add(&c);
                    branches.max_with(&self.block(else_if.block())?);
                }
                if let Some(block) = if_stmt.else_block() {
                    branches.max_with(&self.block(block)?);
                }
                count.add(&branches);
                Ok(count)
            }
            Stmt::Do(inner) => self.block(inner.block()),
            Stmt::Goto(goto) => {
                let target = ident(goto.label_name()).to_owned();
                if self.labels.contains(&target) {
                    self.backward_goto = Some((target, token_pos(goto.goto_token())));
                }
                Ok(Count::default())
            }
            _ => Ok(Count::default()),
        }
    }

    /// The collection `ipairs(x)`/`pairs(x)` iterates, when the call is one of those.
    pub(super) fn iterated(
        &mut self,
        call: &'a full_moon::ast::FunctionCall,
    ) -> Bound<Option<(Count, Abs<'a>)>> {
        let Prefix::Name(token) = call.prefix() else { return Ok(None) };
        let name = ident(token);
        if !matches!(name, "ipairs" | "pairs") || self.lookup(name).is_some() {
            return Ok(None);
        }
        let suffixes: Vec<&Suffix> = call.suffixes().collect();
        let [Suffix::Call(Call::AnonymousCall(args))] = suffixes.as_slice() else { return Ok(None) };
        let args = arg_exprs(args);
        let Some(first) = args.first() else { return Ok(None) };
        let (count, value) = self.arg(first)?;
        Ok(Some((count, value)))
    }

    /// Walks a loop body with the loop's names bound.
    pub(super) fn loop_body(&mut self, bindings: &[(String, Abs<'a>)], block: &'a Block) -> Bound<Count> {
        let mark = self.scope.len();
        let result = self.bind_all(bindings.iter().cloned()).and_then(|()| self.block(block));
        self.scope.truncate(mark);
        result
    }

    pub(super) fn bind_all(&mut self, bindings: impl Iterator<Item = (String, Abs<'a>)>) -> Bound<()> {
        for (name, value) in bindings {
            self.bind(&name, value, (1, 1))?;
        }
        Ok(())
    }

    /// A body run `n` times, walked once with unknown elements.
    pub(super) fn repeat_body(
        &mut self,
        pos: Pos,
        n: u64,
        body: impl FnOnce(&mut Self) -> Bound<Count>,
    ) -> Bound<Count> {
        let _ = pos;
        Ok(body(self)?.scaled(n))
    }

    /// A body run once per element: walked once with an unknown element and scaled, or (when
    /// that cannot bound it and the elements are known and few) once per element. `elements`
    /// `None` means the count of runs is unknown: bounded only when the body calls no agents.
    pub(super) fn per_element(
        &mut self,
        pos: Pos,
        elements: Option<Vec<Abs<'a>>>,
        unknown_reason: Reason,
        mut body: impl FnMut(&mut Self, Abs<'a>) -> Bound<Count>,
    ) -> Bound<Count> {
        let once = body(self, Abs::Unknown);
        match (once, elements) {
            (Ok(count), _) if count.is_zero() => Ok(count),
            (Ok(count), Some(elements)) => Ok(count.scaled(elements.len() as u64)),
            (Err(error), Some(elements)) if !error.reason.is_exhaustion() => {
                let mut total = Count::default();
                for element in elements {
                    total.add(&body(self, element)?);
                }
                Ok(total)
            }
            (Err(error), _) => Err(error),
            (Ok(_), None) => unbounded(pos, unknown_reason),
        }
    }
}
