//! Lua lint: the Rhai rules, by the same ids and in the same diagnostic shape, over a Lua 5.4
//! syntax tree parsed by full_moon.
//!
//! The pass: a lexical scan rejects what would hurt the parser (nesting deep enough to exhaust
//! a stack, backquotes full_moon's lexer panics on); full_moon parses, and its errors become
//! `syntax` diagnostics naming the Lua form to write; then one walk over the tree tracks
//! scopes, follows every function into its body where it is created and reports what it finds
//! ([`walk`] for scopes, statements and expressions, [`calls`] for calls, [`values`] for what an
//! expression statically is).
//!
//! Decisions that differ from Rhai because Lua does:
//! - `loop-capture`: each iteration of a Lua 5.4 `for` loop binds its variables afresh, so a
//!   closure capturing one is safe and not reported. The Lua hazard is a closure made in a loop
//!   (and kept, not run at once by a global) that captures a variable declared outside the loop
//!   which the loop reassigns: it sees the value when it runs, not when it was made.
//! - Globals: a script declares everything with `local`. Assigning an undeclared name (including
//!   `function name() ... end`) is an `unknown-variable` error: it would create a global shared
//!   by every branch, and it is how a typo (`totl = totl + 1`) shows. Assigning a cairn global or
//!   a library is `forbidden`.
//! - `forbidden` covers io, os (with `os.time`/`os.clock` pointing at `now()`), debug, package,
//!   require, load, loadstring, dofile, loadfile, collectgarbage, coroutine (the engine runs
//!   branches itself), `_G`/`_ENV`, setfenv/getfenv, rawget/rawset (they bypass a read-only
//!   table), print, `string.dump`, `math.random`/`math.randomseed` (use `random()`), and the
//!   metatable keys `__gc` (a finalizer runs when the collector decides) and `__mode` (weak
//!   tables lose entries when it decides). `setmetatable`/`getmetatable` themselves are allowed.
//! - `dynamic-fn`: indexing `_G`/`_ENV` with a computed key, which hides which function runs.
//! - `closure-text` is an error in Lua: `tostring` of a function is its address, which differs
//!   in every process, so a prompt made from it could never be replayed.

mod aliases;
pub(crate) mod bound;
mod calls;
mod escapes;
mod names;
mod syntax;
mod values;
mod walk;

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::script::{Diagnostic, LintContext, sort_diagnostics};
use syntax::span_diagnostic;

/// The Lua card's list of the names a script may use and the ones lint refuses (see
/// `names::card_block`).
#[cfg(test)]
pub(crate) fn card_libraries_block() -> String {
    names::card_block()
}

/// The largest source lint accepts, the limit the Rhai dialect sets.
pub(super) const MAX_SOURCE_SIZE: usize = 1 << 20;

/// Every finding of lint over a Lua source, sorted by position. Never fails: a malformed or
/// hostile script yields diagnostics, and a bug in the linter (or a panic in the parser) yields
/// an `internal` diagnostic instead of taking the host down.
pub fn lint(source: &str, ctx: &LintContext) -> Vec<Diagnostic> {
    lint_within(source, ctx, &crate::script::rhai::sandbox::SandboxLimits::STANDARD)
}

/// [`lint`] under `limits`' source limits (size and tokens, checked before the parser).
pub(crate) fn lint_within(
    source: &str,
    ctx: &LintContext,
    limits: &crate::script::rhai::sandbox::SandboxLimits,
) -> Vec<Diagnostic> {
    let mut diagnostics =
        catch_unwind(AssertUnwindSafe(|| analyze(source, ctx, limits))).unwrap_or_else(|_| {
            let message = "the linter failed on this script; this is a bug in cairn, please report it";
            vec![span_diagnostic("internal", message.to_owned(), 1, 1, None)]
        });
    sort_diagnostics(&mut diagnostics);
    diagnostics
}

fn analyze(
    source: &str,
    ctx: &LintContext,
    limits: &crate::script::rhai::sandbox::SandboxLimits,
) -> Vec<Diagnostic> {
    if source.trim().is_empty() {
        let message = "the script is empty; write statements and return the run's result";
        return vec![span_diagnostic("syntax", message.to_owned(), 1, 1, None)];
    }
    if let Some(message) =
        crate::script::source::over_limits(source, limits.max_source_size, limits.max_source_tokens)
    {
        return vec![span_diagnostic("syntax", message, 1, 1, None)];
    }
    let scan = syntax::scan(source);
    if let Some(fatal) = scan.fatal {
        return vec![fatal];
    }
    let warnings = scan.warnings;
    let found = on_parser_stack(scan.nesting, || parse_and_walk(source, ctx));
    found.map(|found| found.into_iter().chain(warnings).collect()).unwrap_or_else(|| {
        let message = "the linter failed on this script; this is a bug in cairn, please report it";
        vec![span_diagnostic("internal", message.to_owned(), 1, 1, None)]
    })
}

/// Runs `work` (a parse, a walk of the tree and its drop) where the stack fits a source of
/// this nesting: inline for shallow sources, else on a thread whose stack is sized for the
/// deepest nesting [`syntax::scan`] accepts, since the parser, the walks and dropping the tree
/// all recurse once per level. `None` when the thread could not run or panicked.
pub(super) fn on_parser_stack<T: Send>(nesting: usize, work: impl FnOnce() -> T + Send) -> Option<T> {
    if nesting <= syntax::SHALLOW_NESTING {
        return Some(work());
    }
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("cairn-lua-parse".to_owned())
            .stack_size(syntax::DEEP_STACK)
            .spawn_scoped(scope, work);
        worker.ok().and_then(|handle| handle.join().ok())
    })
}

fn parse_and_walk(source: &str, ctx: &LintContext) -> Vec<Diagnostic> {
    let parsed = syntax::parse(source);
    if !parsed.errors().is_empty() {
        return syntax::parse_errors(parsed.errors(), source);
    }
    let ast = parsed.into_ast();
    let block = ast.nodes();
    if block.stmts().next().is_none() && block.last_stmt().is_none() {
        let message = "the script has no statements; write statements and return the run's result";
        return vec![span_diagnostic("syntax", message.to_owned(), 1, 1, None)];
    }
    walk::check(block, ctx, source)
}

#[cfg(test)]
mod tests;
