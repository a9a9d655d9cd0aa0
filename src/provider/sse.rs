//! An incremental server-sent-events parser: bytes in, complete events out, whatever the
//! chunking.
//!
//! It follows the WHATWG event-stream grammar: lines end in `\n`, `\r\n` or a lone `\r`; a line
//! starting with `:` is a comment; `field: value` drops one leading space from the value; `data`
//! lines accumulate joined by `\n`; a blank line dispatches. A `\r` at the very end of a chunk is
//! held back until the next chunk shows whether a `\n` follows, so a `\r\n` split across chunks
//! is one line ending, not two. Bytes are kept as bytes until a line is complete, so a UTF-8
//! character split across chunks is decoded whole.

use std::mem;

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, empty when the server sent none (the spec's default type "message").
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The last `id:` field seen, if any.
    pub id: Option<String>,
}

/// The default bound on one line, and on the data of one event: a server that never sends a
/// newline (or never ends an event) cannot make the parser buffer without end.
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// The incremental parser. Feed it chunks with [`SseParser::feed`], then call
/// [`SseParser::finish`] at the end of the stream.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the line being read (no terminator).
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a leading `\n` in the next chunk belongs to it.
    pending_cr: bool,
    /// Whether the byte-order mark check is still due (only at the very start of the stream).
    at_start: bool,
    event: String,
    data: String,
    /// Whether any `data` field was seen for the event being built.
    has_data: bool,
    last_id: Option<String>,
    /// The bound on a line and on one event's data (0 means [`DEFAULT_MAX_LINE_BYTES`]).
    max_line: usize,
    /// Set once a line or an event outgrew `max_line`; the rest of the stream is ignored.
    overflowed: bool,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> SseParser {
        SseParser { at_start: true, max_line: DEFAULT_MAX_LINE_BYTES, ..SseParser::default() }
    }

    /// A parser whose lines and events may hold at most `max` bytes.
    pub fn with_max_line(max: usize) -> SseParser {
        SseParser { max_line: max.max(1), ..SseParser::new() }
    }

    /// Whether a line or an event outgrew the bound: the stream is broken (a typed error for
    /// the caller), and nothing more was parsed.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    fn overflow(&mut self) {
        self.overflowed = true;
        self.line = Vec::new();
        self.data = String::new();
        self.has_data = false;
    }

    /// Parses one chunk, appending every event it completes to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) {
        if self.overflowed {
            return;
        }
        let mut rest = chunk;
        if self.pending_cr {
            self.pending_cr = false;
            if let Some((&b'\n', tail)) = rest.split_first() {
                rest = tail;
            }
        }
        while !rest.is_empty() {
            let Some(pos) = memchr::memchr2(b'\n', b'\r', rest) else {
                if self.line.len() + rest.len() > self.max_line {
                    return self.overflow();
                }
                self.line.extend_from_slice(rest);
                break;
            };
            if self.line.len() + pos > self.max_line || self.data.len() > self.max_line {
                return self.overflow();
            }
            let terminator = rest[pos];
            // A line wholly inside this chunk is parsed in place; only a line split across
            // chunks goes through the buffer.
            if self.line.is_empty() {
                self.end_line(&rest[..pos], out);
            } else {
                self.line.extend_from_slice(&rest[..pos]);
                let line = mem::take(&mut self.line);
                self.end_line(&line, out);
                self.line = line;
                self.line.clear();
            }
            rest = &rest[pos + 1..];
            if terminator == b'\r' {
                match rest.first() {
                    Some(&b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.pending_cr = true,
                }
            }
        }
    }

    /// Ends the stream. A last line without a terminator is processed, and an event still being
    /// built is dispatched: the final blank line is often missing from recorded or proxied
    /// streams, and the decoder (not the framing) decides whether the stream was complete.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if self.overflowed {
            return;
        }
        if !self.line.is_empty() {
            let line = mem::take(&mut self.line);
            self.end_line(&line, out);
        }
        self.dispatch(out);
    }

    fn end_line(&mut self, mut line: &[u8], out: &mut Vec<SseEvent>) {
        if self.at_start {
            self.at_start = false;
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        if line.is_empty() {
            self.dispatch(out);
        } else {
            self.field(line);
        }
    }

    fn field(&mut self, line: &[u8]) {
        if line[0] == b':' {
            return;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.has_data = true;
                match std::str::from_utf8(value) {
                    Ok(text) => self.data.push_str(text),
                    Err(_) => self.data.push_str(&String::from_utf8_lossy(value)),
                }
            }
            b"event" => self.event = String::from_utf8_lossy(value).into_owned(),
            b"id" if !value.contains(&0) => self.last_id = Some(String::from_utf8_lossy(value).into_owned()),
            // `retry` and unknown fields carry nothing a one-shot request can use.
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = mem::take(&mut self.event);
        if !mem::take(&mut self.has_data) {
            return;
        }
        out.push(SseEvent { event, data: mem::take(&mut self.data), id: self.last_id.clone() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_chunks(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, &mut out);
        }
        parser.finish(&mut out);
        out
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent { event: event.into(), data: data.into(), id: None }
    }

    #[test]
    fn every_line_ending_frames_the_same_events() {
        for sep in ["\n", "\r\n", "\r"] {
            let text = format!("event: a{sep}data: 1{sep}{sep}data: 2{sep}data: 3{sep}{sep}");
            assert_eq!(parse_chunks(&[text.as_bytes()]), [ev("a", "1"), ev("", "2\n3")], "{sep:?}");
        }
    }

    #[test]
    fn any_chunking_gives_the_same_events() {
        let text = "event: message_start\r\ndata: {\"a\":\"\u{e9}\u{1F600}\"}\r\n\r\n: comment\r\n\r\nevent: x\rdata:y\r\rdata: z\n\n";
        let whole = parse_chunks(&[text.as_bytes()]);
        assert_eq!(whole, [ev("message_start", "{\"a\":\"\u{e9}\u{1F600}\"}"), ev("x", "y"), ev("", "z")]);
        let bytes = text.as_bytes();
        for split in 0..bytes.len() {
            assert_eq!(parse_chunks(&[&bytes[..split], &bytes[split..]]), whole, "split at {split}");
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(parse_chunks(&singles), whole);
    }

    #[test]
    fn comments_bom_and_fields_without_colon() {
        let out = parse_chunks(&[b"\xEF\xBB\xBF: hi\nevent\ndata\n\ndata:  two spaces\nid: 7\n\n"]);
        assert_eq!(out[0], ev("", ""));
        assert_eq!(
            out[1],
            SseEvent { event: String::new(), data: " two spaces".into(), id: Some("7".into()) }
        );
    }

    #[test]
    fn event_without_data_is_not_dispatched() {
        assert_eq!(parse_chunks(&[b"event: ping\n\nretry: 5\n\n"]), []);
    }

    #[test]
    fn unterminated_last_event_is_flushed_at_the_end() {
        assert_eq!(
            parse_chunks(&[b"data: {\"type\":\"message_stop\"}"]),
            [ev("", "{\"type\":\"message_stop\"}")]
        );
        assert_eq!(parse_chunks(&[b"data: a\n"]), [ev("", "a")]);
    }

    #[test]
    fn a_line_or_event_past_the_bound_overflows_and_stops_parsing() {
        let mut parser = SseParser::with_max_line(64);
        let mut out = Vec::new();
        for _ in 0..100 {
            parser.feed(&[b'a'; 10], &mut out);
        }
        assert!(parser.overflowed());
        parser.feed(b"\ndata: late\n\n", &mut out);
        parser.finish(&mut out);
        assert_eq!(out, []);
        // Many short data lines of one endless event are bounded too.
        let mut parser = SseParser::with_max_line(64);
        for _ in 0..100 {
            parser.feed(b"data: 0123456789\n", &mut out);
        }
        assert!(parser.overflowed());
        // Within the bound nothing changes.
        let mut parser = SseParser::with_max_line(64);
        parser.feed(b"data: ok\n\n", &mut out);
        assert!(!parser.overflowed());
        assert_eq!(out, [ev("", "ok")]);
    }

    #[test]
    fn trailing_whitespace_stays_in_data() {
        let out = parse_chunks(&[b"data: {\"a\":1}     \n\n"]);
        assert_eq!(out[0].data, "{\"a\":1}     ");
        let value: serde_json::Value = serde_json::from_str(&out[0].data).unwrap();
        assert_eq!(value["a"], 1);
    }
}
