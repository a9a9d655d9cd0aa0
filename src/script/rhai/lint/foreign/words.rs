//! The pre-scan's words: keywords and declarations of other languages (`var`, `local`,
//! `function`, `def`, `lambda`, `elif`, `end`, `for ... of`, ...) and the Rhai to write instead.

use super::super::scan::{Kind, Tok};
use super::{Edit, MAX_BRACKET_SCAN, Scanner, ends_operand, starts_operand};

impl Scanner<'_> {
    pub(super) fn word(&mut self, i: usize) {
        let text = self.text(i);
        let after_dot = i > 0 && self.is(i - 1, ".");
        // A map key (`#{class: 1, end: 2}`) is any word.
        let map_key = self.is(i + 1, ":") && i > 0 && matches!(self.text(i - 1), "{" | "#{" | ",");
        if after_dot || map_key || self.declared.contains(text) {
            return;
        }
        let next_is_ident = self.tok(i + 1).is_some_and(Tok::is_ident);
        match text {
            "var" => {
                self.report(i, i, "\"var\" is not rhai: write let".to_owned());
                self.edit_tok(i, "let");
            }
            "local" if next_is_ident => {
                self.report(i, i, "\"local\" is not rhai: write let".to_owned());
                let with = if self.is(i + 1, "function") { "" } else { "let" };
                self.edit_tok(i, with);
            }
            "async" => {
                // Before a closure or function, the rule for that names the form to write.
                if !self.tok(i + 1).is_some_and(|t| t.is("(") || t.is_ident()) {
                    self.report(
                        i,
                        i,
                        "\"async\" is not rhai: drop it; calls return their result directly".to_owned(),
                    );
                }
                self.edit_tok(i, "");
            }
            "await" => {
                let message = format!("\"{text}\" is not rhai: drop it; calls return their result directly");
                self.report(i, i, message);
                self.edit_tok(i, "");
            }
            "null" | "undefined" | "None" | "nil" => {
                self.report(i, i, format!("\"{text}\" is not rhai: write () for no value"));
                self.edit_tok(i, "()");
            }
            "True" | "False" => {
                let rhai = if text == "True" { "true" } else { "false" };
                self.report(i, i, format!("\"{text}\" is not rhai: write {rhai}"));
                self.edit_tok(i, rhai);
            }
            "and" | "or" => {
                let binary = i > 0
                    && ends_operand(&self.toks[i - 1])
                    && self.tok(i + 1).is_some_and(starts_operand)
                    && self.same_line(i - 1, i);
                if binary {
                    let rhai = if text == "and" { "&&" } else { "||" };
                    self.report(i, i, format!("\"{text}\" is not rhai: write {rhai}"));
                    self.edit_tok(i, rhai);
                }
            }
            "not" => {
                let unary = (i == 0 || !ends_operand(&self.toks[i - 1]) || self.is(i - 1, "is"))
                    && self.tok(i + 1).is_some_and(starts_operand);
                if unary && !self.is(i - 1, "is") {
                    self.report(i, i, "\"not\" is not rhai: write !".to_owned());
                    self.edit_tok(i, "!");
                }
            }
            "is" if i > 0 => {
                let negated = self.is(i + 1, "not");
                let (to, rhai) = if negated { (i + 1, "!=") } else { (i, "==") };
                let shown = if negated { "is not" } else { "is" };
                self.report(i, to, format!("\"{shown}\" is not rhai: write {rhai}"));
                let (start, end) = (self.toks[i].start, self.toks[to].end);
                self.edit_range(start, end, rhai);
            }
            "function" => self.function(i),
            "def" => {
                self.report(i, i, "\"def\" is not rhai: write fn name(params) { ... }".to_owned());
                self.edit_tok(i, "fn");
            }
            "lambda" => self.lambda(i),
            "typeof" => {
                let arg = if next_is_ident { self.text(i + 1) } else { "x" };
                self.report(i, i, format!("\"typeof\" is not rhai: write type_of({arg})"));
                self.edit_tok(i, "");
            }
            "new" => {
                let class = if next_is_ident { self.text(i + 1) } else { "" };
                let message = if matches!(class, "Error" | "TypeError" | "RangeError") {
                    "\"new Error(msg)\" is not rhai: write throw msg (a string or a map)".to_owned()
                } else if class == "Date" {
                    "\"new Date()\" is not rhai: write now(), the journaled clock".to_owned()
                } else {
                    "\"new\" is not rhai: there are no classes; build a map with #{...}".to_owned()
                };
                let to = if next_is_ident { i + 1 } else { i };
                self.report(i, to, message);
                let with = if class == "Date" { "now" } else { "" };
                let (start, end) = (self.toks[i].start, self.toks[to].end);
                self.edit_range(start, end, with);
                if next_is_ident {
                    self.consumed[i + 1] = true;
                }
            }
            "pass" if self.alone_on_line(i) => {
                self.report(i, i, "\"pass\" is not rhai: write an empty block {}".to_owned());
                self.edit_tok(i, "");
            }
            "class" => self.report(i, i, "classes are not rhai: use a map #{...} and functions".to_owned()),
            "case" => {
                let message = "\"case\" is not rhai: write switch x { value => expr, _ => other }".to_owned();
                self.report(i, i, message);
            }
            "elif" => self.report(i, i, "\"elif\" is not rhai: write } else if cond { ... }".to_owned()),
            "elseif" => {
                self.report(i, i, "\"elseif\" is not rhai: write } else if cond { ... }".to_owned());
                // Blank through its `then`: the branch's body joins the block before it.
                let then = (i..self.toks.len())
                    .take(MAX_BRACKET_SCAN)
                    .take_while(|&j| self.same_line(i, j))
                    .find(|&j| self.is(j, "then"));
                let to = then.unwrap_or(i);
                self.blank_toks(i, to);
                for j in i..=to {
                    self.consumed[j] = true;
                }
            }
            "then" => {
                self.report(i, i, "\"then\" is not rhai: write if cond { ... }".to_owned());
                self.edit_tok(i, "{");
                self.lua_blocks.push(true);
            }
            "do" if self.lua_do(i) => {
                self.report(i, i, "\"do\" is not rhai: write the loop body in { ... }".to_owned());
                self.edit_tok(i, "{");
                self.lua_blocks.push(true);
            }
            "end" if !self.lua_blocks.is_empty() && self.alone_on_line(i) => {
                self.report(i, i, "\"end\" is not rhai: close the block with }".to_owned());
                let rewritten = self.lua_blocks.pop().unwrap_or(false);
                self.edit_tok(i, if rewritten { "}" } else { "" });
            }
            "else" if self.lua_blocks.last() == Some(&true) && self.alone_on_line(i) => {
                self.report(i, i, "a bare \"else\" is not rhai: write } else { ... }".to_owned());
                self.edit_tok(i, "");
            }
            "for" => self.for_loop(i),
            "range" if self.is(i + 1, "(") => {
                if let Some(close) = self.matching(i + 1) {
                    let top_comma = self.has_top_level_comma(i + 2, close);
                    if !top_comma && close > i + 2 {
                        let n: String = (i + 2..close).map(|j| self.text(j)).collect();
                        self.report(i, close, format!("\"range({n})\" is not rhai: write 0..{n}"));
                    }
                }
            }
            "pairs" | "ipairs" if self.is(i + 1, "(") => {
                let message = format!(
                    "\"{text}\" is not rhai: write for x in xs {{ ... }} (for k in m.keys() for a map)"
                );
                self.report(i, i, message);
                self.edit_tok(i, "");
            }
            "enumerate" if self.is(i + 1, "(") => {
                self.report(i, i, "\"enumerate\" is not rhai: write for (x, i) in xs { ... }".to_owned());
            }
            "f" | "rf" | "fr" | "F" => {
                let string_follows = self.tok(i + 1).is_some_and(|t| {
                    matches!(t.kind, Kind::Str | Kind::Quoted)
                        && t.start == self.toks[i].end
                        && !t.text.starts_with('`')
                });
                if string_follows {
                    self.report(
                        i,
                        i + 1,
                        "f-strings are not rhai: write `text ${x}` with backticks".to_owned(),
                    );
                    self.edit_tok(i, "");
                }
            }
            "let" | "const" => self.declaration(i),
            "import" | "export" | "require" => {
                let foreign = match text {
                    "require" => self.is(i + 1, "("),
                    "export" => matches!(self.text(i + 1), "default" | "function" | "const" | "class" | "{"),
                    _ => self.tok(i + 1).is_some_and(|t| t.is_ident() || t.is("{") || t.is("*")),
                };
                if foreign {
                    let message =
                        format!("\"{text}\" is not rhai: scripts have no modules; use the cairn globals");
                    self.report(i, i, message);
                }
            }
            _ => {}
        }
    }

    /// Lua's `do` after a `for`/`while` header on the same line (Rhai's own `do` starts a
    /// `do { } while` loop and is followed by `{`).
    pub(super) fn lua_do(&self, i: usize) -> bool {
        if self.is(i + 1, "{") {
            return false;
        }
        (0..i)
            .rev()
            .take(MAX_BRACKET_SCAN)
            .take_while(|&j| self.same_line(j, i))
            .any(|j| matches!(self.text(j), "for" | "while"))
    }

    /// Whether token `i` is the only token on its line (a block keyword of Lua).
    pub(super) fn alone_on_line(&self, i: usize) -> bool {
        let before = i == 0 || !self.same_line(i - 1, i);
        let after = self.tok(i + 1).is_none_or(|t| t.line != self.toks[i].end_line || t.is(")") || t.is(","));
        before && after
    }

    pub(super) fn has_top_level_comma(&self, from: usize, to: usize) -> bool {
        let mut depth = 0i32;
        for j in from..to {
            match self.text(j) {
                "(" | "[" | "{" | "#{" => depth += 1,
                ")" | "]" | "}" => depth -= 1,
                "," if depth == 0 => return true,
                _ => {}
            }
        }
        false
    }

    /// `function name(a) {` and `function (a) {`; a Lua-style header without `{` is blanked,
    /// with its `end`.
    pub(super) fn function(&mut self, i: usize) {
        let named = self.tok(i + 1).is_some_and(Tok::is_ident);
        let open = if named { i + 2 } else { i + 1 };
        if !self.is(open, "(") {
            return;
        }
        let Some(close) = self.matching(open) else {
            self.report(i, i, "\"function\" is not rhai: write fn name(params) { ... }".to_owned());
            return;
        };
        let params = self.plain_params(open + 1, close);
        let shown = params.as_ref().map_or_else(|| "params".to_owned(), |p| p.join(", "));
        let braced = self.is(close + 1, "{");
        if named {
            let name = self.text(i + 1);
            let message = format!("\"function\" is not rhai: write fn {name}({shown}) {{ ... }}");
            self.report(i, i, message);
            if braced {
                self.edit_tok(i, "fn");
            } else {
                // Lua: the body follows without a brace and ends with `end`.
                self.declarations(i, close + 1);
                self.blank_toks(i, close);
                for j in i..=close {
                    self.consumed[j] = true;
                }
                self.lua_blocks.push(false);
            }
        } else {
            let message = format!("\"function\" is not rhai: write a closure as |{shown}| {{ ... }}");
            self.report(i, i, message);
            if braced && params.is_some() {
                self.edit_tok(i, "");
                self.edit_tok(open, "|");
                self.edit_tok(close, "|");
            }
        }
    }

    /// `lambda x, y: expr`.
    pub(super) fn lambda(&mut self, i: usize) {
        let colon = (i + 1..self.toks.len())
            .take(MAX_BRACKET_SCAN)
            .take_while(|&j| self.same_line(i, j))
            .find(|&j| self.is(j, ":"));
        let Some(colon) = colon else {
            self.report(i, i, "\"lambda\" is not rhai: write a closure as |x| expr".to_owned());
            return;
        };
        let params = self.plain_params(i + 1, colon);
        let shown = params.as_ref().map_or_else(|| "x".to_owned(), |p| p.join(", "));
        self.report(i, colon, format!("\"lambda\" is not rhai: write a closure as |{shown}| expr"));
        if params.is_some() {
            let (start, end) = (self.toks[i].start, self.toks[colon].end);
            self.edit_range(start, end, &format!("|{shown}|"));
        }
        for j in i..=colon {
            self.consumed[j] = true;
        }
    }

    /// `let {a, b} = x`, `const [a, b] = x` and `let x: string = ...`.
    pub(super) fn declaration(&mut self, i: usize) {
        if self.is(i + 1, "{") || self.is(i + 1, "[") {
            let message =
                "destructuring is not rhai: write one let per value, let a = x.a; (or x[0])".to_owned();
            self.report(i, i + 1, message);
            return;
        }
        if self.tok(i + 1).is_some_and(Tok::is_ident) && self.is(i + 2, ":") {
            let name = self.text(i + 1);
            let eq = (i + 3..self.toks.len())
                .take(MAX_BRACKET_SCAN)
                .take_while(|&j| self.same_line(i, j))
                .find(|&j| self.is(j, "="));
            let to = eq.map_or(i + 2, |eq| eq - 1);
            self.report(i + 2, to, format!("type annotations are not rhai: write let {name} = ..."));
            if let Some(eq) = eq {
                let (start, end) = (self.toks[i + 2].start, self.toks[eq - 1].end);
                self.edit_range(start, end, "");
                for j in i + 2..eq {
                    self.consumed[j] = true;
                }
            }
        }
    }

    /// `for (let i = 0; i < n; i++)`, `for (const x of xs)`, `for (k in m)` and Lua's
    /// `for i = 1, n do`.
    pub(super) fn for_loop(&mut self, i: usize) {
        if self.tok(i + 1).is_some_and(Tok::is_ident) && self.is(i + 2, "=") {
            let var = self.text(i + 1);
            let message = format!("numeric for is not rhai: write for {var} in 1..=n {{ ... }}");
            let end = (i..self.toks.len())
                .take(MAX_BRACKET_SCAN)
                .take_while(|&j| self.same_line(i, j))
                .find(|&j| self.is(j, "do"));
            let to = end.unwrap_or(i + 2);
            self.report(i, to, message);
            if end.is_some() {
                self.declarations(i, to);
                self.blank_toks(i, to);
                self.lua_blocks.push(false);
                for j in i..=to {
                    self.consumed[j] = true;
                }
            }
            return;
        }
        if !self.is(i + 1, "(") {
            return;
        }
        let open = i + 1;
        let Some(close) = self.matching(open) else { return };
        if self.is(close + 1, "in") {
            // Rhai's own `for (x, i) in xs`.
            return;
        }
        let header = open + 1..close;
        let semicolons = header.clone().any(|j| self.is(j, ";"));
        let decl = header.clone().find(|&j| matches!(self.text(j), "let" | "const" | "var"));
        let var_at = decl.map_or(open + 1, |d| d + 1);
        let var = if self.tok(var_at).is_some_and(Tok::is_ident) { self.text(var_at) } else { "i" };
        if semicolons {
            let message = format!("c-style for loops are not rhai: write for {var} in 0..n {{ ... }}");
            self.report(i, close, message);
            self.out.variables.insert(var.to_owned());
            let (start, end) = (self.toks[i].start, self.toks[close].end);
            let text = &self.src[start..end];
            let with = format!("for {var} in []");
            if text.chars().filter(|c| *c != '\n').count() >= with.len() {
                // Keep the header's newlines so every later line keeps its number.
                let mut rest = with.chars();
                let rewritten: String =
                    text.chars().map(|c| if c == '\n' { '\n' } else { rest.next().unwrap_or(' ') }).collect();
                self.out.edits.push(Edit { start, end, with: rewritten });
            }
        } else {
            let of = header.clone().find(|&j| self.is(j, "of"));
            let inn = header.clone().find(|&j| self.is(j, "in"));
            let message = match (of, inn) {
                (Some(_), _) => format!("\"for (x of xs)\" is not rhai: write for {var} in xs {{ ... }}"),
                (None, Some(_)) if decl.is_some() => {
                    format!("\"for (k in m)\" is not rhai: write for {var} in m.keys() {{ ... }}")
                }
                (None, Some(_)) => format!("\"for (x in xs)\" is not rhai: write for {var} in xs {{ ... }}"),
                (None, None) => return,
            };
            self.report(i, close, message);
            self.edit_tok(open, "");
            self.edit_tok(close, "");
            if let Some(of) = of {
                self.edit_tok(of, "in");
            }
            if let Some(decl) = decl {
                self.edit_tok(decl, "");
            }
        }
        for j in i..=close {
            self.consumed[j] = true;
        }
    }
}
