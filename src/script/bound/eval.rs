//! The one analysis of the cost bound: an abstract run of a script's [`Shape`] that counts,
//! per agent call site, how many times it can run at most. Both dialects' front ends lower
//! their syntax trees into the shape; everything below is the same for both, except where
//! the shape's [`Dialect`] says the dialects' constructs mean different things.
//!
//! Counts multiply through nesting: a loop over known elements (a literal, a range, an `args`
//! value: the run's `args` are given, so their sizes are known) runs its body once per
//! element; `parallel(items, f)` and `pipeline(items, stages)` run their functions once per
//! item; `parallel([branches])` runs each branch once; `step` and `phase` bodies (and the
//! function given to Lua's `pcall`) run once; a branch counts one arm, the larger (each site
//! keeps the most it can run in any arm, `count.rs`); a condition known before the run (Rhai)
//! picks its arm; a Rhai `try`/`catch` counts both; a default (`args.x ?? [...]`,
//! `args.x or {...}`) is what the args give, else the default; a call of a script function or closure counts its body at
//! that call, with the arguments it is given. `break`, `return` and `goto` only lower counts
//! and are ignored, except a `goto` back to a label, which is a loop.
//!
//! Values are tracked as far as they are static: JSON literals, `args` paths, ranges,
//! lengths, and functions bound to a name the script never changes. A name the script
//! changes anywhere is unknown wherever it is bound ([`Shape::changed`]).
//!
//! Unbounded: a `while`/`loop`/`do`/`repeat` loop (or a `goto` loop) whose body calls agents;
//! a loop or fan-out over a value of unknown size whose body calls agents; a child
//! `workflow` (its calls are not in the script); `orchestrate` (it decides its calls at run
//! time); recursion; a function that calls agents stored where the analysis cannot follow
//! it (a changed name, a table field, a return value, an argument of anything but a cairn
//! global or the script's own function); Rhai's `Fn` with a computed name. Every reason is
//! worded once, in `reason.rs`.

mod calls;
mod flow;

use std::collections::HashMap;
use std::rc::Rc;

use serde_json::Value;

use super::CallBound;
use super::count::SiteCounts as Count;
use super::reason::{Place, Reason};
use super::shape::{Change, Dialect, FnId, Pos, SeesArgs, Shape};
use super::sites::Sites;
use super::value::{Abs, Callee, Func};

/// The most statements and expressions one analysis visits before it gives up (nested
/// per-element walks and inlined functions multiply the work).
const MAX_STEPS: u64 = 2_000_000;

/// The most steps one element-by-element walk of a Rhai loop may take before the loop is
/// walked once with an unknown element instead.
const PER_ELEMENT_STEPS: u64 = 20_000;

/// Rhai: the nested function and closure calls the walk follows (the sandbox allows 48 call
/// levels), checked at every step.
const MAX_CALL_DEPTH: usize = 48;

/// Lua: the most function calls inlined inside one another, checked at each call.
const MAX_INLINE_DEPTH: usize = 64;

/// Globals that call agents themselves or run what they are given: a pointer to one
/// (`Fn("agent")`) must not go where the bound cannot follow it.
const AGENT_GLOBALS: &[&str] = &["agent", "workflow", "orchestrate", "parallel", "pipeline", "step", "phase"];

/// The call bound of a lowered script, given the run's `args`.
pub(crate) fn call_bound(shape: &Shape, args: &Value) -> CallBound {
    let mut evaluator = Evaluator {
        shape,
        args: shape.args_known.then_some(args),
        sites: Sites::default(),
        scope: Vec::new(),
        frames: vec![true],
        active: Vec::new(),
        probes: HashMap::new(),
        steps: 0,
        step_limit: MAX_STEPS,
        labels: Vec::new(),
        backward_goto: None,
    };
    match evaluator.run() {
        Ok(count) => evaluator.sites.finish(count),
        Err(unbounded) => unbounded.reason.at(unbounded.pos.0, unbounded.pos.1),
    }
}

/// Why the count has no static bound, and where.
#[derive(Debug, Clone)]
struct Unbounded {
    reason: Reason,
    pos: Pos,
}

type Bound<T> = Result<T, Unbounded>;

fn unbounded<T>(pos: Pos, reason: Reason) -> Bound<T> {
    Err(Unbounded { reason, pos })
}

/// A function being walked, to catch recursion: Rhai's by name (its overloads are one
/// function), Lua's by body.
#[derive(Debug, Clone, PartialEq)]
enum Active {
    Name(String),
    Body(FnId),
}

struct Evaluator<'s> {
    shape: &'s Shape,
    /// The run's args, unless the script rebinds `args`.
    args: Option<&'s Value>,
    /// What each site's options say, merged over every context it was reached in.
    sites: Sites,
    /// The bindings in sight, innermost last.
    scope: Vec<(String, Abs)>,
    /// Whether each function being walked sees `args`, innermost last.
    frames: Vec<bool>,
    /// Functions being walked, to catch recursion.
    active: Vec<Active>,
    /// Whether a Lua function calls agents, by body, once probed.
    probes: HashMap<FnId, bool>,
    steps: u64,
    /// Where `steps` stops the walk.
    step_limit: u64,
    /// Labels of the enclosing blocks seen so far: a `goto` to one of them jumps back.
    labels: Vec<String>,
    /// A `goto` back to a label, not yet matched with its block.
    backward_goto: Option<(String, Pos)>,
}

impl Evaluator<'_> {
    fn run(&mut self) -> Bound<Count> {
        self.implicit_functions()?;
        let (count, value) = self.block(&self.shape.main)?;
        self.lose(value, (1, 1), Place::Unfollowed)?;
        Ok(count)
    }

    /// One step of the budget.
    fn step(&mut self, pos: Pos) -> Bound<()> {
        if self.shape.dialect == Dialect::Rhai && self.active.len() > MAX_CALL_DEPTH {
            return unbounded(pos, Reason::TooDeep);
        }
        self.steps += 1;
        if self.steps > self.step_limit {
            return unbounded(pos, Reason::TooComplex);
        }
        Ok(())
    }

    /// Functions the interpreter calls by itself cannot be followed: any that calls agents
    /// makes the script unbounded.
    fn implicit_functions(&mut self) -> Bound<()> {
        for name in &self.shape.implicit {
            let func = Rc::new(Func::named(Callee::Named(name.clone())));
            if self.calls_agents(&func, (1, 1))? {
                return unbounded((1, 1), Reason::Implicit(name.clone()));
            }
        }
        Ok(())
    }

    // ----- scope -----

    /// A name's value: its innermost binding, else the run's `args` where they are in sight;
    /// `None` for a name nothing binds (Lua: a global).
    fn lookup(&self, name: &str) -> Option<Abs> {
        if let Some((_, value)) = self.scope.iter().rev().find(|(n, _)| n == name) {
            return Some(value.clone());
        }
        match self.args {
            Some(args) if name == "args" && self.sees_args() => Some(Abs::Json(args.clone())),
            _ => None,
        }
    }

    /// Whether the function being walked sees the run's `args`.
    fn sees_args(&self) -> bool {
        self.frames.last().copied().unwrap_or(false)
    }

    /// The run's args when `args` here is them (not shadowed, rebound or out of sight).
    fn script_args(&self) -> Option<&Value> {
        let args = self.args?;
        (self.sees_args() && !self.scope.iter().any(|(name, _)| name == "args")).then_some(args)
    }

    /// Binds a name; a name the script changes does not hold what it is bound to, so what it
    /// held must not be a function that calls agents.
    fn bind(&mut self, name: &str, value: Abs, pos: Pos) -> Bound<()> {
        let changed = match self.shape.changed.get(name) {
            Some(Change::Always) => true,
            Some(Change::UnlessScalar) => !value.is_scalar(),
            None => false,
        };
        let value = if changed {
            self.lose(value, pos, Place::ChangedVariable(name.to_owned()))?;
            Abs::Unknown
        } else {
            value
        };
        self.scope.push((name.to_owned(), value));
        Ok(())
    }

    /// A value goes where the analysis cannot follow it: unbounded if it holds a function
    /// that calls agents. A Lua function is reported where it was made, with the place it
    /// went; a Rhai one where it went.
    fn lose(&mut self, value: Abs, pos: Pos, place: Place) -> Bound<()> {
        match value {
            Abs::Func(func) => {
                if self.calls_agents(&func, pos)? {
                    return match func.callee {
                        Callee::Body { .. } => unbounded(func.pos, Reason::Escape(place)),
                        _ => unbounded(pos, Reason::Escape(Place::Unfollowed)),
                    };
                }
                Ok(())
            }
            Abs::List(items) => items.iter().try_for_each(|item| self.lose(item.clone(), pos, place.clone())),
            Abs::Map(entries) => {
                entries.iter().try_for_each(|(_, value)| self.lose(value.clone(), pos, place.clone()))
            }
            _ => Ok(()),
        }
    }

    /// Whether calling the function (with unknown arguments) may call agents.
    fn calls_agents(&mut self, func: &Rc<Func>, pos: Pos) -> Bound<bool> {
        match &func.callee {
            Callee::Global(name) => Ok(AGENT_GLOBALS.contains(&name.as_str())),
            Callee::Named(name) => {
                // Every overload of the name, each with unknown arguments; what the probe
                // learned of options is not from a real call.
                let arities: Vec<usize> =
                    self.overloads(name).map(|id| self.shape.functions[id].params.len()).collect();
                let sites = self.sites.clone();
                let mut agentic = false;
                for arity in arities {
                    let unknown = vec![Abs::Unknown; arity.saturating_sub(func.captured.len())];
                    let probe = Func {
                        callee: func.callee.clone(),
                        captured: func.captured.clone(),
                        scope: None,
                        pos,
                    };
                    match self.invoke(&Rc::new(probe), unknown, pos) {
                        Ok(count) if count.is_zero() => {}
                        _ => agentic = true,
                    }
                }
                self.sites = sites;
                Ok(agentic)
            }
            Callee::Body { id, .. } => {
                if let Some(known) = self.probes.get(id) {
                    return Ok(*known);
                }
                if self.active.contains(&Active::Body(*id)) {
                    return Ok(false);
                }
                let saved = std::mem::take(&mut self.sites);
                let calls = match self.invoke(func, Vec::new(), func.pos) {
                    Ok(count) => !count.is_zero(),
                    Err(error) if error.reason.is_exhaustion() => return Err(error),
                    Err(_) => true,
                };
                self.sites = saved;
                self.probes.insert(*id, calls);
                Ok(calls)
            }
        }
    }

    /// Rhai's overloads of a name, in declaration order.
    fn overloads<'a>(&'a self, name: &str) -> impl Iterator<Item = FnId> + 'a {
        self.shape.named.get(name).into_iter().flatten().copied()
    }

    /// Rhai's function of a name and arity: the one of that arity, else (closures have unique
    /// names) the only one.
    fn overload(&self, name: &str, arity: usize) -> Option<FnId> {
        let ids = self.shape.named.get(name)?;
        ids.iter().copied().find(|id| self.shape.functions[*id].params.len() == arity).or(
            match ids.as_slice() {
                [only] => Some(*only),
                _ => None,
            },
        )
    }

    /// Calls a function with `args` after its captured values: its body's count.
    fn invoke(&mut self, func: &Rc<Func>, args: Vec<Abs>, pos: Pos) -> Bound<Count> {
        let (id, key, own_name) = match &func.callee {
            Callee::Global(global) => {
                // `Fn("agent")` and the like: the global, called with these arguments.
                let mut all = func.captured.clone();
                all.extend(args);
                return Ok(self.apply(global, all, pos, false)?.0);
            }
            Callee::Named(name) => {
                let Some(id) = self.overload(name, func.captured.len() + args.len()) else {
                    return Ok(Count::default());
                };
                if self.active.contains(&Active::Name(name.clone())) {
                    let shown = (!name.starts_with("anon$")).then(|| name.clone());
                    return unbounded(pos, Reason::Recursion(shown));
                }
                (id, Active::Name(name.clone()), None)
            }
            Callee::Body { id, name } => {
                if self.active.contains(&Active::Body(*id)) {
                    return unbounded(func.pos, Reason::Recursion(name.clone()));
                }
                if self.active.len() >= MAX_INLINE_DEPTH {
                    return unbounded(pos, Reason::TooDeep);
                }
                (*id, Active::Body(*id), name.clone())
            }
        };
        let function = &self.shape.functions[id];
        let sees = match function.sees_args {
            SeesArgs::Always => true,
            SeesArgs::Never => false,
            SeesArgs::AsCaller => self.sees_args(),
        };
        let scope = func.scope.as_ref().map_or_else(Vec::new, |scope| scope.as_ref().clone());
        let saved = std::mem::replace(&mut self.scope, scope);
        if let Some(name) = own_name {
            self.scope.push((name, Abs::Func(func.clone())));
        }
        let values = func.captured.iter().cloned().chain(args).chain(std::iter::repeat(Abs::Unknown));
        let params: Vec<(String, Abs)> = function.params.iter().cloned().zip(values).collect();
        let param_pos = if matches!(func.callee, Callee::Body { .. }) { (1, 1) } else { pos };
        self.frames.push(sees);
        self.active.push(key);
        let count = params
            .into_iter()
            .try_for_each(|(param, value)| self.bind(&param, value, param_pos))
            .and_then(|()| self.block(&function.body))
            .and_then(|(count, value)| {
                // The function's result: a function it returns is out of sight.
                self.lose(value, pos, Place::ReturnValue)?;
                Ok(count)
            });
        self.active.pop();
        self.frames.pop();
        self.scope = saved;
        count
    }
}
