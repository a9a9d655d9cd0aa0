//! The Rhai dialect's diagnostics of a script that does not parse: a position as a 1-based
//! line and column, Rhai's parse error worded as a diagnostic naming its rule, and the
//! diagnostic style of its messages. The dialect's entry and its lint both word findings
//! through them.

use ::rhai::{ParseError, ParseErrorType, Position};

use super::sandbox::SCRIPT_VARIABLES;
use crate::script::{Diagnostic, Severity, suggest};

/// Turns Rhai's one parse error into a diagnostic, naming the rule it belongs to when it is
/// more than a syntax slip.
pub(super) fn parse_diagnostic(error: &ParseError, source: &str) -> Diagnostic {
    let (line, column) = line_column(error.position());
    let (rule_id, message) = match &*error.0 {
        ParseErrorType::VariableUndefined(name) if is_assigned_at(source, line, column, name) => (
            "unknown-variable",
            format!("unknown variable '{name}'; declare it before assigning to it: let {name} = ...;"),
        ),
        ParseErrorType::VariableUndefined(name) => ("unknown-variable", unknown_variable(name, source)),
        ParseErrorType::AssignmentToConstant(name) if SCRIPT_VARIABLES.contains(&name.as_str()) => (
            "syntax",
            format!("'{name}' is read-only; copy what you need into a variable first: let a = {name};"),
        ),
        ParseErrorType::ModuleUndefined(name) => {
            ("forbidden", format!("module '{name}' is not available; scripts have no modules or imports"))
        }
        other => ("syntax", sentence(&other.to_string())),
    };
    diagnostic(rule_id, message, line, column)
}

/// Whether the variable at `line:column` of `source` is the target of a plain `=` (a
/// declaration written without `let`, as Python and Lua do).
fn is_assigned_at(source: &str, line: u32, column: u32, name: &str) -> bool {
    let Some(text) = source.lines().nth(line.saturating_sub(1) as usize) else { return false };
    let rest: String = text.chars().skip(column.saturating_sub(1) as usize).collect();
    let Some(after) = rest.strip_prefix(name) else { return false };
    let after = after.trim_start();
    after.starts_with('=') && !after.starts_with("==") && !after.starts_with("=>")
}

/// The message for a variable strict mode does not know, with the closest identifier that does
/// appear in the script as a suggestion.
fn unknown_variable(name: &str, source: &str) -> String {
    if name == "ctx" {
        return "unknown variable 'ctx'; globals are called bare, as in agent(prompt), not ctx.agent(prompt)"
            .to_owned();
    }
    let identifiers = identifiers(source);
    let candidates = identifiers.iter().copied().chain(SCRIPT_VARIABLES);
    match suggest::did_you_mean(name, candidates) {
        Some(candidate) => format!("unknown variable '{name}' (did you mean '{candidate}'?)"),
        None => format!("unknown variable '{name}'; declare it with let first (the run's input is args)"),
    }
}

/// Every identifier-shaped word of the source, for suggestions. Words inside strings and
/// comments are included too; a suggestion only needs to be plausible.
fn identifiers(source: &str) -> Vec<&str> {
    let mut words: Vec<&str> = source
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|word| word.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_'))
        .collect();
    words.sort_unstable();
    words.dedup();
    words
}

/// Rhai's messages in the diagnostic style: lowercase first letter, no final period.
pub(crate) fn sentence(text: &str) -> String {
    let text = text.trim().trim_end_matches('.');
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::from("the script does not parse"),
    }
}

/// A 1-based line and column; positions Rhai did not record map to the script's start.
pub(crate) fn line_column(pos: Position) -> (u32, u32) {
    let line = pos.line().unwrap_or(1);
    let column = pos.position().unwrap_or(1);
    (u32::try_from(line).unwrap_or(u32::MAX), u32::try_from(column).unwrap_or(u32::MAX))
}

pub(super) fn diagnostic(rule_id: &str, message: String, line: u32, column: u32) -> Diagnostic {
    Diagnostic {
        rule_id: rule_id.to_owned(),
        message,
        line,
        column,
        end_line: None,
        end_column: None,
        severity: Severity::Error,
    }
}
