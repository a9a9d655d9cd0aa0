//! `next` and `pairs` in a fixed order: numbers (by value), then strings (by bytes), then
//! booleans (false first), the order Rhai's maps iterate in.
//!
//! Lua 5.4 seeds its string hashes per process, so its own `next` visits a table's keys in an
//! order that differs from process to process, and a workflow iterating a table would make its
//! calls in a different order on every run. Here a traversal takes a sorted snapshot of the
//! table's keys when it starts (`next(t, nil)`) and walks it, reading each value live (a key
//! whose value became nil meanwhile is skipped); a few recent snapshots are kept, so nested
//! traversals stay linear. Keys that are tables, functions or coroutines have no stable order
//! and are refused. Sorting is charged to the operation budget.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::rc::Rc;

use mlua::{Lua, MultiValue, Table, Value as Lv};

use super::guard::Guard;
use super::internals::Internals;

/// How many snapshots are kept (one per table being traversed).
const SNAPSHOTS: usize = 8;

/// Recent traversals' key snapshots, most recent last.
#[derive(Default)]
pub(super) struct Snapshots(RefCell<Vec<(Table, Rc<Vec<Lv>>)>>);

fn rank(key: &Lv) -> Option<u8> {
    match key {
        Lv::Integer(_) | Lv::Number(_) => Some(0),
        Lv::String(_) => Some(1),
        Lv::Boolean(_) => Some(2),
        _ => None,
    }
}

/// An integer against a float, exactly (a total order with no precision loss).
fn int_float(i: i64, f: f64) -> Ordering {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if f >= TWO_63 {
        return Ordering::Less;
    }
    if f < -TWO_63 {
        return Ordering::Greater;
    }
    let whole = f.floor();
    match i.cmp(&(whole as i64)) {
        Ordering::Equal if f > whole => Ordering::Less,
        other => other,
    }
}

/// The traversal order of two keys of the ranks above.
pub(super) fn compare(a: &Lv, b: &Lv) -> Ordering {
    match (a, b) {
        (Lv::Integer(x), Lv::Integer(y)) => x.cmp(y),
        (Lv::Number(x), Lv::Number(y)) => x.total_cmp(y),
        (Lv::Integer(x), Lv::Number(y)) => int_float(*x, *y),
        (Lv::Number(x), Lv::Integer(y)) => int_float(*y, *x).reverse(),
        (Lv::String(x), Lv::String(y)) => x.as_bytes().cmp(&y.as_bytes()),
        (Lv::Boolean(x), Lv::Boolean(y)) => x.cmp(y),
        _ => rank(a).cmp(&rank(b)),
    }
}

impl Snapshots {
    fn find(&self, table: &Table) -> Option<Rc<Vec<Lv>>> {
        let snapshots = self.0.borrow();
        snapshots.iter().rev().find(|(t, _)| t == table).map(|(_, keys)| keys.clone())
    }

    fn take(&self, table: &Table, guard: &Guard, source: &Table) -> mlua::Result<Rc<Vec<Lv>>> {
        let mut keys = Vec::new();
        for pair in source.pairs::<Lv, Lv>() {
            let (key, _) = pair?;
            if rank(&key).is_none() {
                return Err(mlua::Error::runtime(format!(
                    "next/pairs cannot order a table with a {} key: its place would differ from run to run; \
                     key the table by strings or numbers",
                    key.type_name()
                )));
            }
            keys.push(key);
        }
        let n = keys.len() as u64;
        if let Some(error) = guard.charge(n.saturating_mul(u64::from(64 - n.leading_zeros()).max(1))) {
            return Err(mlua::Error::external(error));
        }
        keys.sort_by(compare);
        let keys = Rc::new(keys);
        let mut snapshots = self.0.borrow_mut();
        snapshots.retain(|(t, _)| t != table);
        if snapshots.len() == SNAPSHOTS {
            snapshots.remove(0);
        }
        snapshots.push((table.clone(), keys.clone()));
        Ok(keys)
    }
}

/// `next(t, k)` in the fixed order.
pub(super) fn next(
    internals: &Internals,
    snapshots: &Snapshots,
    guard: &Guard,
    table: &Table,
    key: Lv,
) -> mlua::Result<MultiValue> {
    // A read-only view iterates its backing table's keys and reads values through itself.
    let (source, _) = internals.resolve(table);
    let view = source != *table;
    let read =
        |k: &Lv| -> mlua::Result<Lv> { if view { table.get(k.clone()) } else { source.raw_get(k.clone()) } };
    let (keys, mut at) = if key.is_nil() {
        (snapshots.take(table, guard, &source)?, 0)
    } else {
        let position = |keys: &Rc<Vec<Lv>>| keys.binary_search_by(|k| compare(k, &key)).ok();
        match snapshots.find(table).and_then(|keys| position(&keys).map(|i| (keys, i + 1))) {
            Some(found) => found,
            None => {
                let keys = snapshots.take(table, guard, &source)?;
                match position(&keys) {
                    Some(i) => (keys, i + 1),
                    None => return Err(mlua::Error::runtime("invalid key to 'next'")),
                }
            }
        }
    };
    while at < keys.len() {
        let value = read(&keys[at])?;
        if !value.is_nil() {
            return Ok(MultiValue::from_iter([keys[at].clone(), value]));
        }
        at += 1;
    }
    Ok(MultiValue::from_iter([Lv::Nil]))
}

/// Registers `next` and `pairs` (as helpers the prelude installs).
pub(super) fn functions(
    lua: &Lua,
    internals: &Rc<Internals>,
    guard: &Rc<Guard>,
) -> mlua::Result<(mlua::Function, mlua::Function)> {
    let snapshots = Rc::new(Snapshots::default());
    let (i, s, g) = (internals.clone(), snapshots.clone(), guard.clone());
    let next_fn = lua.create_function(move |_, (table, key): (Lv, Lv)| match table {
        Lv::Table(table) => next(&i, &s, &g, &table, key),
        other => Err(mlua::Error::runtime(format!(
            "bad argument #1 to 'next' (table expected, got {})",
            other.type_name()
        ))),
    })?;
    let next_for_pairs = next_fn.clone();
    let pairs_fn = lua.create_function(move |_, value: Lv| {
        let table = match &value {
            Lv::Table(table) => table.clone(),
            other => {
                return Err(mlua::Error::runtime(format!(
                    "bad argument #1 to 'pairs' (table expected, got {})",
                    other.type_name()
                )));
            }
        };
        if let Some(mt) = table.metatable()
            && let Ok(Lv::Function(custom)) = mt.raw_get::<Lv>("__pairs")
        {
            return custom.call::<MultiValue>(value);
        }
        Ok(MultiValue::from_iter([Lv::Function(next_for_pairs.clone()), value, Lv::Nil]))
    })?;
    Ok((next_fn, pairs_fn))
}
