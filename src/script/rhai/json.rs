//! The JSON boundary, script side: a script value as JSON, linear in its size and capped in
//! depth.
//!
//! The conversion reads the value by reference (shared values through their lock, arrays and
//! maps element by element), so each node is visited once and nothing is copied but the
//! leaves; it refuses a value nested deeper than [`MAX_DEPTH`] levels with a typed
//! `sandbox_limit` error before going deeper; and every few thousand nodes it checks the run's
//! bounds (cancellation, the deadline, memory), so a huge value cannot hold the thread.
//!
//! Its output is bounded before it is made, as the Lua side's is: a string is shared by every
//! element that holds it, so 2,000 references to one 4 MB string are a few kilobytes to the
//! script and 8 GB as JSON, copied leaf by leaf before the next check of the run's memory. Each
//! string and key is spent from a budget of [`MAX_JSON`] estimated JSON bytes (less when the
//! run's memory has less room left) before it is copied, and a value past it is a
//! `sandbox_limit` error.

use ::rhai::Dynamic;
use serde_json::Value;

use super::guard;
use crate::error::{Error, ErrorCode};

/// The deepest a value crossing the sandbox boundary may nest.
pub(crate) const MAX_DEPTH: usize = 128;

/// How many nodes pass between checks of the run's bounds.
const CHECK_EVERY: usize = 4096;

/// What a conversion may produce, in estimated JSON bytes (as in Lua).
const MAX_JSON: usize = 64 << 20;

/// The estimated JSON bytes of a node besides its text (a number, a bracket, a separator).
const NODE_BYTES: usize = 8;

/// A script value as JSON; closures and other non-JSON values are refused.
pub(crate) fn to_json(value: &Dynamic) -> Result<Value, Error> {
    // What the run's memory has room for bounds a conversion too.
    let (left, short) = match guard::memory_room_current() {
        Some((room, max)) if room < MAX_JSON as u64 => (usize::try_from(room).unwrap_or(0), Some(max)),
        _ => (MAX_JSON, None),
    };
    convert(value, 0, &mut Budget { nodes: 0, left, short })
}

/// What a conversion has done so far.
struct Budget {
    nodes: usize,
    /// Estimated JSON bytes it may still produce.
    left: usize,
    /// The run's memory limit, when what it has room for, not [`MAX_JSON`], set the budget.
    short: Option<u64>,
}

impl Budget {
    /// Spends `bytes` of output before they are made.
    fn spend(&mut self, bytes: usize) -> Result<(), Error> {
        match self.left.checked_sub(bytes) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => match self.short {
                Some(max) => Err(crate::script::host::out_of_memory(max)),
                None => Err(Error::new(
                    ErrorCode::SandboxLimit,
                    format!(
                        "a value is larger than {} MiB as JSON (each reference to a string is a copy of it)",
                        MAX_JSON >> 20
                    ),
                )),
            },
        }
    }
}

fn convert(value: &Dynamic, depth: usize, budget: &mut Budget) -> Result<Value, Error> {
    budget.nodes += 1;
    if budget.nodes.is_multiple_of(CHECK_EVERY)
        && let Some(error) = guard::check_current()
    {
        return Err(error);
    }
    budget.spend(NODE_BYTES)?;
    if value.is_unit() {
        return Ok(Value::Null);
    }
    if let Ok(b) = value.as_bool() {
        return Ok(Value::Bool(b));
    }
    if let Ok(i) = value.as_int() {
        return Ok(Value::from(i));
    }
    if let Ok(f) = value.as_float() {
        return serde_json::Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| Error::validation(format!("{f} is not a JSON number")));
    }
    if let Ok(c) = value.as_char() {
        return Ok(Value::String(c.to_string()));
    }
    if let Ok(s) = value.as_immutable_string_ref() {
        budget.spend(s.len())?;
        return Ok(Value::String(s.as_str().to_owned()));
    }
    if value.is_array() || value.is_map() {
        if depth >= MAX_DEPTH {
            return Err(too_deep());
        }
        if let Ok(items) = value.as_array_ref() {
            let mut out = Vec::with_capacity(items.len());
            for item in items.iter() {
                out.push(convert(item, depth + 1, budget)?);
            }
            return Ok(Value::Array(out));
        }
        if let Ok(map) = value.as_map_ref() {
            let mut out = serde_json::Map::with_capacity(map.len());
            for (key, item) in map.iter() {
                budget.spend(key.len())?;
                out.insert(key.to_string(), convert(item, depth + 1, budget)?);
            }
            return Ok(Value::Object(out));
        }
    }
    if value.is_fnptr() {
        return Err(Error::validation(
            "a closure is not a JSON value; closures go only where a global runs them",
        ));
    }
    Err(Error::validation(format!("a value of type {} is not JSON", value.type_name())))
}

fn too_deep() -> Error {
    Error::new(
        ErrorCode::SandboxLimit,
        format!(
            "a value nests deeper than {MAX_DEPTH} levels; values that cross the sandbox boundary (step and \
             branch results, options, the run's result) may nest at most {MAX_DEPTH} deep"
        ),
    )
}

#[cfg(test)]
mod tests {
    use ::rhai::{Array, Map};
    use serde_json::json;

    use super::*;

    /// A value `depth` arrays deep, built without recursion.
    fn nested(depth: usize) -> Dynamic {
        let mut value = Dynamic::from(1_i64);
        for _ in 0..depth {
            value = Dynamic::from_array(vec![value]);
        }
        value
    }

    #[test]
    fn a_value_deeper_than_the_cap_is_a_typed_error_found_at_the_cap() {
        // 100k levels: the conversion stops at level 128, so it is immediate.
        let deep = nested(100_000);
        let error = to_json(&deep).unwrap_err();
        assert_eq!(error.code, ErrorCode::SandboxLimit);
        assert!(error.message.contains("128"), "{}", error.message);
        // Dropping a 100k-deep value recurses in rhai's own drop; the test leaks it instead.
        std::mem::forget(deep);
        assert_eq!(to_json(&nested(MAX_DEPTH - 1)).unwrap().to_string().matches('[').count(), MAX_DEPTH - 1);
        assert!(to_json(&nested(MAX_DEPTH + 1)).is_err());
    }

    #[test]
    fn shared_and_wide_values_convert_by_reference() {
        let mut map = Map::new();
        map.insert("s".into(), Dynamic::from("text").into_shared());
        map.insert("f".into(), Dynamic::from(1.5_f64));
        map.insert("c".into(), Dynamic::from('x'));
        let wide: Array = (0..10_000).map(|_| Dynamic::from_map(map.clone()).into_shared()).collect();
        let value = to_json(&Dynamic::from_array(wide)).unwrap();
        assert_eq!(value.as_array().unwrap().len(), 10_000);
        assert_eq!(value[7], json!({"s": "text", "f": 1.5, "c": "x"}));
    }
}
