//! Branches cannot write what they share.
//!
//! A Rhai closure captures variables by reference: the closure holds the enclosing scope's
//! shared cell. Run on several threads at once, as `parallel` branches and `pipeline` stages
//! are, every such cell is a data race: writes interleave in a different order on every run,
//! and Rhai's locks raise `ErrorDataRace` in whichever branch loses a race. So before a branch
//! runs, its function pointer gets a private copy of everything it captured, recursively
//! through closures it captured in turn (a closure stored in a variable, a map's property):
//! each captured value is copied out of its cell, made read-only, and put in a fresh cell of
//! its own. A branch then shares no cell with any other thread; a write to a captured value,
//! by whatever route (an assignment, a mutating method, a user method changing `this`, a
//! closure called from the branch), is refused by Rhai's read-only check at the write, the
//! same way on every run. The refusal is uncatchable: it ends the branch (or step body) there
//! with a `sandbox_violation` error that names the variable and says to return values
//! instead. It does not stop the branch's siblings: the fan-out lets each run to its own end
//! and then raises the first violation in branch order (`engine::fanout`), so what the
//! siblings journaled never depends on when the write happened.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;

use ::rhai::{AST, Dynamic, EvalAltResult, FnPtr, Map, NativeCallContext};

use crate::error::{Error, ErrorCode};

/// How deep a captured value may nest before the copy refuses it (as the JSON boundary does).
const MAX_COPY_DEPTH: usize = 128;

/// The parameters of every closure of a script, by its internal name: a closure's captured
/// variables are its first parameters, one per curried value.
#[derive(Debug, Default)]
pub(crate) struct ClosureParams(HashMap<String, Vec<String>>);

impl ClosureParams {
    pub(crate) fn of(ast: &AST) -> ClosureParams {
        ClosureParams(
            ast.iter_fn_def()
                .filter(|def| super::text::is_closure_name(&def.name))
                .map(|def| (def.name.to_string(), def.params.iter().map(|p| p.to_string()).collect()))
                .collect(),
        )
    }

    /// The names of the variables `pointer` captured (its first `curry().len()` parameters).
    fn captured(&self, pointer: &FnPtr) -> &[String] {
        let count = pointer.curry().len();
        self.0.get(pointer.fn_name()).map_or(&[], |params| &params[..count.min(params.len())])
    }
}

/// Where isolated code runs, for the violation's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// A `parallel` branch or `pipeline` stage: siblings run at once.
    Branch,
    /// A `step` body: a replay serves the step's value without running it.
    Step,
}

/// One fan-out's (or one step's) isolation: copies are taken one at a time, so no two
/// branches of a fan-out read a shared cell at once (reading a cell takes its lock).
pub(crate) struct Isolation<'p> {
    params: &'p ClosureParams,
    copying: Mutex<()>,
    place: Place,
}

impl<'p> Isolation<'p> {
    pub(crate) fn new(params: &'p ClosureParams) -> Isolation<'p> {
        Isolation { params, copying: Mutex::new(()), place: Place::Branch }
    }

    /// The isolation of a step body: what it captured is read-only inside it, since a replay
    /// skips the body and a write there would be lost.
    pub(crate) fn step(params: &'p ClosureParams) -> Isolation<'p> {
        Isolation { params, copying: Mutex::new(()), place: Place::Step }
    }

    /// Calls `pointer` as a branch: with private, read-only copies of what it captured and
    /// private copies of its arguments, marked as a branch for [`violation`].
    pub(crate) fn call_branch(
        &self,
        pointer: &FnPtr,
        context: &NativeCallContext,
        args: Vec<Dynamic>,
    ) -> Result<Dynamic, Box<EvalAltResult>> {
        let (pointer, args, names) = {
            let _copying = self.copying.lock().unwrap_or_else(|p| p.into_inner());
            let mut names = Vec::new();
            let pointer = private_pointer(pointer, self.params, &mut names, 0).map_err(terminated)?;
            let args = args
                .into_iter()
                .map(|arg| private_copy(arg, self.params, &mut names, 0))
                .collect::<Result<Vec<_>, _>>()
                .map_err(terminated)?;
            names.sort();
            names.dedup();
            (pointer, args, names)
        };
        let previous = BRANCH.with(|branch| branch.replace(Some((names, self.place))));
        let result = pointer.call_within_context::<Dynamic>(context, args).map_err(|error| {
            match violation(error.unwrap_inner()) {
                // Uncatchable, and this branch's alone: its siblings run on (see the module).
                Some(violation) => terminated(violation),
                None => error,
            }
        });
        BRANCH.with(|branch| *branch.borrow_mut() = previous);
        result
    }
}

thread_local! {
    /// Set while a branch or step body runs on this thread: the names of the variables it
    /// captured, and which it is.
    static BRANCH: RefCell<Option<(Vec<String>, Place)>> = const { RefCell::new(None) };
}

fn terminated(error: Error) -> Box<EvalAltResult> {
    let token = ::rhai::serde::to_dynamic(&error).unwrap_or_else(|_| Dynamic::from(error.message.clone()));
    Box::new(EvalAltResult::ErrorTerminated(token, ::rhai::Position::NONE))
}

/// A copy of `pointer` whose captured values are private, read-only copies.
fn private_pointer(
    pointer: &FnPtr,
    params: &ClosureParams,
    names: &mut Vec<String>,
    depth: usize,
) -> Result<FnPtr, Error> {
    let mut pointer = pointer.clone();
    names.extend(params.captured(&pointer).iter().cloned());
    let captured: Vec<Dynamic> = pointer.curry().to_vec();
    let mut private = Vec::with_capacity(captured.len());
    for value in captured {
        private.push(private_copy(value, params, names, depth + 1)?.into_read_only().into_shared());
    }
    pointer.set_curry(private);
    Ok(pointer)
}

/// `value` with no cell shared with anyone: shared cells are copied out, arrays and maps
/// copied element by element, and closures get private captured values.
fn private_copy(
    value: Dynamic,
    params: &ClosureParams,
    names: &mut Vec<String>,
    depth: usize,
) -> Result<Dynamic, Error> {
    if depth > MAX_COPY_DEPTH {
        return Err(Error::new(
            ErrorCode::SandboxLimit,
            format!("a value a branch captured nests deeper than {MAX_COPY_DEPTH} levels"),
        ));
    }
    let value = if value.is_shared() { value.flatten_clone() } else { value };
    if value.is_shared() {
        // The cell is locked by the code around the fan-out (a method running on the value
        // the branch captured): never hand the branch the shared cell itself.
        return Err(Error::new(
            ErrorCode::SandboxLimit,
            "a value a branch captured is in use by the method that started the fan-out; copy it into a \
             variable of its own first (let copy = value;) and capture the copy",
        ));
    }
    if value.is_array() {
        let mut items = value.into_array().map_err(|e| Error::internal(e.to_owned()))?;
        for item in &mut items {
            if needs_copy(item) {
                *item = private_copy(std::mem::take(item), params, names, depth + 1)?;
            }
        }
        return Ok(Dynamic::from_array(items));
    }
    if value.is_map() {
        let mut map = value.try_cast::<Map>().unwrap_or_default();
        for item in map.values_mut() {
            if needs_copy(item) {
                *item = private_copy(std::mem::take(item), params, names, depth + 1)?;
            }
        }
        return Ok(Dynamic::from_map(map));
    }
    if value.is_fnptr() {
        let pointer =
            value.try_cast::<FnPtr>().ok_or_else(|| Error::internal("a function pointer changed type"))?;
        return Ok(Dynamic::from(private_pointer(&pointer, params, names, depth)?));
    }
    Ok(value)
}

/// Whether a value may hold a shared cell (scalars and strings never do).
fn needs_copy(value: &Dynamic) -> bool {
    value.is_shared() || value.is_array() || value.is_map() || value.is_fnptr()
}

/// The error a write to a captured value raises inside a branch, as the run's error: `None`
/// outside branches and for every other error.
pub(crate) fn violation(error: &EvalAltResult) -> Option<Error> {
    let what = match error {
        EvalAltResult::ErrorAssignmentToConstant(name, _) => format!("assignment to '{name}'"),
        EvalAltResult::ErrorNonPureMethodCallOnConstant(function, _) => {
            format!("{}() on a captured value", super::text::scrub(function))
        }
        _ => return None,
    };
    let (names, place) = BRANCH.with(|branch| branch.borrow().clone())?;
    let captured = if names.is_empty() {
        String::new()
    } else {
        format!(" (it captured {})", names.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", "))
    };
    Some(match place {
        Place::Branch => Error::new(
            ErrorCode::SandboxViolation,
            format!(
                "sandbox violation: {what} inside a parallel branch or pipeline stage{captured}; values \
                 captured from outside a branch are read-only there, since the branches run at once: return \
                 values from the branch instead and combine them after parallel or pipeline returns"
            ),
        ),
        Place::Step => crate::script::captured::step_violation(&format!("{what}{captured}")),
    })
}
