//! Lua's string patterns (`string.find`, `match`, `gmatch`, `gsub`), ported from Lua 5.4's
//! `lstrlib.c` with one change: every step of the matcher is counted against the run's
//! operation budget, and the run's bounds are checked every few thousand steps.
//!
//! Lua's own matcher runs in C, where the instruction hook never fires, and backtracks: a
//! pattern like `.-.-.-b` over a long subject takes time polynomial in the subject's length
//! with the number of `-`/`*` items as the exponent, which would hold the run's thread for
//! hours. Counted, such a match ends with `sandbox_limit` like any other runaway computation.
//! Semantics (classes, sets, `%b`, `%f`, captures, position captures, anchors, replacement
//! strings, tables and functions) are the C library's.

use std::rc::Rc;

use mlua::{Function, Lua, MultiValue, Table, Value as Lv};

use super::guard::Guard;
use super::internals::Callbacks;
use crate::error::Error;

const MAX_CAPTURES: usize = 32;
const MAX_DEPTH: usize = 200;
const CHECK_EVERY: u64 = 4096;
const CAP_UNFINISHED: isize = -1;
const CAP_POSITION: isize = -2;
const ESC: u8 = b'%';
const SPECIALS: &[u8] = b"^$*+?.([%-";

/// Why a match stopped early.
enum Stop {
    /// A malformed pattern or a bad capture: a Lua error with this message.
    Lua(String),
    /// A bound of the run.
    Limit(Error),
}

type Step<T> = Result<T, Stop>;

struct State<'a> {
    src: &'a [u8],
    pat: &'a [u8],
    depth: usize,
    level: usize,
    captures: [(usize, isize); MAX_CAPTURES],
    steps: u64,
    guard: &'a Guard,
}

impl<'a> State<'a> {
    fn new(src: &'a [u8], pat: &'a [u8], guard: &'a Guard) -> State<'a> {
        State { src, pat, depth: MAX_DEPTH, level: 0, captures: [(0, 0); MAX_CAPTURES], steps: 0, guard }
    }

    fn reset(&mut self) {
        self.depth = MAX_DEPTH;
        self.level = 0;
    }

    fn step(&mut self) -> Step<()> {
        self.steps += 1;
        if self.steps.is_multiple_of(CHECK_EVERY)
            && let Some(error) = self.guard.charge(CHECK_EVERY)
        {
            return Err(Stop::Limit(error));
        }
        Ok(())
    }

    fn p(&self, i: usize) -> u8 {
        self.pat.get(i).copied().unwrap_or(0)
    }

    fn class_end(&self, mut p: usize) -> Step<usize> {
        let c = self.p(p);
        p += 1;
        match c {
            ESC => {
                if p >= self.pat.len() {
                    return Err(Stop::Lua("malformed pattern (ends with '%')".into()));
                }
                Ok(p + 1)
            }
            b'[' => {
                if self.p(p) == b'^' {
                    p += 1;
                }
                loop {
                    if p >= self.pat.len() {
                        return Err(Stop::Lua("malformed pattern (missing ']')".into()));
                    }
                    let c = self.p(p);
                    p += 1;
                    if c == ESC && p < self.pat.len() {
                        p += 1;
                    }
                    if self.p(p) == b']' {
                        break;
                    }
                }
                Ok(p + 1)
            }
            _ => Ok(p),
        }
    }

    fn bracket(&self, c: u8, mut p: usize, end: usize) -> bool {
        let mut sig = true;
        if self.p(p + 1) == b'^' {
            sig = false;
            p += 1;
        }
        loop {
            p += 1;
            if p >= end {
                break;
            }
            if self.p(p) == ESC {
                p += 1;
                if class(c, self.p(p)) {
                    return sig;
                }
            } else if self.p(p + 1) == b'-' && p + 2 < end {
                p += 2;
                if self.p(p - 2) <= c && c <= self.p(p) {
                    return sig;
                }
            } else if self.p(p) == c {
                return sig;
            }
        }
        !sig
    }

    fn single(&self, s: usize, p: usize, ep: usize) -> bool {
        let Some(&c) = self.src.get(s) else { return false };
        match self.p(p) {
            b'.' => true,
            ESC => class(c, self.p(p + 1)),
            b'[' => self.bracket(c, p, ep - 1),
            other => other == c,
        }
    }

    fn balance(&mut self, s: usize, p: usize) -> Step<Option<usize>> {
        if p + 1 >= self.pat.len() {
            return Err(Stop::Lua("malformed pattern (missing arguments to '%b')".into()));
        }
        if self.src.get(s) != Some(&self.p(p)) {
            return Ok(None);
        }
        let (open, close) = (self.p(p), self.p(p + 1));
        let mut count = 1;
        let mut s = s + 1;
        while s < self.src.len() {
            self.step()?;
            let c = self.src[s];
            if c == close {
                count -= 1;
                if count == 0 {
                    return Ok(Some(s + 1));
                }
            } else if c == open {
                count += 1;
            }
            s += 1;
        }
        Ok(None)
    }

    fn max_expand(&mut self, s: usize, p: usize, ep: usize) -> Step<Option<usize>> {
        let mut i = 0;
        while self.single(s + i, p, ep) {
            self.step()?;
            i += 1;
        }
        loop {
            if let Some(res) = self.do_match(s + i, ep + 1)? {
                return Ok(Some(res));
            }
            if i == 0 {
                return Ok(None);
            }
            i -= 1;
        }
    }

    fn min_expand(&mut self, mut s: usize, p: usize, ep: usize) -> Step<Option<usize>> {
        loop {
            if let Some(res) = self.do_match(s, ep + 1)? {
                return Ok(Some(res));
            }
            if self.single(s, p, ep) {
                s += 1;
            } else {
                return Ok(None);
            }
        }
    }

    fn start_capture(&mut self, s: usize, p: usize, what: isize) -> Step<Option<usize>> {
        if self.level >= MAX_CAPTURES {
            return Err(Stop::Lua("too many captures".into()));
        }
        self.captures[self.level] = (s, what);
        self.level += 1;
        let res = self.do_match(s, p)?;
        if res.is_none() {
            self.level -= 1;
        }
        Ok(res)
    }

    fn end_capture(&mut self, s: usize, p: usize) -> Step<Option<usize>> {
        let Some(l) = (0..self.level).rev().find(|&l| self.captures[l].1 == CAP_UNFINISHED) else {
            return Err(Stop::Lua("invalid pattern capture".into()));
        };
        self.captures[l].1 = (s - self.captures[l].0) as isize;
        let res = self.do_match(s, p)?;
        if res.is_none() {
            self.captures[l].1 = CAP_UNFINISHED;
        }
        Ok(res)
    }

    fn match_capture(&mut self, s: usize, l: u8) -> Step<Option<usize>> {
        let l = usize::from(l.wrapping_sub(b'1'));
        if l >= self.level || self.captures[l].1 == CAP_UNFINISHED {
            return Err(Stop::Lua(format!("invalid capture index %{}", l + 1)));
        }
        let (start, len) = self.captures[l];
        let Ok(len) = usize::try_from(len) else { return Ok(None) };
        if self.src.len() - s >= len && self.src[start..start + len] == self.src[s..s + len] {
            Ok(Some(s + len))
        } else {
            Ok(None)
        }
    }

    fn do_match(&mut self, s: usize, p: usize) -> Step<Option<usize>> {
        if self.depth == 0 {
            return Err(Stop::Lua("pattern too complex".into()));
        }
        self.depth -= 1;
        let result = self.match_body(s, p);
        self.depth += 1;
        result
    }

    fn match_body(&mut self, mut s: usize, mut p: usize) -> Step<Option<usize>> {
        loop {
            self.step()?;
            if p == self.pat.len() {
                return Ok(Some(s));
            }
            match self.p(p) {
                b'(' => {
                    return if self.p(p + 1) == b')' {
                        self.start_capture(s, p + 2, CAP_POSITION)
                    } else {
                        self.start_capture(s, p + 1, CAP_UNFINISHED)
                    };
                }
                b')' => return self.end_capture(s, p + 1),
                b'$' if p + 1 == self.pat.len() => {
                    return Ok((s == self.src.len()).then_some(s));
                }
                ESC if self.p(p + 1) == b'b' => match self.balance(s, p + 2)? {
                    Some(next) => {
                        s = next;
                        p += 4;
                        continue;
                    }
                    None => return Ok(None),
                },
                ESC if self.p(p + 1) == b'f' => {
                    p += 2;
                    if self.p(p) != b'[' {
                        return Err(Stop::Lua("missing '[' after '%f' in pattern".into()));
                    }
                    let ep = self.class_end(p)?;
                    let previous = if s == 0 { 0 } else { self.src[s - 1] };
                    let current = self.src.get(s).copied().unwrap_or(0);
                    if !self.bracket(previous, p, ep - 1) && self.bracket(current, p, ep - 1) {
                        p = ep;
                        continue;
                    }
                    return Ok(None);
                }
                ESC if self.p(p + 1).is_ascii_digit() => match self.match_capture(s, self.p(p + 1))? {
                    Some(next) => {
                        s = next;
                        p += 2;
                        continue;
                    }
                    None => return Ok(None),
                },
                _ => {
                    let ep = self.class_end(p)?;
                    let suffix = self.p(ep);
                    if !self.single(s, p, ep) {
                        if matches!(suffix, b'*' | b'?' | b'-') {
                            p = ep + 1;
                            continue;
                        }
                        return Ok(None);
                    }
                    match suffix {
                        b'?' => {
                            if let Some(res) = self.do_match(s + 1, ep + 1)? {
                                return Ok(Some(res));
                            }
                            p = ep + 1;
                        }
                        b'+' => return self.max_expand(s + 1, p, ep),
                        b'*' => return self.max_expand(s, p, ep),
                        b'-' => return self.min_expand(s, p, ep),
                        _ => {
                            s += 1;
                            p = ep;
                        }
                    }
                }
            }
        }
    }
}

fn class(c: u8, cl: u8) -> bool {
    let res = match cl.to_ascii_lowercase() {
        b'a' => c.is_ascii_alphabetic(),
        b'c' => c.is_ascii_control(),
        b'd' => c.is_ascii_digit(),
        b'g' => c.is_ascii_graphic(),
        b'l' => c.is_ascii_lowercase(),
        b'p' => c.is_ascii_punctuation(),
        b's' => matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c),
        b'u' => c.is_ascii_uppercase(),
        b'w' => c.is_ascii_alphanumeric(),
        b'x' => c.is_ascii_hexdigit(),
        b'z' => c == 0,
        _ => return cl == c,
    };
    if cl.is_ascii_lowercase() { res } else { !res }
}

/// A capture's value: a string, or a position (1-based).
fn capture(lua: &Lua, st: &State<'_>, i: usize, s: usize, e: usize) -> mlua::Result<Lv> {
    if i >= st.level {
        if i != 0 {
            return Err(mlua::Error::runtime(format!("invalid capture index %{}", i + 1)));
        }
        return Ok(Lv::String(lua.create_string(&st.src[s..e])?));
    }
    let (start, len) = st.captures[i];
    match len {
        CAP_UNFINISHED => Err(mlua::Error::runtime("unfinished capture")),
        CAP_POSITION => Ok(Lv::Integer(start as i64 + 1)),
        len => Ok(Lv::String(lua.create_string(&st.src[start..start + len as usize])?)),
    }
}

fn captures(lua: &Lua, st: &State<'_>, whole: Option<(usize, usize)>) -> mlua::Result<MultiValue> {
    let count = if st.level == 0 && whole.is_some() { 1 } else { st.level };
    let (s, e) = whole.unwrap_or((0, 0));
    (0..count).map(|i| capture(lua, st, i, s, e)).collect()
}

fn stop(error: Stop) -> mlua::Error {
    match error {
        Stop::Lua(message) => mlua::Error::runtime(message),
        Stop::Limit(error) => mlua::Error::external(error),
    }
}

/// A string argument (numbers are converted, as Lua's library does).
fn bytes(lua: &Lua, value: &Lv, index: usize, name: &str) -> mlua::Result<Vec<u8>> {
    match lua.coerce_string(value.clone())? {
        Some(s) => Ok(s.as_bytes().to_vec()),
        None => Err(mlua::Error::runtime(format!(
            "bad argument #{index} to '{name}' (string expected, got {})",
            value.type_name()
        ))),
    }
}

fn integer(lua: &Lua, value: &Lv, default: i64, index: usize, name: &str) -> mlua::Result<i64> {
    if value.is_nil() {
        return Ok(default);
    }
    lua.coerce_integer(value.clone())?.ok_or_else(|| {
        mlua::Error::runtime(format!(
            "bad argument #{index} to '{name}' (number has no integer representation)"
        ))
    })
}

/// 1-based, negative from the end, as `posrelatI`.
fn start_at(pos: i64, len: usize) -> usize {
    if pos > 0 {
        pos as usize
    } else if pos == 0 || pos < -(len as i64) {
        1
    } else {
        (len as i64 + pos + 1) as usize
    }
}

fn find_aux(lua: &Lua, guard: &Guard, args: MultiValue, find: bool) -> mlua::Result<MultiValue> {
    let name = if find { "find" } else { "match" };
    let get = |i: usize| args.get(i).cloned().unwrap_or(Lv::Nil);
    let src = bytes(lua, &get(0), 1, name)?;
    let pat = bytes(lua, &get(1), 2, name)?;
    let init = start_at(integer(lua, &get(2), 1, 3, name)?, src.len()) - 1;
    if init > src.len() {
        return Ok(MultiValue::from_iter([Lv::Nil]));
    }
    let plain = !matches!(get(3), Lv::Nil | Lv::Boolean(false));
    if find && (plain || !pat.iter().any(|c| SPECIALS.contains(c))) {
        if let Some(found) = memfind(&src[init..], &pat) {
            if let Some(error) = guard.charge((src.len() - init) as u64 / 64) {
                return Err(mlua::Error::external(error));
            }
            let start = init + found;
            return Ok(MultiValue::from_iter([
                Lv::Integer(start as i64 + 1),
                Lv::Integer((start + pat.len()) as i64),
            ]));
        }
        return Ok(MultiValue::from_iter([Lv::Nil]));
    }
    let (anchor, pat) = match pat.first() {
        Some(b'^') => (true, &pat[1..]),
        _ => (false, &pat[..]),
    };
    let mut st = State::new(&src, pat, guard);
    let mut s = init;
    loop {
        st.reset();
        if let Some(end) = st.do_match(s, 0).map_err(stop)? {
            if find {
                let mut out = MultiValue::from_iter([Lv::Integer(s as i64 + 1), Lv::Integer(end as i64)]);
                out.extend(captures(lua, &st, None)?);
                return Ok(out);
            }
            return captures(lua, &st, Some((s, end)));
        }
        s += 1;
        if anchor || s > src.len() {
            break;
        }
    }
    Ok(MultiValue::from_iter([Lv::Nil]))
}

fn memfind(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    memchr::memmem::find(haystack, needle)
}

/// `gsub` returns `result, count`, or, when its replacement function (or a replacement table's
/// `__index`) raised an error, `nil, nil, true, error value`: the prelude's `string.gsub`
/// raises that value from Lua, so it reaches the script as it was raised (see
/// `internals::Callbacks`).
fn gsub(
    lua: &Lua,
    guard: &Guard,
    protected: &Function,
    index: &Function,
    args: MultiValue,
) -> mlua::Result<MultiValue> {
    let get = |i: usize| args.get(i).cloned().unwrap_or(Lv::Nil);
    let src = bytes(lua, &get(0), 1, "gsub")?;
    let pat_all = bytes(lua, &get(1), 2, "gsub")?;
    let repl = get(2);
    let max = integer(lua, &get(3), src.len() as i64 + 1, 4, "gsub")?;
    let repl_text = match &repl {
        Lv::String(_) | Lv::Integer(_) | Lv::Number(_) => Some(bytes(lua, &repl, 3, "gsub")?),
        Lv::Table(_) | Lv::Function(_) => None,
        other => {
            return Err(mlua::Error::runtime(format!(
                "bad argument #3 to 'gsub' (string/function/table expected, got {})",
                other.type_name()
            )));
        }
    };
    let (anchor, pat) = match pat_all.first() {
        Some(b'^') => (true, &pat_all[1..]),
        _ => (false, &pat_all[..]),
    };
    let mut st = State::new(&src, pat, guard);
    let mut out: Vec<u8> = Vec::new();
    let (mut s, mut n, mut last): (usize, i64, Option<usize>) = (0, 0, None);
    let mut changed = false;
    while n < max {
        st.reset();
        match st.do_match(s, 0).map_err(stop)? {
            Some(e) if Some(e) != last => {
                n += 1;
                let callbacks = (protected, index);
                match add_value(lua, &st, &mut out, (s, e), &repl, repl_text.as_deref(), callbacks)? {
                    Replaced::Text(replaced) => changed |= replaced,
                    Replaced::Raised(error) => {
                        return Ok(MultiValue::from_iter([Lv::Nil, Lv::Nil, Lv::Boolean(true), error]));
                    }
                }
                s = e;
                last = Some(e);
            }
            _ if s < src.len() => {
                out.push(src[s]);
                s += 1;
            }
            _ => break,
        }
        if out.len() > (guard.max_memory as usize) {
            return Err(mlua::Error::external(guard.out_of_memory()));
        }
        if anchor {
            break;
        }
    }
    let result = if changed {
        out.extend_from_slice(&src[s..]);
        Lv::String(lua.create_string(&out)?)
    } else {
        match get(0) {
            Lv::String(original) => Lv::String(original),
            _ => Lv::String(lua.create_string(&src)?),
        }
    };
    Ok(MultiValue::from_iter([result, Lv::Integer(n)]))
}

/// What one replacement did: whether it changed the text, or the error value the script's
/// replacement function raised.
enum Replaced {
    Text(bool),
    Raised(Lv),
}

fn add_value(
    lua: &Lua,
    st: &State<'_>,
    out: &mut Vec<u8>,
    (s, e): (usize, usize),
    repl: &Lv,
    text: Option<&[u8]>,
    (protected, index): (&Function, &Function),
) -> mlua::Result<Replaced> {
    if let Some(text) = text {
        let mut i = 0;
        while i < text.len() {
            let c = text[i];
            i += 1;
            if c != ESC {
                out.push(c);
                continue;
            }
            let d = text.get(i).copied().unwrap_or(0);
            i += 1;
            if d == ESC {
                out.push(ESC);
            } else if d == b'0' {
                out.extend_from_slice(&st.src[s..e]);
            } else if d.is_ascii_digit() {
                match capture(lua, st, usize::from(d - b'1'), s, e)? {
                    Lv::String(v) => out.extend_from_slice(&v.as_bytes()),
                    Lv::Integer(v) => out.extend_from_slice(v.to_string().as_bytes()),
                    _ => {}
                }
            } else {
                return Err(mlua::Error::runtime("invalid use of '%' in replacement string"));
            }
        }
        return Ok(Replaced::Text(true));
    }
    // The script's function (or the table's `__index`) runs under the raw `pcall`, so what it
    // raises comes back as the value it raised.
    let mut call = MultiValue::new();
    match repl {
        Lv::Function(f) => {
            call.push_back(Lv::Function(f.clone()));
            call.extend(captures(lua, st, Some((s, e)))?);
        }
        Lv::Table(t) => {
            call.extend([Lv::Function(index.clone()), Lv::Table(t.clone()), capture(lua, st, 0, s, e)?]);
        }
        _ => {
            out.extend_from_slice(&st.src[s..e]);
            return Ok(Replaced::Text(false));
        }
    }
    let mut returned = protected.call::<MultiValue>(call)?;
    let ok = matches!(returned.pop_front(), Some(Lv::Boolean(true)));
    let value = returned.pop_front().unwrap_or(Lv::Nil);
    if !ok {
        return Ok(Replaced::Raised(value));
    }
    match value {
        Lv::Nil | Lv::Boolean(false) => {
            out.extend_from_slice(&st.src[s..e]);
            Ok(Replaced::Text(false))
        }
        Lv::String(v) => {
            out.extend_from_slice(&v.as_bytes());
            Ok(Replaced::Text(true))
        }
        v @ (Lv::Integer(_) | Lv::Number(_)) => {
            out.extend_from_slice(&bytes(lua, &v, 3, "gsub")?);
            Ok(Replaced::Text(true))
        }
        other => Err(mlua::Error::runtime(format!("invalid replacement value (a {})", other.type_name()))),
    }
}

/// The host memory a `gmatch` iterator's state takes besides its pattern (its closure and the
/// reference to its subject), charged to the run.
const ITERATOR_BYTES: u64 = 256;

/// The subject is held as the Lua string itself (a reference the state's byte limit already
/// counts), never as a copy: a thousand iterators over one 4 MB string hold one 4 MB string.
fn gmatch(lua: &Lua, guard: &Rc<Guard>, args: MultiValue) -> mlua::Result<Function> {
    let get = |i: usize| args.get(i).cloned().unwrap_or(Lv::Nil);
    let subject = match get(0) {
        Lv::String(subject) => subject,
        other => lua.create_string(bytes(lua, &other, 1, "gmatch")?)?,
    };
    let pat = bytes(lua, &get(1), 2, "gmatch")?;
    // The iterator's state lives outside the state's byte limit: the host keeps it.
    if let Some(error) = guard.host_work(0, pat.len() as u64 + ITERATOR_BYTES, 0) {
        return Err(mlua::Error::external(error));
    }
    let length = subject.as_bytes().len();
    let init = (start_at(integer(lua, &get(2), 1, 3, "gmatch")?, length) - 1).min(length + 1);
    let guard = guard.clone();
    let mut position = init;
    let mut last: Option<usize> = None;
    lua.create_function_mut(move |lua, ()| {
        let src = subject.as_bytes();
        let src: &[u8] = &src;
        let mut st = State::new(src, &pat, &guard);
        let mut s = position;
        while s <= src.len() {
            st.reset();
            if let Some(e) = st.do_match(s, 0).map_err(stop)?
                && Some(e) != last
            {
                position = e;
                last = Some(e);
                return captures(lua, &st, Some((s, e)));
            }
            s += 1;
        }
        position = src.len() + 1;
        Ok(MultiValue::new())
    })
}

/// Replaces the pattern functions of the string library.
pub(super) fn install(
    lua: &Lua,
    string: &Table,
    guard: &Rc<Guard>,
    callbacks: &Callbacks,
) -> mlua::Result<()> {
    let g = guard.clone();
    string
        .raw_set("find", lua.create_function(move |lua, args: MultiValue| find_aux(lua, &g, args, true))?)?;
    let g = guard.clone();
    string.raw_set(
        "match",
        lua.create_function(move |lua, args: MultiValue| find_aux(lua, &g, args, false))?,
    )?;
    let g = guard.clone();
    let (protected, index) = (callbacks.protected.clone(), callbacks.index.clone());
    string.raw_set(
        "gsub",
        lua.create_function(move |lua, args: MultiValue| gsub(lua, &g, &protected, &index, args))?,
    )?;
    let g = guard.clone();
    string.raw_set("gmatch", lua.create_function(move |lua, args: MultiValue| gmatch(lua, &g, args))?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use mlua::{Lua, Table};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::script::rhai::sandbox::SandboxLimits;

    /// Runs `code` (which reads `S`, the string library under test) and returns what it built.
    fn outcome(lua: &Lua, string: Table, code: &str) -> String {
        lua.globals().set("S", string).unwrap();
        // Errors compare by their message: Lua's C library prefixes the caller's position.
        lua.load(code).eval::<String>().unwrap_or_else(|e| {
            let line = e.to_string().lines().next().unwrap_or_default().to_owned();
            format!("error: {}", line.rsplit(": ").next().unwrap_or_default())
        })
    }

    #[test]
    fn the_port_agrees_with_lua_on_every_case() {
        let reference = Lua::new();
        let ported = Lua::new();
        let string = ported.create_table().unwrap();
        let guard = Rc::new(Guard::new(
            &SandboxLimits::STANDARD,
            CancellationToken::new(),
            std::sync::Arc::default(),
            None,
        ));
        install(&ported, &string, &guard, &Callbacks::load(&ported).unwrap()).unwrap();
        // As the prelude does: a replacement's error is raised from Lua with its value.
        let raise = "local S = ... local gsub = S.gsub \
                     S.gsub = function(...) local r, n, raised, e = gsub(...) if raised then error(e, 0) end return r, n end";
        ported.load(raise).call::<()>(string.clone()).unwrap();
        let cases = [
            ("hello world", "o w"),
            ("hello world", "l+"),
            ("hello world", "^h(.-)o"),
            ("hello", "()ll()"),
            ("  trim me  ", "^%s*(.-)%s*$"),
            ("key = value", "(%w+)%s*=%s*(%w+)"),
            ("f(a(b)c)d", "%b()"),
            ("THE (quick) fox", "%f[%a]%a+"),
            ("abcabc", "(abc)%1"),
            ("a.b.c", "%."),
            ("x=1, y=2", "(%w)=(%d)"),
            ("[]]", "[]]"),
            ("a-b", "[a-]"),
            ("caf\\195\\169", "[\\128-\\255]+"),
            ("aaa", "a-"),
            ("aaa", "a?a?"),
            ("abc", "$"),
            ("ab$c", "b$c"),
            ("", ".*"),
            ("abc", "[^b]+"),
            ("a1b2", "%d"),
            ("x", "(()"),
            ("x", "%"),
            ("x", "[a"),
            ("x", "%g+"),
            ("tab\tsep", "%c"),
            ("A_b", "[%u_]+"),
        ];
        for (subject, pattern) in cases {
            let code = format!(
                "local s, p = \"{subject}\", \"{pattern}\" local out = {{}} \
                 local function add(...) for i = 1, select('#', ...) do out[#out + 1] = tostring((select(i, ...))) end out[#out + 1] = '|' end \
                 add(S.find(s, p)) add(S.find(s, p, 2)) add(S.match(s, p)) add(S.gsub(s, p, '<%0>')) \
                 add(S.gsub(s, p, function(a) return a and a:upper() end)) add(S.gsub(s, p, {{}}, 1)) \
                 for a, b in S.gmatch(s, p) do add(a, b) end \
                 return table.concat(out, ',')"
            );
            let expected = outcome(&reference, reference.globals().get("string").unwrap(), &code);
            let got = outcome(&ported, string.clone(), &code);
            assert_eq!(got, expected, "{subject:?} ~ {pattern:?}");
        }
    }

    #[test]
    fn a_replacement_that_raises_hands_back_the_value_it_raised() {
        let lua = Lua::new();
        let string = lua.create_table().unwrap();
        let guard = Rc::new(Guard::new(
            &SandboxLimits::STANDARD,
            CancellationToken::new(),
            std::sync::Arc::default(),
            None,
        ));
        install(&lua, &string, &guard, &Callbacks::load(&lua).unwrap()).unwrap();
        lua.globals().set("S", string).unwrap();
        let code = "local r, n, raised, e = S.gsub('abc', '%w', function(c) error({c = c}) end) \
                    local r2, n2, raised2, e2 = S.gsub('abc', 'b', setmetatable({}, {__index = function(_, k) error(k .. '!', 0) end})) \
                    return tostring(raised) .. e.c .. tostring(raised2) .. e2";
        assert_eq!(lua.load(code).eval::<String>().unwrap(), "truea".to_owned() + "trueb!");
    }

    #[test]
    fn catastrophic_backtracking_ends_at_the_operation_budget() {
        let lua = Lua::new();
        let string = lua.create_table().unwrap();
        let limits = SandboxLimits { max_operations: 2_000_000, ..SandboxLimits::STANDARD };
        let guard = Rc::new(Guard::new(&limits, CancellationToken::new(), std::sync::Arc::default(), None));
        install(&lua, &string, &guard, &Callbacks::load(&lua).unwrap()).unwrap();
        lua.globals().set("S", string).unwrap();
        let started = std::time::Instant::now();
        let error = lua.load("return S.find(string.rep('a', 40000), '.-.-.-.-b')").exec().unwrap_err();
        assert!(error.to_string().contains("operations"), "{error}");
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
    }
}
