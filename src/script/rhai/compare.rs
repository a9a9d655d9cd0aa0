//! Charged twins of the array and map builtins that compare elements with `==` or `<` in one
//! operation: an array's `==`/`!=`, `contains` (and `in`), `index_of` by value, `dedup`, and
//! `sort`/`sort_desc`/`order`/`order_desc` without a comparator; a map's `==`/`!=`. Each
//! compares up to 16,384 elements natively, and an element may be a reference to a 4 MiB
//! string shared by all of them (a few kilobytes to the script), so `a == b` over two arrays of
//! references to two distinct equal strings scanned 64 GiB in one operation, a hang the
//! operation budget never saw. Each twin charges the bytes its comparisons may walk (every
//! element's string bytes, times the comparisons a sort may make of each) to the run's
//! operation budget (`script::host`, four bytes an operation) before comparing, and returns
//! exactly what Rhai's does. Nested arrays and maps are compared by these twins again, so each
//! level charges its own elements.

use std::cmp::Ordering;

use ::rhai::{
    Array, Dynamic, Engine, EvalAltResult, FuncRegistration, INT, Map, NativeCallContext, Position,
};

use super::builtins::{merge_sort, scanned};

type Result<T> = std::result::Result<T, Box<EvalAltResult>>;

/// Registers the twins on `engine` (registered functions take precedence over the packages').
pub(crate) fn register(engine: &mut Engine) {
    // Pure, as Rhai's are: an impure method has its receiver size-checked after the call.
    let pure = |name: &str| FuncRegistration::new(name).in_global_namespace().with_purity(true);
    pure("==").register_into_engine(engine, |ctx: NativeCallContext, a: &mut Array, b: Array| {
        arrays_equal(&ctx, a, b)
    });
    pure("!=").register_into_engine(engine, |ctx: NativeCallContext, a: &mut Array, b: Array| {
        arrays_equal(&ctx, a, b).map(|equal| !equal)
    });
    pure("==")
        .register_into_engine(engine, |ctx: NativeCallContext, a: &mut Map, b: Map| maps_equal(&ctx, a, b));
    pure("!=").register_into_engine(engine, |ctx: NativeCallContext, a: &mut Map, b: Map| {
        maps_equal(&ctx, a, b).map(|equal| !equal)
    });
    pure("contains").register_into_engine(
        engine,
        |ctx: NativeCallContext, array: &mut Array, value: Dynamic| {
            index_of(&ctx, array, &value, 0).map(|at| at >= 0)
        },
    );
    pure("index_of")
        .register_into_engine(engine, |ctx: NativeCallContext, array: &mut Array, value: Dynamic| {
            index_of(&ctx, array, &value, 0)
        });
    pure("index_of").register_into_engine(
        engine,
        |ctx: NativeCallContext, array: &mut Array, value: Dynamic, start: INT| {
            index_of(&ctx, array, &value, start)
        },
    );
    engine.register_fn("dedup", |ctx: NativeCallContext, array: &mut Array| dedup(&ctx, array));
    engine.register_fn("sort", |array: &mut Array| sort(array, false));
    engine.register_fn("sort_desc", |array: &mut Array| sort(array, true));
    engine.register_fn("order", |array: &mut Array| {
        let mut copy = array.clone();
        sort(&mut copy, false).map(|()| copy)
    });
    engine.register_fn("order_desc", |array: &mut Array| {
        let mut copy = array.clone();
        sort(&mut copy, true).map(|()| copy)
    });
}

/// The bytes comparing `value` with another may walk at this level: a string's bytes, a blob's,
/// one word for anything else (a nested array or map charges its own elements when its twin
/// compares them).
fn weight(value: &Dynamic) -> usize {
    if let Ok(s) = value.as_immutable_string_ref() {
        return s.len().max(8);
    }
    if value.is_blob() {
        return value.as_blob_ref().map_or(8, |blob| blob.len().max(8));
    }
    8
}

/// Charges walking every element of `items` `times` over.
fn charge<'a>(items: impl Iterator<Item = &'a Dynamic>, times: usize) -> Result<()> {
    let bytes = items.fold(0usize, |sum, item| sum.saturating_add(weight(item)));
    scanned(bytes.saturating_mul(times))
}

/// `a == b` through the engine, as Rhai's array functions take it: no `==` for two values of
/// different types is `false`, for two of the same type an error.
fn equal(ctx: &NativeCallContext, a: &mut Dynamic, b: &mut Dynamic) -> Result<bool> {
    let same_type = a.type_id() == b.type_id();
    match ctx.call_native_fn_raw("==", true, &mut [a, b]) {
        Ok(result) => Ok(result.as_bool().unwrap_or(false)),
        Err(error) => match *error {
            EvalAltResult::ErrorFunctionNotFound(ref signature, ..)
                if signature.starts_with("==") && !same_type =>
            {
                Ok(false)
            }
            _ => Err(error),
        },
    }
}

/// Rhai's array `==`.
fn arrays_equal(ctx: &NativeCallContext, a: &mut Array, mut b: Array) -> Result<bool> {
    if a.len() != b.len() {
        return Ok(false);
    }
    charge(a.iter(), 1)?;
    for (x, y) in a.iter_mut().zip(b.iter_mut()) {
        if !equal(ctx, x, y)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Rhai's map `==` (no default for values of different types: their missing `==` is an
/// error there too).
fn maps_equal(ctx: &NativeCallContext, a: &mut Map, mut b: Map) -> Result<bool> {
    if a.len() != b.len() {
        return Ok(false);
    }
    charge(a.values(), 1)?;
    for (key, x) in a.iter_mut() {
        let Some(y) = b.get_mut(key) else { return Ok(false) };
        let result = ctx.call_native_fn_raw("==", true, &mut [x, y])?;
        if !result.as_bool().unwrap_or(false) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Rhai's array `index_of(value, start)` (and `contains`: `index_of(value) >= 0`).
fn index_of(ctx: &NativeCallContext, array: &mut Array, value: &Dynamic, start: INT) -> Result<INT> {
    if array.is_empty() {
        return Ok(-1);
    }
    let start = offset(array.len(), start);
    charge(array[start..].iter(), 1)?;
    for (i, item) in array.iter_mut().enumerate().skip(start) {
        if equal(ctx, item, &mut value.clone())? {
            return Ok(INT::try_from(i).unwrap_or(INT::MAX));
        }
    }
    Ok(-1)
}

/// Rhai's `calc_offset_len` for a start alone: negative counts from the end (clamped to 0),
/// past the end is the end.
fn offset(len: usize, start: INT) -> usize {
    if start < 0 {
        let back = usize::try_from(start.unsigned_abs()).unwrap_or(usize::MAX);
        len.saturating_sub(back)
    } else {
        usize::try_from(start).unwrap_or(usize::MAX).min(len)
    }
}

/// Rhai's `dedup` without a comparer: consecutive elements `==` to the one before go (a
/// comparison that fails keeps the element, as there).
fn dedup(ctx: &NativeCallContext, array: &mut Array) -> Result<()> {
    if array.is_empty() {
        return Ok(());
    }
    charge(array.iter(), 1)?;
    array.dedup_by(|x, y| equal(ctx, y, x).unwrap_or(false));
    Ok(())
}

/// Rhai's `sort` and `sort_desc` without a comparator: integers, characters, floats, strings,
/// booleans or units, all of one type.
fn sort(array: &mut Array, descending: bool) -> Result<()> {
    if array.len() <= 1 {
        return Ok(());
    }
    let type_id = array[0].type_id();
    if array.iter().any(|a| a.type_id() != type_id) {
        return Err(Box::new(EvalAltResult::ErrorFunctionNotFound(
            "elements of different types cannot be sorted".into(),
            Position::NONE,
        )));
    }
    // A sort compares each element about log2(n) times.
    let rounds = (usize::BITS - array.len().leading_zeros()) as usize;
    charge(array.iter(), rounds)?;
    let first = &array[0];
    let key: fn(&Dynamic, &Dynamic) -> Ordering = if first.is_int() {
        |a, b| a.as_int().unwrap_or_default().cmp(&b.as_int().unwrap_or_default())
    } else if first.is_char() {
        |a, b| a.as_char().unwrap_or_default().cmp(&b.as_char().unwrap_or_default())
    } else if first.is_float() {
        // Not a total order with a NaN: Rust's sort may panic on that, this one never does.
        |a, b| {
            a.as_float()
                .unwrap_or_default()
                .partial_cmp(&b.as_float().unwrap_or_default())
                .unwrap_or(Ordering::Equal)
        }
    } else if first.is_string() {
        |a, b| match (a.as_immutable_string_ref(), b.as_immutable_string_ref()) {
            (Ok(a), Ok(b)) => a.as_str().cmp(b.as_str()),
            _ => Ordering::Equal,
        }
    } else if first.is_bool() {
        |a, b| a.as_bool().unwrap_or_default().cmp(&b.as_bool().unwrap_or_default())
    } else if first.is_unit() {
        return Ok(());
    } else {
        return Err(Box::new(EvalAltResult::ErrorFunctionNotFound(
            format!("elements of {} cannot be sorted", first.type_name()),
            Position::NONE,
        )));
    };
    let Ok(()) = merge_sort(array, |a, b| {
        let order = key(a, b);
        Ok::<_, std::convert::Infallible>(if descending { order.reverse() } else { order })
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each twin gives exactly what Rhai's own gives.
    #[test]
    fn the_charged_comparisons_give_rhais_results() {
        let mut ours = Engine::new();
        register(&mut ours);
        let rhai = Engine::new();
        let calls = [
            "[1, 2, 3] == [1, 2, 3]",
            "[1, 2, 3] != [1, 2, 4]",
            r#"[1, "a", 'c', 1.5, true, ()] == [1, "a", 'c', 1.5, true, ()]"#,
            r#"[1] == ["1"]"#,
            "[1, 2] == [1, 2, 3]",
            "[[1, 2], [3]] == [[1, 2], [3]]",
            "#{a: 1, b: [2]} == #{a: 1, b: [2]}",
            "#{a: 1} != #{a: 2}",
            "#{a: 1} == #{b: 1}",
            "[1, 2, 3].contains(2)",
            "2 in [1, 2, 3]",
            r#""x" in [1, 2]"#,
            "[1, 2, 3, 2].index_of(2)",
            "[1, 2, 3, 2].index_of(2, 2)",
            "[1, 2, 3, 2].index_of(2, -1)",
            "[1, 2, 3, 2].index_of(2, -10)",
            "[1, 2, 3, 2].index_of(2, 10)",
            "[].index_of(2)",
            "[1, 2].index_of(|x| x == 2)",
            "let a = [1, 1, 2, 2, 1, 1]; a.dedup(); a",
            r#"let a = [1, "1", "1", 1]; a.dedup(); a"#,
            "let a = [3, 1, 2, 1]; a.sort(); a",
            r#"let a = ["b", "a", "c", "a"]; a.sort_desc(); a"#,
            "[3.5, 1.0, 2.25, -0.0, 0.0].order()",
            "['b', 'a', 'c'].order_desc()",
            "let a = [true, false, true]; a.sort(); a",
            "let a = [(), ()]; a.sort(); a",
            "let a = [3, 1, 2]; a.sort(|x, y| y - x); a",
        ];
        for call in calls {
            let mine = ours.eval::<Dynamic>(call).unwrap();
            let theirs = rhai.eval::<Dynamic>(call).unwrap();
            assert_eq!(format!("{mine:?}"), format!("{theirs:?}"), "{call}");
        }
        for call in [r#"[1, "a"].sort()"#, "[#{}, #{}].sort()", "[[1], [2]].order()"] {
            let mine = ours.eval::<Dynamic>(call).unwrap_err();
            let theirs = rhai.eval::<Dynamic>(call).unwrap_err();
            assert_eq!(mine.to_string(), theirs.to_string(), "{call}");
        }
    }

    /// A float array with NaNs is not a total order: the sort still ends, in both directions.
    #[test]
    fn a_float_array_with_nans_sorts_without_panicking() {
        let mut ours = Engine::new();
        register(&mut ours);
        let script = r#"let a = []; for i in 0..2000 { a.push(if i % 3 == 0 { parse_float("NaN") } else { (i * 7919 % 1000).to_float() }); }
            a.sort(); let b = a.order_desc(); a.len() + b.len()"#;
        assert_eq!(ours.eval::<INT>(script).unwrap(), 4000);
    }
}
