//! No process-dependent text reaches a script: closures print as `<closure>`, and error
//! messages never carry Rhai's internal closure names (`anon$<hash>`).
//!
//! Rhai names each closure after a hash of its body; the sandbox fixes the hashing seed
//! ([`super::sandbox::stable_hashing`]) so the name is at least stable, but it is still an
//! implementation detail a prompt must not be built from (a new rhai release may hash
//! differently and re-key every call). So the conversions a script can apply to a function
//! pointer (`to_string`, `to_debug`, `name`, interpolation, `+` on strings, arrays and maps
//! printing their elements) are overridden for anonymous functions, and [`scrub`] replaces any
//! name that still appears in a message.

use ::rhai::{Engine, FnPtr, ImmutableString};

/// How a closure reads to a script.
pub(crate) const CLOSURE_TEXT: &str = "<closure>";

/// The text of a function pointer: a named function keeps its name, a closure is `<closure>`.
fn pointer_name(pointer: &FnPtr) -> ImmutableString {
    if pointer.is_anonymous() { CLOSURE_TEXT.into() } else { pointer.fn_name().into() }
}

/// Registers the overrides. Functions registered on the engine are resolved before the
/// packages' functions of the same signature, and the packages' printers of arrays and maps
/// call `to_debug` through the engine, so they reach these too.
pub(crate) fn register_closure_text(engine: &mut Engine) {
    engine.register_fn("name", |pointer: &mut FnPtr| pointer_name(pointer));
    engine.register_get("name", |pointer: &mut FnPtr| pointer_name(pointer));
    engine.register_fn("to_string", |pointer: &mut FnPtr| pointer_name(pointer));
    engine.register_fn("to_debug", |pointer: &mut FnPtr| {
        if pointer.is_anonymous() {
            ImmutableString::from(CLOSURE_TEXT)
        } else {
            format!("Fn({})", pointer.fn_name()).into()
        }
    });
}

/// `text` with every `anon$<hex>` closure name replaced by `<closure>`. Allocates only when
/// there is something to replace.
pub(crate) fn scrub(text: &str) -> std::borrow::Cow<'_, str> {
    const MARK: &str = "anon$";
    if !text.contains(MARK) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let after = &rest[at + MARK.len()..];
        let hex = after.bytes().take_while(u8::is_ascii_hexdigit).count();
        if hex == 0 {
            out.push_str(MARK);
        } else {
            out.push_str(CLOSURE_TEXT);
        }
        rest = &after[hex..];
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

/// Whether `name` is one of Rhai's closure names.
pub(crate) fn is_closure_name(name: &str) -> bool {
    name.strip_prefix("anon$")
        .is_some_and(|hex| !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_replaces_closure_names_only() {
        assert_eq!(scrub("in anon$2e967c836985c9b3: x"), "in <closure>: x");
        assert_eq!(scrub("Fn(anon$ab) and anon$cd!"), "Fn(<closure>) and <closure>!");
        assert_eq!(scrub("anon$ alone"), "anon$ alone");
        assert_eq!(scrub("plain"), "plain");
        assert!(is_closure_name("anon$0f"));
        assert!(!is_closure_name("anon$"));
        assert!(!is_closure_name("worker"));
    }
}
