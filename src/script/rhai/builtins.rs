//! Builtins the sandbox replaces with bounded twins: the same results as Rhai's own, but a
//! result's size is checked before it is built, work in proportion to the input is charged to
//! the run's operation budget (`script::host`), and nothing panics.
//!
//! - `replace` (all four forms) computes the result's length first and refuses one past the
//!   string limit without building it (Rhai's builds it, then checks: 8.6 GB for a 1 MB
//!   string whose every byte becomes 8 KiB);
//! - `index_of` and `contains` on strings charge the bytes they scan (one operation scanning
//!   4 MiB, in a loop, is a hang the operation budget never sees);
//! - `sort`, `sort_by`, `order`, `order_by` with a comparator run a merge sort of their own:
//!   Rust's sort panics on a comparator that is not a total order (Rhai catches it, but
//!   "panicked at" reaches stderr, and a panic across the sandbox is a defect); here such a
//!   comparator, when an out-of-order pair shows it, is a typed `script_error`, and a
//!   comparator's own error (a limit included) ends the sort instead of being ignored.
//!
//! - `split`, `split_rev` and `to_chars` count their pieces before building them
//!   (`split.rs`).
//!
//! Functions registered on the engine take precedence over its packages, so scripts call these.

use std::cmp::Ordering;

use ::rhai::{
    Array, Dynamic, Engine, EvalAltResult, FnPtr, INT, ImmutableString, NativeCallContext, Position,
};

use super::guard;

type Result<T> = std::result::Result<T, Box<EvalAltResult>>;

/// Registers the bounded builtins on `engine`, with `max_string` the longest string a script
/// may build (`split.rs` registers the splitting forms beside them).
pub(crate) fn register(engine: &mut Engine, max_string: usize) {
    engine.register_fn("replace", move |s: &mut ImmutableString, find: &str, with: &str| {
        replace(s, find, with, max_string)
    });
    engine.register_fn("replace", move |s: &mut ImmutableString, find: &str, with: char| {
        replace(s, find, with.encode_utf8(&mut [0; 4]), max_string)
    });
    engine.register_fn("replace", move |s: &mut ImmutableString, find: char, with: &str| {
        replace(s, find.encode_utf8(&mut [0; 4]), with, max_string)
    });
    engine.register_fn("replace", move |s: &mut ImmutableString, find: char, with: char| {
        replace(s, find.encode_utf8(&mut [0; 4]), with.encode_utf8(&mut [0; 4]), max_string)
    });
    engine.register_fn("index_of", |s: &str, find: &str| -> Result<INT> {
        scanned(s.len())?;
        Ok(index_of(s, s.find(find)))
    });
    engine.register_fn("index_of", |s: &str, find: char| -> Result<INT> {
        scanned(s.len())?;
        Ok(index_of(s, s.find(find)))
    });
    engine.register_fn("contains", |s: &str, find: &str| -> Result<bool> {
        scanned(s.len())?;
        Ok(s.contains(find))
    });
    engine.register_fn("contains", |s: &str, find: char| -> Result<bool> {
        scanned(s.len())?;
        Ok(s.contains(find))
    });
    for name in ["sort", "sort_by"] {
        engine.register_fn(name, |context: NativeCallContext, array: &mut Array, comparer: FnPtr| {
            sort(&context, array, &comparer)
        });
    }
    for name in ["order", "order_by"] {
        engine.register_fn(name, |context: NativeCallContext, array: &mut Array, comparer: FnPtr| {
            let mut copy = array.clone();
            sort(&context, &mut copy, &comparer).map(|()| copy)
        });
    }
}

/// Charges scanning `bytes` to the run.
pub(super) fn scanned(bytes: usize) -> Result<()> {
    // Only the operation budget (or a bound another thread latched) can end it here; the
    // runner reports the latched error with its full message.
    match guard::host_work_current(bytes as u64, 0, 0) {
        Some(_) => Err(Box::new(EvalAltResult::ErrorTooManyOperations(Position::NONE))),
        None => Ok(()),
    }
}

/// Rhai's `index_of`: the character index of a byte offset, or -1.
fn index_of(s: &str, found: Option<usize>) -> INT {
    if s.is_empty() {
        return -1;
    }
    found.map_or(-1, |at| INT::try_from(s[..at].chars().count()).unwrap_or(-1))
}

fn replace(s: &mut ImmutableString, find: &str, with: &str, max_string: usize) -> Result<()> {
    if s.is_empty() {
        return Ok(());
    }
    scanned(s.len())?;
    // `str::replace` with an empty pattern inserts before every character and at the end.
    let matches = if find.is_empty() { s.chars().count() + 1 } else { s.matches(find).count() };
    let length = (s.len() - matches * find.len()).saturating_add(matches.saturating_mul(with.len()));
    if length > max_string {
        return Err(Box::new(EvalAltResult::ErrorDataTooLarge("Length of string".into(), Position::NONE)));
    }
    scanned(length)?;
    *s = s.replace(find, with).into();
    Ok(())
}

/// What a comparator's result means: an integer's sign, or `true` for "first goes first".
fn ordering(value: &Dynamic) -> Option<Ordering> {
    value
        .as_int()
        .map(|v| v.cmp(&0))
        .or_else(|_| value.as_bool().map(|first| if first { Ordering::Less } else { Ordering::Greater }))
        .ok()
}

/// A stable bottom-up merge sort by `comparer`. Never panics whatever the comparator does; a
/// comparator that returns neither an integer nor a boolean, or that the result shows is not
/// a total order, is a `script_error`.
fn sort(context: &NativeCallContext, array: &mut Array, comparer: &FnPtr) -> Result<()> {
    let n = array.len();
    if n < 2 {
        return Ok(());
    }
    let compare = |a: &Dynamic, b: &Dynamic| -> Result<Ordering> {
        let result = comparer.call_raw(context, None, [a.clone(), b.clone()])?;
        ordering(&result).ok_or_else(|| {
            runtime("the sort comparator must return an integer (its sign) or a boolean".to_owned())
        })
    };
    merge_sort(array, compare)?;
    // A total order leaves no adjacent pair out of order; a comparator that contradicts
    // itself usually does.
    for i in 1..n {
        if compare(&array[i], &array[i - 1])? == Ordering::Less {
            return Err(runtime(
                "the sort comparator is not a total order (it put an element both before and after \
                 another); compare consistently, e.g. |a, b| a - b"
                    .to_owned(),
            ));
        }
    }
    Ok(())
}

/// A stable bottom-up merge sort by `compare`, which never panics whatever `compare` answers
/// (Rust's sort may panic on an order that is not total, such as floats with a NaN); on a
/// total order its result is the one every stable sort gives, Rhai's included. The first
/// error `compare` gives ends it.
pub(super) fn merge_sort<E>(
    array: &mut Array,
    mut compare: impl FnMut(&Dynamic, &Dynamic) -> std::result::Result<Ordering, E>,
) -> std::result::Result<(), E> {
    let n = array.len();
    let mut from: Vec<Dynamic> = std::mem::take(array);
    let mut to: Vec<Dynamic> = Vec::with_capacity(n);
    let mut width = 1;
    while width < n {
        to.clear();
        let mut start = 0;
        while start < n {
            let mid = (start + width).min(n);
            let end = (start + 2 * width).min(n);
            let (mut left, mut right) = (start, mid);
            while left < mid && right < end {
                if compare(&from[right], &from[left])? == Ordering::Less {
                    to.push(from[right].clone());
                    right += 1;
                } else {
                    to.push(from[left].clone());
                    left += 1;
                }
            }
            to.extend(from[left..mid].iter().cloned());
            to.extend(from[right..end].iter().cloned());
            start = end;
        }
        std::mem::swap(&mut from, &mut to);
        width *= 2;
    }
    *array = from;
    Ok(())
}

fn runtime(message: String) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(message.into(), Position::NONE))
}
