//! Canonical identity: RFC 8785 canonical JSON, sha256 content keys, and schema hashes that
//! ignore annotation keywords.
//!
//! Canonicalization is serde_json_canonicalizer's (a maintained RFC 8785 implementation),
//! checked against the cyberphone test vectors and the 100,000-number ES6 file in the tests.
//! serde_json is built without `arbitrary_precision`, so numbers are IEEE doubles as the RFC
//! requires.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::ContentKey;

/// A value that has no canonical form.
#[derive(Debug, thiserror::Error)]
#[error("value has no canonical JSON form: {0}")]
pub struct CanonError(String);

/// The RFC 8785 canonical form of a JSON value.
///
/// # Errors
/// [`CanonError`] when the value cannot be canonicalized (it always can for a `Value`
/// built by serde_json, whose numbers are finite).
pub fn canonical_json(value: &Value) -> Result<String, CanonError> {
    serde_json_canonicalizer::to_string(value).map_err(|e| CanonError(e.to_string()))
}

/// The content key of an identity input: sha256 of its canonical JSON.
///
/// Identity inputs are almost always made of ASCII-keyed objects, strings and small
/// integers; for those serde_json's compact output already is the canonical form, so it is
/// streamed straight into the hash (no intermediate string). Anything else (floats, keys
/// outside the Basic Multilingual Plane, integers beyond 2^53, maps not in byte order) goes
/// through the RFC 8785 canonicalizer. A property test holds the two paths equal.
///
/// # Errors
/// [`CanonError`] as for [`canonical_json`].
pub fn content_key(identity: &Value) -> Result<ContentKey, CanonError> {
    if is_canonical_as_serialized(identity) {
        let mut hasher = HashWriter(Sha256::new());
        if serde_json::to_writer(&mut hasher, identity).is_ok() {
            return Ok(ContentKey::from_bytes(hasher.0.finalize().into()));
        }
    }
    Ok(content_key_of_canonical(&canonical_json(identity)?))
}

/// The content key of an identity struct, hashed straight from its serialization: no
/// `Value` is built on the way.
///
/// For structs whose fields are declared in byte order and hold only strings, nulls, nested
/// such structs and the JSON values listed in `embedded`: their serialization is canonical
/// exactly when every embedded value's is, which this checks. When one is not (a float, say),
/// the struct goes through [`content_key`] instead. Property tests hold the engine's identity
/// structs equal to the `Value` path.
///
/// # Errors
/// [`CanonError`] as for [`canonical_json`].
pub fn content_key_of<'v, T: serde::Serialize>(
    identity: &T,
    embedded: impl IntoIterator<Item = &'v Value>,
) -> Result<ContentKey, CanonError> {
    if embedded.into_iter().all(is_canonical_as_serialized) {
        let mut hasher = HashWriter(Sha256::new());
        if serde_json::to_writer(&mut hasher, identity).is_ok() {
            return Ok(ContentKey::from_bytes(hasher.0.finalize().into()));
        }
    }
    let value = serde_json::to_value(identity).map_err(|e| CanonError(e.to_string()))?;
    content_key(&value)
}

/// Whether serde_json's compact serialization of `value` is its RFC 8785 form: integers
/// within ±2^53 print the same as the doubles they denote, strings escape the same way, and
/// object keys whose characters are all below U+10000 sort the same by UTF-8 bytes (how
/// the map iterates, checked here rather than assumed) as by UTF-16 code units.
fn is_canonical_as_serialized(value: &Value) -> bool {
    const EXACT: u64 = 1 << 53;
    match value {
        Value::Null | Value::Bool(_) | Value::String(_) => true,
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u <= EXACT,
            (None, Some(i)) => i.unsigned_abs() <= EXACT,
            _ => false,
        },
        Value::Array(items) => items.iter().all(is_canonical_as_serialized),
        Value::Object(map) => {
            let mut previous: Option<&str> = None;
            map.iter().all(|(key, item)| {
                let in_order = previous.is_none_or(|p| p.as_bytes() < key.as_bytes());
                previous = Some(key);
                in_order
                    && (key.is_ascii() || key.chars().all(|c| u32::from(c) < 0x1_0000))
                    && is_canonical_as_serialized(item)
            })
        }
    }
}

/// Feeds serialized bytes to a hash.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The content key of text that is already canonical JSON.
pub fn content_key_of_canonical(canonical: &str) -> ContentKey {
    ContentKey::from_bytes(Sha256::digest(canonical.as_bytes()).into())
}

/// JSON Schema keywords that annotate without constraining; they never enter a schema hash.
const ANNOTATION_KEYWORDS: [&str; 8] =
    ["title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"];

/// The hash of a JSON Schema's shape: sha256 (hex) of the canonical JSON of the schema with
/// every annotation keyword removed at every level.
///
/// Keywords are only stripped where they are keywords: the names of properties under
/// `properties` (or `patternProperties`, `$defs`, `definitions`, `dependentSchemas`) are
/// data, so a property called `title` keeps its schema.
///
/// # Errors
/// [`CanonError`] as for [`canonical_json`].
pub fn schema_hash(schema: &Value) -> Result<String, CanonError> {
    let stripped = strip_annotations(schema);
    Ok(content_key(&stripped)?.to_hex())
}

fn strip_annotations(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out = serde_json::Map::with_capacity(map.len());
            for (keyword, sub) in map {
                if ANNOTATION_KEYWORDS.contains(&keyword.as_str()) {
                    continue;
                }
                let sub = if is_name_map(keyword) {
                    match sub {
                        Value::Object(props) => Value::Object(
                            props.iter().map(|(name, s)| (name.clone(), strip_annotations(s))).collect(),
                        ),
                        other => strip_annotations(other),
                    }
                } else if matches!(keyword.as_str(), "enum" | "const") {
                    // Literal data: kept verbatim.
                    sub.clone()
                } else {
                    strip_annotations(sub)
                };
                out.insert(keyword.clone(), sub);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(strip_annotations).collect()),
        other => other.clone(),
    }
}

/// Keywords whose value maps user-chosen names to subschemas.
fn is_name_map(keyword: &str) -> bool {
    matches!(keyword, "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas")
}
