//! The internal tables and functions of a Lua run that the script never reaches: the private
//! key marking internal metatables, the metatables that remember a table's JSON kind, and the
//! functions the runner keeps out of the script's reach. Plain data the sandbox's parts share;
//! it names none of them.

use mlua::{Function, Table, Value as Lv};

/// What a table is as JSON, when it came from JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Array,
    Object,
}

/// The internal tables the runner and the prelude share: the private key marking internal
/// metatables, and the metatables that remember a table's JSON kind.
pub(super) struct Internals {
    pub(super) private: Table,
    /// The key marking the metatable of a branch's or step body's read-only view of a captured
    /// table (`isolate`), as opposed to a table read-only for everyone (a library, `args`).
    pub(super) view: Table,
    pub(super) array_mt: Table,
    pub(super) object_mt: Table,
    /// Lua-side helpers (chunk `=cairn`) through which script functions that Rust reaches are
    /// called from Lua instead of from Rust: see [`Callbacks`].
    pub(super) callbacks: Callbacks,
}

/// Where a script function runs on behalf of a builtin (a read-only view's `__index`
/// fallback, `gsub`'s replacement, `__pairs`), it is called from Lua, never from Rust: an error
/// it raises keeps its value (a table stays a table, never `table: 0x...` text with an address
/// that differs from run to run) and a cairn global it calls can yield to the engine, as it
/// would anywhere else in the script.
pub(super) struct Callbacks {
    /// `view_index(lookup)`: the `__index` of a read-only view. `lookup(view, key)` (Rust)
    /// returns the value and, when it is nil, the private copy of the table's own `__index`,
    /// which the returned Lua function then calls or indexes.
    pub(super) view_index: Function,
    /// `protected(f, ...)`: `f(...)` under the raw `pcall`, for Rust that must call a script
    /// function: returns `true, results...` or `false, error value` as Lua values.
    pub(super) protected: Function,
    /// `index(t, k)`: `t[k]` with its metamethods, for Rust to call under `protected`.
    pub(super) index: Function,
}

/// The Lua source of [`Callbacks`], loaded before any script code runs (so the builtins it
/// captures are the originals).
const CALLBACKS: &str = r#"
local type, pcall = type, pcall
local function view_index(lookup)
  return function(view, key)
    local value, fallback = lookup(view, key)
    if value ~= nil or fallback == nil then return value end
    if type(fallback) == "function" then return fallback(view, key) end
    return fallback[key]
  end
end
local function index(t, k) return t[k] end
return view_index, pcall, index
"#;

impl Callbacks {
    pub(super) fn load(lua: &mlua::Lua) -> mlua::Result<Callbacks> {
        let (view_index, protected, index) = lua.load(CALLBACKS).set_name("=cairn").eval()?;
        Ok(Callbacks { view_index, protected, index })
    }
}

impl Internals {
    /// The table whose keys and JSON kind `table` stands for: a read-only view stands for its
    /// backing table; a table that came from JSON knows its kind.
    pub(super) fn resolve(&self, table: &Table) -> (Table, Option<Kind>) {
        let mut table = table.clone();
        for _ in 0..4 {
            let Some(mt) = table.metatable() else { return (table, None) };
            match mt.raw_get::<Lv>(&self.private) {
                Ok(Lv::Table(backing)) => table = backing,
                Ok(Lv::String(kind)) if kind == "array" => return (table, Some(Kind::Array)),
                Ok(Lv::String(kind)) if kind == "object" => return (table, Some(Kind::Object)),
                _ => return (table, None),
            }
        }
        (table, None)
    }

    /// The length a table that came from a JSON array with trailing nulls had (its nulls are
    /// absent keys, so its keys alone would lose them); 0 for any other table.
    pub(super) fn declared_len(&self, table: &Table) -> usize {
        table
            .metatable()
            .and_then(|mt| mt.raw_get::<Option<i64>>(&self.array_mt).ok().flatten())
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0)
    }
}

/// Functions the runner keeps out of the script's reach.
pub(super) struct Hidden {
    /// The raw `pcall`: every frame runs as `pcall(body, ...)` so its error value is seen raw.
    pub(super) pcall: Function,
    /// `load`, for loading a dumped function afresh (branch isolation).
    pub(super) load: Function,
    pub(super) getupvalue: Function,
    pub(super) setupvalue: Function,
    pub(super) upvalueid: Function,
    pub(super) upvaluejoin: Function,
}
