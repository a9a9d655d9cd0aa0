//! The Rhai dialect: the sandbox engine, and compile and lint from source to a checked AST.
//!
//! [`compile`] is the gate before a run: it parses with the sandbox's limits and strict
//! variables, runs every lint rule over the AST, and hands back the AST only when no rule found
//! an error. [`lint`] is the same analysis reporting everything it found. Both report parse
//! errors as diagnostics of the same shape as lint findings, so neither ever fails on bad input:
//! a malformed, hostile or empty script yields diagnostics, never a panic or an `Err` of another
//! kind.

mod arg_error;
mod body;
mod bound;
mod bridge;
mod builtins;
mod defer;
mod fanout;
mod guard;
mod isolate;
mod json;
mod lint;
mod resolver;
mod runner;
pub(crate) mod sandbox;
mod split;
mod teardown;
mod text;
mod threads;

pub use runner::RhaiDialect;
#[cfg(test)]
mod tests;

use std::panic::{AssertUnwindSafe, catch_unwind};

use ::rhai::{AST, ParseError, ParseErrorType, Position};

use self::sandbox::{SCRIPT_VARIABLES, SandboxLimits, compile_scope, parser_engine};
use crate::script::{Diagnostic, LintContext, Severity, sort_diagnostics, suggest};

/// A script that compiled and passed lint: the AST the runner executes, and the warnings lint
/// reported beside it.
#[derive(Debug, Clone)]
pub struct CompiledRhai {
    ast: AST,
    warnings: Vec<Diagnostic>,
}

impl CompiledRhai {
    /// The checked AST. It was parsed without optimisation, so it mirrors the source.
    pub fn ast(&self) -> &AST {
        &self.ast
    }

    /// Warning-severity findings; a compiled script has no errors.
    pub fn warnings(&self) -> &[Diagnostic] {
        &self.warnings
    }

    /// Takes the AST out.
    pub fn into_ast(self) -> AST {
        self.ast
    }
}

/// Compiles a script for the sandbox, rejecting it with every diagnostic (warnings included)
/// when any has error severity.
///
/// # Errors
///
/// The diagnostics, sorted by position, when the script does not parse or a lint rule rejects
/// it.
pub fn compile(source: &str, ctx: &LintContext) -> Result<CompiledRhai, Vec<Diagnostic>> {
    compile_within(source, ctx, &SandboxLimits::STANDARD)
}

/// [`compile`] under `limits`' source limits (size and tokens, checked before the parser).
pub(crate) fn compile_within(
    source: &str,
    ctx: &LintContext,
    limits: &SandboxLimits,
) -> Result<CompiledRhai, Vec<Diagnostic>> {
    let (ast, diagnostics) = analyze(source, ctx, limits);
    match ast {
        Some(ast) if !diagnostics.iter().any(Diagnostic::is_error) => {
            Ok(CompiledRhai { ast, warnings: diagnostics })
        }
        _ => Err(diagnostics),
    }
}

/// Parses a script for the sandbox without linting it (the `without_lint` test seam).
pub(crate) fn parse_only(source: &str, limits: &SandboxLimits) -> Result<CompiledRhai, Vec<Diagnostic>> {
    if let Some(message) =
        crate::script::source::over_limits(source, limits.max_source_size, limits.max_source_tokens)
    {
        return Err(vec![diagnostic("syntax", message, 1, 1)]);
    }
    let engine = parser_engine(&SandboxLimits::STANDARD);
    engine
        .compile_with_scope(&compile_scope(), source)
        .map(|ast| CompiledRhai { ast, warnings: Vec::new() })
        .map_err(|error| vec![parse_diagnostic(&error, source)])
}

/// Lints a script: every finding of every rule, sorted by position. An empty list means the
/// script compiles cleanly.
pub fn lint(source: &str, ctx: &LintContext) -> Vec<Diagnostic> {
    analyze(source, ctx, &SandboxLimits::STANDARD).1
}

/// Parses and lints. The parser and the walker are written not to panic on any input; the
/// `catch_unwind` is the backstop that keeps a bug in either from taking down the host, turning
/// it into an `internal` diagnostic instead.
fn analyze(source: &str, ctx: &LintContext, limits: &SandboxLimits) -> (Option<AST>, Vec<Diagnostic>) {
    let result = catch_unwind(AssertUnwindSafe(|| {
        if source.trim().is_empty() {
            let message = "the script is empty; write statements whose last value is the run's result";
            return (None, vec![diagnostic("syntax", message.to_owned(), 1, 1)]);
        }
        if let Some(message) =
            crate::script::source::over_limits(source, limits.max_source_size, limits.max_source_tokens)
        {
            return (None, vec![diagnostic("syntax", message, 1, 1)]);
        }
        let (ast, mut diagnostics) = lint::analyze(source, ctx, &parser_engine(limits));
        sort_diagnostics(&mut diagnostics);
        (ast, diagnostics)
    }));
    result.unwrap_or_else(|_| {
        let message = "the linter failed on this script; this is a bug in cairn, please report it";
        (None, vec![diagnostic("internal", message.to_owned(), 1, 1)])
    })
}

/// Turns Rhai's one parse error into a diagnostic, naming the rule it belongs to when it is
/// more than a syntax slip.
fn parse_diagnostic(error: &ParseError, source: &str) -> Diagnostic {
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

fn diagnostic(rule_id: &str, message: String, line: u32, column: u32) -> Diagnostic {
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
