//! What the bound knows of a value: known JSON (a literal, or read from the run's `args`), a
//! range or a length, a list or map holding functions, a function, or nothing.
//!
//! The invariant that keeps the bound sound: an [`Abs::Unknown`] is never a function that calls
//! agents, because such a function is reported unbounded wherever it would turn unknown
//! (`eval.rs`, `lose`). Calling an unknown value therefore counts nothing.

use std::rc::Rc;

use serde_json::Value;

use super::shape::{Dialect, FnId, Pos};

/// Loops over at most this many known elements may be walked element by element.
pub(crate) const PER_ELEMENT_LIMIT: usize = 64;

/// What the analysis knows of a value.
#[derive(Debug, Clone)]
pub(crate) enum Abs {
    /// A JSON value known exactly (a literal, or read from `args`).
    Json(Value),
    /// An integer range `start..end` (exclusive; Rhai).
    Range(i64, i64),
    /// A list of known length whose elements are unknown.
    Sized(u64),
    /// A list holding something other than JSON (functions).
    List(Rc<Vec<Abs>>),
    /// A map holding something other than JSON (Rhai).
    Map(Rc<Vec<(String, Abs)>>),
    /// A function.
    Func(Rc<Func>),
    /// Unknown data: never a function that calls agents.
    Unknown,
}

/// A function value.
#[derive(Debug)]
pub(crate) struct Func {
    pub(crate) callee: Callee,
    /// Values passed before the arguments (a Rhai closure's captured variables, a curried
    /// pointer's).
    pub(crate) captured: Vec<Abs>,
    /// The scope a Lua function closes over.
    pub(crate) scope: Option<Rc<Vec<(String, Abs)>>>,
    /// Where a Lua function is made.
    pub(crate) pos: Pos,
}

/// What a function value runs.
#[derive(Debug, Clone)]
pub(crate) enum Callee {
    /// A Rhai script function or closure, by name (its arity picks the body).
    Named(String),
    /// A cairn global by pointer (`Fn("agent")`).
    Global(String),
    /// A Lua function body; `name` is the name it sees itself by.
    Body { id: FnId, name: Option<String> },
}

impl Func {
    /// A function by name or pointer, capturing nothing.
    pub(crate) fn named(callee: Callee) -> Func {
        Func { callee, captured: Vec::new(), scope: None, pos: (1, 1) }
    }
}

impl Abs {
    pub(crate) fn int(&self) -> Option<i64> {
        match self {
            Abs::Json(value) => value.as_i64(),
            _ => None,
        }
    }

    /// Whether it is a string, number, boolean or nil: nothing a reference can change.
    pub(crate) fn is_scalar(&self) -> bool {
        matches!(self, Abs::Json(Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_)))
    }

    /// How many elements iterating it yields (Rhai's `for` and `len`; Lua's `#` and `pairs`),
    /// when known.
    pub(crate) fn len(&self, dialect: Dialect) -> Option<u64> {
        match (self, dialect) {
            (Abs::Json(Value::Array(items)), _) => Some(items.len() as u64),
            (Abs::Json(Value::String(text)), Dialect::Rhai) => Some(text.chars().count() as u64),
            (Abs::Json(Value::Object(map)), Dialect::Lua) => Some(map.len() as u64),
            (Abs::Range(start, end), _) => Some(u64::try_from(end.saturating_sub(*start)).unwrap_or(0)),
            (Abs::Sized(n), _) => Some(*n),
            (Abs::List(items), _) => Some(items.len() as u64),
            _ => None,
        }
    }

    /// Rhai: its elements, when known and few (a list of functions, whatever its length).
    pub(crate) fn elements(&self) -> Option<Vec<Abs>> {
        match self {
            Abs::Json(Value::Array(items)) if items.len() <= PER_ELEMENT_LIMIT => {
                Some(items.iter().cloned().map(Abs::Json).collect())
            }
            Abs::Json(Value::String(text)) if text.chars().count() <= PER_ELEMENT_LIMIT => {
                Some(text.chars().map(|c| Abs::Json(Value::String(c.to_string()))).collect())
            }
            Abs::Range(start, end) if end.saturating_sub(*start) <= PER_ELEMENT_LIMIT as i64 => {
                Some((*start..*end).map(|n| Abs::Json(Value::from(n))).collect())
            }
            Abs::List(items) => Some(items.to_vec()),
            _ => None,
        }
    }

    /// Lua: its (key, value) pairs in iteration order, when known and few (a list of
    /// functions, whatever its length). The runtime's `pairs` iterates a map in key order.
    pub(crate) fn pairs(&self) -> Option<Vec<(Abs, Abs)>> {
        match self {
            Abs::Json(Value::Array(items)) if items.len() <= PER_ELEMENT_LIMIT => Some(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| (Abs::Json(Value::from(i + 1)), Abs::Json(item.clone())))
                    .collect(),
            ),
            Abs::Json(Value::Object(map)) if map.len() <= PER_ELEMENT_LIMIT => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                Some(
                    entries
                        .into_iter()
                        .map(|(k, v)| (Abs::Json(Value::String(k.clone())), Abs::Json(v.clone())))
                        .collect(),
                )
            }
            Abs::List(items) => Some(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| (Abs::Json(Value::from(i + 1)), item.clone()))
                    .collect(),
            ),
            _ => None,
        }
    }

    /// Whether it holds functions (whose calls must be followed element by element).
    pub(crate) fn holds_functions(&self) -> bool {
        match self {
            Abs::Func(_) => true,
            Abs::List(items) => items.iter().any(Abs::holds_functions),
            Abs::Map(entries) => entries.iter().any(|(_, value)| value.holds_functions()),
            _ => false,
        }
    }

    /// The functions it holds, in order (Lua: a function, or a list of them).
    pub(crate) fn functions(&self) -> Vec<Rc<Func>> {
        match self {
            Abs::Func(func) => vec![func.clone()],
            Abs::List(items) => items.iter().flat_map(Abs::functions).collect(),
            _ => Vec::new(),
        }
    }

    /// A field or element by a known key. A map's missing field reads as `()`/nil; Rhai
    /// indexes arrays from 0 (negative from the end), Lua from 1.
    pub(crate) fn member(&self, key: &Abs, dialect: Dialect) -> Abs {
        match (self, key, dialect) {
            (Abs::Json(Value::Object(map)), Abs::Json(Value::String(name)), _) => {
                Abs::Json(map.get(name).cloned().unwrap_or(Value::Null))
            }
            (Abs::Json(Value::Array(items)), Abs::Json(index), Dialect::Rhai) => index
                .as_i64()
                .and_then(|i| index_of(items.len(), i))
                .and_then(|i| items.get(i).cloned())
                .map_or(Abs::Unknown, Abs::Json),
            (Abs::Json(Value::Array(items)), Abs::Json(index), Dialect::Lua) => match index.as_i64() {
                Some(i) if i >= 1 => {
                    items.get((i - 1) as usize).cloned().map_or(Abs::Json(Value::Null), Abs::Json)
                }
                _ => Abs::Unknown,
            },
            (Abs::List(items), Abs::Json(index), Dialect::Rhai) => index
                .as_i64()
                .and_then(|i| index_of(items.len(), i))
                .and_then(|i| items.get(i).cloned())
                .unwrap_or(Abs::Unknown),
            (Abs::List(items), Abs::Json(index), Dialect::Lua) => match index.as_i64() {
                Some(i) if i >= 1 => items.get((i - 1) as usize).cloned().unwrap_or(Abs::Unknown),
                _ => Abs::Unknown,
            },
            (Abs::Map(entries), Abs::Json(Value::String(name)), _) => entries
                .iter()
                .rev()
                .find(|(key, _)| key == name)
                .map_or(Abs::Unknown, |(_, value)| value.clone()),
            _ => Abs::Unknown,
        }
    }
}

/// Rhai's index rule: negative indexes count from the end.
pub(crate) fn index_of(len: usize, index: i64) -> Option<usize> {
    if index >= 0 {
        usize::try_from(index).ok()
    } else {
        len.checked_sub(usize::try_from(index.unsigned_abs()).ok()?)
    }
}
