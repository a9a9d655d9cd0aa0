//! The Lua dialect (Lua 5.4): the same globals, semantics, journal identity and diagnostics as
//! Rhai, behind the same [`crate::engine::ScriptDialect`] seam.
//!
//! `lint` checks a source without running it (full_moon); the runner, the sandbox and the
//! JSON boundary live beside it.

pub mod lint;
