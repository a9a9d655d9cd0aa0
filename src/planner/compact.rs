//! The compact API card: the dialect's card cut down to what a small-context model needs to
//! write a script (the globals with their first sentence and options, one dense line each, the
//! first sentence of every other section, and the first example), derived from the full card
//! so the two never disagree. The Rhai card is about 4,400 tokens; the compact one fits a
//! 4,096-token window with room for the goal, a repair round and the draft.

use std::fmt::Write as _;

/// The compact form of a dialect's API card (`cairn card --compact`). Byte-stable: a pure
/// function of the full card.
pub fn compact_card(full: &str) -> String {
    let mut out = String::with_capacity(full.len() / 3);
    let mut lines = full.lines().peekable();
    // The title and the introduction: every line up to the first section.
    while let Some(line) = lines.next_if(|l| !l.starts_with("## ")) {
        match line.strip_prefix("# ") {
            Some(title) => {
                let _ = writeln!(out, "# {title}, compact");
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    let sections = split_sections(lines);
    let mut examples = None;
    for (heading, body) in &sections {
        match heading.as_str() {
            "Globals" => {
                out.push_str("\n## Globals (opts: the keys of the options map; no other key exists)\n");
                for (signature, text) in split_subsections(body) {
                    globals_line(&mut out, &signature, &text);
                }
            }
            "Examples" => examples = Some(body),
            _ => {
                let text = paragraph(body);
                let first = first_sentence(&text);
                let second = first_sentence(text[first.len()..].trim_start());
                if !first.is_empty() {
                    let _ = writeln!(out, "\n## {heading}\n{first} {second}");
                }
            }
        }
    }
    if let Some(body) = examples
        && let Some(example) = first_fenced_block(body)
    {
        out.push_str("\n## Example\n");
        out.push_str(&example);
    }
    out
}

/// `## Heading` sections: the heading and its lines.
fn split_sections<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<(String, Vec<&'a str>)> {
    let mut sections: Vec<(String, Vec<&str>)> = Vec::new();
    for line in lines {
        match line.strip_prefix("## ") {
            Some(heading) => sections.push((heading.trim().to_owned(), Vec::new())),
            None => {
                if let Some((_, body)) = sections.last_mut() {
                    body.push(line);
                }
            }
        }
    }
    sections
}

/// `### signature` subsections of the globals: the signature and its lines.
fn split_subsections<'a>(body: &[&'a str]) -> Vec<(String, Vec<&'a str>)> {
    let mut globals: Vec<(String, Vec<&str>)> = Vec::new();
    for line in body {
        match line.strip_prefix("### ") {
            Some(signature) => globals.push((signature.trim().to_owned(), Vec::new())),
            None => {
                if let Some((_, text)) = globals.last_mut() {
                    text.push(line);
                }
            }
        }
    }
    globals
}

/// One global: `- signature: first sentence` and, when it takes options, one `opts:` line with
/// each option's name and type.
fn globals_line(out: &mut String, signature: &str, text: &[&str]) {
    let prose = paragraph(text);
    let _ = writeln!(out, "- {signature}: {}", first_sentence(&prose));
    let options: Vec<&str> = text
        .iter()
        .filter_map(|line| line.strip_prefix("- `"))
        .filter_map(|option| {
            // "- `name` (type): description" -> "name (type)"
            let end = option.find("):").map(|i| i + 1).or_else(|| option.find('`'))?;
            Some(&option[..end])
        })
        .collect();
    if !options.is_empty() {
        let options: Vec<String> = options.iter().map(|o| o.replacen('`', "", 1)).collect();
        let _ = writeln!(out, "  opts: {}", options.join("; "));
    }
}

/// The first paragraph of prose (no option lists, comments or fences), joined on one line.
fn paragraph(text: &[&str]) -> String {
    let mut words = Vec::new();
    for line in text {
        let line = line.trim();
        if line.is_empty() {
            if words.is_empty() {
                continue;
            }
            break;
        }
        if line.starts_with("<!--") || line.starts_with("- ") || line.starts_with("```") {
            break;
        }
        words.push(line);
    }
    words.join(" ")
}

/// The text up to and including the first sentence's full stop (a `.` followed by a space or
/// the end), or all of it.
fn first_sentence(text: &str) -> &str {
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'.' && (i + 1 == bytes.len() || bytes[i + 1] == b' ') {
            // "e.g.", "i.e." and an ellipsis are not sentence ends.
            let before = &text[..i];
            if before.ends_with("e.g") || before.ends_with("i.e") || before.ends_with('.') {
                continue;
            }
            return &text[..=i];
        }
    }
    text
}

/// The first fenced code block of `body`, fences included.
fn first_fenced_block(body: &[&str]) -> Option<String> {
    let start = body.iter().position(|l| l.starts_with("```"))?;
    let end = body[start + 1..].iter().position(|l| l.starts_with("```"))? + start + 1;
    let mut block = body[start..=end].join("\n");
    block.push('\n');
    Some(block)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compact_card_keeps_every_global_and_every_option_name() {
        let full = crate::script::api_card();
        let compact = compact_card(full);
        assert_eq!(compact, compact_card(full), "byte-stable");
        assert!(compact.len() * 5 < full.len() * 2);
        assert!(compact.contains("- agent(prompt, opts?):"));
        assert!(compact.contains("profile (string)"));
        for line in full.lines() {
            if let Some(signature) = line.strip_prefix("### ") {
                assert!(compact.contains(&format!("- {signature}:")), "{signature} is missing:\n{compact}");
            }
            if let Some(option) = line.strip_prefix("- `") {
                let name = &option[..option.find('`').unwrap()];
                assert!(compact.contains(&format!(" {name} (")), "option {name} is missing:\n{compact}");
            }
        }
        assert!(compact.contains("- agent(prompt, opts?): Runs one model agent and returns its output"));
        assert!(compact.contains("on_error (\"throw\" | \"null\")"), "{compact}");
        assert!(compact.contains("```rhai\n"), "the example is missing");
        assert!(!compact.contains("<!--"), "{compact}");
        // Under 40% of the characters of the full card.
        assert!(compact.len() * 5 < full.len() * 2, "{} of {}", compact.len(), full.len());
    }

    #[test]
    fn the_lua_cards_compact_form_keeps_its_globals_too() {
        let full = include_str!("../../dialect/card.lua.md");
        let compact = compact_card(full);
        assert!(compact.starts_with("# cairn script dialect (Lua), compact\n"), "{compact}");
        for signature in full.lines().filter_map(|l| l.strip_prefix("### ")) {
            assert!(compact.contains(&format!("- {signature}:")), "{signature} is missing:\n{compact}");
        }
        assert!(compact.contains("```lua\n"), "{compact}");
    }

    #[test]
    fn sentences_end_at_a_full_stop_not_inside_an_abbreviation() {
        assert_eq!(first_sentence("Use e.g. this. Then that."), "Use e.g. this.");
        assert_eq!(first_sentence("No stop"), "No stop");
        assert_eq!(first_sentence("Version 1.5 is out. Yes."), "Version 1.5 is out.");
        assert_eq!(first_sentence("try { ... } catch. Then."), "try { ... } catch.");
    }
}
