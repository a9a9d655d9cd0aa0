//! The bound's walk of statements and expressions: blocks and their labels, bindings,
//! branches, loops and what they iterate, and the values of literals and operators.

use std::rc::Rc;

use serde_json::Value;

use super::super::reason::{Construct, Place, Reason};
use super::super::shape::{
    BinaryOp, Block, Dialect, FnValue, For, Kind, LogicOp, Node, Over, Pos, TableField, UnaryOp, While,
};
use super::super::value::{Abs, Callee, Func, PER_ELEMENT_LIMIT};
use super::{Bound, Count, Evaluator, PER_ELEMENT_STEPS, unbounded};

impl Evaluator<'_> {
    // ----- blocks -----

    /// A block in a scope of its own, and its value.
    pub(super) fn block(&mut self, block: &Block) -> Bound<(Count, Abs)> {
        let mark = self.scope.len();
        let result = self.block_in_scope(block);
        self.scope.truncate(mark);
        result
    }

    /// A block's statements in the current scope: the value is the last statement's, every
    /// other statement's value is dropped where the next one starts. A `goto` back to a label
    /// of the block after calls that reach it is a loop.
    pub(super) fn block_in_scope(&mut self, block: &Block) -> Bound<(Count, Abs)> {
        let mut total = Count::default();
        let mut last = Abs::Json(Value::Null);
        let labels_mark = self.labels.len();
        let outer_goto = self.backward_goto.take();
        // The count since each label of this block, for a `goto` back to it.
        let mut since_label: Vec<(String, Count)> = Vec::new();
        for stmt in &block.stmts {
            let previous = std::mem::replace(&mut last, Abs::Json(Value::Null));
            self.lose(previous, stmt.at, Place::Unfollowed)?;
            let (count, value) = self.eval(stmt)?;
            total.add(&count);
            for (_, since) in &mut since_label {
                since.add(&count);
            }
            if let Kind::Label(name) = &stmt.kind {
                self.labels.push(name.clone());
                since_label.push((name.clone(), Count::default()));
            }
            if let Some((target, pos)) = self.backward_goto.clone()
                && let Some((_, since)) = since_label.iter().find(|(name, _)| *name == target)
            {
                if !since.is_zero() {
                    return unbounded(pos, Reason::Loop(Construct::Goto));
                }
                self.backward_goto = None;
            }
            last = value;
        }
        self.labels.truncate(labels_mark);
        if self.backward_goto.is_none() {
            self.backward_goto = outer_goto;
        }
        if let Some(ret) = &block.ret {
            total.add(&self.eval(ret)?.0);
        }
        Ok((total, last))
    }

    /// A block whose value is dropped where the block ends.
    fn block_count(&mut self, block: &Block) -> Bound<Count> {
        let (count, value) = self.block(block)?;
        self.lose(value, block.at, Place::Unfollowed)?;
        Ok(count)
    }

    // ----- nodes -----

    /// A node's count and value. The frequent and recursive kinds are here; the others are
    /// out of line, so a deep walk (functions inlined in functions) keeps small frames.
    pub(super) fn eval(&mut self, node: &Node) -> Bound<(Count, Abs)> {
        if node.step {
            self.step(node.at)?;
        }
        match &node.kind {
            Kind::Const(value) => Ok((Count::default(), Abs::Json(value.clone()))),
            Kind::Unknown => Ok((Count::default(), Abs::Unknown)),
            Kind::Var(name) => Ok((Count::default(), self.lookup(name).unwrap_or(Abs::Unknown))),
            Kind::Chain { root, steps } => self.chain(root, steps),
            Kind::Also(inner) => self.eval(inner),
            Kind::Drop(inner) => Ok((self.eval(inner)?.0, Abs::Unknown)),
            Kind::Block(block) => self.block(block),
            Kind::Return { values, checked } => self.returned(values, *checked),
            _ => self.compound(node),
        }
    }

    /// `return`: its values leave, unknown.
    #[inline(never)]
    fn returned(&mut self, values: &[Node], checked: bool) -> Bound<(Count, Abs)> {
        let mut count = Count::default();
        for value in values {
            let (c, result) = self.eval(value)?;
            count.add(&c);
            if checked {
                self.lose(result, value.at, Place::ReturnValue)?;
            }
        }
        Ok((count, Abs::Unknown))
    }

    /// Every other kind of node.
    #[inline(never)]
    fn compound(&mut self, node: &Node) -> Bound<(Count, Abs)> {
        let none = Count::default;
        let unit = || Abs::Json(Value::Null);
        Ok(match &node.kind {
            Kind::Const(_)
            | Kind::Unknown
            | Kind::Var(_)
            | Kind::Chain { .. }
            | Kind::Also(_)
            | Kind::Drop(_)
            | Kind::Block(_)
            | Kind::Return { .. } => return self.eval(node),
            Kind::Function(FnValue::Named { name, captured }) => {
                let captured = captured
                    .iter()
                    .map(|var| var.as_ref().and_then(|var| self.lookup(var)).unwrap_or(Abs::Unknown))
                    .collect();
                let func = Func { callee: Callee::Named(name.clone()), captured, scope: None, pos: node.at };
                (none(), Abs::Func(Rc::new(func)))
            }
            Kind::Function(FnValue::Body { id, name }) => {
                let func = Func {
                    callee: Callee::Body { id: *id, name: name.clone() },
                    captured: Vec::new(),
                    scope: Some(Rc::new(self.scope.clone())),
                    pos: node.at,
                };
                (none(), Abs::Func(Rc::new(func)))
            }
            Kind::Text(parts) => {
                let (count, values) = self.eval_all(parts)?;
                let mut text = String::new();
                let mut known = true;
                for value in values {
                    match value {
                        Abs::Json(Value::String(part)) => text.push_str(&part),
                        Abs::Json(Value::Null) => {}
                        Abs::Json(other) => text.push_str(&other.to_string()),
                        other => {
                            self.lose(other, node.at, Place::Unfollowed)?;
                            known = false;
                        }
                    }
                }
                (count, if known { Abs::Json(Value::String(text)) } else { Abs::Unknown })
            }
            Kind::List(items) => {
                let (count, values) = self.eval_all(items)?;
                (count, self.list(values))
            }
            Kind::Map(fields) => {
                let mut count = Count::default();
                let mut entries = Vec::with_capacity(fields.len());
                for (key, value) in fields {
                    let (c, v) = self.eval(value)?;
                    count.add(&c);
                    entries.push((key.clone(), v));
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
            Kind::Table { fields, known } => {
                let mut count = Count::default();
                let mut list = Vec::new();
                let mut keyed = false;
                for field in fields {
                    match field {
                        TableField::Item(value) => {
                            let (c, value) = self.eval(value)?;
                            count.add(&c);
                            list.push(value);
                        }
                        TableField::Keyed { key, value, at } => {
                            keyed = true;
                            if let Some(key) = key {
                                count.add(&self.eval(key)?.0);
                            }
                            let (c, value) = self.eval(value)?;
                            count.add(&c);
                            self.lose(value, *at, Place::TableField)?;
                        }
                    }
                }
                let value =
                    if keyed { known.clone().map_or(Abs::Unknown, Abs::Json) } else { self.list(list) };
                (count, value)
            }
            Kind::Unary { op, operand } => {
                let (count, value) = self.eval(operand)?;
                let value = match op {
                    UnaryOp::Len => {
                        value.len(self.shape.dialect).map_or(Abs::Unknown, |n| Abs::Json(Value::from(n)))
                    }
                    UnaryOp::Neg => value.int().map_or(Abs::Unknown, |n| Abs::Json(Value::from(-n))),
                    UnaryOp::Other => Abs::Unknown,
                };
                (count, value)
            }
            Kind::Binary { op, lhs, rhs } => {
                let (mut count, left) = self.eval(lhs)?;
                let (c, right) = self.eval(rhs)?;
                count.add(&c);
                let value = match (left.int(), right.int(), op) {
                    (Some(a), Some(b), BinaryOp::Add) => checked(a.checked_add(b)),
                    (Some(a), Some(b), BinaryOp::Sub) => checked(a.checked_sub(b)),
                    (Some(a), Some(b), BinaryOp::Mul) => checked(a.checked_mul(b)),
                    (Some(a), Some(b), BinaryOp::FloorDiv) if b != 0 => {
                        Abs::Json(Value::from(a.div_euclid(b)))
                    }
                    (_, _, BinaryOp::And | BinaryOp::Or) => {
                        // `args.x or {...}`: the first operand that is not nil or false;
                        // `a and b`: `a` when it is, else `b`. An operand not known yet may
                        // be either.
                        let falsy = |value: &Abs| match value {
                            Abs::Json(Value::Null | Value::Bool(false)) => Some(true),
                            Abs::Unknown => None,
                            _ => Some(false),
                        };
                        let value = match (op, falsy(&left)) {
                            (BinaryOp::Or, _) => self.first_set(&[left.clone(), right.clone()], falsy),
                            (_, Some(true)) => self.plain(&left),
                            (_, Some(false)) => self.plain(&right),
                            (_, None) => self.either(&self.plain(&left), &self.plain(&right)),
                        };
                        // Either operand may be the value: neither may be a function that
                        // calls agents.
                        self.lose(left, lhs.at, Place::AndOr)?;
                        self.lose(right, rhs.at, Place::AndOr)?;
                        value
                    }
                    _ => Abs::Unknown,
                };
                (count, value)
            }
            Kind::Logic { op, operands } => {
                // Every operand counted (short-circuiting only lowers counts).
                let (count, values) = self.eval_all(operands)?;
                let bools: Option<Vec<bool>> = values
                    .iter()
                    .map(|v| if let Abs::Json(Value::Bool(b)) = v { Some(*b) } else { None })
                    .collect();
                let value = match (op, bools) {
                    (LogicOp::And, Some(bools)) => Abs::Json(Value::Bool(bools.iter().all(|b| *b))),
                    (LogicOp::Or, Some(bools)) => Abs::Json(Value::Bool(bools.iter().any(|b| *b))),
                    // `args.x ?? [...]`: the first operand that is not (); one not known yet
                    // may be either.
                    (LogicOp::Coalesce, _) => self.first_set(&values, |value| match value {
                        Abs::Json(Value::Null) => Some(true),
                        Abs::Unknown => None,
                        _ => Some(false),
                    }),
                    _ => Abs::Unknown,
                };
                for value in values {
                    self.lose(value, node.at, Place::Unfollowed)?;
                }
                (count, value)
            }
            Kind::Operator { name, args } => {
                let (count, values) = self.eval_all(args)?;
                (count, self.operator(name, values, node.at)?)
            }
            Kind::Call { name, args, method } => {
                let (mut count, mut values) = self.eval_all(args)?;
                if *method {
                    // A method call outside a chain has no receiver we know.
                    values.insert(0, Abs::Unknown);
                }
                let (more, value) = self.apply(name, values, node.at, *method)?;
                count.add(&more);
                (count, value)
            }
            Kind::Seq(effects) => {
                let mut count = Count::default();
                for effect in effects {
                    let (c, value) = self.eval(&effect.node)?;
                    count.add(&c);
                    if let Some((pos, place)) = &effect.lose {
                        self.lose(value, *pos, place.clone())?;
                    }
                }
                (count, unit())
            }
            Kind::Let { names, values } => {
                let (count, mut values) = self.eval_all(values)?;
                values.truncate(names.len());
                values.resize(names.len(), Abs::Unknown);
                for ((name, pos), value) in names.iter().zip(values) {
                    self.bind(name, value, *pos)?;
                }
                // Values without a name are dropped, never called.
                (count, unit())
            }
            Kind::If { cond, then, else_ifs, otherwise } => {
                let (mut count, condition) = self.eval(cond)?;
                // A condition known before the run (from literals and args) picks its branch.
                let (branches, value) = match condition {
                    Abs::Json(Value::Bool(true)) if else_ifs.is_empty() => self.block(then)?,
                    Abs::Json(Value::Bool(false)) if else_ifs.is_empty() => self.block(otherwise)?,
                    _ => {
                        let (mut branches, first) = self.block(then)?;
                        for (cond, block) in else_ifs {
                            count.add(&self.eval(cond)?.0);
                            branches.max_with(&self.block(block)?.0);
                        }
                        let (other, last) = self.block(otherwise)?;
                        branches.max_with(&other);
                        (branches, self.join(first, last, cond.at)?)
                    }
                };
                count.add(&branches);
                (count, value)
            }
            Kind::Switch { subject, cases } => {
                let (mut count, _) = self.eval(subject)?;
                let mut branches = Count::default();
                let mut value: Option<Abs> = None;
                for (condition, result) in cases {
                    count.add(&self.eval(condition)?.0);
                    let (branch, case_value) = self.eval(result)?;
                    branches.max_with(&branch);
                    value = Some(match value {
                        Some(value) => self.join(value, case_value, result.at)?,
                        None => case_value,
                    });
                }
                count.add(&branches);
                // No case may match: the value may be ().
                let value = match value {
                    Some(value) => self.join(value, unit(), subject.at)?,
                    None => unit(),
                };
                (count, value)
            }
            Kind::Try { body, catch, handler, at } => {
                let (mut count, tried) = self.block(body)?;
                let mark = self.scope.len();
                if let Some((name, pos)) = catch {
                    self.bind(name, Abs::Unknown, *pos)?;
                }
                let (caught, fallback) = self.block(handler)?;
                self.scope.truncate(mark);
                count.add(&caught);
                (count, self.join(tried, fallback, *at)?)
            }
            Kind::While(what) => (self.while_loop(what)?, unit()),
            Kind::Repeat { body, until, at } => {
                let mark = self.scope.len();
                let result = self.block_in_scope(body).and_then(|(mut count, _)| {
                    count.add(&self.eval(until)?.0);
                    Ok(count)
                });
                self.scope.truncate(mark);
                let count = result?;
                if !count.is_zero() {
                    return unbounded(*at, Reason::Loop(Construct::Repeat));
                }
                (count, unit())
            }
            Kind::For(for_loop) => (self.for_loop(for_loop)?, unit()),
            Kind::Label(_) => (none(), unit()),
            Kind::Goto { target, at } => {
                if self.labels.contains(target) {
                    self.backward_goto = Some((target.clone(), *at));
                }
                (none(), unit())
            }
        })
    }

    pub(super) fn eval_all(&mut self, nodes: &[Node]) -> Bound<(Count, Vec<Abs>)> {
        let mut count = Count::default();
        let mut values = Vec::with_capacity(nodes.len());
        for node in nodes {
            let (c, value) = self.eval(node)?;
            count.add(&c);
            values.push(value);
        }
        Ok((count, values))
    }

    /// A list literal's value: JSON when every item is; a list when an item holds functions;
    /// else unknown (Rhai) or of known length (Lua).
    fn list(&self, values: Vec<Abs>) -> Abs {
        if values.iter().all(|v| matches!(v, Abs::Json(_))) {
            return Abs::Json(Value::Array(
                values
                    .into_iter()
                    .filter_map(|v| if let Abs::Json(v) = v { Some(v) } else { None })
                    .collect(),
            ));
        }
        match self.shape.dialect {
            Dialect::Rhai if values.iter().any(Abs::holds_functions) => Abs::List(Rc::new(values)),
            Dialect::Rhai => Abs::Unknown,
            Dialect::Lua if values.iter().any(|v| matches!(v, Abs::Func(_) | Abs::List(_))) => {
                Abs::List(Rc::new(values))
            }
            Dialect::Lua => Abs::Sized(values.len() as u64),
        }
    }

    /// The value of a default (`a ?? b`, `a or b`): the first operand not known to be empty
    /// (`empty` says `Some(true)` for an operand known empty, `None` when it is not known yet),
    /// joined with the earlier operands that may be it.
    fn first_set(&self, values: &[Abs], empty: impl Fn(&Abs) -> Option<bool>) -> Abs {
        let mut value: Option<Abs> = None;
        let mut settled = false;
        for operand in values {
            let known = empty(operand);
            if known == Some(true) {
                continue;
            }
            let plain = self.plain(operand);
            value = Some(match value {
                Some(value) => self.either(&value, &plain),
                None => plain,
            });
            if known == Some(false) {
                settled = true;
                break;
            }
        }
        match (value, settled) {
            (Some(value), true) => value,
            // Every operand may be empty: so may the value.
            (Some(value), false) => self.either(&value, &Abs::Json(Value::Null)),
            (None, _) => values.last().map_or(Abs::Unknown, |last| self.plain(last)),
        }
    }

    /// A value as data: known JSON as it is; anything else its length, when known (a default's
    /// functions go nowhere the bound follows).
    fn plain(&self, value: &Abs) -> Abs {
        match value {
            Abs::Json(_) => value.clone(),
            other => other.len(self.shape.dialect).map_or(Abs::Unknown, Abs::Sized),
        }
    }

    /// Data that is one of two: the value when both are the same, else what both share (a
    /// length bound), else unknown.
    fn either(&self, a: &Abs, b: &Abs) -> Abs {
        if let (Abs::Json(x), Abs::Json(y)) = (a, b)
            && x == y
        {
            return a.clone();
        }
        let dialect = self.shape.dialect;
        match (a.len(dialect), b.len(dialect)) {
            (Some(x), Some(y)) => Abs::Sized(x.max(y)),
            _ => Abs::Unknown,
        }
    }

    /// A value that is one of two: the value when both are the same, else what both share
    /// (a length bound), else unknown.
    pub(super) fn join(&mut self, a: Abs, b: Abs, pos: Pos) -> Bound<Abs> {
        if let (Abs::Json(x), Abs::Json(y)) = (&a, &b)
            && x == y
        {
            return Ok(a);
        }
        let dialect = self.shape.dialect;
        let both = (a.len(dialect), b.len(dialect));
        self.lose(a, pos, Place::Unfollowed)?;
        self.lose(b, pos, Place::Unfollowed)?;
        Ok(match both {
            (Some(x), Some(y)) => Abs::Sized(x.max(y)),
            _ => Abs::Unknown,
        })
    }

    // ----- loops -----

    fn while_loop(&mut self, what: &While) -> Bound<Count> {
        let (mut count, condition) = self.eval(&what.cond)?;
        count.add(&self.block_count(&what.body)?);
        // `while false` never runs its body, `do .. while false` once.
        let once = matches!(condition, Abs::Json(Value::Bool(false)));
        if count.is_zero() || once {
            return Ok(if once && !what.runs_once { Count::default() } else { count });
        }
        unbounded(what.at, Reason::Loop(what.what.clone()))
    }

    fn for_loop(&mut self, for_loop: &For) -> Bound<Count> {
        let For { over, names, body, at } = for_loop;
        let at = *at;
        match over {
            Over::Elements(iterable) => {
                let (mut count, iterable) = self.eval(iterable)?;
                let each = self.iterate(&iterable, at, &Construct::For, &mut |walker, element, index| {
                    let mark = walker.scope.len();
                    let mut values = [element, index].into_iter();
                    for (name, pos) in names {
                        walker.bind(name, values.next().unwrap_or(Abs::Unknown), *pos)?;
                    }
                    let count = walker.block_count(body);
                    walker.scope.truncate(mark);
                    count
                })?;
                count.add(&each);
                Ok(count)
            }
            Over::Steps { start, end, step } => {
                let (mut count, start) = self.eval(start)?;
                let (c, end) = self.eval(end)?;
                count.add(&c);
                let step = match step {
                    Some(step) => {
                        let (c, step) = self.eval(step)?;
                        count.add(&c);
                        step.int()
                    }
                    None => Some(1),
                };
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
                let mut run = |walker: &mut Self, value: Abs| walker.loop_body(names, &[value], body);
                let each = match runs {
                    Some((start, step, n)) if n as usize <= PER_ELEMENT_LIMIT => {
                        let elements =
                            (0..n as i64).map(|k| Abs::Json(Value::from(start + k * step))).collect();
                        self.per_element(at, Some(elements), reason, &mut run)?
                    }
                    Some((_, _, n)) => self.repeat(n, |walker| run(walker, Abs::Unknown))?,
                    None => self.per_element(at, None, reason, &mut run)?,
                };
                count.add(&each);
                Ok(count)
            }
            Over::Pairs { via, collection, otherwise } => {
                if self.lookup(via).is_some() {
                    return self.iterator(at, names, otherwise, body);
                }
                let (mut count, collection) = self.eval(collection)?;
                let reason = size_unknown(&collection, Construct::For);
                let each = match collection.pairs() {
                    Some(pairs) => {
                        let elements =
                            pairs.into_iter().map(|(k, v)| Abs::List(Rc::new(vec![k, v]))).collect();
                        let dialect = self.shape.dialect;
                        self.per_element(at, Some(elements), reason, &mut |walker, pair| {
                            let key = pair.member(&Abs::Json(Value::from(1)), dialect);
                            let value = pair.member(&Abs::Json(Value::from(2)), dialect);
                            walker.loop_body(names, &[key, value], body)
                        })?
                    }
                    None => match collection.len(self.shape.dialect) {
                        Some(n) => self.repeat(n, |walker| walker.loop_body(names, &[], body))?,
                        None => self.per_element(at, None, reason, &mut |walker, _| {
                            walker.loop_body(names, &[], body)
                        })?,
                    },
                };
                count.add(&each);
                Ok(count)
            }
            Over::Iterator(exprs) => self.iterator(at, names, exprs, body),
        }
    }

    /// A Lua loop over an iterator the bound cannot size: its expressions go where the bound
    /// does not follow them, and its body may run any number of times.
    fn iterator(&mut self, at: Pos, names: &[(String, Pos)], exprs: &[Node], body: &Block) -> Bound<Count> {
        let mut count = Count::default();
        for expr in exprs {
            let (c, value) = self.eval(expr)?;
            count.add(&c);
            self.lose(value, expr.at, Place::Iterator)?;
        }
        let each = self
            .per_element(at, None, Reason::Iterator, &mut |walker, _| walker.loop_body(names, &[], body))?;
        count.add(&each);
        Ok(count)
    }

    /// A Lua loop body with the loop's names bound (to `values`, then unknown).
    fn loop_body(&mut self, names: &[(String, Pos)], values: &[Abs], body: &Block) -> Bound<Count> {
        let mark = self.scope.len();
        let mut values = values.iter().cloned();
        let result = names
            .iter()
            .try_for_each(|(name, pos)| self.bind(name, values.next().unwrap_or(Abs::Unknown), *pos))
            .and_then(|()| self.block_count(body));
        self.scope.truncate(mark);
        result
    }

    /// Rhai's loop rule: runs `body` once per element of `iterable`, element by element when
    /// the elements are known and few (so what a site's options say per element, an
    /// interpolated prompt or a nested size, stays known) within a step budget; else (or when
    /// that budget runs out) one walk with an unknown element, times the length.
    pub(super) fn iterate(
        &mut self,
        iterable: &Abs,
        pos: Pos,
        what: &Construct,
        body: &mut dyn FnMut(&mut Self, Abs, Abs) -> Bound<Count>,
    ) -> Bound<Count> {
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
                        && !iterable.holds_functions() =>
                {
                    self.sites = sites;
                    self.steps = steps;
                }
                other => return other,
            }
        }
        if iterable.holds_functions() {
            self.lose(iterable.clone(), pos, Place::Unfollowed)?;
            return unbounded(pos, Reason::Unfollowable(what.clone()));
        }
        let count = body(self, Abs::Unknown, Abs::Unknown)?;
        if count.is_zero() {
            return Ok(count);
        }
        match iterable.len(self.shape.dialect) {
            Some(n) => Ok(count.scaled(n)),
            None => unbounded(pos, size_unknown(iterable, what.clone())),
        }
    }

    /// Lua's loop rule: a body run once per element, walked once with an unknown element and
    /// scaled, or (when that cannot bound it and the elements are known and few) once per
    /// element. `elements` `None`: the count of runs is unknown, bounded only when the body
    /// calls no agents.
    pub(super) fn per_element(
        &mut self,
        pos: Pos,
        elements: Option<Vec<Abs>>,
        unknown_reason: Reason,
        body: &mut dyn FnMut(&mut Self, Abs) -> Bound<Count>,
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

    /// A body run `n` times, walked once with unknown elements.
    pub(super) fn repeat(&mut self, n: u64, body: impl FnOnce(&mut Self) -> Bound<Count>) -> Bound<Count> {
        Ok(body(self)?.scaled(n))
    }
}

/// Why a loop over `iterable` has no static length: it is missing (an args value not given),
/// or its size is not known.
pub(super) fn size_unknown(iterable: &Abs, what: Construct) -> Reason {
    match iterable {
        Abs::Json(Value::Null) => Reason::Missing(what),
        _ => Reason::UnknownSize(what),
    }
}

fn checked(value: Option<i64>) -> Abs {
    value.map_or(Abs::Unknown, |n| Abs::Json(Value::from(n)))
}
