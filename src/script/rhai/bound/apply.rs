//! The Rhai call bound's calls: script functions, closures, cairn globals, builtins and
//! operators, and the site record of each `agent(...)` call.

use super::*;

impl Walker<'_> {
    /// A call: `receiver` is the value a method is called on.
    pub(super) fn call(
        &mut self,
        call: &::rhai::FnCallExpr,
        pos: Position,
        receiver: Option<Abs>,
    ) -> Bound<(Count, Abs)> {
        let (mut count, mut args) = self.exprs(&call.args)?;
        let name = call.name.clone();
        let method = receiver.is_some();
        if let Some(receiver) = receiver {
            args.insert(0, receiver);
        }
        let (more, value) = self.apply(&name, args, pos, method, call.op_token.is_some())?;
        count.add(&more);
        Ok((count, value))
    }

    /// Calls `name` with evaluated arguments (a method's receiver first).
    pub(super) fn apply(
        &mut self,
        name: &ImmutableString,
        args: Vec<Abs>,
        pos: Position,
        method: bool,
        operator: bool,
    ) -> Bound<(Count, Abs)> {
        let none = Count::default();
        if operator {
            return Ok((none, self.operator(name, args, pos)?));
        }
        // A script function of that name and arity (Rhai prefers it over a builtin). A method
        // call `x.f(a)` is `f(a)` with `this` = x, or else `f(x, a)`.
        if !name.starts_with("anon$") {
            let has = |arity: usize| self.functions.bodies.contains_key(&(name.clone(), arity));
            let this_style = method && has(args.len() - 1);
            if this_style || has(args.len()) {
                let callable = Callable { target: Target::Script(name.clone()), captured: Vec::new() };
                let mut args = args;
                if this_style {
                    // `this` is not a parameter the body can be given: unknown inside.
                    let receiver = args.remove(0);
                    self.lose(receiver, pos)?;
                }
                return Ok((self.invoke(&callable, &args, pos)?, Abs::Unknown));
            }
        }
        let (line, column) = line_column(pos);
        let mut args = args;
        match (name.as_str(), args.len()) {
            ("agent", 1 | 2) => {
                let site = self.site(&args, (line, column));
                self.sites.record(site);
                for arg in args {
                    self.lose(arg, pos)?;
                }
                Ok((Count::one((line, column)), Abs::Unknown))
            }
            ("parallel", 1 | 2) if !matches!(args.get(1), Some(Abs::Closure(_))) => {
                // The list form: every branch once.
                let branches = args.remove(0);
                for opts in args {
                    self.lose(opts, pos)?;
                }
                Ok((self.each_closure(&branches, pos, Construct::Parallel)?, Abs::Unknown))
            }
            ("parallel", 2 | 3) => {
                let items = args.remove(0);
                let body = args.remove(0);
                for opts in args {
                    self.lose(opts, pos)?;
                }
                let Abs::Closure(body) = body else { return Ok((none, Abs::Unknown)) };
                let count = self.iterate(&items, pos, &Construct::Parallel, &mut |walker, item, _| {
                    walker.invoke(&body, &[item], pos)
                })?;
                Ok((count, Abs::Unknown))
            }
            ("pipeline", 2 | 3) => {
                let items = args.remove(0);
                let stages = args.remove(0);
                for opts in args {
                    self.lose(opts, pos)?;
                }
                // Every item through every stage; a stage's input is the previous stage's
                // output, unknown to the bound (the first stage's is the item).
                let count = self.iterate(&items, pos, &Construct::Pipeline, &mut |walker, item, _| {
                    let Some(stages) = stage_list(&stages) else {
                        return walker.each_closure(&stages, pos, Construct::Pipeline);
                    };
                    let mut total = Count::default();
                    for (index, stage) in stages.iter().enumerate() {
                        let input = if index == 0 { item.clone() } else { Abs::Unknown };
                        if let Abs::Closure(stage) = stage {
                            total.add(&walker.invoke(stage, &[input], pos)?);
                        }
                    }
                    Ok(total)
                })?;
                Ok((count, Abs::Unknown))
            }
            ("step", 2 | 3) | ("phase", 2) => {
                let body = args.remove(1);
                for other in args {
                    self.lose(other, pos)?;
                }
                match body {
                    Abs::Closure(body) => Ok((self.invoke(&body, &[], pos)?, Abs::Unknown)),
                    _ => Ok((none, Abs::Unknown)),
                }
            }
            ("workflow", 2 | 3) => {
                let child = match args.first() {
                    Some(Abs::Json(Value::String(child))) => Some(child.clone()),
                    _ => None,
                };
                unbounded(pos, Reason::ChildWorkflow(child))
            }
            ("orchestrate", 1 | 2) => unbounded(pos, Reason::Orchestrate),
            ("call", n) if n >= 1 => {
                let callee = args.remove(0);
                match callee {
                    Abs::Closure(callee) => Ok((self.invoke(&callee, &args, pos)?, Abs::Unknown)),
                    _ => {
                        for arg in args {
                            self.lose(arg, pos)?;
                        }
                        Ok((none, Abs::Unknown))
                    }
                }
            }
            ("Fn", 1) => match &args[0] {
                Abs::Json(Value::String(target)) => {
                    let target: ImmutableString = target.as_str().into();
                    let target = if self.functions.has(&target) {
                        Target::Script(target)
                    } else {
                        Target::Global(target)
                    };
                    Ok((none, Abs::Closure(Rc::new(Callable { target, captured: Vec::new() }))))
                }
                _ => unbounded(pos, Reason::ComputedFnName),
            },
            ("type_of", 1) => Ok((
                none,
                match &args[0] {
                    Abs::Json(value) => Abs::Json(Value::String(type_name(value).to_owned())),
                    Abs::Closure(_) => Abs::Json(Value::String("Fn".to_owned())),
                    _ => Abs::Unknown,
                },
            )),
            ("len", 1) => Ok((none, args[0].len().map_or(Abs::Unknown, |n| Abs::Json(Value::from(n))))),
            ("keys" | "values", 1) => Ok((
                none,
                match &args[0] {
                    Abs::Json(Value::Object(map)) => Abs::Json(Value::Array(if name.as_str() == "keys" {
                        map.keys().cloned().map(Value::String).collect()
                    } else {
                        map.values().cloned().collect()
                    })),
                    _ => Abs::Unknown,
                },
            )),
            ("range", 2) => Ok((
                none,
                match (args[0].int(), args[1].int()) {
                    (Some(start), Some(end)) => Abs::Range(start, end),
                    _ => Abs::Unknown,
                },
            )),
            ("range", 3) => Ok((
                none,
                match (args[0].int(), args[1].int(), args[2].int()) {
                    (Some(start), Some(end), Some(step)) if step > 0 => {
                        let span = u64::try_from(end.saturating_sub(start)).unwrap_or(0);
                        Abs::Sized(span.div_ceil(step.unsigned_abs()))
                    }
                    _ => Abs::Unknown,
                },
            )),
            _ => {
                // A variable holding a closure, called like a function: `f(x)`.
                if !method && let Abs::Closure(callee) = self.lookup(name) {
                    return Ok((self.invoke(&callee, &args, pos)?, Abs::Unknown));
                }
                self.builtin(name, args, pos)
            }
        }
    }

    /// A builtin (or unknown) function: an array method that runs a closure per element counts
    /// it that many times; any other closure argument must not call agents.
    pub(super) fn builtin(&mut self, name: &str, args: Vec<Abs>, pos: Position) -> Bound<(Count, Abs)> {
        let per_element = PER_ELEMENT_METHODS.contains(&name);
        let per_pair = PER_PAIR_METHODS.contains(&name);
        let mut count = Count::default();
        if (per_element || per_pair) && args.len() >= 2 {
            let receiver = &args[0];
            for closure in &args[1..] {
                let Abs::Closure(body) = closure else {
                    self.escape(closure, pos)?;
                    continue;
                };
                let mut each = self.iterate(
                    receiver,
                    pos,
                    &Construct::Method(name.to_owned()),
                    &mut |walker, item, index| walker.invoke(body, &[item, index], pos),
                )?;
                if per_pair {
                    each = each.scaled(receiver.len().unwrap_or(0));
                }
                count.add(&each);
            }
            return Ok((count, Abs::Unknown));
        }
        for arg in &args {
            self.escape(arg, pos)?;
        }
        Ok((count, Abs::Unknown))
    }

    /// Operators over static values: ranges, integer arithmetic, string and array `+`.
    pub(super) fn operator(&mut self, name: &str, args: Vec<Abs>, pos: Position) -> Bound<Abs> {
        for arg in &args {
            self.escape(arg, pos)?;
        }
        let ints = (args.first().and_then(Abs::int), args.get(1).and_then(Abs::int));
        Ok(match (name, ints, args.as_slice()) {
            ("..", (Some(a), Some(b)), _) => Abs::Range(a, b),
            ("..=", (Some(a), Some(b)), _) => Abs::Range(a, b.saturating_add(1)),
            ("-", (Some(a), None), [_]) => Abs::Json(Value::from(a.saturating_neg())),
            ("+", (Some(a), Some(b)), _) => {
                a.checked_add(b).map_or(Abs::Unknown, |n| Abs::Json(Value::from(n)))
            }
            ("-", (Some(a), Some(b)), _) => {
                a.checked_sub(b).map_or(Abs::Unknown, |n| Abs::Json(Value::from(n)))
            }
            ("*", (Some(a), Some(b)), _) => {
                a.checked_mul(b).map_or(Abs::Unknown, |n| Abs::Json(Value::from(n)))
            }
            ("/", (Some(a), Some(b)), _) => {
                a.checked_div(b).map_or(Abs::Unknown, |n| Abs::Json(Value::from(n)))
            }
            ("!", _, [Abs::Json(Value::Bool(b))]) => Abs::Json(Value::Bool(!b)),
            ("==" | "!=" | "<" | ">" | "<=" | ">=", _, [Abs::Json(a), Abs::Json(b)]) => {
                compare(name, a, b).map_or(Abs::Unknown, |known| Abs::Json(Value::Bool(known)))
            }
            ("+", _, [Abs::Json(Value::String(a)), Abs::Json(Value::String(b))]) => {
                Abs::Json(Value::String(format!("{a}{b}")))
            }
            ("+", _, [Abs::Json(Value::Array(a)), Abs::Json(Value::Array(b))]) => {
                Abs::Json(Value::Array(a.iter().chain(b).cloned().collect()))
            }
            _ => Abs::Unknown,
        })
    }

    /// Every closure of a list (parallel branches, pipeline stages), once each.
    pub(super) fn each_closure(&mut self, list: &Abs, pos: Position, what: Construct) -> Bound<Count> {
        match list {
            Abs::Array(items) => {
                let mut total = Count::default();
                for item in items.iter() {
                    if let Abs::Closure(body) = item {
                        total.add(&self.invoke(body, &[], pos)?);
                    }
                }
                Ok(total)
            }
            // JSON holds no closures: nothing runs.
            Abs::Json(_) => Ok(Count::default()),
            _ => unbounded(pos, Reason::Unfollowable(what)),
        }
    }

    /// Calls a closure or function with `args` after its captured values: its body's count.
    pub(super) fn invoke(&mut self, callable: &Callable, args: &[Abs], pos: Position) -> Bound<Count> {
        let name = match &callable.target {
            Target::Script(name) => name.clone(),
            Target::Global(global) => {
                // `Fn("agent")` and the like: the global, called with these arguments.
                let mut all = callable.captured.clone();
                all.extend(args.iter().cloned());
                return Ok(self.apply(global, all, pos, false, false)?.0);
            }
        };
        let arity = callable.captured.len() + args.len();
        let functions = self.functions;
        let Some(body) = functions.get(&name, arity) else { return Ok(Count::default()) };
        if self.active.contains(&name) {
            let shown = (!name.starts_with("anon$")).then(|| name.to_string());
            return unbounded(pos, Reason::Recursion(shown));
        }
        let base = self.scope.len();
        let sees_script = name.starts_with("anon$") && self.frames.last().is_some_and(|f| f.sees_script);
        let values =
            callable.captured.iter().chain(args.iter()).cloned().chain(std::iter::repeat(Abs::Unknown));
        let params: Vec<(ImmutableString, Abs)> = body.params.iter().cloned().zip(values).collect();
        self.frames.push(Frame { base, sees_script });
        self.active.push(name);
        let mut result = Ok(());
        for (param, value) in params {
            if let Err(e) = self.declare(param, value, pos) {
                result = Err(e);
                break;
            }
        }
        let count = result.and_then(|()| self.statements(&body.statements)).and_then(|(count, value)| {
            // The function's result: a closure it returns is out of sight.
            self.lose(value, pos)?;
            Ok(count)
        });
        self.active.pop();
        self.frames.pop();
        self.scope.truncate(base);
        count
    }

    // ----- sites -----

    /// What an `agent(prompt, opts?)` call's arguments say.
    pub(super) fn site(&self, args: &[Abs], pos: (u32, u32)) -> AgentSite {
        let prompt = match args.first() {
            Some(Abs::Json(Value::String(prompt))) => Known::Literal(prompt.clone()),
            _ => Known::Computed,
        };
        let options = match args.get(1) {
            None => Options::Absent,
            Some(Abs::Json(Value::Object(map))) => Options::Fields(
                map.iter().map(|(key, value)| (key.clone(), Known::Literal(value.clone()))).collect(),
            ),
            Some(Abs::Map(entries)) => Options::Fields(
                entries
                    .iter()
                    .map(|(key, value)| {
                        let value = match value {
                            Abs::Json(value) => Known::Literal(value.clone()),
                            _ => Known::Computed,
                        };
                        (key.clone(), value)
                    })
                    .collect(),
            ),
            Some(_) => Options::Computed,
        };
        sites::site(pos, prompt, options)
    }
}

/// Follows the static part of a chain into a JSON value by reference: properties after `.`,
/// literal keys and indexes in `[]`. Returns what it reached and the rest of the chain (with how
/// it is reached) from the first accessor it could not follow.
pub(super) fn args_path<'v, 'e>(
    mut value: &'v Value,
    mut dot: bool,
    mut node: &'e Expr,
) -> (&'v Value, Option<(bool, &'e Expr)>) {
    static NULL: Value = Value::Null;
    loop {
        let (accessor, next) = match node {
            Expr::Dot(chain, ..) => (&chain.lhs, Some((true, &chain.rhs))),
            Expr::Index(chain, ..) => (&chain.lhs, Some((false, &chain.rhs))),
            leaf => (leaf, None),
        };
        let reached = match (dot, accessor, value) {
            // A map's missing property reads as ().
            (true, Expr::Property(property, _), Value::Object(map)) => {
                Some(map.get(property.2.as_str()).unwrap_or(&NULL))
            }
            (false, Expr::StringConstant(key, _), Value::Object(map)) => {
                Some(map.get(key.as_str()).unwrap_or(&NULL))
            }
            (false, Expr::IntegerConstant(index, _), Value::Array(items)) => {
                index_of(items.len(), *index).and_then(|i| items.get(i))
            }
            _ => None,
        };
        let Some(reached) = reached else { return (value, Some((dot, node))) };
        value = reached;
        match next {
            Some((next_dot, rest)) => {
                dot = next_dot;
                node = rest;
            }
            None => return (value, None),
        }
    }
}

/// A comparison of two JSON values, when Rhai's answer is certain: integers, strings, booleans
/// and `()` (which equals only itself).
pub(super) fn compare(operator: &str, a: &Value, b: &Value) -> Option<bool> {
    use std::cmp::Ordering;
    let order = match (a, b) {
        (Value::Null, Value::Null) => Some(Ordering::Equal),
        (Value::Null, _) | (_, Value::Null) => None,
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        (Value::Number(x), Value::Number(y)) => Some(x.as_i64()?.cmp(&y.as_i64()?)),
        _ => None,
    };
    match (operator, order) {
        ("==", Some(order)) => Some(order == Ordering::Equal),
        ("!=", Some(order)) => Some(order != Ordering::Equal),
        ("==", None) if a.is_null() || b.is_null() => Some(false),
        ("!=", None) if a.is_null() || b.is_null() => Some(true),
        ("<", Some(order)) => Some(order == Ordering::Less),
        (">", Some(order)) => Some(order == Ordering::Greater),
        ("<=", Some(order)) => Some(order != Ordering::Greater),
        (">=", Some(order)) => Some(order != Ordering::Less),
        _ => None,
    }
}

/// Rhai's `type_of` of a JSON value.
pub(super) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "()",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() => "i64",
        Value::Number(_) => "f64",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "map",
    }
}

/// The stages of a pipeline, when they are a list the bound can follow.
pub(super) fn stage_list(stages: &Abs) -> Option<Vec<Abs>> {
    match stages {
        Abs::Array(items) => Some(items.to_vec()),
        _ => None,
    }
}
