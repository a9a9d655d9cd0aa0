//! Bounded twins of Rhai's string-to-array builtins (`split` in its five forms, `split_rev` in
//! its four, `to_chars`): Rhai's build the whole array, then check its size against the array
//! limit, so a 4 MiB string of commas became four million strings (300 MiB) in one operation
//! before the check refused it. These count the pieces first (walking the string, no
//! allocation), charge the scan to the run's operation budget, and refuse an array past
//! `max_array_size` before building it; otherwise the result is exactly Rhai's.

use ::rhai::{Array, Dynamic, Engine, EvalAltResult, INT, ImmutableString, Position};

use super::builtins::scanned;

type Result<T> = std::result::Result<T, Box<EvalAltResult>>;

/// Registers the bounded forms on `engine`; `max_array` is the sandbox's array limit (0: none).
pub(crate) fn register(engine: &mut Engine, max_array: usize) {
    let limit = if max_array == 0 { usize::MAX } else { max_array };
    engine.register_fn("to_chars", move |s: &str| -> Result<Array> {
        if s.is_empty() {
            return Ok(Array::new());
        }
        bounded(s, s.chars().count(), limit)?;
        Ok(s.chars().map(Into::into).collect())
    });
    engine.register_fn("split", move |s: &mut ImmutableString| -> Result<Array> {
        if s.is_empty() {
            return Ok(vec![s.clone().into()]);
        }
        bounded(s, s.split_whitespace().count(), limit)?;
        Ok(s.split_whitespace().map(Into::into).collect())
    });
    engine.register_fn("split", move |s: &mut ImmutableString, delimiter: &str| {
        let s = &*s;
        pieces(s, !delimiter.is_empty() && !s.contains(delimiter), limit, || s.split(delimiter))
    });
    engine.register_fn("split", move |s: &mut ImmutableString, delimiter: char| {
        let s = &*s;
        pieces(s, !s.contains(delimiter), limit, || s.split(delimiter))
    });
    engine.register_fn("split_rev", move |s: &mut ImmutableString, delimiter: &str| {
        let s = &*s;
        pieces(s, !delimiter.is_empty() && !s.contains(delimiter), limit, || s.rsplit(delimiter))
    });
    engine.register_fn("split_rev", move |s: &mut ImmutableString, delimiter: char| {
        let s = &*s;
        pieces(s, !s.contains(delimiter), limit, || s.rsplit(delimiter))
    });
    engine.register_fn("split", move |s: &mut ImmutableString, delimiter: &str, segments: INT| {
        let s = &*s;
        let whole = segments <= 1 || (!delimiter.is_empty() && !s.contains(delimiter));
        pieces(s, whole, limit, || s.splitn(count(segments), delimiter))
    });
    engine.register_fn("split", move |s: &mut ImmutableString, delimiter: char, segments: INT| {
        let s = &*s;
        let whole = segments <= 1 || !s.contains(delimiter);
        pieces(s, whole, limit, || s.splitn(count(segments), delimiter))
    });
    engine.register_fn("split_rev", move |s: &mut ImmutableString, delimiter: &str, segments: INT| {
        let s = &*s;
        let whole = segments <= 1 || (!delimiter.is_empty() && !s.contains(delimiter));
        pieces(s, whole, limit, || s.rsplitn(count(segments), delimiter))
    });
    engine.register_fn("split_rev", move |s: &mut ImmutableString, delimiter: char, segments: INT| {
        let s = &*s;
        let whole = segments <= 1 || !s.contains(delimiter);
        pieces(s, whole, limit, || s.rsplitn(count(segments), delimiter))
    });
}

/// A segment count as Rhai reads it (only called for counts above one).
fn count(segments: INT) -> usize {
    usize::try_from(segments).unwrap_or(usize::MAX)
}

/// The pieces `split` yields, or the whole string when it is empty or `whole` (Rhai's rule:
/// no delimiter found, or at most one segment asked for), checked before they are built.
fn pieces<'a, I: Iterator<Item = &'a str>>(
    s: &'a ImmutableString,
    whole: bool,
    limit: usize,
    split: impl Fn() -> I,
) -> Result<Array> {
    if s.is_empty() || whole {
        return Ok(vec![s.clone().into()]);
    }
    bounded(s, split().count(), limit)?;
    Ok(split().map(|piece| Dynamic::from(ImmutableString::from(piece))).collect())
}

/// Charges scanning `s` twice (counting, then building) and refuses `items` past `limit`.
fn bounded(s: &str, items: usize, limit: usize) -> Result<()> {
    scanned(s.len())?;
    if items > limit {
        return Err(Box::new(EvalAltResult::ErrorDataTooLarge("Size of array".into(), Position::NONE)));
    }
    scanned(s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(max_array: usize) -> Engine {
        let mut engine = Engine::new();
        engine.set_max_array_size(max_array);
        register(&mut engine, max_array);
        engine
    }

    /// Each form gives exactly what Rhai's own gives, on strings with and without the
    /// delimiter, empty ones and empty delimiters.
    #[test]
    fn the_bounded_forms_give_rhais_results() {
        let ours = engine(1000);
        let rhai = Engine::new();
        let calls = [
            r#""a,b,,c".split(",")"#,
            r#""a,b,,c".split(',')"#,
            r#""abc".split("")"#,
            r#""abc".split("x")"#,
            r#""".split(",")"#,
            r#""a b  c ".split()"#,
            r#""".split()"#,
            r#""a,b,c,d".split(",", 2)"#,
            r#""a,b,c,d".split(',', 3)"#,
            r#""a,b,c,d".split(",", 0)"#,
            r#""a,b,c,d".split(",", -4)"#,
            r#""a,b,c,d".split_rev(",")"#,
            r#""a,b,c,d".split_rev(',')"#,
            r#""a,b,c,d".split_rev(",", 2)"#,
            r#""a,b,c,d".split_rev(',', 2)"#,
            r#""abc".split_rev("")"#,
            r#""héllo".to_chars()"#,
            r#""".to_chars()"#,
        ];
        for call in calls {
            let mine = ours.eval::<Array>(call).unwrap();
            let theirs = rhai.eval::<Array>(call).unwrap();
            assert_eq!(format!("{mine:?}"), format!("{theirs:?}"), "{call}");
        }
    }

    /// Past the array limit the call is refused before anything is built.
    #[test]
    fn a_split_past_the_array_limit_is_refused() {
        let ours = engine(100);
        for call in [
            r#"let s = ""; for i in 0..200 { s += ","; } s.split(",")"#,
            r#"let s = ""; for i in 0..200 { s += ","; } s.split_rev(',')"#,
            r#"let s = ""; for i in 0..200 { s += "x"; } s.to_chars()"#,
            r#"let s = ""; for i in 0..200 { s += "x "; } s.split()"#,
            r#"let s = ""; for i in 0..200 { s += ","; } s.split(",", 150)"#,
        ] {
            let err = ours.eval::<Array>(call).unwrap_err();
            assert!(matches!(*err, EvalAltResult::ErrorDataTooLarge(..)), "{call}: {err}");
        }
        assert_eq!(
            ours.eval::<Array>(r#"let s = ""; for i in 0..200 { s += ","; } s.split(",", 50)"#)
                .unwrap()
                .len(),
            50
        );
    }
}
