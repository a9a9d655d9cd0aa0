//! Branches cannot write what they share.
//!
//! A Lua closure shares its upvalues (the enclosing locals it captured) with every other
//! closure that captured them, and tables are shared by reference. `parallel` branches and
//! `pipeline` stages run as coroutines that interleave at every engine call, so a branch that
//! wrote a captured local or a captured table would make the run's values depend on which
//! model call answered first. So each branch runs a private copy of its function:
//!
//! - the function is re-instantiated from its own bytecode with fresh upvalue cells (cells the
//!   original shared stay shared among the copies, so a helper and the branch still see one
//!   variable), each holding a private copy of what the original held;
//! - a captured table is seen through a read-only view: reads copy lazily (a function read
//!   from it is itself a private copy; nested tables are views), writes by any route
//!   (assignment, `rawset`, `table.insert`, `table.sort`, ...) raise a `sandbox_violation`;
//! - the global table is such a view too: a branch reads globals and cannot assign them;
//! - a write to a captured local lands in the branch's private cell (nobody else sees it) and
//!   is reported as a `sandbox_violation` at the branch's next cairn call or at its end,
//!   before anything it computed reaches the journal;
//! - a captured coroutine is refused (resuming it from two branches would race).
//!
//! The libraries, `args`, `budget` and the cairn globals are read-only already and are shared
//! as they are. Values created inside the branch are the branch's own and may be written
//! freely. As in Rhai, the violation is uncatchable (`pcall` re-raises it: see
//! `sandbox::uncatchable`) and ends its branch or step body, the same way on every run; it
//! does not stop the siblings, which run to their own ends before the fan-out raises the first
//! violation in branch order (`engine::fanout`), so what they journaled never depends on when
//! the write happened.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::{Rc, Weak};

use mlua::{Function, Lua, Table, Value as Lv};

use super::internals::{Hidden, Internals};
use crate::error::{Error, ErrorCode};

/// How deep a chain of captured functions may go before the copy refuses it.
const MAX_COPY_DEPTH: usize = 128;

/// One branch's private copies.
pub(super) struct Isolation {
    hidden: Rc<Hidden>,
    internals: Rc<Internals>,
    globals: Table,
    this: Weak<Isolation>,
    /// Original table or function (by address; the original is alive for the whole fan-out,
    /// since the code that started it holds it) → its copy.
    copies: RefCell<HashMap<usize, Lv>>,
    /// Original upvalue cell → the copy and index that holds its private cell.
    cells: RefCell<HashMap<usize, (Function, i64)>>,
    /// Every private cell, with its name and the value it was given.
    watched: RefCell<Vec<(Function, i64, String, Lv)>>,
    /// A branch's copies, or a step body's.
    place: Place,
}

/// Where isolated code runs, for the violation's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// A `parallel` branch or `pipeline` stage: siblings run at once.
    Branch,
    /// A `step` body: a replay serves the step's value without running it.
    Step,
}

fn violation(place: Place, what: &str) -> Error {
    if place == Place::Step {
        return crate::script::captured::step_violation(what);
    }
    Error::new(
        ErrorCode::SandboxViolation,
        format!(
            "sandbox violation: {what} inside a parallel branch or pipeline stage; values captured from \
             outside a branch are read-only there, since the branches run at once: return values from the \
             branch instead and combine them after parallel or pipeline returns"
        ),
    )
}

fn lua_err(error: mlua::Error) -> Error {
    match error {
        mlua::Error::MemoryError(_) => {
            Error::new(ErrorCode::SandboxLimit, "the script's memory limit was reached")
        }
        mlua::Error::ExternalError(inner) => match inner.downcast_ref::<Error>() {
            Some(error) => error.clone(),
            None => Error::internal(inner.to_string()),
        },
        mlua::Error::CallbackError { cause, .. } => lua_err((*cause).clone()),
        other => Error::internal(format!("copying a branch's captured values: {other}")),
    }
}

/// Whether two values are the same value (references by identity).
fn same(a: &Lv, b: &Lv) -> bool {
    match (a, b) {
        (Lv::Nil, Lv::Nil) => true,
        (Lv::Boolean(x), Lv::Boolean(y)) => x == y,
        (Lv::Integer(x), Lv::Integer(y)) => x == y,
        (Lv::Number(x), Lv::Number(y)) => x.to_bits() == y.to_bits(),
        (Lv::String(x), Lv::String(y)) => x.as_bytes() == y.as_bytes(),
        (Lv::LightUserData(x), Lv::LightUserData(y)) => x == y,
        (Lv::Table(_) | Lv::Function(_) | Lv::Thread(_) | Lv::UserData(_), _) => {
            std::mem::discriminant(a) == std::mem::discriminant(b) && a.to_pointer() == b.to_pointer()
        }
        _ => false,
    }
}

impl Isolation {
    pub(super) fn new(
        lua: &Lua,
        hidden: &Rc<Hidden>,
        internals: &Rc<Internals>,
        place: Place,
    ) -> Rc<Isolation> {
        Rc::new_cyclic(|this| Isolation {
            hidden: hidden.clone(),
            internals: internals.clone(),
            globals: lua.globals(),
            this: this.clone(),
            copies: RefCell::new(HashMap::new()),
            cells: RefCell::new(HashMap::new()),
            watched: RefCell::new(Vec::new()),
            place,
        })
    }

    /// The branch's private copy of `function`.
    pub(super) fn function(&self, lua: &Lua, function: &Function) -> Result<Function, Error> {
        match self.copy(lua, Lv::Function(function.clone()), 0)? {
            Lv::Function(copy) => Ok(copy),
            _ => Err(Error::internal("a function's copy is not a function")),
        }
    }

    /// Reports a write to a captured local, if the branch made one.
    pub(super) fn check_writes(&self) -> Result<(), Error> {
        let watched = self.watched.borrow();
        for (function, index, name, given) in watched.iter() {
            let (_, now): (Lv, Lv) =
                self.hidden.getupvalue.call((function.clone(), *index)).map_err(lua_err)?;
            if !same(&now, given) {
                let what = if name == "_ENV" {
                    "assignment to _ENV".to_owned()
                } else {
                    format!("assignment to '{name}'")
                };
                return Err(violation(self.place, &what));
            }
        }
        Ok(())
    }

    fn copy(&self, lua: &Lua, value: Lv, depth: usize) -> Result<Lv, Error> {
        if depth > MAX_COPY_DEPTH {
            return Err(Error::new(
                ErrorCode::SandboxLimit,
                format!("the functions a branch captured nest deeper than {MAX_COPY_DEPTH} levels"),
            ));
        }
        let value = match value {
            // Another isolation's view (a step body or a nested fan-out's branch reaching what its
            // enclosing branch captured): this isolation views the captured table itself, so
            // what it copies from there (a function and its upvalue cells) is its own, and a
            // write through it is seen by this isolation's checks, not shared with its siblings
            // or left for the enclosing branch to find after a step's result was journaled.
            Lv::Table(table) if self.is_view(&table) => {
                match table.metatable().map(|mt| mt.raw_get::<Lv>(&self.internals.private)) {
                    Some(Ok(backing @ Lv::Table(_))) => backing,
                    _ => return Err(Error::internal("a captured table's view has no table behind it")),
                }
            }
            value => value,
        };
        match &value {
            Lv::Table(table) => {
                if let Some(mt) = table.metatable()
                    && let Ok(Lv::Table(_)) = mt.raw_get::<Lv>(&self.internals.private)
                {
                    // Read-only already (a library, args, budget).
                    return Ok(value);
                }
                let key = value.to_pointer() as usize;
                if let Some(copy) = self.copies.borrow().get(&key) {
                    return Ok(copy.clone());
                }
                let view = self.view(lua, table, depth).map_err(lua_err)?;
                self.copies.borrow_mut().insert(key, Lv::Table(view.clone()));
                Ok(Lv::Table(view))
            }
            Lv::Function(function) => {
                let info = function.info();
                if info.what == "C" || info.source.as_deref() == Some("=cairn") {
                    return Ok(value);
                }
                let key = value.to_pointer() as usize;
                if let Some(copy) = self.copies.borrow().get(&key) {
                    return Ok(copy.clone());
                }
                self.clone_function(lua, function, key, depth).map(Lv::Function)
            }
            Lv::Thread(_) => Err(violation(self.place, "use of a coroutine created outside the branch")),
            Lv::UserData(_) | Lv::Error(_) => {
                Err(Error::validation("a branch captured a value it cannot copy"))
            }
            _ => Ok(value),
        }
    }

    fn clone_function(
        &self,
        lua: &Lua,
        function: &Function,
        key: usize,
        depth: usize,
    ) -> Result<Function, Error> {
        let bytes = lua.create_string(function.dump(false)).map_err(lua_err)?;
        let copy: Function = self.hidden.load.call((bytes, Lv::Nil, "b")).map_err(lua_err)?;
        self.copies.borrow_mut().insert(key, Lv::Function(copy.clone()));
        for index in 1_i64.. {
            let (name, value): (Lv, Lv) =
                self.hidden.getupvalue.call((function.clone(), index)).map_err(lua_err)?;
            let name = match name {
                Lv::String(name) => name.to_string_lossy(),
                _ => break,
            };
            let cell = match self.hidden.upvalueid.call::<Lv>((function.clone(), index)).map_err(lua_err)? {
                Lv::LightUserData(id) => id.0 as usize,
                _ => return Err(Error::internal("an upvalue has no identity")),
            };
            let shared = self.cells.borrow().get(&cell).cloned();
            match shared {
                Some((other, other_index)) => {
                    self.hidden
                        .upvaluejoin
                        .call::<()>((copy.clone(), index, other, other_index))
                        .map_err(lua_err)?;
                }
                None => {
                    let private = self.copy(lua, value, depth + 1)?;
                    self.hidden
                        .setupvalue
                        .call::<Lv>((copy.clone(), index, private.clone()))
                        .map_err(lua_err)?;
                    self.cells.borrow_mut().insert(cell, (copy.clone(), index));
                    self.watched.borrow_mut().push((copy.clone(), index, name, private));
                }
            }
        }
        Ok(copy)
    }

    /// Whether `table` is a view an isolation made (this one's or another's).
    fn is_view(&self, table: &Table) -> bool {
        table
            .metatable()
            .is_some_and(|mt| matches!(mt.raw_get::<Lv>(&self.internals.view), Ok(Lv::Boolean(true))))
    }

    /// A read-only view of `table`: reads are private copies, writes are violations.
    fn view(&self, lua: &Lua, table: &Table, depth: usize) -> mlua::Result<Table> {
        let is_globals = *table == self.globals;
        let mt = lua.create_table()?;
        mt.raw_set(&self.internals.private, table.clone())?;
        mt.raw_set(&self.internals.view, true)?;
        let user_mt = if is_globals { None } else { table.metatable() };
        if let Some(user_mt) = &user_mt {
            for pair in user_mt.pairs::<Lv, Lv>() {
                let (key, value) = pair?;
                let reserved = matches!(&key, Lv::String(s) if matches!(
                    s.as_bytes().as_ref(),
                    b"__index" | b"__newindex" | b"__len" | b"__gc" | b"__mode" | b"__close" | b"__metatable"
                ));
                let internal =
                    matches!(&key, Lv::Table(t) if *t == self.internals.private || *t == self.internals.view);
                if !reserved && !internal {
                    let value = self.copy(lua, value, depth + 1).map_err(mlua::Error::external)?;
                    mt.raw_set(key, value)?;
                }
            }
        }
        let this = self.this.clone();
        let backing = table.clone();
        let fallback: Option<Lv> = user_mt.as_ref().map(|mt| mt.raw_get("__index")).transpose()?;
        // The lookup is Rust; the table's own `__index`, when the key is absent, is called
        // (or indexed) by the Lua function `view_index` makes, so it runs as it would outside
        // the branch (see `internals::Callbacks`).
        let lookup =
            lua.create_function(move |lua, (_view, key): (Table, Lv)| -> mlua::Result<(Lv, Lv)> {
                let Some(this) = this.upgrade() else {
                    return Err(mlua::Error::runtime(
                        "a branch's captured value was used after the branch ended",
                    ));
                };
                let value: Lv = if is_globals { backing.get(key)? } else { backing.raw_get(key)? };
                if !value.is_nil() {
                    return Ok((this.copy(lua, value, 0).map_err(mlua::Error::external)?, Lv::Nil));
                }
                match &fallback {
                    Some(fallback @ (Lv::Table(_) | Lv::Function(_))) => {
                        Ok((Lv::Nil, this.copy(lua, fallback.clone(), 0).map_err(mlua::Error::external)?))
                    }
                    _ => Ok((Lv::Nil, Lv::Nil)),
                }
            })?;
        mt.raw_set("__index", self.internals.callbacks.view_index.call::<Function>(lookup)?)?;
        let place = self.place;
        mt.raw_set(
            "__newindex",
            lua.create_function(move |_, (_, key): (Lv, Lv)| -> mlua::Result<()> {
                let what = match (&key, is_globals) {
                    (Lv::String(s), true) => format!("assignment to the global '{}'", s.to_string_lossy()),
                    (Lv::String(s), false) => {
                        format!("a write to the field '{}' of a captured table", s.to_string_lossy())
                    }
                    _ => "a write to a captured table".to_owned(),
                };
                Err(mlua::Error::external(violation(place, &what)))
            })?,
        )?;
        let backing = table.clone();
        let user_len: Option<Lv> = user_mt.as_ref().map(|mt| mt.raw_get("__len")).transpose()?;
        match user_len {
            Some(Lv::Function(len)) => {
                let len = self.copy(lua, Lv::Function(len), depth + 1).map_err(mlua::Error::external)?;
                mt.raw_set("__len", len)?;
            }
            _ => mt.raw_set("__len", lua.create_function(move |_, _: Lv| Ok(backing.raw_len()))?)?,
        }
        let view = lua.create_table()?;
        view.set_metatable(Some(mt))?;
        Ok(view)
    }
}
