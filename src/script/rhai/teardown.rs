//! Dropping a run's values without recursion.
//!
//! A closure that captures another closure holds it through a shared cell, so a loop of
//! `let g = f; f = || g.call();` builds a chain as long as the loop, and Rust drops it
//! recursively: 300k links overflow the script thread's stack and abort the process. At the
//! end of a run the runner hands the scope and the result to [`dismantle`], which takes every
//! nested value out of its container (a shared cell's value, a closure's captured values, an
//! array's items, a map's values) onto a worklist first, so each value is dropped shallow.
//!
//! Rhai drops every other value itself: a function's locals when it returns, a block's when
//! it ends, a variable's old value when it is reassigned, a branch's values on its thread.
//! Those drops cannot be reached from here, so the script threads get a stack deep enough for
//! the longest chain the run's memory limit lets a script build ([`script_stack`]): a link
//! holds at least about 175 bytes the memory account charges (a function pointer, its curry
//! and a shared cell) and takes about 370 bytes of stack to drop in a debug build (less when
//! optimized), so three bytes of stack per byte of memory limit drop any chain that fits. The
//! stack is reserved, not used: only a deep drop touches its pages. (Without
//! [`crate::CountingAlloc`] as the global allocator the memory limit does not hold, and
//! neither does this bound.)

use ::rhai::{Array, Dynamic, FnPtr, Map};

use super::sandbox::SandboxLimits;

/// The stack every script thread gets whatever its limits: the interpreter's own recursion
/// (calls, nested expressions) within the sandbox's depth limits.
const BASE_STACK: usize = 16 << 20;

/// Stack bytes per byte of the run's memory limit (see the module's comment).
const STACK_PER_MEMORY_BYTE: u64 = 3;

/// The most stack a script thread reserves, for runs with a very large (or no) memory limit.
const MAX_STACK: u64 = 1 << 30;

/// The stack of a script thread (the run's main thread and each branch thread) under `limits`.
pub(crate) fn script_stack(limits: &SandboxLimits) -> usize {
    let deep = limits.max_memory.saturating_mul(STACK_PER_MEMORY_BYTE).min(MAX_STACK);
    BASE_STACK.saturating_add(usize::try_from(deep).unwrap_or(usize::MAX))
}

/// Drops `values` and everything they hold, iteratively.
pub(crate) fn dismantle(values: impl IntoIterator<Item = Dynamic>) {
    let mut pending: Vec<Dynamic> = values.into_iter().collect();
    while let Some(mut value) = pending.pop() {
        if value.is_shared() {
            // Another holder may still see the cell; at the end of the run nobody reads it.
            if let Some(mut inner) = value.write_lock::<Dynamic>() {
                pending.push(std::mem::take(&mut *inner));
            }
            continue;
        }
        if let Some(mut function) = value.write_lock::<FnPtr>() {
            pending.extend(function.iter_curry().cloned());
            function.set_curry([]);
        } else if let Some(mut items) = value.write_lock::<Array>() {
            pending.append(&mut items);
        } else if let Some(mut map) = value.write_lock::<Map>() {
            pending.extend(std::mem::take(&mut *map).into_values());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_chain_of_closures_is_dropped_without_recursion() {
        let engine = ::rhai::Engine::new();
        let mut scope = ::rhai::Scope::new();
        let value: Dynamic = engine
            .eval_with_scope(&mut scope, "let f = || 0; for i in 0..200000 { let g = f; f = || g.call(); } f")
            .unwrap();
        dismantle(scope.into_iter().map(|(_, value, _)| value).chain([value]));
    }

    /// A chain dropped by Rhai itself, as a function's local, on a thread with the stack a
    /// 64 MiB run gets: 100,000 links overflowed the 16 MiB stack script threads had.
    #[test]
    fn a_chain_dropped_inside_a_function_fits_the_script_stack() {
        let limits = SandboxLimits { max_memory: 64 << 20, ..SandboxLimits::STANDARD };
        let stack = script_stack(&limits);
        assert!(stack > BASE_STACK);
        let dropped = std::thread::Builder::new()
            .stack_size(stack)
            .spawn(|| {
                ::rhai::Engine::new().eval::<i64>(
                    "fn build(n) { let f = || 0; for i in 0..n { let g = f; f = || g.call(); } 0 } build(100000)",
                )
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(dropped.unwrap(), 0);
    }

    #[test]
    fn the_stack_is_capped_for_runs_without_a_memory_limit() {
        let unlimited = SandboxLimits { max_memory: u64::MAX, ..SandboxLimits::STANDARD };
        assert_eq!(script_stack(&unlimited), BASE_STACK + (1 << 30));
    }
}
