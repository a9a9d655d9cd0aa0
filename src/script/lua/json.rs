//! The JSON boundary, Lua side: Lua values as JSON and back, linear in their size, capped in
//! depth and in bytes.
//!
//! # Tables as JSON
//! Lua has one table type for arrays and objects, so a table's JSON form follows its keys:
//! - no keys: `[]`, unless the table came from a JSON object (`args`, an agent's structured
//!   result, a host call's result keep their kind, so `{}` stays `{}`); options tables are
//!   objects, so an empty options table is `{}`;
//! - only positive integer keys: an array as long as the largest key, holes as `null` (a
//!   sequence `{a, b, c}` is `[a, b, c]`); a table that came from a JSON array keeps that
//!   array's length, trailing `null`s included;
//! - only string keys: an object;
//! - anything else (integer and string keys mixed, zero, negative or fractional keys, boolean
//!   or table keys): a `validation` error naming the key.
//!
//! Values: `nil` is `null` (and an absent key), booleans and strings as themselves (a string
//! must be UTF-8), integers as integers, floats as floats (NaN and infinities are refused).
//! Functions, coroutines and userdata are refused with a `validation` error. JSON coming in
//! becomes tables marked with their kind, `null` becomes `nil` (an array's `null` is a hole).
//!
//! A value is visited once per reference, so a table reachable twice is converted twice; every
//! few thousand nodes the run's bounds are checked and the output's size is capped, so a
//! cyclic or exponentially shared value ends with a typed error, never a hang.

use std::rc::Rc;

use mlua::{Lua, Table, Value as Lv};
use serde_json::Value;

use super::guard::Guard;
use super::internals::{Internals, Kind};
use crate::error::{Error, ErrorCode};

/// The deepest a value crossing the sandbox boundary may nest.
pub(super) const MAX_DEPTH: usize = 128;

/// How many nodes pass between checks of the run's bounds.
const CHECK_EVERY: u64 = 4096;

/// What a conversion may produce, in estimated JSON bytes.
pub(super) const MAX_JSON: usize = 64 << 20;

/// Converts Lua values to JSON under one budget.
pub(super) struct ToJson<'a> {
    internals: &'a Internals,
    guard: &'a Rc<Guard>,
    nodes: u64,
    budget: isize,
    limit: usize,
    /// The limit the caller asked for; `limit` is lower when the run's memory is nearly spent.
    requested: usize,
}

impl<'a> ToJson<'a> {
    pub(super) fn new(internals: &'a Internals, guard: &'a Rc<Guard>, limit: usize) -> ToJson<'a> {
        // What the host may still keep for the script bounds a conversion too.
        let requested = limit;
        let limit = limit.min(usize::try_from(guard.memory_room()).unwrap_or(usize::MAX));
        ToJson { internals, guard, nodes: 0, budget: limit as isize, limit, requested }
    }

    /// The bytes charged so far: the output's estimated size, host memory included.
    pub(super) fn spent(&self) -> usize {
        usize::try_from(self.limit as isize - self.budget).unwrap_or(0)
    }

    fn spend(&mut self, bytes: usize) -> Result<(), Error> {
        self.budget -= bytes as isize;
        if self.budget < 0 && self.limit < self.requested {
            return Err(self.guard.out_of_memory());
        }
        if self.budget < 0 {
            return Err(Error::new(
                ErrorCode::SandboxLimit,
                format!("a value is larger than {} MiB as JSON", self.limit >> 20),
            ));
        }
        Ok(())
    }

    /// A script value as JSON.
    pub(super) fn convert(&mut self, value: &Lv) -> Result<Value, Error> {
        self.value(value, 0, false)
    }

    /// An options table as JSON: an empty table is `{}`.
    pub(super) fn convert_object(&mut self, value: &Lv) -> Result<Value, Error> {
        self.value(value, 0, true)
    }

    fn value(&mut self, value: &Lv, depth: usize, empty_object: bool) -> Result<Value, Error> {
        self.nodes += 1;
        if self.nodes.is_multiple_of(CHECK_EVERY)
            && let Some(error) = self.guard.charge(CHECK_EVERY)
        {
            return Err(error);
        }
        match value {
            Lv::Nil => {
                self.spend(4)?;
                Ok(Value::Null)
            }
            Lv::Boolean(b) => {
                self.spend(5)?;
                Ok(Value::Bool(*b))
            }
            Lv::Integer(i) => {
                self.spend(20)?;
                Ok(Value::from(*i))
            }
            Lv::Number(f) => {
                self.spend(24)?;
                serde_json::Number::from_f64(*f)
                    .map(Value::Number)
                    .ok_or_else(|| Error::validation(format!("{f} is not a JSON number")))
            }
            Lv::String(s) => {
                let bytes = s.as_bytes();
                self.spend(bytes.len() + 2)?;
                match std::str::from_utf8(&bytes) {
                    Ok(text) => Ok(Value::String(text.to_owned())),
                    Err(_) => Err(Error::validation("a string that is not UTF-8 text is not a JSON value")),
                }
            }
            Lv::Table(table) => {
                if depth >= MAX_DEPTH {
                    return Err(too_deep());
                }
                self.table(table, depth, empty_object)
            }
            Lv::Function(_) => Err(Error::validation(
                "a function is not a JSON value; functions go only where a global runs them",
            )),
            Lv::Thread(_) => Err(Error::validation("a coroutine is not a JSON value")),
            Lv::Error(_) => Err(Error::validation("an error object is not a JSON value")),
            other => Err(Error::validation(format!("a value of type {} is not JSON", other.type_name()))),
        }
    }

    fn table(&mut self, table: &Table, depth: usize, empty_object: bool) -> Result<Value, Error> {
        let (table, kind) = self.internals.resolve(table);
        let mut ints: Vec<(i64, Lv)> = Vec::new();
        let mut strings: Vec<(String, Lv)> = Vec::new();
        // Keys with no JSON form, as the error would name them. Every key is read before any
        // is judged, and an error names the first of them in a fixed order, never whichever
        // raw hash order (random per process) visits first.
        let mut others: Vec<(u8, String)> = Vec::new();
        for pair in table.pairs::<Lv, Lv>() {
            let (key, item) = pair.map_err(|e| Error::internal(format!("reading a table: {e}")))?;
            match key {
                Lv::Integer(i) if i >= 1 => ints.push((i, item)),
                Lv::String(s) => match s.to_str() {
                    Ok(text) => strings.push((text.to_owned(), item)),
                    Err(_) => others.push((0, String::new())),
                },
                other => others.push(described(&other)),
            }
        }
        ints.sort_by_key(|(i, _)| *i);
        strings.sort_by(|a, b| a.0.cmp(&b.0));
        others.sort();
        if let Some((rank, shown)) = others.into_iter().next() {
            if rank == 0 {
                return Err(Error::validation("a table key that is not UTF-8 text has no JSON form"));
            }
            return Err(mixed(&shown, !ints.is_empty(), !strings.is_empty()));
        }
        if let (Some((i, _)), Some((first, _))) = (ints.first(), strings.first()) {
            // Both kinds: name the first key of each, in order.
            return Err(Error::validation(format!(
                "a table with the integer key {i} and the string key {first:?} has no JSON form: a table is a \
                 JSON array (keys 1, 2, 3, ...) or a JSON object (string keys), not both"
            )));
        }
        let declared = if kind == Some(Kind::Array) { self.internals.declared_len(&table) } else { 0 };
        if ints.is_empty() && strings.is_empty() && declared == 0 {
            self.spend(2)?;
            let object = kind == Some(Kind::Object) || (kind.is_none() && empty_object);
            return Ok(if object { Value::Object(serde_json::Map::new()) } else { Value::Array(Vec::new()) });
        }
        if kind == Some(Kind::Object) && !ints.is_empty() {
            return Err(Error::validation(
                "a table that came from a JSON object has integer keys; an object's keys are strings",
            ));
        }
        if kind == Some(Kind::Array) && !strings.is_empty() {
            return Err(Error::validation(
                "a table that came from a JSON array has string keys; an array's keys are 1, 2, 3, ...",
            ));
        }
        if !ints.is_empty() || declared > 0 {
            let len = ints.iter().map(|(i, _)| *i).max().unwrap_or(0).max(declared as i64);
            // A comma per slot and a null per hole, charged before anything is built, so a
            // sparse table cannot blow up the output.
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            let holes = len.saturating_sub(ints.len());
            // A slot is a host value (a `null` hole too) as well as its text.
            let slot = std::mem::size_of::<Value>();
            self.spend(len.saturating_mul(slot).saturating_add(holes.saturating_mul(4)))?;
            let mut out = vec![Value::Null; len];
            for (i, item) in ints {
                out[(i - 1) as usize] = self.value(&item, depth + 1, false)?;
            }
            return Ok(Value::Array(out));
        }
        let mut out = serde_json::Map::new();
        for (key, item) in strings {
            self.spend(key.len() + 4)?;
            let value = self.value(&item, depth + 1, false)?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// A key with no JSON form, ranked for a fixed order (non-UTF-8 text 0, numbers 1, others 2)
/// and as an error names it.
fn described(key: &Lv) -> (u8, String) {
    match key {
        Lv::Integer(i) => (1, format!("the integer key {i:020}")),
        Lv::Number(f) => (1, format!("the number key {f}")),
        other => (2, format!("a {} key", other.type_name())),
    }
}

fn mixed(shown: &str, ints: bool, strings: bool) -> Error {
    let shown = match shown.strip_prefix("the integer key ") {
        // Padded for ordering; shown as written.
        Some(digits) => format!("the integer key {}", digits.parse::<i64>().unwrap_or_default()),
        None => shown.to_owned(),
    };
    let why = if ints || strings {
        "a table is a JSON array (keys 1, 2, 3, ...) or a JSON object (string keys), not both"
    } else {
        "a JSON array has keys 1, 2, 3, ... and a JSON object has string keys"
    };
    Error::validation(format!("a table with {shown} has no JSON form: {why}"))
}

fn too_deep() -> Error {
    Error::new(
        ErrorCode::SandboxLimit,
        format!(
            "a value nests deeper than {MAX_DEPTH} levels; values that cross the sandbox boundary (step and \
             branch results, options, the run's result) may nest at most {MAX_DEPTH} deep (a table that \
             contains itself nests forever)"
        ),
    )
}

/// A JSON value as a Lua value: objects and arrays become tables marked with their kind.
pub(super) fn from_json(lua: &Lua, internals: &Internals, value: &Value) -> Result<Lv, Error> {
    from_json_at(lua, internals, value, 0).map_err(|e| lua_error(&e))
}

fn from_json_at(lua: &Lua, internals: &Internals, value: &Value, depth: usize) -> mlua::Result<Lv> {
    if depth > MAX_DEPTH + 1 {
        return Err(mlua::Error::external(too_deep()));
    }
    Ok(match value {
        Value::Null => Lv::Nil,
        Value::Bool(b) => Lv::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Lv::Integer(i),
            None => Lv::Number(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => Lv::String(lua.create_string(s)?),
        Value::Array(items) => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                let item = from_json_at(lua, internals, item, depth + 1)?;
                if !item.is_nil() {
                    table.raw_set(i + 1, item)?;
                }
            }
            if items.last().is_some_and(Value::is_null) {
                // Trailing nulls are absent keys: the table keeps the array's length itself.
                let mt = lua.create_table()?;
                mt.raw_set(&internals.private, "array")?;
                mt.raw_set(&internals.array_mt, items.len() as i64)?;
                table.set_metatable(Some(mt))?;
            } else {
                table.set_metatable(Some(internals.array_mt.clone()))?;
            }
            Lv::Table(table)
        }
        Value::Object(map) => {
            let table = lua.create_table_with_capacity(0, map.len())?;
            for (key, item) in map {
                let item = from_json_at(lua, internals, item, depth + 1)?;
                if !item.is_nil() {
                    table.raw_set(key.as_str(), item)?;
                }
            }
            table.set_metatable(Some(internals.object_mt.clone()))?;
            Lv::Table(table)
        }
    })
}

/// An mlua error met while building a value, as a cairn error.
fn lua_error(error: &mlua::Error) -> Error {
    match error {
        mlua::Error::MemoryError(_) => {
            Error::new(ErrorCode::SandboxLimit, "the script's memory limit was reached")
        }
        mlua::Error::ExternalError(inner) => match inner.downcast_ref::<Error>() {
            Some(error) => error.clone(),
            None => Error::internal(inner.to_string()),
        },
        other => Error::internal(other.to_string()),
    }
}
