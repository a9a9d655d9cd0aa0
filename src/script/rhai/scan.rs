//! Charged twins of Rhai's builtins that scan their input and allocate nothing: one operation
//! that walks a 4 MiB string (`len` counts its characters, `get(i)` walks to the i-th, a map
//! lookup compares a 4 MiB key), in a loop, is seconds of work per thousand operations that
//! neither the operation budget nor the allocation charge sees, so such a loop ran until the
//! script-time limit (then 300 s). Each twin charges the bytes it walks to the run's
//! operation budget (`script::host`, four bytes an operation) and returns exactly what Rhai's
//! does.
//!
//! Builtins that allocate in proportion to what they walk (`sub_string`, `crop`, `to_upper`,
//! `split`, ...) are already charged by the bytes they allocate; `index_of` and `contains`
//! without a start are in `builtins.rs`.

use ::rhai::{Dynamic, Engine, EvalAltResult, INT, Map};

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

/// Charges a lookup of `key` in `map`: each of the about log2(n) comparisons of an ordered map
/// may walk the whole key.
fn lookup(map: &Map, key: &str) -> Result<()> {
    let depth = (usize::BITS - map.len().leading_zeros()) as usize + 1;
    scanned(key.len().saturating_mul(depth))
}
