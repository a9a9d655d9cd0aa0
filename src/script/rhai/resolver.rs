//! The variable resolver of a run's engine. Rhai has one (`Engine::on_var`), called before
//! every read of a variable, so the two things that must see those reads share it: each cell a
//! closure captures is kept until the run ends (`teardown`), and the error map a `catch` binds
//! loses Rhai's closure names before the script reads it (`text`). A script with neither a
//! capturing closure nor a `catch` variable gets no resolver, so its variable reads cost
//! nothing more.

use std::sync::Arc;

use ::rhai::{AST, Engine};

use super::teardown::{Cells, captured_names};
use super::text::{caught_names, scrub_caught};

/// Installs the resolver `ast` needs on `engine`; returns the cells it keeps, for
/// [`super::teardown::dismantle`] at the end of the run.
pub(crate) fn install(engine: &mut Engine, ast: &AST) -> Arc<Cells> {
    let cells = Arc::new(Cells::default());
    let captured = captured_names(ast);
    let caught = caught_names(ast);
    if captured.is_empty() && caught.is_empty() {
        return cells;
    }
    let kept = cells.clone();
    // Rhai calls the resolver for each variable a closure captures, just before it makes the
    // variable's cell (`Stmt::Share`), and again as the closure takes the cell (the curried
    // argument): the second sighting keeps it. Every later read of a captured name finds its
    // cell kept already. Every use of a caught error is a read of its variable (or of a
    // closure's captured copy, read under the same name), so it is scrubbed before any use.
    #[allow(deprecated)] // `on_var` is marked volatile, not deprecated; rhai is pinned.
    engine.on_var(move |name, _, mut context| {
        if caught.iter().any(|c| c == name)
            && let Some(value) = context.scope_mut().get_mut(name)
        {
            scrub_caught(value);
        }
        if captured.iter().any(|c| c == name)
            && let Some(value) = context.scope().get(name)
        {
            kept.keep(value);
        }
        Ok(None)
    });
    cells
}
