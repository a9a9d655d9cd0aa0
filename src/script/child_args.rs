//! What a script child declares, read from its source the same way in both dialects, without
//! running it: its arguments and its summary (the first comment lines). The planner's card
//! shows both; lint checks a `workflow(NAME, args)` call's literal arguments against them.
//!
//! A child declares its arguments on an `@args` line of its leading comment, in either comment
//! form (`//` in Rhai, `--` in Lua):
//!
//! ```text
//! // Researches a topic and returns notes.
//! // @args topic: string, depth?: integer, sources?: array
//! ```
//!
//! Each entry is `NAME: TYPE`; a `?` after the name makes it optional; the types are `string`,
//! `integer`, `number`, `boolean`, `array`, `map` and `any`. Several `@args` lines add up. A
//! declared child takes exactly those arguments. A child without one is described by the
//! arguments it reads (every `args.NAME` and `args["NAME"]`), none of them required, and takes
//! only those when it reads `args` no other way.

use std::collections::BTreeSet;

use serde_json::{Value, json};

/// The tag that starts a declaration line in the leading comment.
const TAG: &str = "@args";

/// The type names a declaration accepts, with the JSON Schema each stands for.
const TYPES: &[(&str, &str)] = &[
    ("string", "string"),
    ("integer", "integer"),
    ("number", "number"),
    ("boolean", "boolean"),
    ("array", "array"),
    ("map", "object"),
    ("any", ""),
];

/// One argument a child declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeclaredArg {
    /// Its name, as the child reads it (`args.NAME`).
    pub(crate) name: String,
    /// Whether a call must give it.
    pub(crate) required: bool,
    /// Its JSON Schema type, `None` for `any`.
    pub(crate) json_type: Option<&'static str>,
}

/// The text of a comment line (`//` or `--`, doc forms included), `None` for code.
fn comment_text(line: &str) -> Option<&str> {
    let line = line.trim();
    let text = line.strip_prefix("//").or_else(|| line.strip_prefix("--"))?;
    Some(text.trim_start_matches(['/', '-', '!']).trim())
}

/// The leading comment: the comment lines before the first line of code (blank lines and a
/// `#!` line allowed).
fn header(source: &str) -> impl Iterator<Item = &str> {
    source.lines().filter(|line| !line.trim().is_empty() && !line.starts_with("#!")).map_while(comment_text)
}

/// The arguments a child declares on its `@args` lines, `None` when it has none.
///
/// # Errors
/// What is malformed, with the form to write instead.
pub(crate) fn declaration(source: &str) -> Result<Option<Vec<DeclaredArg>>, String> {
    let mut found: Option<Vec<DeclaredArg>> = None;
    for line in header(source) {
        let Some(list) = line.strip_prefix(TAG) else { continue };
        if !list.is_empty() && !list.starts_with([' ', '\t', ':']) {
            continue;
        }
        let declared = found.get_or_insert_with(Vec::new);
        let list = list.trim_start_matches(':').trim();
        for entry in list.split(',').map(str::trim).filter(|entry| !entry.is_empty()) {
            let arg = parse_entry(entry)?;
            if declared.iter().any(|other| other.name == arg.name) {
                return Err(format!("{TAG} declares '{}' twice", arg.name));
            }
            declared.push(arg);
        }
    }
    Ok(found)
}

/// One `NAME: TYPE` or `NAME?: TYPE` entry.
fn parse_entry(entry: &str) -> Result<DeclaredArg, String> {
    let form = "write NAME: TYPE, or NAME?: TYPE for an optional one";
    let Some((name, kind)) = entry.split_once(':') else {
        return Err(format!("{TAG} entry '{entry}' has no type; {form}"));
    };
    let name = name.trim();
    let (name, required) = match name.strip_suffix('?') {
        Some(name) => (name.trim_end(), false),
        None => (name, true),
    };
    let valid = !name.is_empty()
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        return Err(format!("{TAG} entry '{entry}': '{name}' is not a name (letters, digits, _); {form}"));
    }
    let kind = kind.trim();
    let Some((_, json_type)) = TYPES.iter().find(|(word, _)| *word == kind) else {
        let words: Vec<&str> = TYPES.iter().map(|(word, _)| *word).collect();
        return Err(format!(
            "{TAG} entry '{entry}': unknown type '{kind}'; the types are {}",
            words.join(", ")
        ));
    };
    let json_type = (!json_type.is_empty()).then_some(*json_type);
    Ok(DeclaredArg { name: name.to_owned(), required, json_type })
}

/// The argument names a script reads: `args.NAME`, `args["NAME"]` and `args['NAME']`, where
/// `args` is not part of a longer name; and whether it reads `args` any other way (passes it
/// on, iterates it), which hides what it takes.
pub(crate) fn read_args(source: &str) -> (BTreeSet<String>, bool) {
    let bytes = source.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut names = BTreeSet::new();
    let mut whole = false;
    let mut at = 0;
    while let Some(found) = source[at..].find("args") {
        let start = at + found;
        let end = start + 4;
        at = end;
        if start > 0 && (ident(bytes[start - 1]) || bytes[start - 1] == b'.') {
            continue;
        }
        if bytes.get(end).is_some_and(|&b| ident(b)) {
            continue;
        }
        let rest = &source[end..];
        let name: String = if let Some(field) = rest.strip_prefix('.').or_else(|| rest.strip_prefix("?.")) {
            let name: String = field.bytes().take_while(|&b| ident(b)).map(char::from).collect();
            // `args.keys()` is a method of the whole map, not an argument.
            let call = field[name.len()..].trim_start().starts_with('(');
            if call { String::new() } else { name }
        } else if let Some(index) = rest.strip_prefix('[') {
            let quote = index.bytes().next();
            match quote {
                Some(q @ (b'"' | b'\'')) => {
                    let inner = &index[1..];
                    match inner.find(q as char) {
                        Some(close) if inner[..close].bytes().all(ident) => inner[..close].to_owned(),
                        _ => String::new(),
                    }
                }
                _ => String::new(),
            }
        } else {
            String::new()
        };
        if !name.is_empty() && !name.as_bytes()[0].is_ascii_digit() {
            names.insert(name);
        } else if !in_comment(source, start) {
            whole = true;
        }
    }
    (names, whole)
}

/// Whether byte `at` is inside a line comment (`//` or `--` earlier on its line).
fn in_comment(source: &str, at: usize) -> bool {
    let line_start = source[..at].rfind('\n').map_or(0, |newline| newline + 1);
    let before = &source[line_start..at];
    before.contains("//") || before.contains("--")
}

/// The JSON Schema of a script child's arguments: its declaration when it has one (exact:
/// types, required names, nothing else), else the names it reads (none required; nothing
/// else only when it reads `args` no other way).
///
/// # Errors
/// A malformed `@args` line, with the form to write instead.
pub(crate) fn accepts_schema(source: &str) -> Result<Value, String> {
    if let Some(declared) = declaration(source)? {
        let properties: serde_json::Map<String, Value> = declared
            .iter()
            .map(|arg| (arg.name.clone(), arg.json_type.map_or_else(|| json!({}), |t| json!({"type": t}))))
            .collect();
        let required: Vec<&str> =
            declared.iter().filter(|arg| arg.required).map(|arg| arg.name.as_str()).collect();
        let mut schema = json!({"type": "object", "properties": properties, "additionalProperties": false});
        if !required.is_empty() {
            schema["required"] = json!(required);
        }
        return Ok(schema);
    }
    let (names, whole) = read_args(source);
    let properties: serde_json::Map<String, Value> =
        names.into_iter().map(|name| (name, json!({}))).collect();
    let mut schema = json!({"type": "object", "properties": properties});
    if !whole {
        schema["additionalProperties"] = json!(false);
    }
    Ok(schema)
}

/// The script's summary: its leading comment lines (`//` or `--`) up to the first empty one,
/// `@args` lines left out, joined, at most 300 chars.
pub(crate) fn summary(source: &str) -> String {
    let mut lines = Vec::new();
    for line in source.lines() {
        let Some(text) = comment_text(line) else { break };
        if text.is_empty() {
            break;
        }
        if text.strip_prefix(TAG).is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', ':'])) {
            continue;
        }
        lines.push(text);
    }
    let mut text = lines.join(" ");
    if text.len() > 300 {
        let mut cut = 300;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_field_and_index_forms_in_both_dialects() {
        let rhai = "let t = args.topic; let d = args[\"depth\"]; let x = myargs.no; if args.subject == () {}";
        let (names, whole) = read_args(rhai);
        assert_eq!(names.into_iter().collect::<Vec<_>>(), ["depth", "subject", "topic"]);
        assert!(!whole);
        let lua = "local t = args.topic or 'x'\nlocal n = args['n']\nlocal y = self.args.no";
        let (names, whole) = read_args(lua);
        assert_eq!(names.into_iter().collect::<Vec<_>>(), ["n", "topic"]);
        assert!(!whole);
        // Passing `args` on hides what the child takes; a comment mentioning it does not.
        assert!(read_args("let x = args.a; workflow(\"k\", args)").1);
        assert!(!read_args("// takes args.a\nlet x = args.a;").1);
        assert!(!read_args("let argsx = 1; args.a").1);
        let (names, whole) = read_args("for k in args.keys() { log(\"info\", args?.b) }");
        assert_eq!(names.into_iter().collect::<Vec<_>>(), ["b"]);
        assert!(whole);
    }

    #[test]
    fn a_declaration_gives_types_and_required_names_in_both_comment_forms() {
        let rhai = "// Researches.\n// @args topic: string, depth?: integer\n// @args tags?: array, extra?: any\nlet t = args.topic;";
        let schema = accepts_schema(rhai).unwrap();
        assert_eq!(
            schema,
            json!({"type": "object", "additionalProperties": false, "required": ["topic"], "properties": {
                "topic": {"type": "string"}, "depth": {"type": "integer"}, "tags": {"type": "array"}, "extra": {}
            }})
        );
        let lua =
            "#!/usr/bin/env cairn\n-- Researches.\n\n-- @args: topic: string, opts?: map\nreturn args.topic";
        let declared = declaration(lua).unwrap().unwrap();
        assert_eq!(declared.len(), 2);
        assert_eq!(
            declared[1],
            DeclaredArg { name: "opts".into(), required: false, json_type: Some("object") }
        );
        // An empty declaration takes nothing; a tag inside code is no declaration.
        assert_eq!(declaration("// @args\nlet x = 1;").unwrap(), Some(vec![]));
        assert_eq!(declaration("let x = 1;\n// @args a: string").unwrap(), None);
        assert_eq!(declaration("// @argsx a: string").unwrap(), None);
    }

    #[test]
    fn a_malformed_declaration_says_what_to_write() {
        let no_type = declaration("// @args topic").unwrap_err();
        assert!(no_type.contains("has no type") && no_type.contains("NAME?: TYPE"), "{no_type}");
        let bad_type = declaration("-- @args topic: strng").unwrap_err();
        assert!(
            bad_type.contains("unknown type 'strng'") && bad_type.contains("string, integer"),
            "{bad_type}"
        );
        let bad_name = declaration("// @args 2x: string").unwrap_err();
        assert!(bad_name.contains("'2x' is not a name"), "{bad_name}");
        let twice = declaration("// @args a: string, a?: integer").unwrap_err();
        assert!(twice.contains("declares 'a' twice"), "{twice}");
    }

    #[test]
    fn an_undeclared_child_takes_the_names_it_reads() {
        let schema = accepts_schema("let t = args.topic;").unwrap();
        assert_eq!(schema["additionalProperties"], false);
        assert!(schema.get("required").is_none());
        let open = accepts_schema("let t = args.topic; workflow(\"x\", args)").unwrap();
        assert!(open.get("additionalProperties").is_none(), "{open}");
    }

    #[test]
    fn the_summary_is_the_leading_comment() {
        assert_eq!(
            summary("// Researches a topic.\n// Returns notes.\n\nlet x = 1;"),
            "Researches a topic. Returns notes."
        );
        assert_eq!(
            summary("-- Drafts.\n-- @args brief: string\n-- From a brief.\nlocal x = 1"),
            "Drafts. From a brief."
        );
        assert_eq!(summary("let x = 1;"), "");
    }
}
