//! Every diagnostic of a draft in one pass.
//!
//! Rhai's parser stops at the first error, and one error in a draft usually hides the rest. So
//! analysis runs in stages over a text that keeps every character's line and column:
//!
//! 1. the pre-scan (`foreign`) reports every form of another language and rewrites those that
//!    have a same-length Rhai equivalent;
//! 2. the parse; an unknown variable is reported and then declared for the next parse, any other
//!    error is reported and its line blanked (keeping its unmatched block braces, so blocks still
//!    nest), and the parse runs again, a bounded number of times. An error on a line the
//!    pre-scan already reported is the same mistake seen again and is not reported twice;
//! 3. the lint rules, over the AST of the first text that parses.
//!
//! Only an untouched script yields an AST to run; a rewritten one only yields diagnostics.

use std::collections::HashSet;

use ::rhai::{AST, Dynamic, Engine, ParseErrorType};

use super::foreign::{self, declared_names};
use super::scan::{Kind, scan};
use crate::script::rhai::diagnostic::{diagnostic, line_column, parse_diagnostic};
use crate::script::rhai::sandbox::{SCRIPT_VARIABLES, compile_scope};
use crate::script::{Diagnostic, LintContext};

/// The most parses of one script: each recovers from one error, so this bounds the work on a
/// hostile script while leaving room for the handful of mistakes a real draft has.
const MAX_PARSES: usize = 24;

/// Pre-scans, parses with recovery, and lints; see the module documentation.
pub(in crate::script::rhai) fn analyze(
    source: &str,
    ctx: &LintContext,
    engine: &Engine,
) -> (Option<AST>, Vec<Diagnostic>) {
    let mut prescan = foreign::prescan(source);
    let mut damaged = !prescan.edits.is_empty();
    let mut text = foreign::apply(source, &mut prescan.edits);
    let mut diagnostics = prescan.diagnostics;
    diagnostics.extend(super::escapes::check(source));
    let mut variables: Vec<String> = prescan.variables.into_iter().collect();
    variables.sort_unstable();
    let mut functions = prescan.functions;
    for _ in 0..MAX_PARSES {
        let mut scope = compile_scope();
        for name in &variables {
            if !SCRIPT_VARIABLES.contains(&name.as_str()) && ::rhai::is_valid_identifier(name) {
                scope.push_dynamic(name.clone(), Dynamic::UNIT);
            }
        }
        let error = match engine.compile_with_scope(&scope, &text) {
            Ok(ast) if ast.statements().is_empty() && !ast.has_functions() => {
                if diagnostics.is_empty() {
                    let message =
                        "the script has no statements; write statements whose last value is the run's result";
                    diagnostics.push(diagnostic("syntax", message.to_owned(), 1, 1));
                }
                return (None, diagnostics);
            }
            Ok(ast) => {
                let mut found = super::check(&ast, ctx, &functions);
                // A later stage finding a mistake where the pre-scan reported one (an unknown
                // method the pre-scan named the Rhai form of) says the same thing less well.
                found.retain(|d| {
                    !diagnostics
                        .iter()
                        .any(|f| f.rule_id == foreign::RULE && f.line == d.line && f.column == d.column)
                });
                diagnostics.extend(found);
                if !damaged {
                    return (Some(ast), diagnostics);
                }
                // A rewritten script is never run; every rewrite comes with its error, and this
                // keeps compile's refusal whatever the stages above reported.
                if !diagnostics.iter().any(Diagnostic::is_error) {
                    let message = "the script does not parse as written; write it in rhai";
                    diagnostics.push(diagnostic("syntax", message.to_owned(), 1, 1));
                }
                return (None, diagnostics);
            }
            Err(error) => error,
        };
        damaged = true;
        let (line, column) = line_column(error.position());
        if let ParseErrorType::MissingToken(token, _) = &*error.0
            && token == ";"
            && let Some((found, fixed)) = missing_semicolon(&text, line, column)
        {
            if !diagnostics.contains(&found) {
                diagnostics.push(found);
            }
            text = fixed;
            continue;
        }
        let found = parse_diagnostic(&error, source);
        // An unknown variable is the pre-scan's finding when inside its span; any other error
        // is when on its lines (the parse stumbling on a form the pre-scan could not rewrite).
        let undefined = matches!(&*error.0, ParseErrorType::VariableUndefined(_));
        let covered = diagnostics.iter().any(|f| {
            let end_line = f.end_line.unwrap_or(f.line);
            if f.rule_id != foreign::RULE {
                false
            } else if undefined {
                (f.line, f.column) <= (line, column)
                    && (line, column) < (end_line, f.end_column.unwrap_or(f.column))
            } else {
                f.line <= line && line <= end_line
            }
        });
        if !covered && !diagnostics.contains(&found) {
            diagnostics.push(found);
        }
        let progressed = match &*error.0 {
            ParseErrorType::VariableUndefined(name) if !variables.contains(name) => {
                variables.push(name.clone());
                true
            }
            _ => blank_line(&mut text, line, &mut variables, &mut functions),
        };
        if !progressed {
            break;
        }
    }
    (None, diagnostics)
}

/// A statement that ends at a line break without `;` (Python and Lua end statements there):
/// the diagnostic at the end of the statement, and the text with a `;` inserted right after its
/// last token. Only comments and whitespace follow that token on its line, so no character that
/// matters moves, and the next parse goes on to the statements after.
fn missing_semicolon(text: &str, line: u32, column: u32) -> Option<(Diagnostic, String)> {
    let at = offset(text, line, column)?;
    let before = &text[..at];
    // The last token before the error, found by scanning its line (a comment may follow it).
    let mut end = before.trim_end().len();
    let line_start = before[..end].rfind('\n').map_or(0, |i| i + 1);
    if let Some(last) = scan(&before[line_start..end]).last() {
        end = line_start + last.end;
    }
    if end == 0 || !before[end..].contains('\n') {
        return None;
    }
    let (end_line, end_column) = position(text, end);
    let message =
        "missing ';' at the end of this statement: rhai ends statements with ;, not with a line break";
    let mut found = diagnostic("syntax", message.to_owned(), end_line, end_column);
    found.end_line = Some(end_line);
    found.end_column = Some(end_column.saturating_add(1));
    let mut fixed = String::with_capacity(text.len() + 1);
    fixed.push_str(&text[..end]);
    fixed.push(';');
    fixed.push_str(&text[end..]);
    Some((found, fixed))
}

/// The byte offset of a 1-based line and character column.
fn offset(text: &str, line: u32, column: u32) -> Option<usize> {
    let mut start = 0;
    for _ in 1..line {
        start += text[start..].find('\n')? + 1;
    }
    let column = usize::try_from(column.max(1) - 1).ok()?;
    let rest = &text[start..];
    Some(start + rest.char_indices().nth(column).map_or(rest.len(), |(i, _)| i))
}

/// The 1-based line and character column of a byte offset.
fn position(text: &str, offset: usize) -> (u32, u32) {
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (u32::try_from(line).unwrap_or(u32::MAX), u32::try_from(column).unwrap_or(u32::MAX))
}

/// Blanks line `line` (1-based) of `text` but for its unmatched block braces, and records the names
/// it declared. False when that changes nothing (the line is blank already, or past the end).
fn blank_line(
    text: &mut String,
    line: u32,
    variables: &mut Vec<String>,
    functions: &mut HashSet<String>,
) -> bool {
    let Some(index) = usize::try_from(line).ok().and_then(|line| line.checked_sub(1)) else { return false };
    let Some((start, content)) = text
        .split_inclusive('\n')
        .scan(0usize, |at, line| {
            let start = *at;
            *at += line.len();
            Some((start, line))
        })
        .nth(index)
    else {
        return false;
    };
    let content = content.trim_end_matches('\n');
    let toks = scan(content);
    // Unmatched braces stay where they are, so the blocks around and after still nest.
    let mut open: Vec<usize> = Vec::new();
    let mut keep: Vec<usize> = Vec::new();
    for (i, tok) in toks.iter().enumerate() {
        if tok.kind != Kind::Punct {
            continue;
        }
        match tok.text {
            "(" | "[" | "{" | "#{" => open.push(i),
            ")" | "]" | "}" => match open.last() {
                Some(_) => {
                    open.pop();
                }
                None => keep.push(i),
            },
            _ => {}
        }
    }
    // A block brace always stays. Other brackets stay only where they continue a construct
    // over lines: closers leading the line (`]);`), openers ending it (`([`). One left open in
    // the middle of a line is usually the error itself, and keeping it would cascade.
    let leading =
        toks.iter().take_while(|t| matches!(t.text, ")" | "]" | "}") && t.kind == Kind::Punct).count();
    keep.retain(|&i| toks[i].text == "}" || i < leading);
    let trailing_from = toks.len()
        - toks
            .iter()
            .rev()
            .take_while(|t| t.kind == Kind::Punct && matches!(t.text, "(" | "[" | "{" | "#{"))
            .count();
    keep.extend(open.into_iter().filter(|&i| toks[i].text == "{" || i >= trailing_from));
    let kept: Vec<(usize, &str)> = keep.iter().map(|&i| (toks[i].start, toks[i].text)).collect();
    let mut blanked = String::with_capacity(content.len());
    let mut at = 0;
    for (offset, bracket) in kept.iter().copied().collect::<std::collections::BTreeMap<_, _>>() {
        blanked.extend(content[at..offset].chars().map(|_| ' '));
        blanked.push_str(bracket);
        at = offset + bracket.len();
    }
    blanked.extend(content[at..].chars().map(|_| ' '));
    if blanked == content {
        return false;
    }
    let mut declared = HashSet::new();
    declared_names(&toks, &mut declared, functions);
    for name in declared {
        if !variables.contains(&name) {
            variables.push(name);
        }
    }
    text.replace_range(start..start + content.len(), &blanked);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blanking_keeps_block_braces_and_declarations() {
        let mut text = "a\nfunction f(x) {\nb".to_owned();
        let (mut vars, mut fns) = (Vec::new(), HashSet::new());
        assert!(blank_line(&mut text, 2, &mut vars, &mut fns));
        assert_eq!(text, "a\n              {\nb");
        assert_eq!((vars, fns.contains("f")), (vec!["x".to_owned()], true));
        assert!(
            !blank_line(&mut text, 2, &mut Vec::new(), &mut HashSet::new()),
            "no progress the second time"
        );
        assert!(!blank_line(&mut text, 9, &mut Vec::new(), &mut HashSet::new()));
        let mut text = "} elif x: {".to_owned();
        assert!(blank_line(&mut text, 1, &mut Vec::new(), &mut HashSet::new()));
        assert_eq!(text, "}         {");
        // A bracket left open mid-line is dropped; one ending the line continues it.
        let mut text = "let x = f(1;\nlet y = g([".to_owned();
        assert!(blank_line(&mut text, 1, &mut Vec::new(), &mut HashSet::new()));
        assert!(blank_line(&mut text, 2, &mut Vec::new(), &mut HashSet::new()));
        assert_eq!(text, "            \n         ([");
    }
}
