//! The bound's calls: chains of accessors and calls, the cairn globals (agent sites,
//! fan-outs, step bodies, child workflows), the script's own functions and closures, and
//! what each dialect's builtins and operators do to the values the bound tracks.

use std::rc::Rc;

use serde_json::Value;

use super::super::Known;
use super::super::reason::{Construct, Place, Reason};
use super::super::shape::{Access, Dialect, Kind, Node, OptionValue, PathKey, Pos, Root, SiteOptions};
use super::super::sites::{self, Options};
use super::super::value::{Abs, Callee, Func, PER_ELEMENT_LIMIT, index_of};
use super::{Bound, Count, Evaluator, unbounded};

/// Rhai's builtin array methods that run a closure once per element (at most).
const PER_ELEMENT_METHODS: &[&str] = &[
    "map",
    "filter",
    "for_each",
    "all",
    "some",
    "find",
    "find_map",
    "retain",
    "drain",
    "index_of",
    "reduce",
    "reduce_rev",
    "dedup",
    "splice",
    "zip",
];

/// Rhai's builtin array methods that run a closure up to once per pair of elements.
const PER_PAIR_METHODS: &[&str] = &["sort", "sort_by", "order_by"];

impl Evaluator<'_> {
    // ----- chains -----

    /// A chain: its root's value, then each accessor or call applied in order.
    pub(super) fn chain(&mut self, root: &Root, steps: &[Access]) -> Bound<(Count, Abs)> {
        let mut count = Count::default();
        // The global a bare name refers to, while the chain is just that name (Lua).
        let mut global: Option<(&str, Pos)> = None;
        let mut rest = steps;
        let mut value = match root {
            Root::Node(node) => {
                let (c, value) = self.eval(node)?;
                count.add(&c);
                value
            }
            Root::Name { name, at } => match self.lookup(name) {
                Some(value) => value,
                None => {
                    global = Some((name, *at));
                    Abs::Unknown
                }
            },
            Root::Args(node) => match self.script_args() {
                // A path into `args` is followed by reference: only what it reaches is copied.
                Some(args) => {
                    let (reached, followed) = args_path(args, steps);
                    rest = &steps[followed..];
                    Abs::Json(reached.clone())
                }
                None => {
                    let (c, value) = self.eval(node)?;
                    count.add(&c);
                    value
                }
            },
        };
        let dialect = self.shape.dialect;
        for step in rest {
            match step {
                Access::Field(name) => {
                    value = value.member(&Abs::Json(Value::String(name.clone())), dialect);
                    global = None;
                }
                Access::Index { key, .. } => {
                    let (c, key_value) = self.eval(key)?;
                    count.add(&c);
                    let member = value.member(&key_value, dialect);
                    if dialect == Dialect::Rhai && matches!(member, Abs::Unknown) {
                        // An element picked by an unknown index: the list must hold no
                        // function that calls agents.
                        self.lose(value, key.at, Place::Unfollowed)?;
                    }
                    value = member;
                    global = None;
                }
                Access::Method { name, args, at } => {
                    let (c, mut values) = self.eval_all(args)?;
                    count.add(&c);
                    values.insert(0, value);
                    let (c, result) = self.apply(name, values, *at, true)?;
                    count.add(&c);
                    value = result;
                }
                Access::Call { args, options } => {
                    let (c, result) = match global.take() {
                        Some((name, at)) => self.global(name, at, args, options)?,
                        None => match &value {
                            Abs::Func(func) => {
                                let func = func.clone();
                                let (mut c, values) = self.eval_all(args)?;
                                let pos = func.pos;
                                c.add(&self.invoke(&func, values, pos)?);
                                (c, Abs::Unknown)
                            }
                            _ => self.opaque(args)?,
                        },
                    };
                    count.add(&c);
                    value = result;
                }
                Access::Opaque(args) => {
                    count.add(&self.opaque(args)?.0);
                    value = Abs::Unknown;
                    global = None;
                }
            }
        }
        Ok((count, value))
    }

    /// A call of something the analysis does not follow: its arguments are lost.
    fn opaque(&mut self, args: &[Node]) -> Bound<(Count, Abs)> {
        let (count, values) = self.eval_all(args)?;
        for value in values {
            self.lose(value, (1, 1), Place::Argument)?;
        }
        Ok((count, Abs::Unknown))
    }

    // ----- Lua's globals -----

    /// A Lua call of a name no local holds: a cairn global, a base function, or something
    /// unknown.
    fn global(&mut self, name: &str, at: Pos, args: &[Node], options: &SiteOptions) -> Bound<(Count, Abs)> {
        if !matches!(
            name,
            "agent"
                | "step"
                | "phase"
                | "pcall"
                | "xpcall"
                | "parallel"
                | "pipeline"
                | "workflow"
                | "orchestrate"
        ) {
            return self.opaque(args);
        }
        let (mut count, values) = self.eval_all(args)?;
        match name {
            "agent" => {
                let options = self.lua_options(options);
                self.record(at, values.first(), options);
                count.add(&Count::one(at));
            }
            "step" | "phase" => {
                if let Some(Abs::Func(func)) = values.get(1) {
                    let func = func.clone();
                    count.add(&self.invoke(&func, Vec::new(), at)?);
                }
            }
            "pcall" | "xpcall" => {
                let targets = if name == "pcall" { 1 } else { 2 };
                let rest: Vec<Abs> = values.iter().skip(targets).cloned().collect();
                let funcs: Vec<Rc<Func>> = values.iter().take(targets).flat_map(Abs::functions).collect();
                for func in funcs {
                    count.add(&self.invoke(&func, rest.clone(), at)?);
                }
                for value in rest {
                    self.lose(value, at, Place::PcallArgument)?;
                }
            }
            "parallel" => match values.get(1) {
                Some(Abs::Func(func)) => {
                    let func = func.clone();
                    let items = values.first().cloned().unwrap_or(Abs::Unknown);
                    count.add(&self.fan_out(at, &items, &[func], Construct::Parallel)?);
                }
                _ => {
                    let branches = values.first().cloned().unwrap_or(Abs::Unknown);
                    for func in branches.functions() {
                        count.add(&self.invoke(&func, Vec::new(), at)?);
                    }
                }
            },
            "pipeline" => {
                let items = values.first().cloned().unwrap_or(Abs::Unknown);
                let stages = values.get(1).map(Abs::functions).unwrap_or_default();
                count.add(&self.fan_out(at, &items, &stages, Construct::Pipeline)?);
            }
            "workflow" => return unbounded(at, Reason::ChildWorkflow(child_name(values.first()))),
            _ => return unbounded(at, Reason::Orchestrate),
        }
        Ok((count, Abs::Unknown))
    }

    /// Lua's fan-out: runs each function once per item of `items` (the first with the item,
    /// the others with an unknown value: a stage's input is the previous stage's output).
    fn fan_out(&mut self, at: Pos, items: &Abs, funcs: &[Rc<Func>], what: Construct) -> Bound<Count> {
        let dialect = self.shape.dialect;
        let mut total = Count::default();
        for (index, func) in funcs.iter().enumerate() {
            let n = items.len(dialect);
            let elements: Option<Vec<Abs>> = match items.pairs() {
                Some(pairs) => Some(pairs.into_iter().map(|(_, value)| value).collect()),
                None => n.map(|n| vec![Abs::Unknown; n.min(PER_ELEMENT_LIMIT as u64 + 1) as usize]),
            };
            let reason = super::flow::size_unknown(items, what.clone());
            let run = |walker: &mut Self, item: Abs| {
                let args = if index == 0 { vec![item] } else { Vec::new() };
                walker.invoke(func, args, at)
            };
            let count = match (elements, n) {
                (Some(elements), Some(_)) if elements.len() <= PER_ELEMENT_LIMIT => {
                    self.per_element(at, Some(elements), reason, &mut |walker, item| run(walker, item))?
                }
                (_, Some(n)) => self.repeat(n, |walker| walker.invoke(func, Vec::new(), at))?,
                _ => {
                    self.per_element(at, None, reason, &mut |walker, _| walker.invoke(func, Vec::new(), at))?
                }
            };
            total.add(&count);
        }
        Ok(total)
    }

    /// What a Lua options table's fields say, each read in the scope of the call.
    fn lua_options(&self, options: &SiteOptions) -> Option<Options> {
        Some(match options {
            SiteOptions::FromValue => return None,
            SiteOptions::Absent => Options::Absent,
            SiteOptions::Computed => Options::Computed,
            SiteOptions::Fields(fields) => Options::Fields(
                fields
                    .iter()
                    .map(|(key, value)| {
                        let known = match value {
                            OptionValue::Known(value) => Known::Literal(value.clone()),
                            OptionValue::Computed => Known::Computed,
                            OptionValue::Path { name, keys } => {
                                self.static_path(name, keys).map_or(Known::Computed, Known::Literal)
                            }
                        };
                        (key.clone(), known)
                    })
                    .collect(),
            ),
        })
    }

    /// The JSON value of a name and a path from it, when the analysis knows it.
    fn static_path(&self, name: &str, keys: &[PathKey]) -> Option<Value> {
        let dialect = self.shape.dialect;
        let mut value = self.lookup(name)?;
        for key in keys {
            value = match key {
                PathKey::Field(field) => value.member(&Abs::Json(Value::String(field.clone())), dialect),
                PathKey::Index(key) => value.member(&key.clone().map_or(Abs::Unknown, Abs::Json), dialect),
            };
        }
        match value {
            Abs::Json(value) => Some(value),
            _ => None,
        }
    }

    // ----- sites -----

    /// Records an agent site: the prompt from its value, the options from `options` (Lua) or
    /// from the value of the second argument (Rhai).
    fn record(&mut self, at: Pos, prompt: Option<&Abs>, options: Option<Options>) {
        let prompt = match prompt {
            Some(Abs::Json(Value::String(text))) => Known::Literal(text.clone()),
            Some(_) => Known::Computed,
            None => Known::Unset,
        };
        self.sites.record(sites::site(at, prompt, options.unwrap_or(Options::Absent)));
    }

    // ----- Rhai's calls -----

    /// Calls `name` with evaluated arguments (a method's receiver first): the script's
    /// function of that name and arity (Rhai prefers it over a builtin; a method call `x.f(a)`
    /// is `f(a)` with `this` = x, or else `f(x, a)`), a cairn global, a closure a variable
    /// holds, or a builtin.
    pub(super) fn apply(
        &mut self,
        name: &str,
        args: Vec<Abs>,
        pos: Pos,
        method: bool,
    ) -> Bound<(Count, Abs)> {
        let none = Count::default();
        if !name.starts_with("anon$") {
            let has =
                |arity: usize| self.overloads(name).any(|id| self.shape.functions[id].params.len() == arity);
            let this_style = method && has(args.len() - 1);
            if this_style || has(args.len()) {
                let func = Rc::new(Func::named(Callee::Named(name.to_owned())));
                let mut args = args;
                if this_style {
                    // `this` is not a parameter the body can be given: unknown inside.
                    let receiver = args.remove(0);
                    self.lose(receiver, pos, Place::Unfollowed)?;
                }
                return Ok((self.invoke(&func, args, pos)?, Abs::Unknown));
            }
        }
        let mut args = args;
        match (name, args.len()) {
            ("agent", 1 | 2) => {
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
                self.record(pos, Some(args.first().unwrap_or(&Abs::Unknown)), Some(options));
                for arg in args {
                    self.lose(arg, pos, Place::Unfollowed)?;
                }
                Ok((Count::one(pos), Abs::Unknown))
            }
            ("parallel", 1 | 2) if !matches!(args.get(1), Some(Abs::Func(_))) => {
                // The list form: every branch once.
                let branches = args.remove(0);
                for opts in args {
                    self.lose(opts, pos, Place::Unfollowed)?;
                }
                Ok((self.each_function(&branches, pos, Construct::Parallel)?, Abs::Unknown))
            }
            ("parallel", 2 | 3) => {
                let items = args.remove(0);
                let body = args.remove(0);
                for opts in args {
                    self.lose(opts, pos, Place::Unfollowed)?;
                }
                let Abs::Func(body) = body else { return Ok((none, Abs::Unknown)) };
                let count = self.iterate(&items, pos, &Construct::Parallel, &mut |walker, item, _| {
                    walker.invoke(&body, vec![item], pos)
                })?;
                Ok((count, Abs::Unknown))
            }
            ("pipeline", 2 | 3) => {
                let items = args.remove(0);
                let stages = args.remove(0);
                for opts in args {
                    self.lose(opts, pos, Place::Unfollowed)?;
                }
                // Every item through every stage; a stage's input is the previous stage's
                // output, unknown to the bound (the first stage's is the item).
                let count = self.iterate(&items, pos, &Construct::Pipeline, &mut |walker, item, _| {
                    let Abs::List(stages) = &stages else {
                        return walker.each_function(&stages, pos, Construct::Pipeline);
                    };
                    let mut total = Count::default();
                    for (index, stage) in stages.iter().enumerate() {
                        let input = if index == 0 { item.clone() } else { Abs::Unknown };
                        if let Abs::Func(stage) = stage {
                            total.add(&walker.invoke(stage, vec![input], pos)?);
                        }
                    }
                    Ok(total)
                })?;
                Ok((count, Abs::Unknown))
            }
            ("step", 2 | 3) | ("phase", 2) => {
                let body = args.remove(1);
                for other in args {
                    self.lose(other, pos, Place::Unfollowed)?;
                }
                match body {
                    Abs::Func(body) => Ok((self.invoke(&body, Vec::new(), pos)?, Abs::Unknown)),
                    _ => Ok((none, Abs::Unknown)),
                }
            }
            ("workflow", 2 | 3) => unbounded(pos, Reason::ChildWorkflow(child_name(args.first()))),
            ("orchestrate", 1 | 2) => unbounded(pos, Reason::Orchestrate),
            ("call", n) if n >= 1 => {
                let callee = args.remove(0);
                match callee {
                    Abs::Func(callee) => Ok((self.invoke(&callee, args, pos)?, Abs::Unknown)),
                    _ => {
                        for arg in args {
                            self.lose(arg, pos, Place::Unfollowed)?;
                        }
                        Ok((none, Abs::Unknown))
                    }
                }
            }
            ("Fn", 1) => match &args[0] {
                Abs::Json(Value::String(target)) => {
                    let callee = if self.shape.named.contains_key(target) {
                        Callee::Named(target.clone())
                    } else {
                        Callee::Global(target.clone())
                    };
                    Ok((none, Abs::Func(Rc::new(Func::named(callee)))))
                }
                _ => unbounded(pos, Reason::ComputedFnName),
            },
            ("type_of", 1) => Ok((
                none,
                match &args[0] {
                    Abs::Json(value) => Abs::Json(Value::String(type_name(value).to_owned())),
                    Abs::Func(_) => Abs::Json(Value::String("Fn".to_owned())),
                    _ => Abs::Unknown,
                },
            )),
            ("len", 1) => {
                Ok((none, args[0].len(Dialect::Rhai).map_or(Abs::Unknown, |n| Abs::Json(Value::from(n)))))
            }
            ("keys" | "values", 1) => Ok((
                none,
                match &args[0] {
                    Abs::Json(Value::Object(map)) => Abs::Json(Value::Array(if name == "keys" {
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
                if !method && let Some(Abs::Func(callee)) = self.lookup(name) {
                    return Ok((self.invoke(&callee, args, pos)?, Abs::Unknown));
                }
                self.builtin(name, args, pos)
            }
        }
    }

    /// A Rhai builtin (or unknown) function: an array method that runs a closure per element
    /// counts it that many times; any other closure argument must not call agents.
    fn builtin(&mut self, name: &str, args: Vec<Abs>, pos: Pos) -> Bound<(Count, Abs)> {
        let per_element = PER_ELEMENT_METHODS.contains(&name);
        let per_pair = PER_PAIR_METHODS.contains(&name);
        let mut count = Count::default();
        if (per_element || per_pair) && args.len() >= 2 {
            let receiver = &args[0];
            for closure in &args[1..] {
                let Abs::Func(body) = closure else {
                    self.lose(closure.clone(), pos, Place::Unfollowed)?;
                    continue;
                };
                let mut each = self.iterate(
                    receiver,
                    pos,
                    &Construct::Method(name.to_owned()),
                    &mut |walker, item, index| walker.invoke(body, vec![item, index], pos),
                )?;
                if per_pair {
                    each = each.scaled(receiver.len(Dialect::Rhai).unwrap_or(0));
                }
                count.add(&each);
            }
            return Ok((count, Abs::Unknown));
        }
        for arg in args {
            self.lose(arg, pos, Place::Unfollowed)?;
        }
        Ok((count, Abs::Unknown))
    }

    /// Rhai's operators over static values: ranges, integer arithmetic, comparisons, string
    /// and array `+`.
    pub(super) fn operator(&mut self, name: &str, args: Vec<Abs>, pos: Pos) -> Bound<Abs> {
        for arg in &args {
            self.lose(arg.clone(), pos, Place::Unfollowed)?;
        }
        let ints = (args.first().and_then(Abs::int), args.get(1).and_then(Abs::int));
        let int = |n: Option<i64>| n.map_or(Abs::Unknown, |n| Abs::Json(Value::from(n)));
        Ok(match (name, ints, args.as_slice()) {
            ("..", (Some(a), Some(b)), _) => Abs::Range(a, b),
            ("..=", (Some(a), Some(b)), _) => Abs::Range(a, b.saturating_add(1)),
            ("-", (Some(a), None), [_]) => Abs::Json(Value::from(a.saturating_neg())),
            ("+", (Some(a), Some(b)), _) => int(a.checked_add(b)),
            ("-", (Some(a), Some(b)), _) => int(a.checked_sub(b)),
            ("*", (Some(a), Some(b)), _) => int(a.checked_mul(b)),
            ("/", (Some(a), Some(b)), _) => int(a.checked_div(b)),
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

    /// Every function of a Rhai list (parallel branches, pipeline stages), once each.
    fn each_function(&mut self, list: &Abs, pos: Pos, what: Construct) -> Bound<Count> {
        match list {
            Abs::List(items) => {
                let mut total = Count::default();
                for item in items.iter() {
                    if let Abs::Func(body) = item {
                        total.add(&self.invoke(body, Vec::new(), pos)?);
                    }
                }
                Ok(total)
            }
            // JSON holds no functions: nothing runs.
            Abs::Json(_) => Ok(Count::default()),
            _ => unbounded(pos, Reason::Unfollowable(what)),
        }
    }
}

/// A child workflow's name, when it is a literal.
fn child_name(first: Option<&Abs>) -> Option<String> {
    match first {
        Some(Abs::Json(Value::String(child))) => Some(child.clone()),
        _ => None,
    }
}

/// Follows the literal start of a Rhai chain into `args` by reference: properties after `.`,
/// literal keys and indexes in `[]`. Returns what it reached and how many accessors it
/// followed.
fn args_path<'v>(mut value: &'v Value, steps: &[Access]) -> (&'v Value, usize) {
    static NULL: Value = Value::Null;
    for (followed, step) in steps.iter().enumerate() {
        let reached = match (step, value) {
            // A map's missing property reads as ().
            (Access::Field(name), Value::Object(map)) => Some(map.get(name.as_str()).unwrap_or(&NULL)),
            (Access::Index { key, literal: true }, Value::Object(map)) => match &key.kind {
                Kind::Const(Value::String(name)) => Some(map.get(name.as_str()).unwrap_or(&NULL)),
                _ => None,
            },
            (Access::Index { key, literal: true }, Value::Array(items)) => match &key.kind {
                Kind::Const(index) => {
                    index.as_i64().and_then(|i| index_of(items.len(), i)).and_then(|i| items.get(i))
                }
                _ => None,
            },
            _ => None,
        };
        match reached {
            Some(reached) => value = reached,
            None => return (value, followed),
        }
    }
    (value, steps.len())
}

/// A comparison of two JSON values, when Rhai's answer is certain: integers, strings, booleans
/// and `()` (which equals only itself).
fn compare(operator: &str, a: &Value, b: &Value) -> Option<bool> {
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
fn type_name(value: &Value) -> &'static str {
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
