//! A step body's source identity in Rhai.
//!
//! A step is keyed on its label (or key) and deps; a script's step body is known too, so it
//! is part of the identity: an edited or inserted body re-keys the step (and a resume explains
//! it before running it), and two steps that share a label never serve each other's values.
//!
//! The identity of a function is its parameters and its body as Rhai parsed it, without
//! positions: moving a step (a line inserted above it, re-indented code) keeps its identity,
//! and so do comments and whitespace, while any change to what the body does re-keys it. A
//! closure's internal name hashes its positions, so each nested closure the body names is
//! replaced by that closure's own identity, recursively.

use std::collections::HashMap;

use ::rhai::{AST, FnPtr};
use sha2::{Digest, Sha256};

/// The source identity (a sha256 hex digest) of every function of a script, by its name.
#[derive(Debug, Default)]
pub(crate) struct BodyHashes(HashMap<String, String>);

impl BodyHashes {
    pub(crate) fn of(ast: &AST) -> BodyHashes {
        let texts: HashMap<String, String> = ast
            .iter_fn_def()
            .map(|def| (def.name.to_string(), format!("{:?} {:?}", def.params, def.body)))
            .collect();
        let mut hashes = HashMap::new();
        for name in texts.keys() {
            hash_of(name, &texts, &mut hashes, 0);
        }
        BodyHashes(hashes)
    }

    /// The identity of the function `pointer` names, if the script defines it.
    pub(crate) fn get(&self, pointer: &FnPtr) -> Option<String> {
        self.0.get(pointer.fn_name()).cloned()
    }
}

/// How deep closures may nest inside one another before their identities stop recursing.
const MAX_NESTING: usize = 64;

fn hash_of(
    name: &str,
    texts: &HashMap<String, String>,
    hashes: &mut HashMap<String, String>,
    depth: usize,
) -> String {
    if let Some(hash) = hashes.get(name) {
        return hash.clone();
    }
    let Some(text) = texts.get(name) else { return name.to_owned() };
    let normalized = normalize(text, &mut |nested| {
        if depth >= MAX_NESTING || nested == name {
            "closure".to_owned()
        } else {
            hash_of(nested, texts, hashes, depth + 1)
        }
    });
    let hash = hex::encode(Sha256::digest(normalized.as_bytes()));
    hashes.insert(name.to_owned(), hash.clone());
    hash
}

/// `debug` (a function's parsed form) without positions (`LINE:COL`, spans `LINE:COL-COL` and
/// `LINE:COL-LINE:COL`) outside string
/// literals, each closure name (`anon$HEX`) replaced by `resolve(name)`.
fn normalize(debug: &str, resolve: &mut dyn FnMut(&str) -> String) -> String {
    // Closure names first, wherever they are (a function pointer shows its name quoted).
    let mut named = String::with_capacity(debug.len());
    let mut rest = debug;
    while let Some(at) = rest.find("anon$") {
        named.push_str(&rest[..at]);
        let tail = &rest[at + 5..];
        let hex = tail.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(tail.len());
        named.push_str(&resolve(&rest[at..at + 5 + hex]));
        rest = &tail[hex..];
    }
    named.push_str(rest);
    let chars: Vec<char> = named.chars().collect();
    let mut out = String::with_capacity(named.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            // A string literal, kept as written (escapes included).
            out.push(c);
            i += 1;
            while i < chars.len() {
                out.push(chars[i]);
                if chars[i] == '\\' && i + 1 < chars.len() {
                    out.push(chars[i + 1]);
                    i += 2;
                    continue;
                }
                i += 1;
                if chars[i - 1] == '"' {
                    break;
                }
            }
            continue;
        }
        let word_before = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        if c.is_ascii_digit() && !word_before {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            if i + 1 < chars.len() && chars[i] == ':' && chars[i + 1].is_ascii_digit() {
                i += 1;
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
                // A span's end: `-COL` on the same line, `-LINE:COL` on another.
                if i + 1 < chars.len() && chars[i] == '-' && chars[i + 1].is_ascii_digit() {
                    i += 1;
                    while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == ':') {
                        i += 1;
                    }
                }
                out.push('@');
            } else {
                out.extend(&chars[start..i]);
            }
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step_body_hash(source: &str) -> String {
        let engine = crate::script::rhai::sandbox::parser_engine(
            &crate::script::rhai::sandbox::SandboxLimits::STANDARD,
        );
        let ast = engine.compile(source).unwrap();
        let hashes = BodyHashes::of(&ast);
        let mut all: Vec<String> = hashes.0.values().cloned().collect();
        all.sort();
        all.join(",")
    }

    #[test]
    fn a_body_keeps_its_identity_when_it_moves_and_changes_it_when_edited() {
        let here = step_body_hash("step(\"t\", || { let x = \"3:4\"; parallel([1], |i| i + 1) })");
        let moved = step_body_hash(
            "\n\n  // a comment\n  step(\"t\", ||   {\n let x = \"3:4\";\n parallel([1], |i| i + 1) })",
        );
        assert_eq!(here, moved);
        let edited = step_body_hash("step(\"t\", || { let x = \"3:5\"; parallel([1], |i| i + 1) })");
        assert_ne!(here, edited);
        let nested_edit = step_body_hash("step(\"t\", || { let x = \"3:4\"; parallel([1], |i| i + 2) })");
        assert_ne!(here, nested_edit);
        assert_ne!(step_body_hash("step(\"t\", || 7)"), step_body_hash("step(\"t\", || 42)"));
    }
}
