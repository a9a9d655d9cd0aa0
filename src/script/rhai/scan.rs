//! Charged twins of Rhai's builtins that scan their input and allocate nothing: one operation
//! that walks a 4 MiB string (`len` counts its characters, `get(i)` walks to the i-th, a map
//! lookup compares a 4 MiB key), in a loop, is seconds of work per thousand operations that
//! neither the operation budget nor the allocation charge sees, so such a loop ran until the
//! script-time limit (then 300 s). Each twin charges the bytes it walks to the run's
//! operation budget (`script::host`, four bytes an operation) and returns exactly what Rhai's
//! does.
//!
//! `parse_int` and `parse_float` walk their whole string too (4 MiB of zeros is a number),
//! `trim` the whitespace it removes, and `chars` from a position (all its forms) the string up
//! to it.
//!
//! Builtins that allocate in proportion to what they walk (`sub_string`, `crop`, `to_upper`,
//! `split`, ...) are already charged by the bytes they allocate; `index_of` and `contains`
//! without a start are in `builtins.rs`.

use ::rhai::{Dynamic, Engine, EvalAltResult, FLOAT, INT, Map};

use super::builtins::scanned;

type Result<T> = std::result::Result<T, Box<EvalAltResult>>;

/// Registers the charged twins on `engine` (registered functions take precedence over the
/// packages' of the same signature).
pub(crate) fn register(engine: &mut Engine) {
    engine.register_fn("len", |s: &str| -> Result<INT> { len(s) });
    engine.register_get("len", |s: &mut ::rhai::ImmutableString| -> Result<INT> { len(s) });
    engine.register_fn("get", |s: &str, index: INT| -> Result<Dynamic> { get(s, index) });
    engine.register_fn("starts_with", |s: &str, prefix: &str| -> Result<bool> {
        scanned(s.len().min(prefix.len()))?;
        Ok(s.starts_with(prefix))
    });
    engine.register_fn("ends_with", |s: &str, suffix: &str| -> Result<bool> {
        scanned(s.len().min(suffix.len()))?;
        Ok(s.ends_with(suffix))
    });
    engine.register_fn("index_of", |s: &str, find: &str, start: INT| -> Result<INT> {
        scanned(s.len())?;
        Ok(index_of_from(s, start, |rest| rest.find(find)))
    });
    engine.register_fn("index_of", |s: &str, find: char, start: INT| -> Result<INT> {
        scanned(s.len())?;
        Ok(index_of_from(s, start, |rest| rest.find(find)))
    });
    engine.register_fn("parse_int", |s: &str| -> Result<INT> { parse_int(s, 10) });
    engine.register_fn("parse_int", |s: &str, radix: INT| -> Result<INT> { parse_int(s, radix) });
    engine.register_fn("parse_float", |s: &str| -> Result<FLOAT> {
        scanned(s.len())?;
        s.trim()
            .parse::<FLOAT>()
            .map_err(|err| arithmetic(format!("Error parsing floating-point number '{s}': {err}")))
    });
    engine.register_fn("trim", |s: &mut ::rhai::ImmutableString| -> Result<()> {
        let trimmed = s.trim();
        scanned(s.len() - trimmed.len())?;
        if trimmed.len() != s.len() {
            *s = trimmed.into();
        }
        Ok(())
    });
    // `chars` from a position walks the string to it before the first character comes out.
    engine.register_type_with_name::<Chars>("CharsStream");
    engine.register_iterator::<Chars>();
    engine.register_fn("chars", |s: &str, start: INT| chars(s, start, INT::MAX));
    engine.register_fn("chars", |s: &str, start: INT, len: INT| chars(s, start, len));
    engine.register_fn("chars", |s: &str, range: std::ops::Range<INT>| {
        let from = range.start.max(0);
        chars(s, from, range.end.max(from) - from)
    });
    engine.register_fn("chars", |s: &str, range: std::ops::RangeInclusive<INT>| {
        let from = (*range.start()).max(0);
        let to = (*range.end()).max(from - 1).min(INT::MAX - 1);
        chars(s, from, to - from + 1)
    });
    engine.register_fn("contains", |map: &mut Map, key: &str| -> Result<bool> {
        lookup(map, key)?;
        Ok(map.contains_key(key))
    });
    engine.register_fn("get", |map: &mut Map, key: &str| -> Result<Dynamic> {
        lookup(map, key)?;
        Ok(map.get(key).cloned().unwrap_or(Dynamic::UNIT))
    });
    engine.register_fn("remove", |map: &mut Map, key: &str| -> Result<Dynamic> {
        lookup(map, key)?;
        Ok(map.remove(key).unwrap_or(Dynamic::UNIT))
    });
}

/// Rhai's `len`: the number of characters, a walk of the whole string.
fn len(s: &str) -> Result<INT> {
    scanned(s.len())?;
    Ok(INT::try_from(s.chars().count()).unwrap_or(INT::MAX))
}

/// Rhai's `get` on a string: the character at `index` (negative: from the end), or `()`.
fn get(s: &str, index: INT) -> Result<Dynamic> {
    let (found, walked) = if index >= 0 {
        let Ok(index) = usize::try_from(index) else { return Ok(Dynamic::UNIT) };
        match s.char_indices().nth(index) {
            Some((at, c)) => (Some(c), at + c.len_utf8()),
            None => (None, s.len()),
        }
    } else {
        let Ok(back) = usize::try_from(index.unsigned_abs()) else { return Ok(Dynamic::UNIT) };
        match s.char_indices().rev().nth(back - 1) {
            Some((at, c)) => (Some(c), s.len() - at),
            None => (None, s.len()),
        }
    };
    scanned(walked)?;
    Ok(found.map_or(Dynamic::UNIT, Into::into))
}

/// Rhai's `index_of` from a character position `start` (negative: from the end; past the end:
/// -1), with `find` searching the rest of the string for a byte offset.
fn index_of_from(s: &str, start: INT, find: impl Fn(&str) -> Option<usize>) -> INT {
    if s.is_empty() {
        return -1;
    }
    let count = s.chars().count();
    let from = if start < 0 {
        let Ok(back) = usize::try_from(start.unsigned_abs()) else { return -1 };
        if back > count { 0 } else { byte_offset(s, count - back) }
    } else {
        let Ok(start) = usize::try_from(start) else { return -1 };
        if start >= count {
            return -1;
        }
        byte_offset(s, start)
    };
    find(&s[from..]).and_then(|at| INT::try_from(s[..from + at].chars().count()).ok()).unwrap_or(-1)
}

/// The byte offset of the character at `index` (the string's length past the end).
fn byte_offset(s: &str, index: usize) -> usize {
    s.char_indices().nth(index).map_or(s.len(), |(at, _)| at)
}

/// Rhai's `parse_int`: a 4 MiB string of zeros is a valid number, walked whole in one operation.
fn parse_int(s: &str, radix: INT) -> Result<INT> {
    if !(2..=36).contains(&radix) {
        return Err(arithmetic(format!("Invalid radix: '{radix}'")));
    }
    scanned(s.len())?;
    let radix = u32::try_from(radix).unwrap_or(10);
    INT::from_str_radix(s.trim(), radix)
        .map_err(|err| arithmetic(format!("Error parsing integer number '{s}': {err}")))
}

fn arithmetic(message: String) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorArithmetic(message, ::rhai::Position::NONE))
}

/// The characters `chars(start, len)` iterates over (Rhai's `CharsStream`: `len` characters
/// from character `start`, a negative start counting from the end).
#[derive(Debug, Clone)]
struct Chars(Vec<char>);

impl IntoIterator for Chars {
    type Item = char;
    type IntoIter = std::vec::IntoIter<char>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// Rhai's `CharsStream::new`, charged by the string it walks.
fn chars(s: &str, from: INT, len: INT) -> Result<Chars> {
    scanned(s.len())?;
    if len <= 0 {
        return Ok(Chars(Vec::new()));
    }
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    let skip = if from >= 0 {
        usize::try_from(from).unwrap_or(usize::MAX)
    } else {
        let back = usize::try_from(from.unsigned_abs()).unwrap_or(usize::MAX);
        s.chars().count().saturating_sub(back)
    };
    Ok(Chars(s.chars().skip(skip).take(len).collect()))
}

/// Charges a lookup of `key` in `map`: each of the about log2(n) comparisons of an ordered map
/// may walk the whole key.
fn lookup(map: &Map, key: &str) -> Result<()> {
    let depth = (usize::BITS - map.len().leading_zeros()) as usize + 1;
    scanned(key.len().saturating_mul(depth))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The twins of `parse_int`, `parse_float`, `trim` and `chars` from a position give exactly
    /// what Rhai's own give, errors included.
    #[test]
    fn the_charged_walks_give_rhais_results() {
        let mut ours = Engine::new();
        register(&mut ours);
        let rhai = Engine::new();
        let calls = [
            r#"parse_int(" 0042 ")"#,
            r#"parse_int("ff", 16)"#,
            r#"parse_float(" 1.5e3 ")"#,
            r#"let s = "  a b  "; s.trim(); s"#,
            r#"let s = "ab"; s.trim(); s"#,
            r#"let s = "   "; s.trim(); s"#,
            r#"let n = []; for c in "héllo".chars(1) { n.push(c) } n"#,
            r#"let n = []; for c in "héllo".chars(-2) { n.push(c) } n"#,
            r#"let n = []; for c in "héllo".chars(1, 2) { n.push(c) } n"#,
            r#"let n = []; for c in "héllo".chars(1, -2) { n.push(c) } n"#,
            r#"let n = []; for c in "héllo".chars(1..3) { n.push(c) } n"#,
            r#"let n = []; for c in "héllo".chars(1..=3) { n.push(c) } n"#,
            r#"let n = []; for c in "héllo".chars(9) { n.push(c) } n"#,
            r#"let n = []; for c in "héllo".chars() { n.push(c) } n"#,
        ];
        for call in calls {
            let mine = ours.eval::<Dynamic>(call).unwrap();
            let theirs = rhai.eval::<Dynamic>(call).unwrap();
            assert_eq!(format!("{mine:?}"), format!("{theirs:?}"), "{call}");
        }
        for call in [r#"parse_int("x1")"#, r#"parse_int("1", 40)"#, r#"parse_float("1.2.3")"#] {
            let mine = ours.eval::<Dynamic>(call).unwrap_err();
            let theirs = rhai.eval::<Dynamic>(call).unwrap_err();
            assert_eq!(mine.to_string(), theirs.to_string(), "{call}");
        }
    }
}
