//! Which scope and which branch the running Lua code belongs to.
//!
//! All of a run's Lua code runs on one thread, as coroutines polled by one future tree: the
//! script's main chunk, and under each `parallel` or `pipeline` one coroutine per branch or
//! item, polled by the fan-out's future. Every coroutine is polled inside a [`Scoped`] future,
//! which pushes its `Ctx` (the journal scope its effects go to) and its [`Frame`] (the branch it
//! belongs to) for the length of each poll. A global reads the top of that stack when called,
//! so a branch's calls keep their identity however the coroutines interleave, as the Rhai
//! runner's thread-local does for its threads.

use std::cell::{Cell, OnceCell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use crate::engine::Ctx;
use crate::error::Error;

/// One unit of uncatchable failure: the main chunk, or one fan-out branch or pipeline item (a
/// step or phase body belongs to the frame it was called from, as in Rhai, where such errors
/// end the whole evaluation of a branch).
#[derive(Default)]
pub(super) struct Frame {
    /// The first uncatchable error raised in this frame (budget exhaustion, cancellation, a
    /// journal miss, a sandbox error): `pcall` and `coroutine.resume` re-raise it, and the
    /// frame ends with it.
    pub(super) latch: OnceCell<Error>,
    /// The branch's private copies of what it captured (`None` for the main chunk).
    pub(super) isolation: Option<Rc<super::isolate::Isolation>>,
    /// How deep the frame is inside coroutines the script created; cairn globals are refused
    /// there, since they would yield to the script instead of the engine.
    pub(super) coroutine_depth: Cell<u32>,
}

impl Frame {
    pub(super) fn main() -> Rc<Frame> {
        Rc::new(Frame::default())
    }

    pub(super) fn branch(isolation: Rc<super::isolate::Isolation>) -> Rc<Frame> {
        Rc::new(Frame { isolation: Some(isolation), ..Frame::default() })
    }

    /// Latches `error` as this frame's uncatchable error (the first one wins).
    pub(super) fn latch(&self, error: Error) -> Error {
        self.latch.get_or_init(|| error).clone()
    }
}

thread_local! {
    static STACK: RefCell<Vec<(Ctx, Rc<Frame>)>> = const { RefCell::new(Vec::new()) };
}

/// The scope and frame of the Lua code running now.
pub(super) fn current() -> Option<(Ctx, Rc<Frame>)> {
    STACK.with(|stack| stack.borrow().last().cloned())
}

/// How many coroutines are being polled inside one another now (the main chunk is 1; each
/// step, phase, branch or stage body running inside another adds one).
pub(super) fn depth() -> usize {
    STACK.with(|stack| stack.borrow().len())
}

/// The frame of the Lua code running now.
pub(super) fn current_frame() -> Option<Rc<Frame>> {
    STACK.with(|stack| stack.borrow().last().map(|(_, frame)| frame.clone()))
}

/// A future polled with its scope and frame on top of the stack.
pub(super) struct Scoped<F> {
    ctx: Ctx,
    frame: Rc<Frame>,
    inner: Pin<Box<F>>,
}

impl<F> Scoped<F> {
    pub(super) fn new(ctx: Ctx, frame: Rc<Frame>, inner: F) -> Scoped<F> {
        Scoped { ctx, frame, inner: Box::pin(inner) }
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let entry = (self.ctx.clone(), self.frame.clone());
        STACK.with(|stack| stack.borrow_mut().push(entry));
        // Popped even if the poll unwinds, so the stack never names a finished frame.
        struct Pop;
        impl Drop for Pop {
            fn drop(&mut self) {
                let _ = STACK.try_with(|stack| stack.borrow_mut().pop());
            }
        }
        let _pop = Pop;
        let _tally = super::step_tally::enter(self.ctx.step_ops.clone());
        self.inner.as_mut().poll(cx)
    }
}
