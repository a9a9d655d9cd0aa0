//! A step body's source identity in Lua.
//!
//! A step is keyed on its label (or key) and deps; a script's step body is known too, so it
//! is part of the identity (as in Rhai, see `script/rhai/body.rs`): an edited or inserted body
//! re-keys the step and a resume explains it, and two steps that share a label never serve
//! each other's values.
//!
//! The identity is the function's bytecode without debug information (`string.dump` with
//! `strip`), nested functions included, read through Lua 5.4's dump format to leave out the
//! two line numbers each function keeps even when stripped (where it starts and ends): moving
//! the step, re-wrapping it, comments and whitespace keep its identity; any change to what it
//! does changes it.

use mlua::Function;
use sha2::{Digest, Sha256};

/// The identity of `body`, `None` for a function that has no Lua bytecode.
pub(super) fn identity(body: &Function) -> Option<String> {
    if body.info().what == "C" {
        return None;
    }
    let dump = body.dump(true);
    let mut hasher = Sha256::new();
    let mut reader = Reader { bytes: &dump, at: 0, hasher: &mut hasher };
    if reader.chunk().is_none() {
        // A dump this reader does not know: the whole of it (stable, only less forgiving).
        hasher = Sha256::new();
        hasher.update(&dump);
    }
    Some(hex::encode(hasher.finalize()))
}

/// Reads a dump, hashing all of it but the line numbers.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    hasher: &'a mut Sha256,
}

/// How deep nested functions may go before the reader gives up (Lua's own limit is lower).
const MAX_DEPTH: usize = 256;

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n)?;
        let slice = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(slice)
    }

    fn keep(&mut self, n: usize) -> Option<()> {
        let end = self.at.checked_add(n)?;
        let slice = self.bytes.get(self.at..end)?;
        self.hasher.update(slice);
        self.at = end;
        Some(())
    }

    /// A size (`dumpSize`: 7 bits a byte, the last byte marked by its high bit).
    fn size(&mut self, keep: bool) -> Option<usize> {
        let mut value: usize = 0;
        for _ in 0..10 {
            let byte = *self.take(1)?.first()?;
            if keep {
                self.hasher.update([byte]);
            }
            value = value.checked_shl(7)? | usize::from(byte & 0x7f);
            if byte & 0x80 != 0 {
                return Some(value);
            }
        }
        None
    }

    fn string(&mut self) -> Option<()> {
        let size = self.size(true)?;
        if size > 0 { self.keep(size - 1) } else { Some(()) }
    }

    fn chunk(&mut self) -> Option<()> {
        // The header (signature, version, format, data, sizes, check values) and the count of
        // the main function's upvalues.
        self.keep(31 + 1)?;
        self.function(0)?;
        (self.at == self.bytes.len()).then_some(())
    }

    fn function(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.string()?; // source (absent when stripped)
        self.size(false)?; // linedefined
        self.size(false)?; // lastlinedefined
        self.keep(3)?; // numparams, is_vararg, maxstacksize
        let code = self.size(true)?;
        self.keep(code.checked_mul(4)?)?;
        let constants = self.size(true)?;
        for _ in 0..constants {
            let tag = *self.take(1)?.first()?;
            self.hasher.update([tag]);
            match tag {
                0x00 | 0x01 | 0x11 => {}
                0x03 | 0x13 => self.keep(8)?,
                0x04 | 0x14 => self.string()?,
                _ => return None,
            }
        }
        let upvalues = self.size(true)?;
        self.keep(upvalues.checked_mul(3)?)?;
        let protos = self.size(true)?;
        for _ in 0..protos {
            self.function(depth + 1)?;
        }
        // Debug information: empty when stripped.
        for _ in 0..4 {
            if self.size(true)? != 0 {
                return None;
            }
        }
        Some(())
    }
}
