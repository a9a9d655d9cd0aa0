//! The source limits both dialects check before their parsers run: a script's size in bytes
//! and its length in tokens, counted by a linear scan.
//!
//! The parsers are not linear on every input (Rhai's parser is quadratic in `let` bindings,
//! Lua's compiler on a long `or` chain) and the linter's syntax tree takes about a kilobyte per
//! token, so a size limit alone still lets a few hundred KiB of hostile source take seconds
//! and hundreds of MiB. The token budget bounds both: the scan never allocates, takes
//! microseconds per KiB, and a script within the budget parses and lints in well under a
//! second and a few tens of MiB.

/// The most tokens the static bound analyses parse: four times the standard source limit, so a
/// host that raised `sandbox.max_script_tokens` still gets bounds, while the parsers'
/// superlinear cases stay out of reach.
pub(crate) const BOUND_MAX_TOKENS: usize =
    4 * crate::script::rhai::sandbox::SandboxLimits::STANDARD.max_source_tokens;

/// What a source over its limits is told (a `syntax` diagnostic at line 1), or `None`.
pub(crate) fn over_limits(source: &str, max_bytes: usize, max_tokens: usize) -> Option<String> {
    if source.len() > max_bytes {
        return Some(format!(
            "the script is {} bytes, over the limit of {max_bytes} bytes; split the work into child workflows",
            source.len()
        ));
    }
    let tokens = count_tokens(source, max_tokens);
    (tokens > max_tokens).then(|| {
        format!(
            "the script has more than {max_tokens} tokens, over the limit scripts are parsed within; split \
             the work into child workflows or pass data as args"
        )
    })
}

/// The tokens of `source`, approximately and never fewer than a parser sees outside string
/// literals, counting at most to `stop + 1`: a run of identifier or number characters is one
/// token, every other visible character one; a quoted string is one token however long (its
/// text is bounded by the size limit and costs the parsers linear time); in a backtick string
/// (Rhai's interpolation) every word counts, since `${...}` holds code; comments (`//`, `/* */`,
/// `--`) count nothing. Lua's long brackets are counted as code, which only errs high.
pub(crate) fn count_tokens(source: &str, stop: usize) -> usize {
    let bytes = source.as_bytes();
    let mut count = 0;
    let mut i = 0;
    while i < bytes.len() && count <= stop {
        let byte = bytes[i];
        if byte.is_ascii_whitespace() {
            i += 1;
        } else if byte.is_ascii_alphanumeric() || byte == b'_' || byte >= 0x80 {
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] >= 0x80)
            {
                i += 1;
            }
            count += 1;
        } else if bytes[i..].starts_with(b"//") || bytes[i..].starts_with(b"--") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if bytes[i..].starts_with(b"/*") {
            i += 2;
            while i < bytes.len() && !bytes[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else if byte == b'"' || byte == b'\'' {
            i += 1;
            while i < bytes.len() && bytes[i] != byte && bytes[i] != b'\n' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            count += 1;
        } else {
            // Punctuation, and a backtick: its string's words are counted as code.
            i += 1;
            count += 1;
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_words_and_punctuation_but_not_comments_or_quoted_text() {
        assert_eq!(count_tokens("let a = 1; // a comment", 100), 5);
        assert_eq!(count_tokens("local s = \"a long quoted string\" -- note", 100), 4);
        assert_eq!(count_tokens("`x ${a or b}`", 100), 9);
        assert_eq!(count_tokens("/* block */ a", 100), 1);
    }

    #[test]
    fn the_count_stops_past_the_limit() {
        let source = "a=1\n".repeat(1_000_000);
        assert_eq!(count_tokens(&source, 10), 11);
        assert!(over_limits(&source, 8 << 20, 10).is_some());
        assert!(over_limits("a = 1", 100, 10).is_none());
        assert!(over_limits("a = 1", 3, 10).is_some());
    }
}
