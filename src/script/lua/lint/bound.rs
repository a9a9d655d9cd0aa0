//! The Lua dialect's static call bound: the parsed chunk lowered into the bound's shape
//! (`bound/lower.rs`) and walked by the one analysis both dialects share
//! (`script/bound/eval.rs`, where the rules and the reasons are).
//!
//! What Lua's constructs mean to the bound: a numeric `for` over literal bounds (or bounds
//! read from `args`, whose values are given) runs its body once per step; a generic `for`
//! over `ipairs`/`pairs` of a literal table or an `args` value runs it once per element, and
//! over any other iterator (`gmatch`, a custom one) has no static length; `parallel`,
//! `pipeline`, `step`, `phase` and the function given to `pcall` run where they are called;
//! `if` counts its largest branch (per site); a call of a local function counts its body at
//! that call. A name assigned anywhere, or changed through a reference (an alias, a table
//! holding it, a method or an argument), is unknown wherever it is bound (`bound/scan.rs`).

mod lower;
mod scan;
#[cfg(test)]
mod tests;

use serde_json::Value;

use super::{MAX_SOURCE_SIZE, syntax};
use crate::script::bound::reason::Reason;
use crate::script::bound::{CallBound, eval, guard};
use scan::{Changes, scan_block};

/// The call bound of `source` given `args`. A script that does not parse is unbounded at the
/// parse error's position (lint reports it).
pub fn call_bound(source: &str, args: &Value) -> CallBound {
    // On a thread of its own with the parser's deep stack, whatever stack the caller runs on:
    // the walk inlines functions 64 deep in bodies nested as deep as the parser allows.
    guard::on_own_stack(syntax::DEEP_STACK, || {
        if source.len() > MAX_SOURCE_SIZE {
            return Reason::TooLarge.at(1, 1);
        }
        if let Some(reason) = crate::script::source::over_limits(
            source,
            MAX_SOURCE_SIZE,
            crate::script::source::BOUND_MAX_TOKENS,
        ) {
            return CallBound::Unbounded { reason, line: 1, column: 1 };
        }
        let scan = syntax::scan(source);
        if let Some(fatal) = scan.fatal {
            return Reason::Parse(fatal.message).at(fatal.line, fatal.column);
        }
        let parsed = syntax::parse(source);
        if let Some(error) = parsed.errors().first() {
            let (start, _) = error.range();
            let line = u32::try_from(start.line()).unwrap_or(u32::MAX).max(1);
            let column = u32::try_from(start.character()).unwrap_or(u32::MAX).max(1);
            return Reason::Parse(error.error_message().to_string()).at(line, column);
        }
        let mut changes = Changes::default();
        scan_block(parsed.ast().nodes(), &mut changes);
        let shape = lower::lower(parsed.ast().nodes(), &changes);
        eval::call_bound(&shape, args)
    })
}
