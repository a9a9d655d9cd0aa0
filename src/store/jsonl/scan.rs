//! Reading a journal file: framing each line as the kernel writes it without parsing its
//! payload, and repairing what a crash can leave (a torn tail, glued records).

use std::io::Read;

use serde::Deserialize;

use crate::store::{Error, RawEntry, Result, RunId};

/// The one field a store reads from an entry; serde skips the rest without building it.
#[derive(Deserialize)]
struct SeqField {
    seq: u64,
}

/// What a scan of a journal file found.
pub(super) struct Scan {
    /// The entries (empty for [`scan_tail`]).
    pub(super) entries: Vec<RawEntry>,
    /// The last entry's seq.
    pub(super) tail: Option<u64>,
    /// How many leading bytes are sound; a torn tail lies beyond.
    pub(super) keep_len: u64,
    /// Whether the last kept record lacks its newline.
    pub(super) unterminated: bool,
}

/// The seq an entry's text carries, read the way a load will read it.
pub(super) fn text_seq(json: &str) -> Option<u64> {
    if let Some(seq) = prefix_seq(json.as_bytes()) {
        return Some(seq);
    }
    if !json.trim_start().starts_with('{') {
        return None;
    }
    serde_json::from_str::<SeqField>(json).ok().map(|field| field.seq)
}

/// The seq of a text that starts `{"seq":N,` (or `{"seq":N}`), as the kernel writes it.
fn prefix_seq(bytes: &[u8]) -> Option<u64> {
    let rest = bytes.strip_prefix(br#"{"seq":"#)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || !matches!(rest.get(digits), Some(b',' | b'}')) || (rest[0] == b'0' && digits > 1) {
        return None;
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// How much of a journal file is read at a time. Lines are cut out of this buffer, so a
/// load holds its entries plus one chunk, never the file's bytes twice.
const READ_CHUNK: usize = 1 << 20;

/// Reads a journal file: every entry in order, and how much of the file is sound.
pub(super) fn scan(run: &RunId, reader: &mut dyn Read) -> Result<Scan> {
    scan_in_chunks(run, reader, READ_CHUNK)
}

/// Like [`scan`], keeping nothing of the entries but the last seq: what a writer opening a
/// journal needs.
pub(super) fn scan_tail(run: &RunId, reader: &mut dyn Read) -> Result<Scan> {
    let mut tail = None;
    let end = scan_from(run, reader, READ_CHUNK, Position::START, &mut |seq, _, _| {
        tail = Some(seq);
        Ok(Visit::Continue)
    })?;
    Ok(Scan { entries: Vec::new(), tail, keep_len: end.keep_len, unterminated: end.unterminated })
}

fn scan_in_chunks(run: &RunId, reader: &mut dyn Read, chunk: usize) -> Result<Scan> {
    let mut entries = Vec::new();
    let mut keep = |seq: u64, text: &str| -> Result<Visit> {
        entries.push(RawEntry::new(seq, text).map_err(|err| corrupt(run, 0, err.to_string()))?);
        Ok(Visit::Continue)
    };
    let end = scan_from(run, reader, chunk, Position::START, &mut |seq, text, _| keep(seq, text))?;
    let tail = entries.last().map(RawEntry::seq);
    Ok(Scan { entries, tail, keep_len: end.keep_len, unterminated: end.unterminated })
}

/// Where a scan starts (or a visited record's line starts): a line start and a seq every
/// record before it is at most (`None` at the file's start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Position {
    pub(super) offset: u64,
    pub(super) tail: Option<u64>,
}

impl Position {
    /// The start of the file.
    pub(super) const START: Position = Position { offset: 0, tail: None };
}

/// What a visitor of a scan says after a line's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Visit {
    Continue,
    /// Stop once the current line's records are visited.
    Stop,
}

/// How a scan ended.
pub(super) struct ScanEnd {
    /// How many leading bytes are sound (for a stopped scan: where it stopped).
    pub(super) keep_len: u64,
    /// Whether the last kept record lacks its newline.
    pub(super) unterminated: bool,
}

/// A record's visitor: its seq, its text (borrowed: a visitor skipping records allocates
/// nothing) and where its line starts.
pub(super) type Visitor<'v> = dyn FnMut(u64, &str, Position) -> Result<Visit> + 'v;

/// Reads a journal file from `from`, handing each record to `visit` in order. The reader must
/// be positioned at `from.offset`. Stops at the end of the file, or after a line's records
/// when `visit` says so.
pub(super) fn scan_from(
    run: &RunId,
    reader: &mut dyn Read,
    chunk: usize,
    from: Position,
    visit: &mut Visitor<'_>,
) -> Result<ScanEnd> {
    let mut scanner = Scanner { run, visit, tail: from.tail, offset: from.offset, line_no: 0, stop: false };
    let mut buffer: Vec<u8> = Vec::with_capacity(chunk);
    // The unconsumed bytes start at `start`; none before `searched` is a newline.
    let (mut start, mut searched) = (0, 0);
    loop {
        buffer.drain(..start);
        searched -= start;
        start = 0;
        // Appends into spare capacity: no zero-filling a chunk per read.
        let read = reader.take(chunk as u64).read_to_end(&mut buffer)?;
        if read == 0 {
            return scanner.finish(&buffer[start..]);
        }
        loop {
            if scanner.stop {
                return Ok(ScanEnd { keep_len: scanner.offset, unterminated: false });
            }
            // Framing finds the end of a line as the kernel writes it in the same pass that
            // checks it; other lines are cut at their newline and parsed.
            if let Some((seq, end)) = framed_line(&buffer[start..]) {
                scanner.framed(&buffer[start..start + end], seq)?;
                start += end + 1;
                searched = start;
                continue;
            }
            let from = searched.max(start);
            let Some(end) = buffer[from..].iter().position(|&b| b == b'\n') else {
                searched = buffer.len();
                break;
            };
            scanner.line(&buffer[start..from + end])?;
            start = from + end + 1;
            searched = start;
        }
    }
}

/// The line-by-line state of a [`scan_from`].
struct Scanner<'r, 'v> {
    run: &'r RunId,
    visit: &'v mut Visitor<'v>,
    /// The largest seq seen so far (records must follow it).
    tail: Option<u64>,
    /// The file offset just past the newline-terminated lines seen so far.
    offset: u64,
    /// Lines seen by this scan (a scan from an offset counts from there, for messages).
    line_no: usize,
    /// The visitor asked to stop after the current line.
    stop: bool,
}

impl Scanner<'_, '_> {
    /// Takes a newline-terminated line that [`framed_line`] framed as one record.
    fn framed(&mut self, line: &[u8], seq: u64) -> Result<()> {
        let in_order = self.tail.is_none_or(|tail| seq > tail);
        match std::str::from_utf8(line).ok().filter(|text| in_order && RawEntry::new(seq, *text).is_ok()) {
            Some(text) => {
                let at = Position { offset: self.offset, tail: self.tail };
                self.line_no += 1;
                self.offset += line.len() as u64 + 1;
                self.tail = Some(seq);
                if (self.visit)(seq, text, at)? == Visit::Stop {
                    self.stop = true;
                }
                Ok(())
            }
            // Let the parsing path find (and name) what is wrong.
            None => self.line(line),
        }
    }

    /// Takes one newline-terminated line: damage here is corruption, never a tear.
    fn line(&mut self, line: &[u8]) -> Result<()> {
        let at = Position { offset: self.offset, tail: self.tail };
        self.line_no += 1;
        self.offset += line.len() as u64 + 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let records =
            split_line(line, self.tail).map_err(|damage| corrupt(self.run, self.line_no, damage.detail))?;
        self.visit_records(line, &records, at)
    }

    /// Hands a line's records to the visitor: the whole line verbatim when it holds one
    /// record, else each record's own bytes.
    fn visit_records(&mut self, line: &[u8], records: &[Record], at: Position) -> Result<()> {
        let whole_line = records.len() == 1;
        for &(seq, start, end) in records {
            let bytes = if whole_line { line } else { line[start..end].trim_ascii() };
            let text = std::str::from_utf8(bytes)
                .map_err(|err| corrupt(self.run, self.line_no, format!("not UTF-8: {err}")))?;
            // A CRLF line ending (an editor's) is not part of the entry.
            let text = text.strip_suffix('\r').unwrap_or(text);
            RawEntry::new(seq, text).map_err(|err| corrupt(self.run, self.line_no, err.to_string()))?;
            self.tail = Some(seq);
            if (self.visit)(seq, text, at)? == Visit::Stop {
                self.stop = true;
            }
        }
        Ok(())
    }

    /// Takes what follows the last newline, where a crash tears: a complete record there is
    /// served (unterminated), a fragment is cut off with whole records before it kept.
    fn finish(mut self, rest: &[u8]) -> Result<ScanEnd> {
        let line_start = self.offset;
        if rest.iter().all(u8::is_ascii_whitespace) {
            // Nothing, or trailing blanks: drop them with the rest of a tear.
            return Ok(ScanEnd { keep_len: line_start, unterminated: false });
        }
        self.line_no += 1;
        let (records, keep, unterminated) = match split_line(rest, self.tail) {
            Ok(records) => (records, rest.len(), true),
            Err(Damage { detail, torn: false, .. }) => return Err(corrupt(self.run, self.line_no, detail)),
            Err(Damage { records, .. }) => {
                let keep = records.last().map_or(0, |&(_, _, end)| end);
                let unterminated = !records.is_empty();
                (records, keep, unterminated)
            }
        };
        let at = Position { offset: line_start, tail: self.tail };
        self.visit_records(rest, &records, at)?;
        Ok(ScanEnd { keep_len: line_start + keep as u64, unterminated })
    }
}

/// The fast path for a line as the kernel writes it: `{"seq":N,` first, then exactly one
/// object up to a newline. Returns the seq and the line's length (without its newline).
///
/// Framing tracks strings, escapes and nesting but does not validate numbers or literals:
/// the store never parses a payload, and decoding the entry reports one that is not JSON,
/// with its seq. Anything else (and every unterminated tail, where crashes tear) takes the
/// exact, parsing path.
fn framed_line(bytes: &[u8]) -> Option<(u64, usize)> {
    let seq = prefix_seq(bytes)?;
    let end = frame_object(bytes)?;
    (bytes.get(end) == Some(&b'\n')).then_some((seq, end))
}

/// Where the JSON object opening `bytes` ends, if its strings and brackets close.
fn frame_object(bytes: &[u8]) -> Option<usize> {
    if bytes.first() != Some(&b'{') {
        return None;
    }
    // One bit per open bracket, 1 for '{'; deeper nesting takes the parsing path.
    let (mut stack, mut depth) = (0u128, 0u32);
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        if in_string {
            if !matches!(byte, b'"' | b'\\' | 0..0x20) {
                i += 1;
                continue;
            }
            match byte {
                // An escape takes the next byte along, which must not be a raw control byte
                // (a newline there would carry the frame into the next line).
                b'\\' if bytes.get(i + 1).is_some_and(|&next| next >= 0x20) => i += 1,
                b'\\' => return None,
                b'"' => in_string = false,
                0..0x20 => return None,
                _ => {}
            }
        } else {
            match byte {
                b'"' => in_string = true,
                b'{' | b'[' if depth < 128 => {
                    stack = (stack << 1) | u128::from(byte == b'{');
                    depth += 1;
                }
                b'{' | b'[' | b'\n' | b'\r' => return None,
                b'}' | b']' => {
                    if depth == 0 || (stack & 1 == 1) != (byte == b'}') {
                        return None;
                    }
                    stack >>= 1;
                    depth -= 1;
                    if depth == 0 {
                        return Some(i + 1);
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    None
}

/// A record found on a line: its seq and its byte range.
type Record = (u64, usize, usize);

/// A line that is not a clean sequence of records.
struct Damage {
    /// The records before the damage.
    records: Vec<Record>,
    /// What is wrong.
    detail: String,
    /// Whether the damage could be a tear (unparseable bytes) rather than sound records in
    /// the wrong order, which no crash produces.
    torn: bool,
}

/// Splits one line into its records (one, or several when newlines were lost), each a
/// JSON object whose seq is after the previous one.
fn split_line(line: &[u8], mut tail: Option<u64>) -> Result<Vec<Record>, Damage> {
    let mut records = Vec::with_capacity(1);
    let mut stream = serde_json::Deserializer::from_slice(line).into_iter::<SeqField>();
    let mut start = 0;
    loop {
        let object_next = line[start..].iter().find(|b| !b.is_ascii_whitespace()).is_none_or(|&b| b == b'{');
        if !object_next {
            return Err(Damage { records, detail: "expected a JSON object".into(), torn: true });
        }
        match stream.next() {
            None => return Ok(records),
            Some(Ok(field)) => {
                if tail.is_some_and(|tail| field.seq <= tail) {
                    let detail =
                        format!("seq {} is not after the previous seq {}", field.seq, tail.unwrap_or(0));
                    return Err(Damage { records, detail, torn: false });
                }
                let end = stream.byte_offset();
                records.push((field.seq, start, end));
                tail = Some(field.seq);
                start = end;
            }
            Some(Err(err)) => {
                // A tear leaves a prefix (end of input) or garbage (syntax); a whole object
                // without a numeric seq is corruption.
                let torn = err.is_eof() || err.is_syntax();
                return Err(Damage { records, detail: err.to_string(), torn });
            }
        }
    }
}

fn corrupt(run: &RunId, line_no: usize, detail: String) -> Error {
    Error::Corrupt { what: format!("journal of run {run}, line {line_no}"), detail }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> RunId {
        RunId::parse("r").unwrap()
    }

    fn seqs(scan: &Scan) -> Vec<u64> {
        scan.entries.iter().map(RawEntry::seq).collect()
    }

    #[test]
    fn scan_keeps_sound_files_whole() {
        let text = b"{\"seq\":1}\n{\"seq\":2,\"a\":[1.50]}\n";
        let scan = scan(&run(), &mut &text[..]).unwrap();
        assert_eq!(seqs(&scan), [1, 2]);
        assert_eq!(scan.keep_len, text.len() as u64);
        assert!(!scan.unterminated);
        assert_eq!(scan.entries[1].json(), r#"{"seq":2,"a":[1.50]}"#);
    }

    #[test]
    fn scan_cuts_a_torn_tail_and_keeps_glued_records() {
        let text = b"{\"seq\":1}\n{\"seq\":2} {\"seq\":3}{\"seq\":4,\"x";
        let scan = scan(&run(), &mut &text[..]).unwrap();
        assert_eq!(seqs(&scan), [1, 2, 3]);
        assert_eq!(scan.entries[2].json(), r#"{"seq":3}"#);
        assert_eq!(&text[..scan.keep_len as usize], b"{\"seq\":1}\n{\"seq\":2} {\"seq\":3}");
        assert!(scan.unterminated);

        let torn_only = b"{\"seq\":1}\n{\"se";
        let scan = super::scan(&run(), &mut &torn_only[..]).unwrap();
        assert_eq!(seqs(&scan), [1]);
        assert_eq!(scan.keep_len, 10);
        assert!(!scan.unterminated);
    }

    #[test]
    fn scan_refuses_damage_before_the_tail() {
        for text in [
            &b"{\"seq\":1}\nnot json\n{\"seq\":3}\n"[..],
            b"{\"seq\":1}\n{\"seq\":1}\n",
            b"{\"seq\":1}\n{\"nope\":2}\n",
            b"[1]\n",
            b"{\"seq\":1} 7\n",
        ] {
            let err = scan(&run(), &mut &text[..]).err().unwrap();
            assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
        }
    }

    #[test]
    fn scan_is_the_same_whatever_the_chunk_size() {
        let texts: [&[u8]; 5] = [
            b"{\"seq\":1,\"a\":\"x\\\"}\"}\n\n{\"seq\":2}{\"seq\":3}\n{\"seq\":4,\"b\":[{}]}\n",
            b"{\"seq\":1}\n{\"seq\":2,\"long\":\"0123456789abcdef\"}\n{\"seq\":3,\"tor",
            b"{\"seq\":1}\n{\"seq\":2}",
            b"{\"seq\":1}\n  \t",
            b"",
        ];
        for text in texts {
            let whole = scan(&run(), &mut &text[..]).unwrap();
            for chunk in [1, 2, 3, 7, 64] {
                let chunked = scan_in_chunks(&run(), &mut &text[..], chunk).unwrap();
                assert_eq!(chunked.entries, whole.entries, "chunk {chunk}");
                assert_eq!((chunked.keep_len, chunked.unterminated), (whole.keep_len, whole.unterminated));
            }
        }
    }

    #[test]
    fn framed_lines_are_served_unparsed() {
        // Balanced but not JSON: the store frames, the kernel's decode reports it.
        let text = b"{\"seq\":1}\n{\"seq\":2,\"a\":1x}\n";
        let scan = scan(&run(), &mut &text[..]).unwrap();
        assert_eq!(scan.entries[1].json(), r#"{"seq":2,"a":1x}"#);
    }

    #[test]
    fn framing_finds_exactly_one_object() {
        assert_eq!(frame_object(br#"{"seq":1,"a":"}{\"]"}"#), Some(21));
        assert_eq!(frame_object(br#"{"seq":1,"a":[{"b":[]}]}"#), Some(24));
        assert_eq!(frame_object(br#"{"seq":1}{"seq":2}"#), Some(9));
        assert_eq!(frame_object(br#"{"seq":1,"a":[}]}"#), None);
        assert_eq!(frame_object(br#"{"seq":1,"a":"open}"#), None);
        assert_eq!(frame_object(b"{\"seq\":1,\"a\":\"\x01\"}"), None);
        assert_eq!(frame_object(b" {}"), None);
        assert_eq!(frame_object(b"{\"a\":\"x\\\n\"}"), None, "an escaped raw newline");
        assert_eq!(frame_object(b"{\"a\":1,\n\"b\":2}"), None, "a newline between tokens");
        assert_eq!(frame_object(&[b'['; 200]), None);
        let deep = format!("{{\"seq\":1,\"d\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert_eq!(frame_object(deep.as_bytes()), None, "deep nesting takes the parsing path");
        let scan = scan(&run(), &mut format!("{deep}\n").as_bytes()).unwrap();
        assert_eq!(scan.entries.len(), 1);
    }

    #[test]
    fn text_seq_reads_what_load_reads() {
        assert_eq!(text_seq(r#"{"seq":12,"a":1}"#), Some(12));
        assert_eq!(text_seq(r#"{"seq":12}"#), Some(12));
        assert_eq!(text_seq(r#"{"z":1,"seq":9}"#), Some(9));
        assert_eq!(text_seq(r#"{ "seq" : 7 }"#), Some(7));
        assert_eq!(text_seq(r#"{"seq":07}"#), None);
        assert_eq!(text_seq(r#"{"a":1}"#), None);
        assert_eq!(text_seq("[3]"), None);
    }
}
