//! Lua lint: the Rhai rules, by the same ids, over a Lua syntax tree.

use crate::script::{Diagnostic, LintContext};

/// Every finding of lint over a Lua source, sorted by position. Never fails: a malformed or
/// hostile script yields diagnostics.
///
/// Being written this session (issue #12); until it lands it finds nothing, so nothing may rely on it.
pub fn lint(source: &str, ctx: &LintContext) -> Vec<Diagnostic> {
    let _ = (source, ctx);
    Vec::new()
}
