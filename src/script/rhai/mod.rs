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
mod compare;
mod defer;
pub(crate) mod diagnostic;
mod fanout;
mod guard;
mod isolate;
mod json;
mod lint;
mod print;
mod resolver;
mod runner;
pub(crate) mod sandbox;
mod scan;
mod split;
mod teardown;
mod text;
mod threads;

pub use runner::RhaiDialect;
#[cfg(test)]
mod tests;

use std::panic::{AssertUnwindSafe, catch_unwind};

use ::rhai::AST;

use self::diagnostic::{diagnostic, parse_diagnostic};
use self::sandbox::{SandboxLimits, compile_scope, parser_engine};
use crate::script::{Diagnostic, LintContext, sort_diagnostics};

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
