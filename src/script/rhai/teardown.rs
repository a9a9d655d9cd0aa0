//! Dropping a run's values without recursion.
//!
//! A closure that captures another closure holds it through a shared cell, so a loop of
//! `let g = f; f = || g.call();` builds a chain as long as the loop, and Rust drops it
//! recursively: 300k links overflow the script thread's stack and abort the process, and a
//! chain the stack does hold touches about twice its own size in stack pages, memory the run's
//! account never sees. Rhai drops values itself wherever the script lets go of them (a
//! function's locals when it returns, a block's when it ends, a variable's old value when it is
//! reassigned, a branch's values on its thread), out of the runner's reach. So the chain is
//! cut where it is made instead: only a shared cell makes a link cheap (without one, nesting a
//! value copies it whole, so a chain of n links costs n²/2 copies, and the operation and time
//! budgets end it long before its depth matters), and Rhai makes a cell only when a closure
//! captures a variable. The run's variable resolver (`resolver.rs`) holds every such cell for the rest of the run
//! (a variable resolver sees each captured variable as the closure takes it), so whatever drops
//! a closure drops one link at most: the next cell is still held. At the end of the run the
//! runner hands the kept cells, the scope and the result to [`dismantle`], which takes every
//! nested value out of its container (a shared cell's value, a closure's captured values, an
//! array's items, a map's values) onto a worklist first, so each value is dropped shallow.
//!
//! The price is that a captured variable's value lives until the run ends, charged to the
//! run's memory account like the rest of its heap; a run's peak is its memory limit plus the
//! stack a bounded drop takes, whatever chain a script builds. The script threads still
//! reserve a stack sized by the run's memory limit ([`script_stack`]: three bytes per byte of
//! limit, about what dropping the longest chain the limit holds would take), reserved address
//! space that only a deep drop would touch: the backstop, should a cell ever escape the
//! resolver. (Without [`crate::CountingAlloc`] as the global allocator the memory limit does not
//! hold, and neither does this bound.)

use std::collections::HashSet;
use std::sync::Mutex;

use ::rhai::{AST, ASTNode, Array, Dynamic, FnPtr, Map, Stmt};

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

/// The shared cells a run's closures captured, held until the run ends.
#[derive(Debug, Default)]
pub(crate) struct Cells(Mutex<Kept>);

#[derive(Debug, Default)]
struct Kept {
    cells: Vec<Dynamic>,
    /// Where each kept cell's value lives: a cell is kept once, however often it is read.
    /// (A kept cell is never freed before the run ends, so its address is never reused.)
    seen: HashSet<usize>,
}

impl Cells {
    /// Keeps the cell `value` holds, unless it is kept already.
    pub(crate) fn keep(&self, value: &Dynamic) {
        // A cell locked for writing (a method on the captured value calling a closure) is
        // read when it is free again: it was kept when the closure took it.
        if !value.is_shared() || value.is_locked() {
            return;
        }
        let Some(address) = value.read_lock::<Dynamic>().map(|inner| std::ptr::from_ref(&*inner) as usize)
        else {
            return;
        };
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if kept.seen.insert(address) {
            kept.cells.push(value.clone());
        }
    }

    /// Every kept cell, for [`dismantle`].
    pub(crate) fn take(&self) -> Vec<Dynamic> {
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        kept.seen = HashSet::new();
        std::mem::take(&mut kept.cells)
    }
}

/// The names of the variables the closures of `ast` capture (anywhere: the script's body and
/// every function's, closures' included).
pub(crate) fn captured_names(ast: &AST) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    ast.walk(&mut |path: &[ASTNode]| {
        if let Some(ASTNode::Stmt(Stmt::Share(shared))) = path.last() {
            for (variable, _) in shared.iter() {
                if !names.iter().any(|n| n == variable.name.as_str()) {
                    names.push(variable.name.to_string());
                }
            }
        }
        true
    });
    names
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

    /// Every cell a chain's closures captured is kept: dropping the chain's head (as Rhai
    /// drops a function's local) frees one link, whatever the chain's length, on a thread with
    /// a stack far too small for a recursive drop of it.
    #[test]
    fn a_chain_whose_cells_are_kept_drops_one_link_at_a_time() {
        for source in [
            "fn build(n) { let f = || 0; for i in 0..n { let g = f; f = || g.call(); } 0 } build(50000)",
            // The chain grows by assignment into cells captured while they held nothing.
            "fn build(n) { let prev = 0; for i in 0..n { let c = 0; let f = || c; c = prev; prev = f; } 0 } build(50000)",
            // Through constants and arrays.
            "fn build(n) { let f = || 0; for i in 0..n { const g = [f]; f = || g[0].call(); } 0 } build(50000)",
        ] {
            let kept = std::thread::Builder::new()
                .stack_size(4 << 20)
                .spawn(move || {
                    let mut engine = ::rhai::Engine::new();
                    engine.set_max_call_levels(64);
                    let ast = engine.compile(source).unwrap();
                    let cells = super::super::resolver::install(&mut engine, &ast);
                    let value = engine.eval_ast::<Dynamic>(&ast).unwrap();
                    let cells = cells.take();
                    let count = cells.len();
                    dismantle(cells.into_iter().chain([value]));
                    count
                })
                .unwrap()
                .join()
                .unwrap();
            assert!(kept >= 50_000, "{kept} cells kept: {source}");
        }
        // No capturing closure: nothing to keep, no resolver.
        let engine = ::rhai::Engine::new();
        assert!(captured_names(&engine.compile("let f = |x| x + 1; f.call(2)").unwrap()).is_empty());
    }

    #[test]
    fn the_stack_is_capped_for_runs_without_a_memory_limit() {
        let unlimited = SandboxLimits { max_memory: u64::MAX, ..SandboxLimits::STANDARD };
        assert_eq!(script_stack(&unlimited), BASE_STACK + (1 << 30));
    }
}
