//! `echo`: the built-in offline model (`echo:default`), deterministic and free, for demos, tests
//! and benchmarks.
//!
//! It answers `echo: ` plus the last user text (cut to a sensible length), or, when the request
//! asks for structured output, a JSON value generated from the schema that satisfies it. The
//! reply streams as a few text deltas; usage is estimated from lengths (about four characters
//! per token) and is not marked approximate, because echo's usage is its own truth: there is no
//! other count to be approximately right about. It never calls tools.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Map, Number, Value, json};
use tokio_util::sync::CancellationToken;

use super::estimate;
use super::stream::cancelled;
use super::{Capabilities, ChatEvent, ChatRequest, FinishReason, Provider};
use crate::Usage;

/// The offline echo model.
#[derive(Debug, Clone)]
pub struct EchoProvider {
    latency: Option<Duration>,
}

impl EchoProvider {
    /// The longest echoed prompt text, in characters, before it is cut with an ellipsis.
    pub const MAX_ECHO_CHARS: usize = 200;

    /// An echo model that answers at once.
    pub fn new() -> EchoProvider {
        EchoProvider { latency: None }
    }

    /// Waits `latency` before answering each call (a `tokio::time::sleep`, so paused test time
    /// skips it), to exercise timeouts, concurrency and budgets.
    pub fn with_latency(mut self, latency: Duration) -> EchoProvider {
        // Zero means no sleep at all (a zero timer still waits for the next timer tick).
        self.latency = (!latency.is_zero()).then_some(latency);
        self
    }

    /// The reply echo gives to `request`, in full.
    pub fn reply(request: &ChatRequest) -> String {
        EchoProvider::bounded_reply(request).unwrap_or_else(|error| error.message)
    }

    /// The reply echo gives to `request`, or a `sandbox_limit` error when the request's schema
    /// asks for more than echo generates ([`MAX_VALUES`] values, [`MAX_TEXT_BYTES`] of text,
    /// [`MAX_DEPTH`] levels): the schema is script-supplied input, bounded like any other.
    pub fn bounded_reply(request: &ChatRequest) -> Result<String, crate::Error> {
        if let Some(schema) = &request.response_schema {
            return Ok(try_json_for_schema(schema)?.to_string());
        }
        let text = request.last_user_text().unwrap_or_default();
        let text = text.trim();
        Ok(match text.char_indices().nth(EchoProvider::MAX_ECHO_CHARS) {
            Some((end, _)) => format!("echo: {}\u{2026}", &text[..end]),
            None => format!("echo: {text}"),
        })
    }
}

impl Default for EchoProvider {
    fn default() -> EchoProvider {
        EchoProvider::new()
    }
}

impl Provider for EchoProvider {
    fn name(&self) -> &str {
        "echo"
    }

    /// Echo takes tool specs (and never calls them), so agents with tools run on it.
    fn capabilities(&self, _model: &str) -> Capabilities {
        Capabilities { native_schema: true, tools: true, reasoning: false }
    }

    fn stream(&self, request: ChatRequest, cancel: CancellationToken) -> BoxStream<'static, ChatEvent> {
        let latency = self.latency;
        let reply = match EchoProvider::bounded_reply(&request) {
            Ok(reply) => reply,
            Err(error) => return futures::stream::iter([ChatEvent::Error(error)]).boxed(),
        };
        let usage = Usage {
            input_tokens: estimate::plain_request_tokens(&request),
            output_tokens: estimate::tokens_for_chars(reply.chars().count()).max(1),
            ..Usage::default()
        };
        let events = async move {
            // Without a latency the answer is ready at once: the engine, not the provider,
            // decides where a fan-out's branches interleave.
            if let Some(latency) = latency {
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return vec![ChatEvent::Error(cancelled())],
                    _ = tokio::time::sleep(latency) => {}
                }
            }
            if cancel.is_cancelled() {
                return vec![ChatEvent::Error(cancelled())];
            }
            let mut events: Vec<ChatEvent> =
                split_deltas(&reply, 4).into_iter().map(ChatEvent::TextDelta).collect();
            events.push(ChatEvent::Finish { reason: FinishReason::Stop, usage });
            events
        };
        futures::stream::once(events).flat_map(futures::stream::iter).boxed()
    }
}

/// Splits `text` into at most `pieces` non-empty pieces on character boundaries.
pub(crate) fn split_deltas(text: &str, pieces: usize) -> Vec<String> {
    let chars = text.chars().count();
    if chars == 0 {
        return Vec::new();
    }
    let size = chars.div_ceil(pieces.max(1));
    let mut deltas = Vec::with_capacity(chars.div_ceil(size));
    let mut rest = text;
    while !rest.is_empty() {
        let cut = rest.char_indices().nth(size).map_or(rest.len(), |(at, _)| at);
        let (piece, tail) = rest.split_at(cut);
        deltas.push(piece.to_owned());
        rest = tail;
    }
    deltas
}

/// A JSON value satisfying `schema`, generated deterministically.
///
/// Supported: `type` (one or several), `properties` + `required`, `additionalProperties`,
/// `items`/`prefixItems`, `minItems`/`maxItems`/`uniqueItems`, `enum`, `const`, `minimum`,
/// `maximum` (and their exclusive forms), `multipleOf`, `minLength`/`maxLength`, common
/// `format`s, `pattern` (by trying a few candidates), `anyOf`/`oneOf` (first branch), `allOf`
/// (merged), and `$ref` to local definitions (`#/$defs/...`, any local JSON pointer).
///
/// A schema asking for more than echo generates gives `null`; [`try_json_for_schema`] says why.
pub fn json_for_schema(schema: &Value) -> Value {
    try_json_for_schema(schema).unwrap_or(Value::Null)
}

/// [`json_for_schema`], or a `sandbox_limit` error once the value would pass [`MAX_VALUES`]
/// values or [`MAX_TEXT_BYTES`] bytes of text: a schema of a few hundred bytes can ask for
/// billions of items (`minItems`, nested arrays) or a string of any length (`minLength`), and
/// echo checks each count before it allocates.
pub fn try_json_for_schema(schema: &Value) -> Result<Value, crate::Error> {
    let generator = Generator {
        root: schema,
        values: Cell::new(0),
        text: Cell::new(0),
        copied: Cell::new(0),
        patterns: RefCell::new(HashMap::new()),
    };
    let value = generator.value(schema, 0, 0);
    if generator.spent() {
        return Err(crate::Error::new(
            crate::ErrorCode::SandboxLimit,
            format!(
                "the echo model generates at most {MAX_VALUES} values and {} KiB of text for a schema, and \
                 copies at most {} MiB of it; this schema asks for more (minItems, minLength, nesting, large \
                 const or enum values, or large schemas merged by allOf, anyOf or oneOf)",
                MAX_TEXT_BYTES >> 10,
                MAX_COPIED_BYTES >> 20
            ),
        ));
    }
    Ok(value)
}

struct Generator<'a> {
    root: &'a Value,
    /// Values generated so far; past [`MAX_VALUES`] generation stops.
    values: Cell<usize>,
    /// Bytes of text generated so far (strings, and `const` and `enum` values as JSON); past
    /// [`MAX_TEXT_BYTES`] generation stops.
    text: Cell<usize>,
    /// Bytes of schema copied so far (the merges of `allOf`, `anyOf` and `oneOf`, each done
    /// once per value generated from them); past [`MAX_COPIED_BYTES`] generation stops.
    copied: Cell<usize>,
    /// Each `pattern` compiled once (`None`: not a pattern the `regex` crate takes, or one
    /// past its size limit), not once per string generated from it.
    patterns: RefCell<HashMap<String, Option<regex::Regex>>>,
}

/// Deep enough for any sensible schema; recursive `$ref`s bottom out here.
pub const MAX_DEPTH: usize = 32;

/// The most values (every array item, property and scalar counts) echo generates for a schema.
pub const MAX_VALUES: usize = 100_000;

/// The most bytes of string text echo generates for a schema.
pub const MAX_TEXT_BYTES: usize = 1 << 20;

/// The most bytes of schema echo copies to merge `allOf`, `anyOf` and `oneOf` branches.
pub const MAX_COPIED_BYTES: usize = 16 << 20;

/// The largest compiled `pattern` echo tries candidates against (the `regex` crate's size
/// limit; its default is 10 MiB, and a schema may hold many patterns).
const MAX_PATTERN_BYTES: usize = 256 << 10;

impl Generator<'_> {
    /// Whether the value's budget is spent (then every further value is `null`, and the caller
    /// reports the overflow).
    fn spent(&self) -> bool {
        self.values.get() > MAX_VALUES
            || self.text.get() > MAX_TEXT_BYTES
            || self.copied.get() > MAX_COPIED_BYTES
    }

    /// Counts `value` as text about to be copied into the output (a `const` or an `enum`
    /// option: a 1 MB `const` under `minItems: 100000` asked for 100 GB); whether it still fits.
    fn copies(&self, value: &Value) -> bool {
        let room = MAX_TEXT_BYTES.saturating_sub(self.text.get());
        self.text.set(self.text.get().saturating_add(weight(value, room)));
        !self.spent()
    }

    /// Counts copying `schema` to merge it; whether it still fits.
    fn merges(&self, schema: &Map<String, Value>) -> bool {
        let room = MAX_COPIED_BYTES.saturating_sub(self.copied.get());
        let bytes = schema.iter().fold(0usize, |sum, (key, value)| {
            sum.saturating_add(key.len()).saturating_add(weight(value, room.saturating_sub(sum)))
        });
        self.copied.set(self.copied.get().saturating_add(bytes));
        !self.spent()
    }

    /// `variant` distinguishes siblings in an array, so `uniqueItems` holds.
    fn value(&self, schema: &Value, depth: usize, variant: usize) -> Value {
        let Some(map) = schema.as_object() else { return Value::Null };
        if depth > MAX_DEPTH {
            return Value::Null;
        }
        self.values.set(self.values.get() + 1);
        if self.spent() {
            return Value::Null;
        }
        if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
            return match self.resolve(reference) {
                Some(target) => self.value(target, depth + 1, variant),
                None => Value::Null,
            };
        }
        if let Some(constant) = map.get("const") {
            return if self.copies(constant) { constant.clone() } else { Value::Null };
        }
        if let Some(options) = map.get("enum").and_then(Value::as_array).filter(|o| !o.is_empty()) {
            let option = &options[variant % options.len()];
            return if self.copies(option) { option.clone() } else { Value::Null };
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(first) = map.get(key).and_then(Value::as_array).and_then(|b| b.first()) {
                if !self.merges(map) || first.as_object().is_some_and(|first| !self.merges(first)) {
                    return Value::Null;
                }
                let merged = merge_siblings(map, key, first);
                return self.value(&merged, depth + 1, variant);
            }
        }
        if let Some(all) = map.get("allOf").and_then(Value::as_array) {
            if !self.merges(map) {
                return Value::Null;
            }
            let mut merged = map.clone();
            merged.remove("allOf");
            for part in all {
                let part = match part.get("$ref").and_then(Value::as_str) {
                    Some(reference) => self.resolve(reference).unwrap_or(&Value::Null),
                    None => part,
                };
                if let Some(part) = part.as_object()
                    && !self.merges(part)
                {
                    return Value::Null;
                }
                merge_into(&mut merged, part);
            }
            return self.value(&Value::Object(merged), depth + 1, variant);
        }
        match self.type_of(map) {
            "object" => self.object(map, depth, variant),
            "array" => self.array(map, depth, variant),
            "string" => {
                let pattern = map.get("pattern").and_then(Value::as_str).and_then(|p| self.pattern(p));
                let text =
                    string(map, variant, MAX_TEXT_BYTES.saturating_sub(self.text.get()), pattern.as_ref());
                self.text.set(self.text.get() + text.as_str().map_or(0, str::len).max(1));
                text
            }
            "integer" => integer(map, variant),
            "number" => number(map, variant),
            "boolean" => Value::Bool(variant % 2 == 1),
            _ => Value::Null,
        }
    }

    fn type_of<'m>(&self, map: &'m Map<String, Value>) -> &'m str {
        match map.get("type") {
            Some(Value::String(kind)) => kind,
            // Prefer a non-null type: a value says more than a null.
            Some(Value::Array(kinds)) => {
                let kinds: Vec<&str> = kinds.iter().filter_map(Value::as_str).collect();
                kinds.iter().find(|k| **k != "null").or(kinds.first()).copied().unwrap_or("null")
            }
            _ if map.contains_key("properties") || map.contains_key("required") => "object",
            _ if map.contains_key("items") || map.contains_key("prefixItems") => "array",
            _ if map.contains_key("minLength") || map.contains_key("pattern") => "string",
            _ if map.contains_key("minimum") || map.contains_key("maximum") => "number",
            _ => "null",
        }
    }

    /// `pattern` compiled, once per schema (see `patterns`).
    fn pattern(&self, pattern: &str) -> Option<regex::Regex> {
        let mut patterns = self.patterns.borrow_mut();
        if let Some(compiled) = patterns.get(pattern) {
            return compiled.clone();
        }
        // Compiling is work in proportion to the pattern, counted as copying it.
        self.copied.set(self.copied.get().saturating_add(pattern.len()));
        let compiled = regex::RegexBuilder::new(pattern)
            .size_limit(MAX_PATTERN_BYTES)
            .dfa_size_limit(MAX_PATTERN_BYTES)
            .build()
            .ok();
        patterns.insert(pattern.to_owned(), compiled.clone());
        compiled
    }

    fn resolve(&self, reference: &str) -> Option<&Value> {
        let pointer = reference.strip_prefix('#')?;
        if pointer.is_empty() {
            return Some(self.root);
        }
        self.root.pointer(pointer)
    }

    fn object(&self, map: &Map<String, Value>, depth: usize, variant: usize) -> Value {
        let mut object = Map::new();
        let empty = Map::new();
        let properties = map.get("properties").and_then(Value::as_object).unwrap_or(&empty);
        for (name, schema) in properties {
            object.insert(name.clone(), self.value(schema, depth + 1, variant));
        }
        let string_schema = json!({"type": "string"});
        let extra = map.get("additionalProperties").filter(|s| s.is_object()).unwrap_or(&string_schema);
        for name in
            map.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str)
        {
            if !object.contains_key(name) {
                object.insert(name.to_owned(), self.value(extra, depth + 1, variant));
            }
        }
        let min = map.get("minProperties").and_then(Value::as_u64).unwrap_or(0) as usize;
        let mut n = 0;
        while object.len() < min
            && map.get("additionalProperties") != Some(&Value::Bool(false))
            && !self.spent()
        {
            object.insert(format!("extra{n}"), self.value(extra, depth + 1, n));
            n += 1;
        }
        Value::Object(object)
    }

    fn array(&self, map: &Map<String, Value>, depth: usize, variant: usize) -> Value {
        let prefix = map.get("prefixItems").and_then(Value::as_array);
        let items = map.get("items");
        let min = map.get("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
        let max = map.get("maxItems").and_then(Value::as_u64).map_or(usize::MAX, |m| m as usize);
        let prefix_len = prefix.map_or(0, Vec::len);
        // One item shows the shape; no item when extra items are forbidden beyond the prefix.
        let wanted = if items == Some(&Value::Bool(false)) { prefix_len } else { min.max(prefix_len).max(1) };
        let count = wanted.min(max);
        // Reserved only up to what the budget allows: `minItems: 1e10` must not allocate first.
        let mut array = Vec::with_capacity(count.min(MAX_VALUES.saturating_sub(self.values.get()) + 1));
        // Each item's schema by reference: a copy per item of a 1 MB `items` schema was 100 GB
        // of copying under `minItems: 100000`.
        let string_schema = json!({"type": "string"});
        for i in 0..count {
            if self.spent() {
                // One more value, so the caller sees the overflow even when this is the last.
                self.values.set(MAX_VALUES + 1);
                break;
            }
            let schema = match (prefix.and_then(|p| p.get(i)), items) {
                (Some(schema), _) => schema,
                (None, Some(schema @ Value::Object(_))) => schema,
                (None, Some(Value::Array(tuple))) => tuple.get(i).unwrap_or(&string_schema),
                _ => &string_schema,
            };
            array.push(self.value(schema, depth + 1, variant + i));
        }
        Value::Array(array)
    }
}

/// `first` branch of an `anyOf`/`oneOf`, with the sibling keywords of the parent kept.
fn merge_siblings(map: &Map<String, Value>, key: &str, first: &Value) -> Value {
    let mut merged = map.clone();
    merged.remove(key);
    merged.remove("anyOf");
    merged.remove("oneOf");
    merge_into(&mut merged, first);
    Value::Object(merged)
}

/// Merges `part`'s keywords into `target`: properties and required lists unite, others replace.
fn merge_into(target: &mut Map<String, Value>, part: &Value) {
    let Some(part) = part.as_object() else { return };
    for (key, value) in part {
        match (key.as_str(), target.get_mut(key), value) {
            ("properties", Some(Value::Object(existing)), Value::Object(more)) => {
                for (name, schema) in more {
                    existing.insert(name.clone(), schema.clone());
                }
            }
            ("required", Some(Value::Array(existing)), Value::Array(more)) => {
                for name in more {
                    if !existing.contains(name) {
                        existing.push(name.clone());
                    }
                }
            }
            _ => {
                target.insert(key.clone(), value.clone());
            }
        }
    }
}

/// A string for `map`; a `minLength` past `room` bytes gives a string just past `room` (the
/// caller reports the overflow) instead of building it.
fn string(map: &Map<String, Value>, variant: usize, room: usize, pattern: Option<&regex::Regex>) -> Value {
    let format = map.get("format").and_then(Value::as_str);
    let base = match format {
        Some("date-time") => "1970-01-01T00:00:00Z".to_owned(),
        Some("date") => "1970-01-01".to_owned(),
        Some("time") => "00:00:00Z".to_owned(),
        Some("email") => format!("echo{variant}@example.com"),
        Some("uri" | "url" | "iri") => format!("https://example.com/{variant}"),
        Some("uuid") => format!("00000000-0000-4000-8000-{variant:012}"),
        Some("ipv4") => format!("192.0.2.{}", variant % 256),
        Some("ipv6") => format!("2001:db8::{:x}", variant % 65536),
        Some("hostname") => format!("echo{variant}.example.com"),
        _ if variant == 0 => "echo".to_owned(),
        _ => format!("echo{variant}"),
    };
    let min = map.get("minLength").and_then(Value::as_u64).unwrap_or(0).min(room as u64 + 1) as usize;
    let max = map.get("maxLength").and_then(Value::as_u64).map_or(usize::MAX, |m| m as usize);
    let fit = |text: &str| -> String {
        let mut text: String = text.chars().take(max).collect();
        let chars = text.chars().count();
        if chars < min {
            text.extend(std::iter::repeat_n('x', min - chars));
        }
        text
    };
    if let Some(regex) = pattern {
        let candidates = [base.as_str(), "", "a", "A", "0", "abc", "ABC", "123", "a1", "echo-1", "x_1"];
        if let Some(found) = candidates.iter().map(|c| fit(c)).find(|c| regex.is_match(c)) {
            return Value::String(found);
        }
    }
    Value::String(fit(&base))
}

/// About the bytes `value` takes as JSON, the walk stopping once past `cap`.
fn weight(value: &Value, cap: usize) -> usize {
    match value {
        Value::String(s) => s.len() + 2,
        Value::Array(items) => {
            let mut sum = 2usize;
            for item in items {
                if sum > cap {
                    break;
                }
                sum = sum.saturating_add(weight(item, cap - sum) + 1);
            }
            sum
        }
        Value::Object(map) => {
            let mut sum = 2usize;
            for (key, item) in map {
                if sum > cap {
                    break;
                }
                sum = sum.saturating_add(key.len() + 4).saturating_add(weight(item, cap - sum));
            }
            sum
        }
        _ => 8,
    }
}

fn bound(map: &Map<String, Value>, key: &str) -> Option<f64> {
    map.get(key).and_then(Value::as_f64)
}

fn integer(map: &Map<String, Value>, variant: usize) -> Value {
    let low =
        match (bound(map, "minimum").map(f64::ceil), bound(map, "exclusiveMinimum").map(|e| e.floor() + 1.0))
        {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    let high =
        match (bound(map, "maximum").map(f64::floor), bound(map, "exclusiveMaximum").map(|e| e.ceil() - 1.0))
        {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    let start = match (low, high) {
        (Some(low), _) => low,
        (None, Some(high)) => high.min(0.0),
        (None, None) => 0.0,
    };
    // Siblings differ by whole steps, so `uniqueItems` holds.
    let step = bound(map, "multipleOf").filter(|s| *s > 0.0);
    let mut value = match step {
        Some(step) => (start / step).ceil() * step + variant as f64 * step,
        None => start + variant as f64,
    };
    if let Some(high) = high
        && value > high
    {
        value = match step {
            Some(step) => (high / step).floor() * step,
            None => high,
        };
    }
    Value::Number(Number::from(value as i64))
}

fn number(map: &Map<String, Value>, variant: usize) -> Value {
    let max = bound(map, "maximum");
    let exclusive_max = bound(map, "exclusiveMaximum");
    let top = max.or(exclusive_max);
    let from_exclusive = bound(map, "exclusiveMinimum").map(|exclusive| match top {
        Some(top) if exclusive + 1.0 >= top => (exclusive + top) / 2.0,
        _ => exclusive + 1.0,
    });
    let base = match (bound(map, "minimum"), from_exclusive) {
        (Some(min), Some(above)) => min.max(above),
        (Some(min), None) => min,
        (None, Some(above)) => above,
        (None, None) => top.map_or(0.0, |top| (top - 1.0).min(0.0)),
    };
    let step = bound(map, "multipleOf").filter(|s| *s > 0.0);
    let fits = |value: f64| max.is_none_or(|m| value <= m) && exclusive_max.is_none_or(|m| value < m);
    let aligned = |value: f64| step.map_or(value, |step| (value / step).ceil() * step);
    // Siblings differ by whole steps, so `uniqueItems` holds where the range allows it.
    let with_variant = aligned(base) + variant as f64 * step.unwrap_or(1.0);
    let value = if fits(with_variant) { with_variant } else { aligned(base) };
    if value.fract() == 0.0 && value.abs() < 9.0e15 {
        return Value::Number(Number::from(value as i64));
    }
    Number::from_f64(value).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_char_boundaries() {
        assert_eq!(split_deltas("h\u{e9}llo w\u{f6}rld", 4).concat(), "h\u{e9}llo w\u{f6}rld");
        assert_eq!(split_deltas("ab", 4), ["a", "b"]);
        assert!(split_deltas("", 4).is_empty());
    }

    #[test]
    fn echoes_the_last_user_text_cut_sensibly() {
        let request = ChatRequest::new("default", vec![crate::provider::Message::user("hello")]);
        assert_eq!(EchoProvider::reply(&request), "echo: hello");
        let long = ChatRequest::new("default", vec![crate::provider::Message::user("\u{e9}".repeat(500))]);
        let reply = EchoProvider::reply(&long);
        assert_eq!(reply.chars().count(), "echo: ".len() + EchoProvider::MAX_ECHO_CHARS + 1);
        assert!(reply.ends_with('\u{2026}'));
    }
}
