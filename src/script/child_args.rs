//! What a script child declares, read from its source the same way in both dialects: the
//! arguments it reads (every `args.NAME` and `args["NAME"]`), and its summary (the first
//! comment lines). The planner's card shows both; lint checks a call's literal arguments
//! against the names.

use std::collections::BTreeSet;

use serde_json::{Value, json};

/// The argument names a script reads: `args.NAME`, `args["NAME"]` and `args['NAME']`, where
/// `args` is not part of a longer name.
pub(crate) fn declared_args(source: &str) -> BTreeSet<String> {
    let bytes = source.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut names = BTreeSet::new();
    let mut at = 0;
    while let Some(found) = source[at..].find("args") {
        let start = at + found;
        let end = start + 4;
        at = end;
        if start > 0 && (ident(bytes[start - 1]) || bytes[start - 1] == b'.') {
            continue;
        }
        let rest = &source[end..];
        let name: String = if let Some(field) = rest.strip_prefix('.') {
            field.bytes().take_while(|&b| ident(b)).map(char::from).collect()
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
        }
    }
    names
}

/// The JSON Schema the card shows for a script child's arguments: an object of the names it
/// reads.
pub(crate) fn accepts_schema(source: &str) -> Value {
    let properties: serde_json::Map<String, Value> =
        declared_args(source).into_iter().map(|name| (name, json!({}))).collect();
    json!({"type": "object", "properties": properties, "additionalProperties": false})
}

/// The script's summary: its leading comment lines (`//` or `--`), joined, at most 300 chars.
pub(crate) fn summary(source: &str) -> String {
    let mut lines = Vec::new();
    for line in source.lines() {
        let line = line.trim();
        let Some(text) = line.strip_prefix("//").or_else(|| line.strip_prefix("--")) else { break };
        let text = text.trim_start_matches(['/', '-', '!']).trim();
        if text.is_empty() {
            break;
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
        let names: Vec<_> = declared_args(rhai).into_iter().collect();
        assert_eq!(names, ["depth", "subject", "topic"]);
        let lua = "local t = args.topic or 'x'\nlocal n = args['n']\nlocal y = self.args.no";
        let names: Vec<_> = declared_args(lua).into_iter().collect();
        assert_eq!(names, ["n", "topic"]);
    }

    #[test]
    fn the_summary_is_the_leading_comment() {
        assert_eq!(
            summary("// Researches a topic.\n// Returns notes.\n\nlet x = 1;"),
            "Researches a topic. Returns notes."
        );
        assert_eq!(summary("-- Drafts.\nlocal x = 1"), "Drafts.");
        assert_eq!(summary("let x = 1;"), "");
    }
}
