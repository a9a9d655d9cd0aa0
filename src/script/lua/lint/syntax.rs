//! Before and after the parser: a cheap lexical scan that rejects what would hurt the parser
//! (nesting deep enough to exhaust a stack, backquotes that full_moon's Lua 5.4 lexer cannot
//! handle), and full_moon's parse errors turned into diagnostics that name the Lua form to write
//! when the slip is a habit from another language (`!=`, `=>`, `let`, `def`, `|x|`, `#{}`, ...).

use full_moon::Error;

use crate::script::{Diagnostic, Severity};

/// The deepest nesting lint accepts, counting each open bracket and block and each operator of
/// an unbroken operator chain (the parser recurses on both). Far beyond any workflow; a script
/// this deep is built to exhaust the parser's stack.
pub(super) const MAX_NESTING: usize = 200;

/// Nesting up to which the parser runs on the caller's stack; deeper sources get a thread with
/// [`DEEP_STACK`] bytes.
pub(super) const SHALLOW_NESTING: usize = 24;

/// The stack of the thread deep (but accepted) sources are parsed and walked on.
pub(super) const DEEP_STACK: usize = 64 << 20;

/// What the scan found.
#[derive(Debug, Default)]
pub(super) struct Scan {
    /// The deepest nesting estimate anywhere in the source.
    pub(super) nesting: usize,
    /// A problem that must stop the parse, as a diagnostic.
    pub(super) fatal: Option<Diagnostic>,
    /// Findings that do not stop the parse (`template-escape` in long strings).
    pub(super) warnings: Vec<Diagnostic>,
}

/// One level of brackets or blocks: how many operators its current chain has.
#[derive(Debug, Clone, Copy, Default)]
struct Level {
    operators: usize,
}

/// Scans a source the way Lua's lexer splits it (strings, long brackets, comments), tracking
/// the nesting estimate and stopping at the first fatal problem.
/// Parses `source` as Lua 5.4 with full_moon. A backquote at a token's start reaches an
/// `unreachable!()` in full_moon's lexer (its template strings are a dialect feature we do not
/// build), and [`scan`] cannot always see where full_moon's tokens start (`0E'` lexes apart from
/// Lua's own reading), so every backquote is handed to the parser as `$`, a character of the same
/// width that it reports as an unexpected character. Positions are unchanged.
pub(super) fn parse(source: &str) -> full_moon::ast::AstResult {
    let parsed: std::borrow::Cow<'_, str> = if source.contains('`') {
        std::borrow::Cow::Owned(source.replace('`', "$"))
    } else {
        std::borrow::Cow::Borrowed(source)
    };
    full_moon::parse_fallible(&parsed, full_moon::LuaVersion::lua54())
}

pub(super) fn scan(source: &str) -> Scan {
    let chars: Vec<char> = source.chars().collect();
    let mut scan = Scan::default();
    let mut levels: Vec<Level> = vec![Level::default()];
    let mut operators_open = 0usize;
    let (mut line, mut column) = (1u32, 1u32);
    let mut i = 0;
    // Advances over `n` characters, keeping line and column.
    macro_rules! advance {
        ($n:expr) => {
            for _ in 0..$n {
                if i < chars.len() {
                    if chars[i] == '\n' {
                        line += 1;
                        column = 1;
                    } else {
                        column += 1;
                    }
                    i += 1;
                }
            }
        };
    }
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        // Comments.
        if c == '-' && next == Some('-') {
            advance!(2);
            if let Some(level) = long_bracket(&chars, i) {
                skip_long(&chars, &mut i, &mut line, &mut column, level);
            } else {
                while i < chars.len() && chars[i] != '\n' {
                    advance!(1);
                }
            }
            continue;
        }
        // Long strings.
        if c == '['
            && let Some(level) = long_bracket(&chars, i)
        {
            let (from, at_line, at_column) = (i, line, column);
            skip_long(&chars, &mut i, &mut line, &mut column, level);
            scan.warnings.extend(super::escapes::in_long_string(&chars[from..i], at_line, at_column));
            reset(&mut levels, &mut operators_open);
            continue;
        }
        // Quoted strings.
        if c == '"' || c == '\'' {
            advance!(1);
            while i < chars.len() && chars[i] != c && chars[i] != '\n' {
                if chars[i] == '\\' {
                    advance!(1);
                }
                advance!(1);
            }
            advance!(1);
            continue;
        }
        if c == '`' {
            let message = "Lua has no backquoted template strings; join text with .. (\"total: \" .. n) or \
                           use string.format(\"total: %d\", n)";
            scan.fatal = Some(span_diagnostic("foreign-syntax", message.to_owned(), line, column, Some(1)));
            return scan;
        }
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                advance!(1);
            }
            let word: String = chars[start..i].iter().collect();
            match word.as_str() {
                "function" | "do" | "then" | "repeat" => open(&mut levels),
                "end" | "until" => close(&mut levels, &mut operators_open),
                "elseif" => close(&mut levels, &mut operators_open),
                "else" => {
                    close(&mut levels, &mut operators_open);
                    open(&mut levels);
                }
                "and" | "or" | "not" => operator(&mut levels, &mut operators_open),
                "local" | "return" | "if" | "while" | "for" | "in" | "goto" | "break" => {
                    reset(&mut levels, &mut operators_open);
                }
                _ => {}
            }
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '.') {
                advance!(1);
            }
            continue;
        } else {
            match c {
                '(' | '[' | '{' => open(&mut levels),
                ')' | ']' | '}' => close(&mut levels, &mut operators_open),
                ',' | ';' | '=' if next != Some('=') => reset(&mut levels, &mut operators_open),
                '+' | '-' | '*' | '/' | '%' | '^' | '#' | '&' | '~' | '|' | '<' | '>' | '=' => {
                    operator(&mut levels, &mut operators_open);
                }
                '.' if next == Some('.') => operator(&mut levels, &mut operators_open),
                _ => {}
            }
            advance!(1);
        }
        let nesting = levels.len() + operators_open;
        scan.nesting = scan.nesting.max(nesting);
        if nesting > MAX_NESTING {
            let message = format!(
                "the script nests brackets, blocks or an operator chain more than {MAX_NESTING} deep; split \
                 the expression into local variables or the work into functions"
            );
            scan.fatal =
                Some(span_diagnostic("syntax", message, line, column.saturating_sub(1).max(1), None));
            return scan;
        }
    }
    scan
}

fn open(levels: &mut Vec<Level>) {
    levels.push(Level::default());
}

fn close(levels: &mut Vec<Level>, operators_open: &mut usize) {
    if levels.len() > 1
        && let Some(level) = levels.pop()
    {
        *operators_open -= level.operators;
    }
    reset(levels, operators_open);
}

fn reset(levels: &mut [Level], operators_open: &mut usize) {
    if let Some(level) = levels.last_mut() {
        *operators_open -= level.operators;
        level.operators = 0;
    }
}

fn operator(levels: &mut [Level], operators_open: &mut usize) {
    if let Some(level) = levels.last_mut() {
        level.operators += 1;
        *operators_open += 1;
    }
}

/// The level of a long bracket opening at `at` (`[[` is 0, `[==[` is 2), if one does.
fn long_bracket(chars: &[char], at: usize) -> Option<usize> {
    if chars.get(at) != Some(&'[') {
        return None;
    }
    let mut level = 0;
    while chars.get(at + 1 + level) == Some(&'=') {
        level += 1;
    }
    (chars.get(at + 1 + level) == Some(&'[')).then_some(level)
}

/// Skips a long bracket of `level` from its opening to just past its closing (or the end).
fn skip_long(chars: &[char], i: &mut usize, line: &mut u32, column: &mut u32, level: usize) {
    let mut step = |i: &mut usize| {
        if chars[*i] == '\n' {
            *line += 1;
            *column = 1;
        } else {
            *column += 1;
        }
        *i += 1;
    };
    for _ in 0..level + 2 {
        if *i < chars.len() {
            step(i);
        }
    }
    while *i < chars.len() {
        if chars[*i] == ']'
            && (1..=level).all(|k| chars.get(*i + k) == Some(&'='))
            && chars.get(*i + level + 1) == Some(&']')
        {
            for _ in 0..level + 2 {
                step(i);
            }
            return;
        }
        step(i);
    }
}

/// Turns full_moon's errors into diagnostics: one per position (the parser often reports a
/// second consequence at the same token), each with a hint when the text there is a habit from
/// another language.
pub(super) fn parse_errors(errors: &[Error], source: &str) -> Vec<Diagnostic> {
    let mut diagnostics: Vec<Diagnostic> = Vec::with_capacity(errors.len());
    for error in errors {
        let (start, end) = error.range();
        let line = u32::try_from(start.line()).unwrap_or(u32::MAX).max(1);
        let column = u32::try_from(start.character()).unwrap_or(u32::MAX).max(1);
        if diagnostics.iter().any(|d| d.line == line && d.column == column) {
            continue;
        }
        let base = match error {
            Error::AstError(error) => {
                let token = error.token().to_string();
                let message = error.error_message();
                if token.trim().is_empty() {
                    format!("{message} (at the end of the script)")
                } else {
                    format!("{message}, near `{}`", crate::text::for_terminal(token.trim()))
                }
            }
            Error::TokenizerError(error) => error.error().to_string(),
        };
        let hint = hint(source, start.bytes(), &base);
        // A habit from another language is `foreign-syntax`, as in Rhai; a missing `then`,
        // `do` or `end` is plain syntax.
        let rule = match hint {
            Some(hint) if !STRUCTURAL.contains(&hint) => "foreign-syntax",
            _ => "syntax",
        };
        let message = match hint {
            Some(hint) => format!("{}; {hint}", base.trim_end_matches('.')),
            None => base,
        };
        let mut diagnostic = span_diagnostic(rule, message, line, column, None);
        if end.line() == start.line() && end.character() > start.character() {
            diagnostic.end_line = Some(line);
            diagnostic.end_column = u32::try_from(end.character()).ok();
        }
        diagnostics.push(diagnostic);
    }
    diagnostics
}

/// What to write instead, when the text at a parse error (or, failing that, anywhere on its
/// line) is a habit from another language.
fn hint(source: &str, at: usize, message: &str) -> Option<&'static str> {
    let rest = source.get(at..)?;
    let before = source.get(..at)?;
    let line_before = before.rsplit('\n').next().unwrap_or_default().trim_end();
    let line_after = rest.split('\n').next().unwrap_or_default();
    let first_word = line_before.trim_start().split(|c: char| !(c.is_alphanumeric() || c == '_')).next();
    let word_at: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    let hint = if rest.starts_with("!=") {
        NOT_EQUAL
    } else if rest.starts_with('!') {
        "Lua negates with not: if not done then ... end"
    } else if rest.starts_with("=>") {
        ARROW
    } else if line_before.contains("//") && !line_before.contains(['"', '\'']) || rest.starts_with("//") {
        COMMENT
    } else if rest.starts_with("&&") || before.ends_with('&') && rest.starts_with('&') {
        AND
    } else if rest.starts_with("||") || before.ends_with('|') && rest.starts_with('|') {
        OR
    } else if rest.starts_with('|') {
        CLOSURE
    } else if ["+=", "-=", "*=", "/=", "..=", "%="].iter().any(|op| rest.starts_with(op))
        || rest.starts_with('=') && line_before.ends_with(['+', '-', '*', '/', '%'])
    {
        COMPOUND
    } else if rest.starts_with("++") {
        "Lua has no ++; write x = x + 1"
    } else if matches!(word_at.as_str(), "elif" | "elsif") || matches!(first_word, Some("elif" | "elsif")) {
        ELSEIF
    } else if matches!(first_word, Some("const" | "let" | "var")) {
        "declare variables with local: local x = 1 (local x <const> = 1 for a constant)"
    } else if matches!(first_word, Some("def" | "fn" | "func" | "fun")) {
        "define functions with local function name(a, b) ... end"
    } else if rest.starts_with(':') && line_before.contains('{') {
        TABLE
    } else if let Some(hint) = line_hint(line_before, line_after) {
        hint
    } else if message.contains("`then`") {
        STRUCTURAL[0]
    } else if message.contains("`do`") {
        STRUCTURAL[1]
    } else if message.contains("`end`") {
        STRUCTURAL[2]
    } else {
        return None;
    };
    Some(hint)
}

/// The hints about Lua's own block structure, which are not habits from another language.
const STRUCTURAL: [&str; 3] = [
    "Lua writes if cond then ... end, with no braces or colon",
    "Lua writes loops as for i = 1, n do ... end or for _, x in ipairs(list) do ... end",
    "every function, if, for, while and do block closes with end",
];

const NOT_EQUAL: &str = "Lua's not-equal is ~=";
const ARROW: &str = "Lua has no arrow functions; write function(x) return x + 1 end";
const COMMENT: &str = "comments start with -- in Lua (// is floor division)";
const AND: &str = "Lua's logical and is the word and";
const OR: &str = "Lua's logical or is the word or";
const CLOSURE: &str = "Lua has no |x| closures; write function(x) return x + 1 end";
const COMPOUND: &str = "Lua has no compound assignment; write x = x + 1";
const ELSEIF: &str = "Lua's else-if is elseif: if a then ... elseif b then ... end";
const TABLE: &str = "Lua table fields are written {key = value}, and maps have no #{...}";

/// A habit from another language anywhere on the error's line, outside strings.
fn line_hint(before: &str, after: &str) -> Option<&'static str> {
    let line = format!("{before}{after}");
    let code: String = {
        // Blank out quoted strings so their contents do not match.
        let mut out = String::with_capacity(line.len());
        let mut quote: Option<char> = None;
        for c in line.chars() {
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None if c == '"' || c == '\'' => quote = Some(c),
                None => out.push(c),
            }
        }
        out
    };
    let code = code.split("--").next().unwrap_or_default();
    let hint = if code.contains("=>") {
        ARROW
    } else if code.contains("!=") {
        NOT_EQUAL
    } else if code.contains("&&") {
        AND
    } else if code.contains("||") {
        OR
    } else if code.contains("#{") || code.contains("{") && code.contains(": ") {
        TABLE
    } else if code.contains('|') {
        CLOSURE
    } else if ["+=", "-=", "*=", "/="].iter().any(|op| code.contains(op)) {
        COMPOUND
    } else {
        return None;
    };
    Some(hint)
}

/// A diagnostic at a line and column, covering `len` characters when given.
pub(super) fn span_diagnostic(
    rule_id: &str,
    message: String,
    line: u32,
    column: u32,
    len: Option<usize>,
) -> Diagnostic {
    let end_column = len.map(|len| column.saturating_add(u32::try_from(len).unwrap_or(u32::MAX)));
    Diagnostic {
        rule_id: rule_id.to_owned(),
        message,
        line,
        column,
        end_line: end_column.map(|_| line),
        end_column,
        severity: Severity::Error,
    }
}
