//! The pre-scan: forms of JavaScript, TypeScript, Python and Lua that models write when asked
//! for Rhai, found on tokens before anything is parsed, so that every one of them is reported
//! (Rhai's parser stops at the first error) with the Rhai form to write instead.
//!
//! Each finding may come with edits that rewrite the form into Rhai of exactly the same number
//! of characters on every line (`(t) => x` becomes `|t|    x`, `===` becomes `== `), so the
//! rewritten script parses on, and the lint of what follows it reports at the positions of the
//! original text. A form with no same-length Rhai equivalent gets no edit; the parse stumbles
//! on it and the recovery in `recover` blanks its line.

mod words;

use std::collections::HashSet;

use super::scan::{Kind, Tok, scan};
use crate::script::{Diagnostic, Severity};

/// The rule every finding of the pre-scan reports under.
pub(super) const RULE: &str = "foreign-syntax";

/// A replacement of `src[start..end]` by text of the same number of characters on each line.
#[derive(Debug, Clone)]
pub(super) struct Edit {
    pub start: usize,
    pub end: usize,
    pub with: String,
}

/// What the pre-scan found: the findings, the edits that turn the forms into Rhai, and the
/// names declared by lines it blanked (so the parse does not report their uses as unknown).
#[derive(Debug, Default)]
pub(super) struct Prescan {
    pub diagnostics: Vec<Diagnostic>,
    pub edits: Vec<Edit>,
    pub variables: HashSet<String>,
    pub functions: HashSet<String>,
}

/// How far a bracket is looked for its match, in tokens: a bound on hostile input, far beyond
/// any parameter list or loop header.
const MAX_BRACKET_SCAN: usize = 512;

/// A Lua block opener waiting for its `end`: whether it was rewritten to `{`.
type LuaBlock = bool;

struct Scanner<'s> {
    src: &'s str,
    toks: Vec<Tok<'s>>,
    out: Prescan,
    /// Names the script declares (`let`, `const`, `fn`): a name of another language's
    /// builtin that the script declared is the script's own.
    declared: HashSet<&'s str>,
    /// Tokens already accounted for by a finding that covers them.
    consumed: Vec<bool>,
    lua_blocks: Vec<LuaBlock>,
}

/// Runs the pre-scan over a script.
pub(super) fn prescan(src: &str) -> Prescan {
    let toks = scan(src);
    let mut declared = HashSet::new();
    for pair in toks.windows(2) {
        if matches!(pair[0].text, "let" | "const" | "fn") && pair[1].is_ident() {
            declared.insert(pair[1].text);
        }
    }
    let consumed = vec![false; toks.len()];
    let mut scanner =
        Scanner { src, toks, out: Prescan::default(), declared, consumed, lua_blocks: Vec::new() };
    scanner.python_block_headers();
    scanner.tokens();
    scanner.out
}

/// Words that start an expression operand (so `and` between two is an operator).
fn starts_operand(tok: &Tok<'_>) -> bool {
    match tok.kind {
        Kind::Ident => !matches!(tok.text, "and" | "or" | "in" | "then" | "do" | "else" | "is"),
        Kind::Number | Kind::Str | Kind::Quoted => true,
        Kind::Punct => matches!(tok.text, "(" | "[" | "#{" | "!" | "-"),
        Kind::ForeignComment => false,
    }
}

fn ends_operand(tok: &Tok<'_>) -> bool {
    match tok.kind {
        Kind::Ident => !matches!(
            tok.text,
            "and" | "or" | "not" | "if" | "while" | "return" | "in" | "let" | "const" | "else" | "elif"
        ),
        Kind::Number | Kind::Str | Kind::Quoted => true,
        Kind::Punct => matches!(tok.text, ")" | "]" | "}"),
        Kind::ForeignComment => false,
    }
}

/// `text` with every character but newlines replaced by a space.
fn blank(text: &str) -> String {
    text.chars().map(|c| if c == '\n' { '\n' } else { ' ' }).collect()
}

/// `with` padded with spaces to the character count of `text`, or `None` when it is longer.
fn padded(with: &str, text: &str) -> Option<String> {
    let room = text.chars().count();
    let len = with.chars().count();
    (len <= room && !text.contains('\n')).then(|| format!("{with}{}", " ".repeat(room - len)))
}

impl<'s> Scanner<'s> {
    fn tok(&self, i: usize) -> Option<&Tok<'s>> {
        self.toks.get(i)
    }

    fn text(&self, i: usize) -> &'s str {
        self.toks.get(i).map_or("", |t| t.text)
    }

    /// Whether token `i` is `text` (an identifier or punctuation, never a string's content).
    fn is(&self, i: usize, text: &str) -> bool {
        self.toks.get(i).is_some_and(|t| t.is(text))
    }

    fn same_line(&self, a: usize, b: usize) -> bool {
        match (self.toks.get(a), self.toks.get(b)) {
            (Some(a), Some(b)) => a.end_line == b.line,
            _ => false,
        }
    }

    fn report(&mut self, from: usize, to: usize, message: String) {
        let (Some(first), Some(last)) = (self.toks.get(from), self.toks.get(to)) else { return };
        self.out.diagnostics.push(Diagnostic {
            rule_id: RULE.to_owned(),
            message,
            line: first.line,
            column: first.col,
            end_line: Some(last.end_line),
            end_column: Some(last.end_col),
            severity: Severity::Error,
        });
    }

    fn edit_tok(&mut self, i: usize, with: &str) {
        let Some(tok) = self.toks.get(i) else { return };
        if let Some(with) = padded(with, tok.text) {
            self.out.edits.push(Edit { start: tok.start, end: tok.end, with });
        }
    }

    fn edit_range(&mut self, start: usize, end: usize, with: &str) {
        if let Some(text) = self.src.get(start..end)
            && let Some(with) = padded(with, text)
        {
            self.out.edits.push(Edit { start, end, with });
        }
    }

    fn blank_toks(&mut self, from: usize, to: usize) {
        let (Some(first), Some(last)) = (self.toks.get(from), self.toks.get(to)) else { return };
        let (start, end) = (first.start, last.end);
        if let Some(text) = self.src.get(start..end) {
            self.out.edits.push(Edit { start, end, with: blank(text) });
        }
    }

    /// The index of the bracket closing the one at `open`, on the token stream.
    fn matching(&self, open: usize) -> Option<usize> {
        let (o, c) = match self.text(open) {
            "(" => ("(", ")"),
            "[" => ("[", "]"),
            "{" | "#{" => ("{", "}"),
            _ => return None,
        };
        let mut depth = 0usize;
        for (i, tok) in self.toks.iter().enumerate().skip(open).take(MAX_BRACKET_SCAN) {
            if tok.kind != Kind::Punct {
                continue;
            }
            if tok.text == o || (o == "{" && tok.text == "#{") {
                depth += 1;
            } else if tok.text == c {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
        }
        None
    }

    /// The index of the bracket opening the one at `close`.
    fn matching_back(&self, close: usize) -> Option<usize> {
        let (o, c) = match self.text(close) {
            ")" => ("(", ")"),
            "]" => ("[", "]"),
            _ => return None,
        };
        let mut depth = 0usize;
        for i in (0..=close).rev().take(MAX_BRACKET_SCAN) {
            let tok = &self.toks[i];
            if tok.kind != Kind::Punct {
                continue;
            }
            if tok.text == c {
                depth += 1;
            } else if tok.text == o {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
        }
        None
    }

    /// Identifiers separated by commas from `from` to `to` (exclusive): a plain parameter list.
    fn plain_params(&self, from: usize, to: usize) -> Option<Vec<&'s str>> {
        let mut params = Vec::new();
        for (n, i) in (from..to).enumerate() {
            let tok = self.tok(i)?;
            if n % 2 == 0 {
                if !tok.is_ident() {
                    return None;
                }
                params.push(tok.text);
            } else if !tok.is(",") {
                return None;
            }
        }
        Some(params)
    }

    /// Records the names a blanked header declares.
    fn declarations(&mut self, from: usize, to: usize) {
        let toks = &self.toks[from.min(self.toks.len())..to.min(self.toks.len())];
        declared_names(toks, &mut self.out.variables, &mut self.out.functions);
    }

    // ----- Python blocks -----

    /// `if x:` / `def f(x):` / `else:`: a line that opens an indented block with a colon.
    fn python_block_headers(&mut self) {
        let mut i = 0;
        while i < self.toks.len() {
            let line = self.toks[i].line;
            let last = (i..self.toks.len()).take_while(|&j| self.toks[j].line == line).last().unwrap_or(i);
            let first = self.toks[i];
            let ends_in_colon = self.toks[last].is(":") && last > i;
            let keyword = first.kind == Kind::Ident
                && matches!(
                    first.text,
                    "if" | "elif"
                        | "else"
                        | "for"
                        | "while"
                        | "def"
                        | "try"
                        | "except"
                        | "finally"
                        | "with"
                        | "class"
                );
            if ends_in_colon && keyword {
                let message = match first.text {
                    "def" => "\"def\" is not rhai: write fn name(params) { ... } (a function sees only its \
                              parameters)"
                        .to_owned(),
                    "elif" => "\"elif\" is not rhai: write } else if cond { ... }".to_owned(),
                    "except" | "finally" => {
                        format!("\"{}\" is not rhai: write try {{ ... }} catch (err) {{ ... }}", first.text)
                    }
                    "with" => "\"with\" is not rhai: write the statements directly".to_owned(),
                    "class" => "classes are not rhai: use a map #{...} and functions".to_owned(),
                    "else" | "try" => {
                        format!("\":\" does not open a block in rhai: write {} {{ ... }}", first.text)
                    }
                    "for" => "\":\" does not open a block in rhai: write for x in xs { ... }".to_owned(),
                    other => format!("\":\" does not open a block in rhai: write {other} cond {{ ... }}"),
                };
                let at = if matches!(first.text, "def" | "elif" | "except" | "finally" | "with" | "class") {
                    i
                } else {
                    last
                };
                self.report(at, at, message);
                self.consumed[at] = true;
                // Findings inside the header still count (range(n), True, and), so the tokens
                // are not consumed; its blanking edit wins over theirs.
                self.declarations(i, last + 1);
                self.blank_toks(i, last);
            }
            i = last + 1;
        }
    }

    // ----- tokens -----

    fn tokens(&mut self) {
        // The bracket stack: true for the braces of a switch (whose arms use `=>`).
        let mut braces: Vec<bool> = Vec::new();
        let mut switch_pending = false;
        for i in 0..self.toks.len() {
            let tok = self.toks[i];
            match tok.text {
                "switch" if tok.is_ident() => switch_pending = true,
                "{" if tok.kind == Kind::Punct => {
                    // The first block brace after `switch` opens its arms; the switched
                    // expression before it may hold calls, indexes and maps.
                    braces.push(switch_pending);
                    switch_pending = false;
                }
                "#{" | "(" | "[" if tok.kind == Kind::Punct => braces.push(false),
                "}" | ")" | "]" if tok.kind == Kind::Punct => {
                    braces.pop();
                }
                _ => {}
            }
            if self.consumed[i] {
                continue;
            }
            let in_switch = braces.last() == Some(&true);
            match tok.kind {
                Kind::ForeignComment => {
                    let mark = if tok.text.starts_with('#') { "#" } else { "--" };
                    let message = format!("\"{mark}\" does not start a comment in rhai: write // comment");
                    self.report(i, i, message);
                    self.blank_toks(i, i);
                }
                Kind::Quoted => self.single_quoted(i),
                Kind::Punct => self.punct(i, in_switch),
                Kind::Ident => self.word(i),
                Kind::Str | Kind::Number => {}
            }
        }
    }

    fn single_quoted(&mut self, i: usize) {
        let tok = self.toks[i];
        let inner = tok.text.strip_prefix('\'').map(|t| t.strip_suffix('\'').unwrap_or(t)).unwrap_or("");
        let chars = inner.chars().count();
        let escaped_char = inner.starts_with('\\') && chars == 2;
        if chars == 1 || escaped_char {
            return;
        }
        let shown: String = inner.chars().take(24).collect();
        let more = if chars > 24 { "..." } else { "" };
        let message = format!(
            "single quotes make one character in rhai: write text in double quotes, \"{shown}{more}\""
        );
        self.report(i, i, message);
        if !inner.contains('"') && tok.text.len() >= 2 && tok.text.ends_with('\'') {
            let with = format!("\"{inner}\"");
            self.edit_tok(i, &with);
        }
    }

    fn punct(&mut self, i: usize, in_switch: bool) {
        let text = self.text(i);
        match text {
            "===" | "!==" => {
                let rhai = if text == "===" { "==" } else { "!=" };
                self.report(i, i, format!("\"{text}\" is not rhai: write {rhai}"));
                self.edit_tok(i, rhai);
            }
            "~=" => {
                self.report(i, i, "\"~=\" is not rhai: write !=".to_owned());
                self.edit_tok(i, "!=");
            }
            "=>" if !in_switch => self.arrow(i),
            "++" | "--" => {
                let target = if self.tok(i.wrapping_sub(1)).is_some_and(Tok::is_ident) && i > 0 {
                    self.text(i - 1)
                } else if self.tok(i + 1).is_some_and(Tok::is_ident) {
                    self.text(i + 1)
                } else {
                    "x"
                };
                let op = if text == "++" { "+=" } else { "-=" };
                self.report(i, i, format!("\"{text}\" is not rhai: write {target} {op} 1"));
            }
            "?" => {
                self.report(i, i, "\"? :\" is not rhai: write if cond { a } else { b }".to_owned());
            }
            ".." => {
                let string_side = [i.wrapping_sub(1), i + 1]
                    .iter()
                    .any(|&j| self.tok(j).is_some_and(|t| t.kind == Kind::Str && !t.text.starts_with('`')));
                if string_side && i > 0 {
                    let message =
                        "\"..\" is a range in rhai, not concatenation: write a + b or `${a}${b}`".to_owned();
                    self.report(i, i, message);
                    self.edit_tok(i, "+");
                }
            }
            "#" if self.tok(i + 1).is_some_and(|t| t.is_ident() && t.start == self.toks[i].end) => {
                let name = self.text(i + 1);
                self.report(i, i + 1, format!("\"#{name}\" is not rhai: write {name}.len()"));
                self.edit_tok(i, "");
            }
            "{" => self.object_literal(i),
            "." => self.member(i),
            _ => {}
        }
    }

    /// `(a, b) => expr`, `x => expr`, `async () => expr`.
    fn arrow(&mut self, i: usize) {
        let Some(prev) = i.checked_sub(1) else {
            self.report(i, i, "\"=>\" is not rhai: write a closure as |x| expr".to_owned());
            return;
        };
        let body = if self.is(i + 1, "{") { "{ ... }" } else { "expr" };
        if self.is(prev, ")")
            && let Some(open) = self.matching_back(prev)
        {
            let start = if open > 0 && self.is(open - 1, "async") { open - 1 } else { open };
            match self.plain_params(open + 1, prev) {
                Some(params) => {
                    let params = params.join(", ");
                    self.report(
                        start,
                        i,
                        format!("\"=>\" is not rhai: write a closure as |{params}| {body}"),
                    );
                    if start < open {
                        self.edit_tok(start, "");
                    }
                    self.edit_tok(open, "|");
                    self.edit_tok(prev, "|");
                    self.edit_tok(i, "");
                }
                None => {
                    let message = format!(
                        "\"=>\" is not rhai: write a closure as |x| {body} (closures take plain parameter names)"
                    );
                    self.report(start, i, message);
                }
            }
            for j in start..=i {
                self.consumed[j] = true;
            }
        } else if self.tok(prev).is_some_and(Tok::is_ident) {
            let name = self.text(prev);
            let start = if prev > 0 && self.is(prev - 1, "async") { prev - 1 } else { prev };
            self.report(start, i, format!("\"=>\" is not rhai: write a closure as |{name}| {body}"));
            let (from, to) = (self.toks[start].start, self.toks[i].end);
            self.edit_range(from, to, &format!("|{name}|"));
        } else {
            self.report(i, i, format!("\"=>\" is not rhai: write a closure as |x| {body}"));
        }
    }

    /// `{key: value}` without the `#` of a Rhai map, and `= {}`.
    fn object_literal(&mut self, i: usize) {
        let key = self.tok(i + 1).is_some_and(|t| matches!(t.kind, Kind::Ident | Kind::Str | Kind::Quoted));
        let object = key && self.is(i + 2, ":");
        let empty =
            self.is(i + 1, "}") && i > 0 && matches!(self.text(i - 1), "=" | "(" | "," | ":" | "return");
        if !object && !empty {
            return;
        }
        let message = if object {
            let key = self.text(i + 1);
            format!("an object literal is not rhai: write a map as #{{{key}: ...}}")
        } else {
            "\"{}\" is an empty block in rhai, not an object: write #{} for an empty map".to_owned()
        };
        self.report(i, i, message);
        // Room for the `#` in the whitespace before the brace.
        let start = self.toks[i].start;
        if let Some(before) = self.src[..start].chars().next_back()
            && (before == ' ' || before == '\t')
        {
            self.edit_range(start - 1, start + 1, "#{");
        }
    }

    /// `x.length`, `console.log(...)`, `xs.forEach(...)`, `p.then(...)`, `s.toUpperCase()`.
    fn member(&mut self, i: usize) {
        let Some(name_tok) = self.tok(i + 1).copied() else { return };
        if !name_tok.is_ident() || name_tok.start != self.toks[i].end {
            return;
        }
        let name = name_tok.text;
        let receiver = if i > 0 && self.toks[i - 1].is_ident() { self.text(i - 1) } else { "x" };
        let called = self.is(i + 2, "(");
        if i > 0
            && self.toks[i - 1].is_ident()
            && !self.declared.contains(receiver)
            && self.global_object(i - 1)
        {
            return;
        }
        if !called {
            if matches!(name, "length" | "size") {
                let message = format!(
                    "\".{name}\" is not rhai: write {receiver}.len() (for a map field, {receiver}[\"{name}\"])"
                );
                self.report(i, i + 1, message);
            }
            return;
        }
        if self.declared.contains(name) {
            return;
        }
        let instead = match name {
            "forEach" => format!("for x in {receiver} {{ ... }}"),
            "then" => "let r = agent(...); and use r: calls return their result directly".to_owned(),
            "catch" | "finally" => "try { ... } catch (err) { ... }".to_owned(),
            "includes" | "has" | "hasOwnProperty" => format!("{receiver}.contains(x) or x in {receiver}"),
            "indexOf" => format!("{receiver}.index_of(x)"),
            "toUpperCase" | "upper" => format!("{receiver}.to_upper()"),
            "toLowerCase" | "lower" => format!("{receiver}.to_lower()"),
            "startsWith" | "startswith" => format!("{receiver}.starts_with(x)"),
            "endsWith" | "endswith" => format!("{receiver}.ends_with(x)"),
            "substring" | "substr" => format!("{receiver}.sub_string(start, len)"),
            "slice" => format!(
                "{receiver}.extract(start, len) for an array, {receiver}.sub_string(start, len) for text"
            ),
            "toString" => format!("{receiver}.to_string()"),
            "length" | "size" => format!("{receiver}.len()"),
            "strip" | "trimStart" | "trimEnd" => format!("{receiver}.trim()"),
            "every" => format!("{receiver}.all(|x| ...)"),
            "concat" | "extend" => format!("{receiver} + other"),
            "items" => format!("for k in {receiver}.keys() {{ let v = {receiver}[k]; ... }}"),
            "format" => "an interpolated string, `text ${x}`".to_owned(),
            _ => return,
        };
        self.report(i + 1, i + 1, format!("\".{name}()\" is not rhai: write {instead}"));
    }

    /// `console.log`, `JSON.stringify`, `Promise.all`, `Math.floor`, `Object.keys`, `Date.now`:
    /// the receiver at `i` is another language's global. Reports and returns true when it is.
    fn global_object(&mut self, i: usize) -> bool {
        let object = self.text(i);
        let member = self.text(i + 2);
        let called = self.is(i + 3, "(");
        let (instead, rewrite): (String, Option<&str>) = match (object, member) {
            ("console", level) => {
                let level = match level {
                    "error" => "error",
                    "warn" => "warn",
                    "debug" | "trace" => "debug",
                    _ => "info",
                };
                (format!("log(\"{level}\", msg) (log(level, msg, data?) emits a run event)"), Some(""))
            }
            ("JSON", "stringify") => ("to_json(map), or interpolate the value: `${x}`".to_owned(), Some("")),
            ("JSON", "parse") => {
                ("give the agent a schema option and it returns the parsed value".to_owned(), Some(""))
            }
            ("Promise", "all" | "allSettled" | "race" | "any") => (
                "parallel([|| ..., || ...]) or parallel(items, |item| ...), which run concurrently"
                    .to_owned(),
                Some(""),
            ),
            ("Math", "random") => ("random(), the journaled random number".to_owned(), Some("random")),
            ("Math", "floor" | "round" | "abs" | "max" | "min" | "sqrt" | "exp") => {
                (format!("{member}(x)"), Some(member))
            }
            ("Math", "ceil") => ("ceiling(x)".to_owned(), Some("ceiling")),
            ("Math", "pow") => ("a ** b".to_owned(), None),
            ("Date", "now") => ("now(), the journaled clock".to_owned(), Some("now")),
            ("Object", "keys" | "values") => (format!("m.{member}()"), Some(member)),
            ("Object", "entries") => ("for k in m.keys() { let v = m[k]; ... }".to_owned(), None),
            ("Object", "assign") => ("a.mixin(b), or a + b for maps".to_owned(), None),
            ("Array", "isArray") => ("type_of(x) == \"array\"".to_owned(), None),
            ("process", _) => {
                ("args: scripts have no environment; pass values in the run's input".to_owned(), None)
            }
            _ => return false,
        };
        let shown = if called { format!("{object}.{member}()") } else { format!("{object}.{member}") };
        self.report(i, i + 2, format!("\"{shown}\" is not rhai: write {instead}"));
        if let Some(with) = rewrite {
            let (start, end) = (self.toks[i].start, self.toks[i + 2].end);
            self.edit_range(start, end, with);
        }
        for j in i..=i + 2 {
            self.consumed[j] = true;
        }
        true
    }
}

/// Applies edits to `src`; an edit overlapping an earlier one is dropped.
pub(super) fn apply(src: &str, edits: &mut [Edit]) -> String {
    edits.sort_by_key(|edit| (edit.start, std::cmp::Reverse(edit.end)));
    let mut out = String::with_capacity(src.len());
    let mut at = 0;
    for edit in edits.iter() {
        if edit.start < at
            || edit.end > src.len()
            || !src.is_char_boundary(edit.start)
            || !src.is_char_boundary(edit.end)
        {
            continue;
        }
        out.push_str(&src[at..edit.start]);
        out.push_str(&edit.with);
        at = edit.end;
    }
    out.push_str(&src[at..]);
    out
}

/// Names a header declares, for a line about to be blanked: `def f(a, b)`, `function f(a)`,
/// `for x in`, `let x`, `local x`. The variables go into the parse scope and the functions
/// count as known, so uses further down are not reported as unknown because of the blanking.
pub(super) fn declared_names(
    toks: &[Tok<'_>],
    variables: &mut HashSet<String>,
    functions: &mut HashSet<String>,
) {
    // `x = ...` at the start of a line declares x in Python and Lua.
    if let [first, second, ..] = toks
        && first.is_ident()
        && second.is("=")
    {
        variables.insert(first.text.to_owned());
    }
    for (i, tok) in toks.iter().enumerate() {
        match tok.text {
            "def" | "function" | "fn" | "lambda" if tok.is_ident() => {
                let mut rest = toks[i + 1..].iter();
                if tok.text != "lambda"
                    && let Some(name) = toks.get(i + 1).filter(|t| t.is_ident())
                {
                    functions.insert(name.text.to_owned());
                    rest.next();
                }
                for param in rest.filter(|t| t.is_ident() && t.text != "self") {
                    variables.insert(param.text.to_owned());
                }
                return;
            }
            "for" | "let" | "const" | "var" | "local" if tok.is_ident() => {
                for name in
                    toks[i + 1..].iter().take_while(|t| !matches!(t.text, "in" | "of" | "=" | ":" | "do"))
                {
                    if name.is_ident() && !matches!(name.text, "let" | "const" | "var") {
                        variables.insert(name.text.to_owned());
                    }
                }
                return;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
