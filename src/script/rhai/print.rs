//! Printing an array or a map (`to_string`, `to_debug`, string interpolation, `+` with a
//! string, which call them; a map's `to_json`) bounded by the string limit while the text grows.
//!
//! Rhai's printers build the whole text and only then check it against the string limit: an
//! array of 2,000 references to one 4 MB string (a few kilobytes of the script's memory, each
//! element a shared string) printed as an 8 GB text in one operation. These twins first add up
//! the bytes the text will at least take (a walk that stops past the limit) and build it only
//! within the limit, as Rhai does (the same text); past it they do not build it.
//!
//! A printer's error cannot simply be returned: interpolation and `+` call `to_string` and, on
//! any error, print the value with Rust's `Display` instead, which has no bound at all. So past
//! the limit the printer latches a `sandbox_limit` error on the run (the next operation ends it,
//! uncatchable like Rhai's own size errors) and returns an empty text. Such a value exists only
//! because Rhai checks an index assignment's element, not its container's total, and after a
//! printer returns Rhai checks the receiver's size: that error made interpolation fall back to
//! `Display` too, so the printer also empties its receiver (a temporary copy when interpolating
//! or concatenating; the script's own value only when the run is ending anyway). `to_json`,
//! which nothing calls that way, returns Rhai's own size error.

use ::rhai::{
    Array, Dynamic, Engine, EvalAltResult, FuncRegistration, ImmutableString, Map, NativeCallContext,
    Position,
};

use super::builtins::scanned;
use crate::error::{Error, ErrorCode};

type Result<T> = std::result::Result<T, Box<EvalAltResult>>;

/// Registers the bounded printers on `engine`, with `max_string` the longest string a script
/// may build.
///
/// They are pure, as Rhai's printers are: a method Rhai takes for impure has its receiver
/// size-checked after the call, and that error made interpolation print the value with
/// `Display` again.
pub(crate) fn register(engine: &mut Engine, max_string: usize) {
    let pure = |name: &str| FuncRegistration::new(name).in_global_namespace().with_purity(true);
    for name in ["to_string", "to_debug"] {
        pure(name).register_into_engine(engine, move |ctx: NativeCallContext, array: &mut Array| {
            format_array(&ctx, array, max_string)
        });
        pure(name).register_into_engine(engine, move |ctx: NativeCallContext, map: &mut Map| {
            format_map(&ctx, map, max_string)
        });
    }
    pure("to_json").register_into_engine(engine, move |map: &mut Map| map_to_json(map, max_string));
}

/// Rhai's `format_array`: `[` the elements' debug texts joined by `, ` `]`.
fn format_array(ctx: &NativeCallContext, array: &mut Array, max_string: usize) -> Result<ImmutableString> {
    let mut least = 2 * array.len().max(1);
    for item in array.iter() {
        least = text_least(item, least, max_string);
        if least > max_string {
            break;
        }
    }
    if let Some(refused) = refused(least, max_string) {
        // See the module's note: the receiver is emptied so Rhai's check of it passes.
        array.clear();
        return Ok(refused);
    }
    let len = array.len();
    let mut result = String::from("[");
    for (i, item) in array.iter_mut().enumerate() {
        result.push_str(&debug_text(ctx, item)?);
        if i + 1 < len {
            result.push_str(", ");
        }
    }
    result.push(']');
    Ok(result.into())
}

/// Rhai's `format_map`: `#{` each `"key": text` joined by `, ` `}`.
fn format_map(ctx: &NativeCallContext, map: &mut Map, max_string: usize) -> Result<ImmutableString> {
    use std::fmt::Write as _;
    let mut least = 1 + 2 * map.len().max(1);
    for (key, item) in map.iter() {
        least = text_least(item, least.saturating_add(key.len() + 4), max_string);
        if least > max_string {
            break;
        }
    }
    if let Some(refused) = refused(least, max_string) {
        map.clear();
        return Ok(refused);
    }
    let len = map.len();
    let mut result = String::from("#{");
    for (i, (key, value)) in map.iter_mut().enumerate() {
        let text = debug_text(ctx, value)?;
        // Writing to a String cannot fail.
        let _ = write!(result, "{key:?}: {text}{}", if i + 1 < len { ", " } else { "" });
    }
    result.push('}');
    Ok(result.into())
}

/// An element's text as Rhai's printers take it: its `to_debug` through the engine (so the
/// overrides apply: nested arrays and maps here, closures in `text.rs`), the result's type name
/// when that is not a string, and Rust's debug form when no `to_debug` applies (only values
/// of types without one: never an array or a map, whose twins are here).
fn debug_text(ctx: &NativeCallContext, value: &mut Dynamic) -> Result<ImmutableString> {
    match ctx.call_native_fn_raw("to_debug", true, &mut [value]) {
        Ok(result) if result.is_string() => Ok(result.into_immutable_string().unwrap_or_default()),
        Ok(result) => Ok(ctx.engine().map_type_name(result.type_name()).into()),
        Err(error) if matches!(*error, EvalAltResult::ErrorFunctionNotFound(..)) => {
            Ok(ctx.engine().map_type_name(&format!("{value:?}")).into())
        }
        Err(error) => Err(error),
    }
}

/// `so_far` plus the fewest bytes `value` takes printed by `to_debug` (a string quoted, an
/// array's `[`, `]` and `, `, a map's `#{`, `}`, `, ` and quoted keys with `: `), the walk
/// stopping once past `max`.
fn text_least(value: &Dynamic, so_far: usize, max: usize) -> usize {
    if let Ok(s) = value.as_immutable_string_ref() {
        return so_far.saturating_add(s.len() + 2);
    }
    if let Ok(items) = value.as_array_ref() {
        let mut total = so_far.saturating_add(2 * items.len().max(1));
        for item in items.iter() {
            if total > max {
                break;
            }
            total = text_least(item, total, max);
        }
        return total;
    }
    if let Ok(map) = value.as_map_ref() {
        let mut total = so_far.saturating_add(1 + 2 * map.len().max(1));
        for (key, item) in map.iter() {
            if total > max {
                break;
            }
            total = text_least(item, total.saturating_add(key.len() + 4), max);
        }
        return total;
    }
    so_far.saturating_add(1)
}

/// Past the limit: the run ends with a `sandbox_limit` error at its next operation, and the
/// printer returns an empty text (see the module's note); `None` within the limit. The walk
/// that measured `least` is charged as a scan.
fn refused(least: usize, max_string: usize) -> Option<ImmutableString> {
    // A charge past the budget latches its error too: the printer then returns nothing (an
    // error here would have interpolation print the value unbounded).
    let charged = scanned(least.min(max_string.saturating_add(1)));
    if least <= max_string {
        return charged.is_err().then(ImmutableString::new);
    }
    super::guard::trip_current(Error::new(
        ErrorCode::SandboxLimit,
        format!(
            "printing an array or a map would build a string of more than {max_string} bytes, the sandbox's \
             limit (each reference to a string is printed whole)"
        ),
    ));
    Some(ImmutableString::new())
}

/// Rhai's `to_json` on a map, refused before it is built when its text would pass the limit.
fn map_to_json(map: &mut Map, max_string: usize) -> Result<String> {
    let mut least: usize = 2;
    for (key, value) in map.iter() {
        least = least.saturating_add(key.len() + 3);
        least = json_least(value, least, max_string);
        if least > max_string {
            break;
        }
    }
    scanned(least)?;
    if least > max_string {
        return Err(too_large());
    }
    Ok(::rhai::format_map_as_json(map))
}

/// `so_far` plus the fewest bytes `value` takes as JSON text, the walk stopping once past `max`.
fn json_least(value: &Dynamic, so_far: usize, max: usize) -> usize {
    let mut total = so_far;
    if let Ok(s) = value.as_immutable_string_ref() {
        return total.saturating_add(s.len() + 2);
    }
    if let Ok(items) = value.as_array_ref() {
        total = total.saturating_add(2);
        for item in items.iter() {
            if total > max {
                return total;
            }
            total = json_least(item, total, max);
        }
        return total;
    }
    if let Ok(map) = value.as_map_ref() {
        total = total.saturating_add(2);
        for (key, item) in map.iter() {
            if total > max {
                return total;
            }
            total = json_least(item, total.saturating_add(key.len() + 3), max);
        }
        return total;
    }
    total.saturating_add(1)
}

fn too_large() -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorDataTooLarge("Length of string".into(), Position::NONE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(max_string: usize) -> Engine {
        let mut engine = Engine::new();
        engine.set_max_string_size(max_string);
        register(&mut engine, max_string);
        engine
    }

    /// Within the limit each printer gives exactly Rhai's text.
    #[test]
    fn the_bounded_printers_give_rhais_text() {
        let ours = engine(10_000);
        let mut rhai = Engine::new();
        rhai.set_max_string_size(10_000);
        let calls = [
            r#"[1, "a\"b\n", 'c', 1.5, true, (), [], #{}].to_string()"#,
            r#"[[1, [2]], #{a: [3], "b c": "d"}].to_debug()"#,
            r#"#{a: 1, b: "x", c: [1, 2], d: #{e: ()}}.to_string()"#,
            r#"let a = [1, "x"]; `<${a}>`"#,
            r#"let m = #{k: [1]}; "" + m"#,
            r#"#{a: 1, b: "x\"y", c: [1, "2"], d: #{e: ()}}.to_json()"#,
            "#{}.to_json()",
            "[].to_string()",
            "#{}.to_string()",
        ];
        for call in calls {
            let mine = ours.eval::<String>(call).unwrap();
            let theirs = rhai.eval::<String>(call).unwrap();
            assert_eq!(mine, theirs, "{call}");
        }
    }

    /// Past the limit nothing is built: a printer gives an empty text (in a run, the run ends
    /// with `sandbox_limit` at its next operation), `to_json` Rhai's size error.
    #[test]
    fn a_text_past_the_limit_is_not_built() {
        let ours = engine(1_000);
        // 100 references to one 900-byte string (a run's index assignments make such values;
        // here the scope holds them).
        let s = Dynamic::from(ImmutableString::from("x".repeat(900)));
        let array: Array = (0..100).map(|_| s.clone()).collect();
        let map: Map = (0..100).map(|i| (format!("k{i}").into(), s.clone())).collect();
        let scope = || {
            let mut scope = ::rhai::Scope::new();
            scope.push("a", array.clone());
            scope.push("m", map.clone());
            scope
        };
        // Interpolation and `+` print with `Display` when the printer fails: a built text here
        // would be that. Reading an oversized variable may also be Rhai's own size error.
        for print in [
            "`${a}`",
            r#""" + a"#,
            r#"a + """#,
            "`${m}`",
            r#""" + m"#,
            "a.to_string()",
            "a.to_debug()",
            "m.to_string()",
        ] {
            match ours.eval_with_scope::<String>(&mut scope(), print) {
                Ok(text) => assert_eq!(text, "", "{print}"),
                Err(error) => {
                    assert!(matches!(*error, EvalAltResult::ErrorDataTooLarge(..)), "{print}: {error}")
                }
            }
        }
        let mut scope = ::rhai::Scope::new();
        scope.push("m", map);
        let error = ours.eval_with_scope::<String>(&mut scope, "m.to_json()").unwrap_err();
        assert!(matches!(*error, EvalAltResult::ErrorDataTooLarge(..)), "{error}");
    }
}
