//! No process-dependent text reaches a script: closures print as `<closure>`, and error
//! messages never carry Rhai's internal closure names (`anon$<hash>`).
//!
//! Rhai names each closure after a hash of its body; the sandbox fixes the hashing seed
//! ([`super::sandbox::stable_hashing`]) so the name is at least stable, but it is still an
//! implementation detail a prompt must not be built from (a new rhai release may hash
//! differently and re-key every call). So the conversions a script can apply to a function
//! pointer (`to_string`, `to_debug`, `name`, interpolation, `+` on strings, arrays and maps
//! printing their elements) are overridden for anonymous functions, and [`scrub`] replaces any
//! name that still appears in a message. The error map a `catch` binds is built by Rhai itself
//! with a failed closure's name in its `function` and `message` fields: the run's variable
//! resolver hands each read of a catch variable to [`scrub_caught`] first ([`caught_names`]
//! says which names those are).

use ::rhai::{AST, ASTNode, Dynamic, Engine, Expr, FnPtr, ImmutableString, Map, Stmt};

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

/// The names `catch` blocks of `ast` bind their error to (anywhere: the script's body and
/// every function's, closures' included).
pub(crate) fn caught_names(ast: &AST) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    ast.walk(&mut |path: &[ASTNode]| {
        if let Some(ASTNode::Stmt(Stmt::TryCatch(flow, _))) = path.last()
            && let Expr::Variable(variable, ..) = &flow.expr
            && !names.iter().any(|n| n == variable.1.as_str())
        {
            names.push(variable.1.to_string());
        }
        true
    });
    names
}

/// The most bytes of a value's text an error message carries (a thrown value's, an index's).
pub(crate) const ERROR_TEXT: usize = 64 << 10;

/// `value`'s `Display` text cut at `cap` bytes, an ellipsis marking the cut. Formatting stops at
/// the cap: a thrown array of 2,000 references to one 4 MB string (a few kilobytes to the
/// script) printed as an 8 GB message.
pub(crate) fn capped(value: &dyn std::fmt::Display, cap: usize) -> String {
    struct Capped {
        text: String,
        cap: usize,
        cut: bool,
    }
    impl std::fmt::Write for Capped {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let room = self.cap.saturating_sub(self.text.len());
            if s.len() <= room {
                self.text.push_str(s);
                return Ok(());
            }
            let mut end = room;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            self.text.push_str(&s[..end]);
            self.cut = true;
            // Stops the formatting: every `Display` passes a writer's error up at once.
            Err(std::fmt::Error)
        }
    }
    let mut out = Capped { text: String::new(), cap, cut: false };
    let _ = std::fmt::Write::write_fmt(&mut out, format_args!("{value}"));
    if out.cut {
        out.text.push('\u{2026}');
    }
    out.text
}

/// Takes closure names out of `value` if it is an error map Rhai built for a `catch` (an
/// `error` field naming one of its error kinds, `Error...`): its `function` and `message`
/// read `<closure>` where they named one. Anything else is left as it is. A value another
/// holder has locked (a method on it calling back into the script) is left too: it was
/// scrubbed when that holder read the variable.
pub(crate) fn scrub_caught(value: &mut Dynamic) {
    if value.is_locked() {
        return;
    }
    let Some(mut map) = value.write_lock::<Map>() else { return };
    let from_rhai = map
        .get("error")
        .and_then(|kind| kind.read_lock::<ImmutableString>().map(|kind| kind.starts_with("Error")))
        .unwrap_or(false);
    if !from_rhai {
        return;
    }
    for field in ["function", "message"] {
        let Some(text) = map.get_mut(field) else { continue };
        let scrubbed = match text.read_lock::<ImmutableString>() {
            Some(current) => match scrub(current.as_str()) {
                std::borrow::Cow::Owned(scrubbed) => scrubbed,
                std::borrow::Cow::Borrowed(_) => continue,
            },
            None => continue,
        };
        *text = scrubbed.into();
    }
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
    fn capped_text_stops_formatting_at_the_cap() {
        let long: ImmutableString = "x".repeat(4 << 20).into();
        let wide: ::rhai::Array = (0..2_000).map(|_| Dynamic::from(long.clone())).collect();
        let text = capped(&Dynamic::from_array(wide), 100);
        assert_eq!(text.len(), 100 + '\u{2026}'.len_utf8());
        assert!(text.starts_with("[\"xxx"), "{text}");
        assert_eq!(capped(&"short", 100), "short");
        assert_eq!(capped(&"\u{e9}\u{e9}", 3), "\u{e9}\u{2026}");
    }

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

    #[test]
    fn a_caught_error_map_loses_its_closure_names_and_other_maps_keep_theirs() {
        let engine = ::rhai::Engine::new();
        let source = "let f = |x| x; let r = (); try { f.call(1, 2); } catch (e) { r = e; } r";
        let ast = engine.compile(source).unwrap();
        assert_eq!(caught_names(&ast), ["e"]);
        let mut caught: Dynamic = engine.eval_ast(&ast).unwrap();
        assert!(is_closure_name(
            caught.clone_cast::<Map>()["function"].to_string().split(' ').next().unwrap()
        ));
        scrub_caught(&mut caught);
        let map = caught.cast::<Map>();
        assert_eq!(map["function"].to_string(), "<closure> (i64, i64)");
        assert_eq!(map["message"].to_string(), "Function not found: <closure> (i64, i64)");
        let mut own: Dynamic = engine.eval::<Dynamic>("#{error: \"mine\", message: \"anon$ab\"}").unwrap();
        scrub_caught(&mut own);
        assert_eq!(own.cast::<Map>()["message"].to_string(), "anon$ab");
    }
}
