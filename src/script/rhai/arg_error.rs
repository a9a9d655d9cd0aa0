//! A call of a global with an argument of the wrong type, as the user reads it: Rhai reports
//! it as a missing overload (`Function not found: parallel (&str | ImmutableString | String,
//! Fn)`); this names the global, the argument and the type it expected, as lint would.

use crate::script::{self, Param, ParamKind};

/// The message for a missing overload of a known global, `None` for any other function.
pub(super) fn explain(signature: &str) -> Option<String> {
    let (name, rest) = signature.split_once(" (")?;
    let global = script::global(name.trim())?;
    let args: Vec<&str> = rest.strip_suffix(')')?.split(", ").filter(|a| !a.is_empty()).collect();
    let params: &[Param] = if name == "parallel" && args.get(1).is_some_and(|a| kind_of(a) == "a closure") {
        script::PARALLEL_MAP_FORM
    } else {
        global.params
    };
    let wrong = args.iter().zip(params).enumerate().find(|(_, (arg, param))| !accepts(param.kind, arg));
    Some(match wrong {
        Some((index, (arg, param))) => format!(
            "{name}: argument {} ({}) is {}; expected {} ({})",
            index + 1,
            param.name,
            kind_of(arg),
            expected(param.kind),
            global.signature
        ),
        None => format!(
            "{name} takes {}..={} arguments, was given {} ({})",
            global.min_args(),
            global.max_args(),
            args.len(),
            global.signature
        ),
    })
}

/// What a Rhai type name is, in words.
fn kind_of(rhai_type: &str) -> &'static str {
    let t = rhai_type.trim();
    if t.contains("ImmutableString") || t == "&str" || t == "String" || t == "char" {
        "a string"
    } else if t == "Fn" || t.contains("FnPtr") {
        "a closure"
    } else if t == "i64" || t == "i32" || t == "INT" {
        "an integer"
    } else if t == "f64" || t == "f32" || t == "FLOAT" {
        "a number"
    } else if t == "bool" {
        "a boolean"
    } else if t.contains("Array") {
        "an array"
    } else if t.contains("Map") {
        "a map"
    } else if t == "()" {
        "()"
    } else {
        "a value of another type"
    }
}

fn accepts(kind: ParamKind, rhai_type: &str) -> bool {
    let is = kind_of(rhai_type);
    match kind {
        ParamKind::Text => is == "a string",
        ParamKind::Json => is != "a closure",
        ParamKind::Items | ParamKind::Branches | ParamKind::Stages => is == "an array",
        ParamKind::Options => is == "a map",
        ParamKind::Body => is == "a closure",
    }
}

fn expected(kind: ParamKind) -> &'static str {
    match kind {
        ParamKind::Text => "a string",
        ParamKind::Json => "a JSON value (not a closure)",
        ParamKind::Items => "an array of items",
        ParamKind::Options => "an options map",
        ParamKind::Body => "a closure",
        ParamKind::Branches => "an array of closures",
        ParamKind::Stages => "an array of closures",
    }
}

#[cfg(test)]
mod tests {
    use super::explain;

    #[test]
    fn a_string_where_parallel_wants_items_is_named() {
        let message = explain("parallel (&str | ImmutableString | String, Fn)").unwrap();
        assert!(
            message.starts_with("parallel: argument 1 (items) is a string; expected an array of items"),
            "{message}"
        );
        assert!(explain("my_fn (i64)").is_none());
    }
}
