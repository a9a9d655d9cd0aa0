//! Branches that are one agent call run without a thread of their own.
//!
//! A `parallel` branch normally runs on a branch thread, since a Rhai closure cannot pause in
//! the middle of its evaluation while others run. But the commonest branch,
//! `|x| agent(prompt_of(x))`, does nothing after its call: the call's value is the branch's
//! value. Such a branch is evaluated on the fan-out's own thread *up to* its call, and the call
//! then runs as one of the engine's futures beside its siblings, hundreds of them in flight on
//! one thread, as the Lua dialect's coroutines are.
//!
//! Which branches qualify is decided in two steps, neither depending on timing:
//! - by shape ([`Shapes`]): the closure's body is a single statement, a call of the global
//!   `agent` (unqualified, one or two arguments), and the script defines no function of that
//!   name;
//! - by evaluation ([`evaluate`]): the closure is called with its private, read-only captures
//!   (the same [`Isolation`] a branch thread uses) while this thread is *armed*: the first
//!   `agent` call records its prompt and options and returns a marker instead of calling the
//!   model; any other cairn global, a second `agent` call, or options the call would refuse,
//!   stops the evaluation with an uncatchable error. A closure that returns the marker is
//!   deferred; any other outcome (an error, a refusal) sends the branch to a thread, where it
//!   runs from its start as it always did. Up to its call, such a body computes only script
//!   values (no effect, no write to what it captured), so evaluating it twice changes nothing
//!   but the operations it counts.
//!
//! A deferred branch's call runs in the branch's scope with the branch's `Ctx`, exactly the
//! call the branch thread would have made; its value and error cross the script boundary the
//! way a thread's would (JSON through a script value, errors through their script token), so
//! journals, results and errors are the same whichever way a branch ran.

use std::cell::RefCell;
use std::collections::HashMap;

use ::rhai::{
    AST, ASTNode, Dynamic, EvalAltResult, Expr, FnCallExpr, FnPtr, Map, Module, NativeCallContext, Stmt,
};

use super::isolate::Isolation;
use crate::engine::AgentOptions;

/// The global a deferred branch calls.
const AGENT: &str = "agent";

/// Which of a script's closures are a single `agent` call, by internal name.
#[derive(Debug, Default)]
pub(crate) struct Shapes(HashMap<String, bool>);

impl Shapes {
    pub(crate) fn of(ast: &AST) -> Shapes {
        // A script function named `agent` would be called instead of the global.
        if ast.iter_fn_def().any(|def| def.name.as_str() == AGENT) {
            return Shapes::default();
        }
        Shapes(
            ast.iter_fn_def()
                .filter(|def| super::text::is_closure_name(&def.name))
                .map(|def| {
                    let mut module = Module::new();
                    module.set_script_fn(def.clone());
                    (def.name.to_string(), is_one_agent_call(&AST::new([], module)))
                })
                .collect(),
        )
    }

    /// Whether `pointer` is a closure whose body is one `agent` call.
    pub(crate) fn one_agent_call(&self, pointer: &FnPtr) -> bool {
        self.0.get(pointer.fn_name()).copied().unwrap_or(false)
    }
}

/// Whether the only function of `body` has a single top-level statement, a plain `agent` call.
fn is_one_agent_call(body: &AST) -> bool {
    let mut statements = 0;
    let mut agent_call = false;
    body.walk(&mut |path: &[ASTNode]| {
        if let [ASTNode::Stmt(stmt)] = path {
            statements += 1;
            agent_call = match stmt {
                Stmt::FnCall(call, _) => is_agent(call),
                Stmt::Expr(expr) => matches!(&**expr, Expr::FnCall(call, _) if is_agent(call)),
                _ => false,
            };
        }
        true
    });
    statements == 1 && agent_call
}

fn is_agent(call: &FnCallExpr) -> bool {
    call.name.as_str() == AGENT
        && !call.is_qualified()
        && !call.capture_parent_scope
        && matches!(call.args.len(), 1 | 2)
}

/// A branch evaluated up to its `agent` call: the call to make in the branch's scope.
pub(crate) struct Deferred {
    pub(crate) prompt: String,
    pub(crate) options: AgentOptions,
}

/// What `agent` returns to an armed evaluation in place of the model's answer.
#[derive(Debug, Clone, Copy)]
struct Marker;

enum Slot {
    Armed,
    Taken(Box<Deferred>),
}

thread_local! {
    /// Set while this thread evaluates a branch up to its call.
    static SLOT: RefCell<Option<Slot>> = const { RefCell::new(None) };
}

/// Whether this thread is evaluating a branch up to its call (every cairn global but the
/// first `agent` call then refuses with [`refused`]).
pub(crate) fn armed() -> bool {
    SLOT.with(|slot| slot.borrow().is_some())
}

/// The uncatchable error that stops an armed evaluation: the branch runs on a thread instead.
pub(crate) fn refused() -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorTerminated(Dynamic::UNIT, ::rhai::Position::NONE))
}

/// `agent`'s first step: on an armed thread, records the call (its options parsed as the call
/// would parse them) and returns the marker; `None` on any other thread.
pub(crate) fn offer(
    prompt: &str,
    opts: &Map,
    parse: impl FnOnce(&Map) -> Option<AgentOptions>,
) -> Option<Result<Dynamic, Box<EvalAltResult>>> {
    SLOT.with(|slot| {
        let mut slot = slot.borrow_mut();
        match slot.as_ref()? {
            Slot::Armed => Some(match parse(opts) {
                Some(options) => {
                    *slot = Some(Slot::Taken(Box::new(Deferred { prompt: prompt.to_owned(), options })));
                    Ok(Dynamic::from(Marker))
                }
                // Options the call refuses: the thread reports the refusal, as always.
                None => Err(refused()),
            }),
            Slot::Taken(_) => Some(Err(refused())),
        }
    })
}

/// Disarms the thread when dropped (an evaluation that unwinds included).
struct Arming;

impl Arming {
    fn arm() -> Arming {
        SLOT.with(|slot| *slot.borrow_mut() = Some(Slot::Armed));
        Arming
    }

    fn take(self) -> Option<Deferred> {
        match SLOT.with(|slot| slot.borrow_mut().take()) {
            Some(Slot::Taken(deferred)) => Some(*deferred),
            _ => None,
        }
    }
}

impl Drop for Arming {
    fn drop(&mut self) {
        SLOT.with(|slot| *slot.borrow_mut() = None);
    }
}

/// Evaluates branch `pointer(args)` on this thread up to its `agent` call: the call, or `None`
/// when the branch must run on a thread.
pub(crate) fn evaluate(
    isolation: &Isolation<'_>,
    pointer: &FnPtr,
    context: &NativeCallContext,
    args: Vec<Dynamic>,
) -> Option<Deferred> {
    let arming = Arming::arm();
    let value = isolation.call_branch(pointer, context, args).ok()?;
    let deferred = arming.take()?;
    value.is::<Marker>().then_some(deferred)
}
