//! The Rhai call bound's walk of statements and expressions: scopes, loops, chains.

use super::apply::args_path;
use super::scan::{closure_name, closure_parts};
use super::*;

impl Walker<'_> {
    pub(super) fn step(&mut self, pos: Position) -> Bound<()> {
        if self.active.len() > MAX_CALL_DEPTH {
            return unbounded(pos, Reason::TooDeep);
        }
        self.steps += 1;
        if self.steps > self.step_limit {
            return unbounded(pos, Reason::TooComplex);
        }
        Ok(())
    }

    /// Script functions Rhai calls implicitly (getters, setters, operators) cannot be followed:
    /// any that calls agents makes the script unbounded.
    pub(super) fn implicit_functions(&mut self) -> Bound<()> {
        let implicit: Vec<ImmutableString> = self
            .functions
            .by_name
            .keys()
            .filter(|name| {
                !name.starts_with("anon$")
                    && (!name.chars().all(|c| c.is_alphanumeric() || c == '_')
                        || IMPLICIT_NAMES.contains(&name.as_str()))
            })
            .cloned()
            .collect();
        for name in implicit {
            let callable = Callable { target: Target::Script(name.clone()), captured: Vec::new() };
            if self.calls_agents(&callable, Position::NONE)? {
                return unbounded(Position::NONE, Reason::Implicit(name.to_string()));
            }
        }
        Ok(())
    }

    // ----- scope -----

    pub(super) fn lookup(&self, name: &str) -> Abs {
        if self.mutated.contains(name) {
            return Abs::Unknown;
        }
        let frame = self.frames.last();
        let base = frame.map_or(0, |frame| frame.base);
        if let Some((_, value)) = self.scope[base..].iter().rev().find(|(n, _)| n.as_str() == name) {
            return value.clone();
        }
        match name {
            "args" if frame.is_some_and(|frame| frame.sees_script) => Abs::Json(self.args.clone()),
            _ => Abs::Unknown,
        }
    }

    /// Whether `args` here is the run's args (not shadowed, reassigned or out of sight).
    pub(super) fn sees_script_args(&self) -> bool {
        let Some(frame) = self.frames.last() else { return false };
        frame.sees_script
            && !self.mutated.contains("args")
            && !self.scope[frame.base..].iter().any(|(name, _)| name.as_str() == "args")
    }

    /// Binds a variable; a value bound to a variable written elsewhere turns unknown, so a
    /// closure that calls agents may not go there.
    pub(super) fn declare(&mut self, name: ImmutableString, value: Abs, pos: Position) -> Bound<()> {
        let value = if self.mutated.contains(&name) { self.lose(value, pos)? } else { value };
        self.scope.push((name, value));
        Ok(())
    }

    /// Turns a value unknown, refusing when it holds a closure that calls agents.
    pub(super) fn lose(&mut self, value: Abs, pos: Position) -> Bound<Abs> {
        self.escape(&value, pos)?;
        Ok(Abs::Unknown)
    }

    pub(super) fn escape(&mut self, value: &Abs, pos: Position) -> Bound<()> {
        match value {
            Abs::Closure(callable) => {
                if self.calls_agents(callable, pos)? {
                    return unbounded(pos, Reason::Escape(Place::Unfollowed));
                }
                Ok(())
            }
            Abs::Array(items) => items.iter().try_for_each(|item| self.escape(item, pos)),
            Abs::Map(entries) => entries.iter().try_for_each(|(_, value)| self.escape(value, pos)),
            _ => Ok(()),
        }
    }

    /// Whether calling the closure (with unknown arguments) may call agents.
    pub(super) fn calls_agents(&mut self, callable: &Callable, pos: Position) -> Bound<bool> {
        let name = match &callable.target {
            // `Fn("agent")` and the globals that run what they are given.
            Target::Global(name) => return Ok(AGENT_GLOBALS.contains(&name.as_str())),
            Target::Script(name) => name.clone(),
        };
        let arities = self.functions.by_name.get(&name).cloned().unwrap_or_default();
        let sites = self.sites.clone();
        let mut agentic = false;
        for arity in arities {
            let unknown = vec![Abs::Unknown; arity.saturating_sub(callable.captured.len())];
            let probe = Callable { target: callable.target.clone(), captured: callable.captured.clone() };
            match self.invoke(&probe, &unknown, pos) {
                Ok(count) if count.is_zero() => {}
                _ => agentic = true,
            }
        }
        // A probe: what it learned of options is not from a real call.
        self.sites = sites;
        Ok(agentic)
    }

    // ----- statements -----

    /// Walks statements in a scope of their own; the value is the last statement's (a block's
    /// value), every other statement's value is dropped.
    pub(super) fn statements(&mut self, statements: &[Stmt]) -> Bound<(Count, Abs)> {
        let mark = self.scope.len();
        let mut total = Count::default();
        let mut last = Abs::Json(Value::Null);
        for stmt in statements {
            let previous = std::mem::replace(&mut last, Abs::Json(Value::Null));
            self.lose(previous, stmt.position())?;
            let (count, value) = self.stmt(stmt)?;
            total.add(&count);
            last = value;
        }
        self.scope.truncate(mark);
        Ok((total, last))
    }

    /// A block whose value is not used.
    pub(super) fn block(&mut self, block: &StmtBlock) -> Bound<Count> {
        let (count, value) = self.statements(block.statements())?;
        self.lose(value, block.position())?;
        Ok(count)
    }

    /// A block and its value.
    pub(super) fn block_value(&mut self, block: &StmtBlock) -> Bound<(Count, Abs)> {
        self.statements(block.statements())
    }

    pub(super) fn stmt(&mut self, stmt: &Stmt) -> Bound<(Count, Abs)> {
        self.step(stmt.position())?;
        let unit = || Abs::Json(Value::Null);
        Ok(match stmt {
            Stmt::Var(var, _, pos) => {
                let (ident, init, _) = &**var;
                let (count, value) = self.expr(init)?;
                self.declare(ident.name.clone(), value, *pos)?;
                (count, unit())
            }
            Stmt::Assignment(assignment) => {
                let (_, binary) = &**assignment;
                let (mut count, value) = self.expr(&binary.rhs)?;
                self.lose(value, binary.rhs.position())?;
                let (target, _) = self.expr(&binary.lhs)?;
                count.add(&target);
                (count, unit())
            }
            Stmt::FnCall(call, pos) => self.call(call, *pos, None)?,
            Stmt::Expr(expr) => self.expr(expr)?,
            Stmt::Block(block) => self.block_value(block)?,
            Stmt::If(flow, _) => {
                let (mut count, condition) = self.expr(&flow.expr)?;
                // A condition known before the run (from literals and args) picks its branch.
                let (branch, value) = match condition {
                    Abs::Json(Value::Bool(true)) => self.block_value(&flow.body)?,
                    Abs::Json(Value::Bool(false)) => self.block_value(&flow.branch)?,
                    _ => {
                        let (mut branch, then) = self.block_value(&flow.body)?;
                        let (other, otherwise) = self.block_value(&flow.branch)?;
                        branch.max_with(&other);
                        (branch, self.join(then, otherwise, flow.expr.position())?)
                    }
                };
                count.add(&branch);
                (count, value)
            }
            Stmt::While(flow, pos) | Stmt::Do(flow, _, pos) => {
                let (mut count, condition) = self.expr(&flow.expr)?;
                let body = self.block(&flow.body)?;
                count.add(&body);
                // `while false` never runs its body, `do .. while false` once.
                let once = matches!(condition, Abs::Json(Value::Bool(false)));
                if count.is_zero() || once {
                    return Ok((
                        if once && matches!(stmt, Stmt::While(..)) { Count::default() } else { count },
                        unit(),
                    ));
                }
                let what = match (stmt, &flow.expr) {
                    (Stmt::While(..), Expr::Unit(_)) => Construct::Loop,
                    (Stmt::While(..), _) => Construct::While,
                    _ => Construct::Do,
                };
                return unbounded(*pos, Reason::Loop(what));
            }
            Stmt::For(for_loop, pos) => {
                let (variable, counter, flow) = &**for_loop;
                let (mut count, iterable) = self.expr(&flow.expr)?;
                let names = (variable.name.clone(), counter.as_ref().map(|c| c.name.clone()));
                let body =
                    self.iterate(&iterable, *pos, &Construct::For, &mut |walker, element, index| {
                        let mark = walker.scope.len();
                        walker.declare(names.0.clone(), element, *pos)?;
                        if let Some(counter) = &names.1 {
                            walker.declare(counter.clone(), index, *pos)?;
                        }
                        let count = walker.block(&flow.body);
                        walker.scope.truncate(mark);
                        count
                    })?;
                count.add(&body);
                (count, unit())
            }
            Stmt::TryCatch(flow, _) => {
                let (mut count, tried) = self.block_value(&flow.body)?;
                let mark = self.scope.len();
                if let Expr::Variable(variable, ..) = &flow.expr {
                    self.declare(variable.1.clone(), Abs::Unknown, flow.expr.position())?;
                }
                let (caught, fallback) = self.block_value(&flow.branch)?;
                self.scope.truncate(mark);
                count.add(&caught);
                (count, self.join(tried, fallback, flow.expr.position())?)
            }
            Stmt::Switch(switch, _) => {
                let (expr, cases) = &**switch;
                let (mut count, _) = self.expr(expr)?;
                let mut branches = Count::default();
                let mut value: Option<Abs> = None;
                for case in &cases.expressions {
                    let (condition, _) = self.expr(&case.lhs)?;
                    count.add(&condition);
                    let (branch, result) = self.expr(&case.rhs)?;
                    branches.max_with(&branch);
                    value = Some(match value {
                        Some(value) => self.join(value, result, case.rhs.position())?,
                        None => result,
                    });
                }
                count.add(&branches);
                // No case may match: the value may be ().
                let value = match value {
                    Some(value) => self.join(value, unit(), expr.position())?,
                    None => unit(),
                };
                (count, value)
            }
            Stmt::Return(Some(expr), ..) | Stmt::BreakLoop(Some(expr), ..) => {
                let (count, value) = self.expr(expr)?;
                self.lose(value, expr.position())?;
                (count, Abs::Unknown)
            }
            Stmt::Import(import, _) => (self.expr(&import.0)?.0, Abs::Unknown),
            _ => (Count::default(), unit()),
        })
    }

    /// A value that is one of two: the value when both are the same, else what both share
    /// (a length bound), else unknown.
    pub(super) fn join(&mut self, a: Abs, b: Abs, pos: Position) -> Bound<Abs> {
        if let (Abs::Json(x), Abs::Json(y)) = (&a, &b)
            && x == y
        {
            return Ok(a);
        }
        let both = (a.len(), b.len());
        self.lose(a, pos)?;
        self.lose(b, pos)?;
        Ok(match both {
            (Some(x), Some(y)) => Abs::Sized(x.max(y)),
            _ => Abs::Unknown,
        })
    }

    /// Runs `body` once per element of `iterable`: one walk with an unknown element, times the
    /// length; or, when that cannot bound it (or the elements are closures), one walk per known
    /// element.
    pub(super) fn iterate(
        &mut self,
        iterable: &Abs,
        pos: Position,
        what: &Construct,
        body: &mut dyn FnMut(&mut Self, Abs, Abs) -> Bound<Count>,
    ) -> Bound<Count> {
        // Element by element when the elements are known and few, so what a site's options
        // say per element (an interpolated prompt, a nested size) stays known; within a step
        // budget, past which one walk with an unknown element is the fallback.
        if let Some(elements) = iterable.elements() {
            let (sites, steps, limit) = (self.sites.clone(), self.steps, self.step_limit);
            self.step_limit = limit.min(steps.saturating_add(PER_ELEMENT_STEPS));
            let mut result = Ok(Count::default());
            for (index, element) in elements.into_iter().enumerate() {
                match body(self, element, Abs::Json(Value::from(index))) {
                    Ok(count) => {
                        if let Ok(total) = &mut result {
                            total.add(&count);
                        }
                    }
                    Err(error) => {
                        result = Err(error);
                        break;
                    }
                }
            }
            self.step_limit = limit;
            match result {
                Err(error)
                    if error.reason.is_exhaustion()
                        && self.step_limit > steps.saturating_add(PER_ELEMENT_STEPS)
                        && !iterable.holds_closures() =>
                {
                    self.sites = sites;
                    self.steps = steps;
                }
                other => return other,
            }
        }
        if iterable.holds_closures() {
            self.escape(iterable, pos)?;
            return unbounded(pos, Reason::Unfollowable(what.clone()));
        }
        let count = body(self, Abs::Unknown, Abs::Unknown)?;
        if count.is_zero() {
            return Ok(count);
        }
        match iterable.len() {
            Some(n) => Ok(count.scaled(n)),
            None => unbounded(pos, Reason::UnknownSize(what.clone())),
        }
    }

    // ----- expressions -----

    pub(super) fn exprs(&mut self, exprs: &[Expr]) -> Bound<(Count, Vec<Abs>)> {
        let mut count = Count::default();
        let mut values = Vec::with_capacity(exprs.len());
        for expr in exprs {
            let (c, value) = self.expr(expr)?;
            count.add(&c);
            values.push(value);
        }
        Ok((count, values))
    }

    pub(super) fn expr(&mut self, expr: &Expr) -> Bound<(Count, Abs)> {
        self.step(expr.position())?;
        let none = Count::default();
        Ok(match expr {
            Expr::StringConstant(text, _) => (none, Abs::Json(Value::String(text.to_string()))),
            Expr::CharConstant(c, _) => (none, Abs::Json(Value::String(c.to_string()))),
            Expr::IntegerConstant(n, _) => (none, Abs::Json(Value::from(*n))),
            Expr::FloatConstant(f, _) => (
                none,
                serde_json::Number::from_f64(**f).map_or(Abs::Unknown, |n| Abs::Json(Value::Number(n))),
            ),
            Expr::BoolConstant(b, _) => (none, Abs::Json(Value::Bool(*b))),
            Expr::Unit(_) => (none, Abs::Json(Value::Null)),
            Expr::DynamicConstant(value, _) => match closure_name(value) {
                Some(name) => (
                    none,
                    Abs::Closure(Rc::new(Callable { target: Target::Script(name), captured: Vec::new() })),
                ),
                None => (none, ::rhai::serde::from_dynamic::<Value>(value).map_or(Abs::Unknown, Abs::Json)),
            },
            Expr::Stmt(block) => match closure_parts(block) {
                Some((name, captured)) => {
                    let captured = captured.into_iter().map(|expr| self.peek(expr)).collect();
                    (none, Abs::Closure(Rc::new(Callable { target: Target::Script(name), captured })))
                }
                None => self.block_value(block)?,
            },
            Expr::InterpolatedString(parts, pos) => {
                let (count, values) = self.exprs(parts)?;
                let mut text = String::new();
                let mut known = true;
                for value in values {
                    match value {
                        Abs::Json(Value::String(part)) => text.push_str(&part),
                        Abs::Json(Value::Null) => {}
                        Abs::Json(other) => text.push_str(&other.to_string()),
                        other => {
                            self.lose(other, *pos)?;
                            known = false;
                        }
                    }
                }
                (count, if known { Abs::Json(Value::String(text)) } else { Abs::Unknown })
            }
            Expr::Array(items, _) => {
                let (count, values) = self.exprs(items)?;
                let value = if values.iter().all(|v| matches!(v, Abs::Json(_))) {
                    Abs::Json(Value::Array(
                        values
                            .into_iter()
                            .filter_map(|v| if let Abs::Json(v) = v { Some(v) } else { None })
                            .collect(),
                    ))
                } else if values.iter().any(Abs::holds_closures) {
                    Abs::Array(Rc::new(values))
                } else {
                    Abs::Unknown
                };
                (count, value)
            }
            Expr::Map(map, _) => {
                let mut count = Count::default();
                let mut entries = Vec::with_capacity(map.0.len());
                for (key, value) in &map.0 {
                    let (c, v) = self.expr(value)?;
                    count.add(&c);
                    entries.push((key.name.to_string(), v));
                }
                let value = if entries.iter().all(|(_, v)| matches!(v, Abs::Json(_))) {
                    let object = entries
                        .into_iter()
                        .filter_map(|(k, v)| if let Abs::Json(v) = v { Some((k, v)) } else { None })
                        .collect();
                    Abs::Json(Value::Object(object))
                } else {
                    Abs::Map(Rc::new(entries))
                };
                (count, value)
            }
            Expr::Variable(variable, ..) => (none, self.lookup(&variable.1)),
            Expr::FnCall(call, pos) => self.call(call, *pos, None)?,
            Expr::MethodCall(call, pos) => {
                // A method call outside a chain has no receiver we know.
                self.call(call, *pos, Some(Abs::Unknown))?
            }
            Expr::Dot(chain, ..) | Expr::Index(chain, ..) => {
                let dot = matches!(expr, Expr::Dot(..));
                // A path into `args` is followed by reference: only what it reaches is copied.
                if let Expr::Variable(variable, ..) = &chain.lhs
                    && variable.1.as_str() == "args"
                    && self.sees_script_args()
                {
                    let args: &Value = self.args;
                    return Ok(match args_path(args, dot, &chain.rhs) {
                        (value, None) => (none, Abs::Json(value.clone())),
                        (value, Some((dot, rest))) => self.chain(Abs::Json(value.clone()), dot, rest)?,
                    });
                }
                let (count, base) = self.expr(&chain.lhs)?;
                let (rest, value) = self.chain(base, dot, &chain.rhs)?;
                let mut count = count;
                count.add(&rest);
                (count, value)
            }
            Expr::And(operands, _) | Expr::Or(operands, _) | Expr::Coalesce(operands, _) => {
                // Every operand counted (short-circuiting only lowers counts).
                let (count, values) = self.exprs(operands)?;
                let bools: Option<Vec<bool>> = values
                    .iter()
                    .map(|v| if let Abs::Json(Value::Bool(b)) = v { Some(*b) } else { None })
                    .collect();
                let value = match (expr, bools) {
                    (Expr::And(..), Some(bools)) => Abs::Json(Value::Bool(bools.iter().all(|b| *b))),
                    (Expr::Or(..), Some(bools)) => Abs::Json(Value::Bool(bools.iter().any(|b| *b))),
                    _ => Abs::Unknown,
                };
                for value in values {
                    self.lose(value, expr.position())?;
                }
                (count, value)
            }
            _ => (none, Abs::Unknown),
        })
    }

    /// What an expression statically is, without counting (for captured variables).
    pub(super) fn peek(&self, expr: &Expr) -> Abs {
        match expr {
            Expr::Variable(variable, ..) => self.lookup(&variable.1),
            _ => Abs::Unknown,
        }
    }

    /// Applies the right side of a chain to `base`: `dot` says whether it is reached by `.`
    /// (a property or a method) or by `[]` (an index).
    pub(super) fn chain(&mut self, base: Abs, dot: bool, rhs: &Expr) -> Bound<(Count, Abs)> {
        match rhs {
            Expr::Dot(chain, ..) | Expr::Index(chain, ..) => {
                let (mut count, value) = self.access(base, dot, &chain.lhs)?;
                let (rest, value) = self.chain(value, matches!(rhs, Expr::Dot(..)), &chain.rhs)?;
                count.add(&rest);
                Ok((count, value))
            }
            other => self.access(base, dot, other),
        }
    }

    pub(super) fn access(&mut self, base: Abs, dot: bool, accessor: &Expr) -> Bound<(Count, Abs)> {
        match (dot, accessor) {
            (true, Expr::Property(property, _)) => {
                Ok((Count::default(), base.member(&Abs::Json(Value::String(property.2.to_string())))))
            }
            (true, Expr::MethodCall(call, pos)) => self.call(call, *pos, Some(base)),
            (_, index) => {
                let (count, key) = self.expr(index)?;
                let value = base.member(&key);
                if matches!(value, Abs::Unknown) {
                    // An element picked by an unknown index: the array must hold no closure
                    // that calls agents.
                    self.escape(&base, accessor.position())?;
                }
                Ok((count, value))
            }
        }
    }

    // ----- calls -----
}
