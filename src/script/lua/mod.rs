//! The Lua dialect (Lua 5.4 through mlua): the same globals, semantics, journal identity and
//! diagnostics as Rhai, behind the same [`crate::engine::ScriptDialect`] seam.
//!
//! `lint` checks a source without running it; the runner (`runner`, `globals`, `fanout`), the
//! sandbox (`sandbox`, `prelude.lua`, `guard`, `frame`, `isolate`, `order`) and the JSON
//! boundary (`json`, `options`) live beside it.

mod body;
mod fanout;
mod frame;
mod globals;
mod guard;
mod internals;
mod isolate;
mod json;
pub(crate) mod lint;
mod options;
mod order;
mod pattern;
mod runner;
mod sandbox;
mod shared;
mod step_tally;

pub use runner::LuaDialect;

#[cfg(test)]
mod tests;
