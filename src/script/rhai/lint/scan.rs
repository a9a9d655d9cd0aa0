//! A token scanner for the pre-scan: enough of Rhai's lexical grammar to tell code from
//! strings and comments, with the exact span (byte range, 1-based line and character column,
//! as Rhai counts them) of every token.
//!
//! It is not Rhai's tokenizer, on purpose: it never fails, it keeps scanning after anything it
//! does not understand, it scans the code inside `${...}` of backtick strings without help from
//! a parser, and it knows the comment forms of the languages models confuse Rhai with (`#` and
//! `--` line comments), so that text in them is never taken for code.

/// What a token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A word: identifier or keyword.
    Ident,
    /// A number literal.
    Number,
    /// A double-quoted string, or a text part of a backtick string.
    Str,
    /// A single-quoted literal (a Rhai character, or another language's string).
    Quoted,
    /// An operator or punctuation, longest match.
    Punct,
    /// A `#` or `--` line comment of another language (not Rhai's `//`).
    ForeignComment,
}

/// One token with its span.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tok<'s> {
    pub kind: Kind,
    pub text: &'s str,
    /// Byte range in the source.
    pub start: usize,
    pub end: usize,
    /// Line and column of the first character (1-based, columns count characters).
    pub line: u32,
    pub col: u32,
    /// Line and column just past the last character.
    pub end_line: u32,
    pub end_col: u32,
}

impl Tok<'_> {
    pub(super) fn is(&self, text: &str) -> bool {
        matches!(self.kind, Kind::Ident | Kind::Punct) && self.text == text
    }

    pub(super) fn is_ident(&self) -> bool {
        self.kind == Kind::Ident
    }
}

/// Operators, longest first within each length so the longest match wins.
const PUNCTS: &[&str] = &[
    "===", "!==", "...", "..=", "**=", "<<=", ">>=", "=>", "==", "!=", "<=", ">=", "&&", "||", "++", "--",
    "+=", "-=", "*=", "/=", "%=", "|=", "&=", "^=", "**", "::", "?.", "??", "?[", "->", "~=", "#{", "<<",
    ">>", "..",
];

struct Cursor<'s> {
    src: &'s str,
    pos: usize,
    line: u32,
    col: u32,
}

impl<'s> Cursor<'s> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn peek_at(&self, n: usize) -> Option<char> {
        self.src[self.pos..].chars().nth(n)
    }

    fn rest(&self) -> &'s str {
        &self.src[self.pos..]
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        if c == '\n' {
            self.line = self.line.saturating_add(1);
            self.col = 1;
        } else {
            self.col = self.col.saturating_add(1);
        }
        Some(c)
    }

    /// Skips to the end of the line, leaving the newline.
    fn skip_line(&mut self) {
        while self.peek().is_some_and(|c| c != '\n') {
            self.bump();
        }
    }
}

/// Scans `src` into tokens. Never fails; unknown characters become one-character `Punct`s.
pub(super) fn scan(src: &str) -> Vec<Tok<'_>> {
    let mut cur = Cursor { src, pos: 0, line: 1, col: 1 };
    let mut toks: Vec<Tok<'_>> = Vec::new();
    // One entry per open `${`: the brace depth inside it.
    let mut interpolations: Vec<u32> = Vec::new();
    // Whether the current line has had a token yet (for line-start comments).
    let mut line_of_last = 0u32;
    loop {
        // Whitespace.
        while cur.peek().is_some_and(char::is_whitespace) {
            cur.bump();
        }
        let Some(c) = cur.peek() else { break };
        let (start, line, col) = (cur.pos, cur.line, cur.col);
        let first_on_line = line_of_last != line;
        let rest = cur.rest();
        let kind = if rest.starts_with("//") {
            cur.skip_line();
            continue;
        } else if rest.starts_with("/*") {
            skip_block_comment(&mut cur);
            continue;
        } else if (c == '#' && is_hash_comment(rest, first_on_line, toks.last()))
            || (rest.starts_with("--") && is_dash_comment(rest, first_on_line, toks.last()))
        {
            cur.skip_line();
            Kind::ForeignComment
        } else if c.is_alphabetic() || c == '_' {
            while cur.peek().is_some_and(|c| c.is_alphanumeric() || c == '_') {
                cur.bump();
            }
            Kind::Ident
        } else if c.is_ascii_digit() {
            scan_number(&mut cur);
            Kind::Number
        } else if c == '"' {
            scan_quoted(&mut cur, '"');
            Kind::Str
        } else if c == '\'' {
            scan_quoted(&mut cur, '\'');
            Kind::Quoted
        } else if c == '`' {
            cur.bump();
            if scan_template_text(&mut cur) {
                interpolations.push(0);
            }
            Kind::Str
        } else if c == '}' && interpolations.last() == Some(&0) {
            // The end of a `${...}`: back to the text of the backtick string.
            interpolations.pop();
            cur.bump();
            if scan_template_text(&mut cur) {
                interpolations.push(0);
            }
            Kind::Str
        } else {
            let len = PUNCTS.iter().find(|p| rest.starts_with(**p)).map_or(c.len_utf8(), |p| p.len());
            for _ in rest[..len].chars() {
                cur.bump();
            }
            if let Some(depth) = interpolations.last_mut() {
                match &rest[..len] {
                    "{" | "#{" => *depth += 1,
                    "}" => *depth = depth.saturating_sub(1),
                    _ => {}
                }
            }
            Kind::Punct
        };
        line_of_last = cur.line;
        toks.push(Tok {
            kind,
            text: &src[start..cur.pos],
            start,
            end: cur.pos,
            line,
            col,
            end_line: cur.line,
            end_col: cur.col,
        });
    }
    toks
}

/// `#` starts another language's comment unless it opens a map (`#{`), a shebang, or reads as
/// Lua's length operator (`#items` after an operator).
fn is_hash_comment(rest: &str, first_on_line: bool, prev: Option<&Tok<'_>>) -> bool {
    if rest.starts_with("#{") || rest.starts_with("#!") {
        return false;
    }
    if first_on_line {
        return true;
    }
    let next_is_word = rest[1..].chars().next().is_some_and(|c| c.is_alphabetic() || c == '_');
    let after_operator = prev.is_some_and(|t| t.kind == Kind::Punct && !matches!(t.text, ")" | "]" | "}"));
    !(next_is_word && after_operator)
}

/// `--` starts a Lua comment at the start of a line or before a space; after a word it is a
/// decrement (`i--`).
fn is_dash_comment(rest: &str, first_on_line: bool, prev: Option<&Tok<'_>>) -> bool {
    if first_on_line {
        return true;
    }
    let after_operand = prev.is_some_and(|t| matches!(t.kind, Kind::Ident | Kind::Number) || t.is(")"));
    rest[2..].starts_with([' ', '[']) && !after_operand
}

fn skip_block_comment(cur: &mut Cursor<'_>) {
    let mut depth = 0u32;
    while !cur.rest().is_empty() {
        if cur.rest().starts_with("/*") {
            depth += 1;
            cur.bump();
            cur.bump();
        } else if cur.rest().starts_with("*/") {
            cur.bump();
            cur.bump();
            depth = depth.saturating_sub(1);
            if depth == 0 {
                return;
            }
        } else {
            cur.bump();
        }
    }
}

fn scan_number(cur: &mut Cursor<'_>) {
    while cur.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
        cur.bump();
    }
    if cur.peek() == Some('.') && cur.peek_at(1).is_some_and(|c| c.is_ascii_digit()) {
        cur.bump();
        while cur.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            cur.bump();
        }
    }
}

/// A quoted literal up to its closing quote; an unescaped newline ends it too (Rhai strings
/// continue over a line only after `\`), so an unterminated one never swallows the script.
fn scan_quoted(cur: &mut Cursor<'_>, quote: char) {
    cur.bump();
    while let Some(c) = cur.peek() {
        match c {
            '\\' => {
                cur.bump();
                cur.bump();
            }
            '\n' => return,
            c if c == quote => {
                cur.bump();
                return;
            }
            _ => {
                cur.bump();
            }
        }
    }
}

/// The text of a backtick string after its opening backtick or a `}`; true when it stopped at
/// a `${` (consumed) rather than the closing backtick or the end.
fn scan_template_text(cur: &mut Cursor<'_>) -> bool {
    while let Some(c) = cur.peek() {
        match c {
            '`' => {
                cur.bump();
                return false;
            }
            '\\' => {
                cur.bump();
                cur.bump();
            }
            '$' if cur.peek_at(1) == Some('{') => {
                cur.bump();
                cur.bump();
                return true;
            }
            _ => {
                cur.bump();
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(src: &str) -> Vec<&str> {
        scan(src).iter().map(|t| t.text).collect()
    }

    #[test]
    fn scans_code_strings_and_comments() {
        assert_eq!(texts("let a = b === c; // x === y"), ["let", "a", "=", "b", "===", "c", ";"]);
        assert_eq!(texts("\"a => b\" /* => /* nested */ */ x"), ["\"a => b\"", "x"]);
        assert_eq!(
            texts("`a ${x.length} b ${ #{k: 1} } c`"),
            ["`a ${", "x", ".", "length", "} b ${", "#{", "k", ":", "1", "}", "} c`"]
        );
        assert_eq!(texts("# it's a comment\nx"), ["# it's a comment", "x"]);
        assert_eq!(texts("let n = #items;"), ["let", "n", "=", "#", "items", ";"]);
        assert_eq!(texts("i--; -- note"), ["i", "--", ";", "-- note"]);
        assert_eq!(texts("0..n 1.5"), ["0", "..", "n", "1.5"]);
        assert_eq!(texts("\"open\nx"), ["\"open", "x"]);
    }

    #[test]
    fn spans_count_characters() {
        let toks = scan("é = 1;\n  x");
        assert_eq!((toks[0].line, toks[0].col, toks[0].end_col), (1, 1, 2));
        assert_eq!((toks[1].col, toks[4].line, toks[4].col), (3, 2, 3));
    }
}
