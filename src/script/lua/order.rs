//! `next` and `pairs` in a fixed order: numbers (by value), then strings (by bytes), then
//! booleans (false first), the order Rhai's maps iterate in.
//!
//! Lua 5.4 seeds its string hashes per process, so its own `next` visits a table's keys in an
//! order that differs from process to process, and a workflow iterating a table would make its
//! calls in a different order on every run. Here a traversal takes a sorted snapshot of the
//! table's keys when it starts (`next(t, nil)`) and walks it, reading each value live (a key
//! whose value became nil meanwhile is skipped). Each `pairs` traversal keeps its own snapshot;
//! `next` keeps a few recent ones per coroutine, so nested traversals stay linear and branches
//! running side by side never evict each other's. Keys that are tables, functions or coroutines have no stable order
//! and are refused. Sorting is charged to the operation budget.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::rc::Rc;

use mlua::thread::ThreadStatus;
use mlua::{Lua, MultiValue, Table, Thread, Value as Lv};

use super::guard::Guard;
use super::internals::Internals;

/// How many snapshots one coroutine keeps for `next` (one per table it is traversing).
const SNAPSHOTS: usize = 8;

/// `next`'s recent key snapshots, most recent last, each owned by the coroutine (the script's
/// main thread or a branch) that took it. A branch's traversals never evict another's, so
/// which snapshot survives does not depend on how branches interleave.
#[derive(Default)]
pub(super) struct Snapshots(RefCell<Vec<Kept>>);

/// One kept snapshot: the coroutine that took it, the table and its sorted keys.
type Kept = (Thread, Table, Rc<Vec<Lv>>);

/// One `pairs` traversal's own snapshot: the table it walks and its sorted keys.
type Own = RefCell<Option<(Table, Rc<Vec<Lv>>)>>;

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

/// The sorted keys of `source` (a table, or a read-only view's backing table), charged to the
/// operation budget.
fn snapshot(guard: &Guard, source: &Table) -> mlua::Result<Rc<Vec<Lv>>> {
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
    Ok(Rc::new(keys))
}

impl Snapshots {
    fn find(&self, thread: &Thread, table: &Table) -> Option<Rc<Vec<Lv>>> {
        let snapshots = self.0.borrow();
        snapshots.iter().rev().find(|(h, t, _)| h == thread && t == table).map(|(_, _, keys)| keys.clone())
    }

    fn keep(&self, thread: &Thread, table: &Table, keys: &Rc<Vec<Lv>>) {
        let mut snapshots = self.0.borrow_mut();
        // A finished branch's snapshots can never be asked for again.
        snapshots.retain(|(h, t, _)| {
            let finished = matches!(h.status(), ThreadStatus::Finished | ThreadStatus::Error);
            let replaced = h == thread && t == table;
            !(finished || replaced)
        });
        let mine = snapshots.iter().filter(|(h, _, _)| h == thread).count();
        if mine >= SNAPSHOTS
            && let Some(oldest) = snapshots.iter().position(|(h, _, _)| h == thread)
        {
            snapshots.remove(oldest);
        }
        snapshots.push((thread.clone(), table.clone(), keys.clone()));
    }
}

/// Where `next(t, key)` goes on from: the snapshot that holds `key` and the index after it.
/// `recent` is the snapshot a traversal of `table` last took, if any; a key it does not hold
/// takes a fresh one (the key must be in the table then).
fn resume_at(
    recent: Option<Rc<Vec<Lv>>>,
    fresh: impl FnOnce() -> mlua::Result<Rc<Vec<Lv>>>,
    key: &Lv,
) -> mlua::Result<(Rc<Vec<Lv>>, usize)> {
    let position = |keys: &Rc<Vec<Lv>>| keys.binary_search_by(|k| compare(k, key)).ok();
    if let Some(found) = recent.and_then(|keys| position(&keys).map(|i| (keys, i + 1))) {
        return Ok(found);
    }
    let keys = fresh()?;
    match position(&keys) {
        Some(i) => Ok((keys, i + 1)),
        None => Err(mlua::Error::runtime("invalid key to 'next'")),
    }
}

/// The first key from `at` on whose value is not nil (values are read live), with its value.
fn walk_from(keys: &[Lv], mut at: usize, read: impl Fn(&Lv) -> mlua::Result<Lv>) -> mlua::Result<MultiValue> {
    while at < keys.len() {
        let value = read(&keys[at])?;
        if !value.is_nil() {
            return Ok(MultiValue::from_iter([keys[at].clone(), value]));
        }
        at += 1;
    }
    Ok(MultiValue::from_iter([Lv::Nil]))
}

/// `next(t, k)` in the fixed order, with the calling coroutine's snapshots.
pub(super) fn next(
    lua: &Lua,
    internals: &Internals,
    snapshots: &Snapshots,
    guard: &Guard,
    table: &Table,
    key: Lv,
) -> mlua::Result<MultiValue> {
    let thread = lua.current_thread();
    traverse(
        internals,
        guard,
        table,
        key,
        || snapshots.find(&thread, table),
        |keys| {
            snapshots.keep(&thread, table, keys);
        },
    )
}

/// One `pairs` traversal's step: like [`next`], with a snapshot of its own that no other
/// traversal (in this coroutine or another) can evict.
fn pairs_step(
    internals: &Internals,
    own: &Own,
    guard: &Guard,
    table: &Table,
    key: Lv,
) -> mlua::Result<MultiValue> {
    let recent = own.borrow().as_ref().filter(|(t, _)| t == table).map(|(_, keys)| keys.clone());
    traverse(
        internals,
        guard,
        table,
        key,
        || recent,
        |keys| *own.borrow_mut() = Some((table.clone(), keys.clone())),
    )
}

/// The step after `key` of a traversal of `table` (`next` and `pairs` alike): from the snapshot
/// `recent` gives when it holds `key`, else a fresh one; `keep` is handed the snapshot walked,
/// for the traversal's next step.
fn traverse(
    internals: &Internals,
    guard: &Guard,
    table: &Table,
    key: Lv,
    recent: impl FnOnce() -> Option<Rc<Vec<Lv>>>,
    keep: impl FnOnce(&Rc<Vec<Lv>>),
) -> mlua::Result<MultiValue> {
    // A read-only view iterates its backing table's keys and reads values through itself.
    let (source, _) = internals.resolve(table);
    let view = source != *table;
    let read =
        |k: &Lv| -> mlua::Result<Lv> { if view { table.get(k.clone()) } else { source.raw_get(k.clone()) } };
    let (keys, at) = if key.is_nil() {
        (snapshot(guard, &source)?, 0)
    } else {
        resume_at(recent(), || snapshot(guard, &source), &key)?
    };
    keep(&keys);
    walk_from(&keys, at, read)
}

/// Registers `next` and `pairs` (as helpers the prelude installs).
pub(super) fn functions(
    lua: &Lua,
    internals: &Rc<Internals>,
    guard: &Rc<Guard>,
) -> mlua::Result<(mlua::Function, mlua::Function)> {
    let snapshots = Rc::new(Snapshots::default());
    let (i, s, g) = (internals.clone(), snapshots.clone(), guard.clone());
    let next_fn = lua.create_function(move |lua, (table, key): (Lv, Lv)| match table {
        Lv::Table(table) => next(lua, &i, &s, &g, &table, key),
        other => Err(mlua::Error::runtime(format!(
            "bad argument #1 to 'next' (table expected, got {})",
            other.type_name()
        ))),
    })?;
    let (i, g) = (internals.clone(), guard.clone());
    let pairs_fn = lua.create_function(move |lua, value: Lv| {
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
            // The prelude's `pairs` calls it, from Lua (see `internals::Callbacks`).
            return Ok(MultiValue::from_iter([Lv::Function(custom), Lv::Table(i.private.clone()), value]));
        }
        // Each traversal gets an iterator with its own snapshot.
        let (i, g, own) = (i.clone(), g.clone(), Own::default());
        let step = lua.create_function(move |_, (table, key): (Lv, Lv)| match table {
            Lv::Table(table) => pairs_step(&i, &own, &g, &table, key),
            other => Err(mlua::Error::runtime(format!(
                "bad argument #1 to 'next' (table expected, got {})",
                other.type_name()
            ))),
        })?;
        Ok(MultiValue::from_iter([Lv::Function(step), value, Lv::Nil]))
    })?;
    Ok((next_fn, pairs_fn))
}
