//! A count of ASCII text by the pieces a byte-level BPE tokenizer splits it into, so that the
//! input estimate bounds what such a tokenizer bills for text that is not prose: code, JSON,
//! numbers, hashes, base64, identifiers.
//!
//! Four characters a token holds for English prose (the OpenAI tokenizers take about five)
//! and fails elsewhere: measured with `o200k_base` and `cl100k_base`, JSON takes 2.2
//! characters a token, hex 1.8, base64 1.4, a line of tab-indented code 2, digits 3. The
//! tokenizers' pre-tokenizers split text into words, groups of up to three digits, runs of
//! punctuation and whitespace, and never merge across them; BPE then splits each piece
//! further only when it is not a common word. So each piece is counted at least one token,
//! and its letters by whether they look like a word:
//!
//! - a **word** (lowercase, Capitalized, or up to four capitals, whose every letter pair is
//!   common in English and with no five consonants in a row) costs a token per six letters;
//!   a letter repeated (`xxxx`) costs the same;
//! - **other letters** (random strings, base64, mixed case) cost three quarters of a token
//!   each; camelCase is split where a lowercase letter meets a capital, but a run that
//!   changes case more than once in three letters counts as other letters whole;
//! - **digits** a token per two; **punctuation** three quarters of a token a character, at
//!   least one a run; **whitespace** a token per four characters, except a single space
//!   before a word or punctuation, which the tokenizers merge into it.
//!
//! Over a corpus of prose, Markdown, Rust and Python code, JSON, SSE, hex, base64, UUIDs,
//! numbers, URLs and random strings of every class, the count is at least both tokenizers'
//! (`tests::the_pieces_bound_the_measured_tokenizers`); for English prose it is within a few
//! percent of four characters a token, which stays the floor.
//!
//! Counts are in quarter tokens, fed byte slices as they come (a JSON value is counted as it
//! is written), so text split anywhere counts the same.

/// For each first letter `a..=z`, a bit per second letter: the letter pairs that make up
/// 99.5 % of the pairs inside English words of the reference documents (`../shared/seeds`).
const COMMON_PAIRS: [u32; 26] = [
    0x1febd6e, 0x1164911, 0x11ecd95, 0x1365d5b, 0x1fffbff, 0x01a4931, 0x01679d1, 0x11a5111, 0x2aefc7f,
    0x0144010, 0x004a131, 0x17e593f, 0x014d117, 0x13efd7d, 0x1feff7f, 0x01ec991, 0x0100800, 0x17efdff,
    0x15fdd9d, 0x1dec9d5, 0x00ef95f, 0x0004111, 0x0066991, 0x0088195, 0x00cf110, 0x0000011,
];

/// What the last byte was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    None,
    Letter,
    Digit,
    Punct,
    Space,
    Other,
}

fn class(byte: u8) -> Class {
    match byte {
        b'a'..=b'z' | b'A'..=b'Z' => Class::Letter,
        b'0'..=b'9' => Class::Digit,
        b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => Class::Space,
        0x80.. => Class::Other,
        _ => Class::Punct,
    }
}

/// One camelCase segment of a letter run, as it is read.
#[derive(Debug, Clone, Copy, Default)]
struct Segment {
    len: usize,
    uppers: usize,
    /// Whether a letter after the first is a capital.
    upper_after_first: bool,
    /// Whether every letter pair so far is common.
    common: bool,
    consonants: usize,
    longest_consonants: usize,
    /// Whether every letter so far is the first one again (`xxxx`: BPE merges repeats).
    repeated: bool,
    last: u8,
}

impl Segment {
    fn start(letter: u8) -> Segment {
        let mut segment = Segment { common: true, repeated: true, ..Segment::default() };
        segment.push(letter);
        segment
    }

    fn push(&mut self, letter: u8) {
        let lower = letter.to_ascii_lowercase();
        if letter.is_ascii_uppercase() {
            self.uppers += 1;
            if self.len > 0 {
                self.upper_after_first = true;
            }
        }
        if self.len > 0 {
            let (first, second) = (usize::from(self.last - b'a'), u32::from(lower - b'a'));
            self.common &= COMMON_PAIRS[first] >> second & 1 == 1;
            self.repeated &= lower == self.last;
        }
        if matches!(lower, b'a' | b'e' | b'i' | b'o' | b'u' | b'y') {
            self.consonants = 0;
        } else {
            self.consonants += 1;
            self.longest_consonants = self.longest_consonants.max(self.consonants);
        }
        self.last = lower;
        self.len += 1;
    }

    /// Quarter tokens.
    fn cost(&self) -> usize {
        let lower_or_capitalized = !self.upper_after_first;
        let short_capitals = self.uppers == self.len && self.len <= 4;
        let word = (lower_or_capitalized || short_capitals) && self.common && self.longest_consonants < 5
            || self.repeated;
        if word { 4 * (1 + (self.len - 1) / 6) } else { 3 * self.len }
    }
}

/// The pieces count of a text fed in slices.
#[derive(Debug, Clone)]
pub(super) struct Pieces {
    /// Quarter tokens of the pieces ended so far.
    quarters: usize,
    ascii: usize,
    non_ascii: usize,
    class: Class,
    /// The current run's length.
    run: usize,
    /// A letter run: its ended segments (quarter tokens), its case changes, the segment being
    /// read and whether its last letter was a capital.
    segments: usize,
    case_changes: usize,
    segment: Segment,
    upper: bool,
    /// The byte before this one.
    last: u8,
}

impl Pieces {
    pub(super) fn new() -> Pieces {
        Pieces {
            quarters: 0,
            ascii: 0,
            non_ascii: 0,
            class: Class::None,
            run: 0,
            segments: 0,
            case_changes: 0,
            segment: Segment::default(),
            upper: false,
            last: 0,
        }
    }

    pub(super) fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            let class = class(byte);
            if class == Class::Other {
                self.non_ascii += 1;
            } else {
                self.ascii += 1;
            }
            let upper = byte.is_ascii_uppercase();
            if class != self.class {
                self.end_run(class);
                self.class = class;
                self.run = 0;
                if class == Class::Letter {
                    self.segments = 0;
                    self.case_changes = 0;
                    self.segment = Segment::start(byte);
                }
            } else if class == Class::Letter {
                if upper != self.upper {
                    self.case_changes += 1;
                }
                if upper && !self.upper {
                    // camelCase: a capital after a lowercase letter starts a segment.
                    self.segments += self.segment.cost();
                    self.segment = Segment::start(byte);
                } else {
                    self.segment.push(byte);
                }
            }
            self.upper = upper;
            self.last = byte;
            self.run += 1;
        }
    }

    /// Ends the current run, `next` being the class of the byte after it.
    fn end_run(&mut self, next: Class) {
        let run = self.run;
        self.quarters += match self.class {
            Class::None | Class::Other => 0,
            Class::Letter if self.case_changes * 3 > run => 3 * run,
            Class::Letter => self.segments + self.segment.cost(),
            Class::Digit => 4 * run.div_ceil(2),
            Class::Punct => (3 * run).max(4),
            // A single space merges into the word or punctuation after it.
            Class::Space if run == 1 && self.last == b' ' && matches!(next, Class::Letter | Class::Punct) => {
                0
            }
            Class::Space => 4 * run.div_ceil(4),
        };
    }

    /// The text's weight in quarter tokens: the larger of its ASCII bytes (four characters a
    /// token) and its pieces, plus four for every byte of other text (a token a byte).
    pub(super) fn finish(mut self) -> usize {
        self.end_run(Class::None);
        self.ascii.max(self.quarters) + 4 * self.non_ascii
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quarters(text: &str) -> usize {
        let mut pieces = Pieces::new();
        pieces.feed(text.as_bytes());
        pieces.finish()
    }

    /// Every text of `measured.jsonl` (78 texts of 1,500 characters: prose, Markdown, Rust and
    /// Python, SSE, JSON, hex, base64, UUIDs, numbers, URLs, random strings and word soups of
    /// every class), with its token counts measured by `tiktoken-rs` 0.12 (`o200k_base` and
    /// `cl100k_base`, `encode_ordinary`): the estimate is never below either, and English prose
    /// stays within a few percent of four characters a token.
    #[test]
    fn the_pieces_bound_the_measured_tokenizers() {
        let mut checked = 0;
        for line in include_str!("measured.jsonl").lines() {
            let case: serde_json::Value = serde_json::from_str(line).unwrap();
            let (what, text) = (case["what"].as_str().unwrap(), case["text"].as_str().unwrap());
            let measured = case["o200k"].as_u64().unwrap().max(case["cl100k"].as_u64().unwrap());
            let estimate = (quarters(text) as u64).div_ceil(4);
            assert!(estimate >= measured, "{what}: estimated {estimate} tokens, measured {measured}");
            if what.starts_with("prose") {
                let plain = (text.len() as u64).div_ceil(4);
                assert!(estimate * 100 <= plain * 106, "{what}: {estimate} against {plain} at four a token");
            }
            checked += 1;
        }
        assert_eq!(checked, 78);
    }

    #[test]
    fn a_text_counts_the_same_however_it_is_split() {
        let text = "fn estimateTokens(x: &str) -> u64 { 0x3f9a2b; \"key\": [1, 2.5], aGVsbG8gd29y }\n\t  end";
        let whole = quarters(text);
        for cut in 0..=text.len() {
            let mut pieces = Pieces::new();
            pieces.feed(&text.as_bytes()[..cut]);
            pieces.feed(&text.as_bytes()[cut..]);
            assert_eq!(pieces.finish(), whole, "cut at {cut}");
        }
    }

    #[test]
    fn pieces_cost_what_the_tokenizers_split() {
        // Words: a token each (but never below four characters a token); a single space merges.
        assert_eq!(quarters("the old house"), 13);
        // Digits a token per two; a space before digits does not merge.
        assert_eq!(quarters("1234 5"), 8 + 4 + 4);
        // Letters that are not a word: three quarters each.
        assert_eq!(quarters("xqzvkw"), 18);
        // camelCase splits into words; random case does not.
        assert_eq!(quarters("requestTokens"), 13);
        assert_eq!(quarters("rEqUeStToKeNs"), 39);
        // Never below four characters a token, and a byte of other text is a token.
        assert_eq!(quarters("internationalization"), 20);
        assert_eq!(quarters("\u{e9}"), 8);
    }
}
