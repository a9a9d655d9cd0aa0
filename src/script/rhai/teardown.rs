//! Dropping a run's values without recursion.
//!
//! A closure that captures another closure holds it through a shared cell, so a loop of
//! `let g = f; f = || g.call();` builds a chain as long as the loop, and Rust drops it
//! recursively: 300k links overflow the script thread's stack and abort the process. At the
//! end of a run the runner hands the scope and the result to [`dismantle`], which takes every
//! nested value out of its container (a shared cell's value, a closure's captured values, an
//! array's items, a map's values) onto a worklist first, so each value is dropped shallow.

use ::rhai::{Array, Dynamic, FnPtr, Map};

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
}
