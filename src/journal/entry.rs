//! The journal's record types: entries, their kinds and statuses, sequence numbers, scope
//! paths and content keys.
//!
//! `Entry` is the decoded form; the stored form is [`RawEntry`](crate::store::RawEntry),
//! the entry's compact JSON text. Encoding happens once, when an entry is appended, and
//! decoding once, when a journal is loaded.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::error::Error;
use crate::money::Money;
use crate::usage::Usage;

/// The kind of effect or fact an entry records. Persisted by name; never renamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// One agent invocation (two-phase).
    Agent,
    /// One journaled step (two-phase).
    Step,
    /// One host-function call (two-phase).
    Call,
    /// One child-workflow invocation (two-phase).
    Child,
    /// One tool call of an agent's loop, in the agent call's own scope (two-phase).
    Tool,
    /// A suspension awaiting an external value (and tool approvals).
    External,
    /// A journaled `now`, `random` or `uuid` value (single-phase).
    Rand,
    /// A dynamic decision the engine made, written before its effect (single-phase).
    Decision,
    /// A ref-entry: an attempt to close a suspension.
    Resolution,
    /// A ref-entry: the decision to stop pursuing a subtree.
    Abandon,
}

impl Kind {
    /// Whether the kind is written as a `running` entry at dispatch plus a terminal entry.
    pub const fn is_two_phase(self) -> bool {
        matches!(self, Kind::Agent | Kind::Step | Kind::Call | Kind::Child | Kind::Tool)
    }

    /// Whether the kind is a ref-entry, which never takes part in matching.
    pub const fn is_ref_entry(self) -> bool {
        matches!(self, Kind::Resolution | Kind::Abandon)
    }

    /// The snake_case name, as persisted.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Agent => "agent",
            Kind::Step => "step",
            Kind::Call => "call",
            Kind::Child => "child",
            Kind::Tool => "tool",
            Kind::External => "external",
            Kind::Rand => "rand",
            Kind::Decision => "decision",
            Kind::Resolution => "resolution",
            Kind::Abandon => "abandon",
        }
    }
}

/// The status an entry records. Persisted by name; never renamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Dispatched, not yet completed.
    Running,
    /// Completed with a value.
    Ok,
    /// Completed with an error.
    Error,
    /// Stopped by a limit (turns, budget cut, timeout).
    Limit,
    /// Cancelled before completion.
    Cancelled,
    /// Waiting for an external value.
    Suspended,
}

impl Status {
    /// Whether the status ends a two-phase call.
    pub const fn is_terminal(self) -> bool {
        matches!(self, Status::Ok | Status::Error | Status::Limit | Status::Cancelled)
    }

    /// The snake_case name, as persisted.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Limit => "limit",
            Status::Cancelled => "cancelled",
            Status::Suspended => "suspended",
        }
    }
}

/// A sequence number: strictly increasing per run, starting at 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Seq(pub u64);

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A content key: the sha256 of the canonical JSON of a call's identity input.
///
/// Serialized as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentKey([u8; 32]);

impl ContentKey {
    /// Wraps a digest.
    pub const fn from_bytes(bytes: [u8; 32]) -> ContentKey {
        ContentKey(bytes)
    }

    /// The digest bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 64-digit lowercase hex form.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses the 64-digit hex form.
    pub fn from_hex(text: &str) -> Option<ContentKey> {
        // By table rather than through the `hex` crate: every entry of a journal being loaded
        // carries a key, and the generic decoder was a tenth of the load.
        const INVALID: u8 = 0xff;
        const DIGITS: [u8; 256] = {
            let mut table = [INVALID; 256];
            let mut i = 0;
            while i < 10 {
                table[b'0' as usize + i] = i as u8;
                i += 1;
            }
            let mut i = 0;
            while i < 6 {
                table[b'a' as usize + i] = 10 + i as u8;
                table[b'A' as usize + i] = 10 + i as u8;
                i += 1;
            }
            table
        };
        let digits: &[u8; 64] = text.as_bytes().try_into().ok()?;
        let mut bytes = [0u8; 32];
        for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
            let (high, low) = (DIGITS[usize::from(pair[0])], DIGITS[usize::from(pair[1])]);
            if high == INVALID || low == INVALID {
                return None;
            }
            *byte = high << 4 | low;
        }
        Some(ContentKey(bytes))
    }
}

impl fmt::Debug for ContentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentKey({})", &self.to_hex()[..12])
    }
}

impl fmt::Display for ContentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl Serialize for ContentKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut buf = [0u8; 64];
        // Infallible: the buffer is exactly twice the digest length.
        let _ = hex::encode_to_slice(self.0, &mut buf);
        s.serialize_str(std::str::from_utf8(&buf).unwrap_or_default())
    }
}

impl<'de> Deserialize<'de> for ContentKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ContentKey, D::Error> {
        // A visitor rather than `Cow<str>`: serde's `Cow` always allocates, and every entry
        // of a journal being loaded carries a key.
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ContentKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("64 hex digits")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<ContentKey, E> {
                ContentKey::from_hex(text).ok_or_else(|| E::custom("content key is not 64 hex digits"))
            }
        }
        d.deserialize_str(Visitor)
    }
}

/// One segment of a scope path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    /// Branch `branch` of the `site`-th `parallel` in the parent scope: `par:site:branch`.
    Par {
        /// Which `parallel` call of the parent scope (0-based).
        site: u32,
        /// Which branch (0-based, source order).
        branch: u32,
    },
    /// Item `item` of stage `stage` of a pipeline: `pipe:stage:item`.
    Pipe {
        /// The stage index (0-based).
        stage: u32,
        /// The source item's index (0-based).
        item: u32,
    },
    /// The `call`-th invocation of child workflow `name`: `wf:name:call`.
    Wf {
        /// The child workflow's registered name.
        name: String,
        /// Which invocation of it in the parent scope (0-based).
        call: u32,
    },
    /// The body of a step: `step:KEY:ordinal`, where `KEY` is the first 16 hex digits of the
    /// step's content key and `ordinal` counts earlier steps with that key in the parent
    /// scope. Both come from the step's identity, so an unrelated call inserted before the
    /// step does not move its body.
    Step {
        /// The first 16 hex digits of the step's content key.
        key: String,
        /// Earlier same-key steps in the parent scope.
        ordinal: u32,
    },
    /// A labelled site (`parallel`, `pipeline` or `workflow` given a `label`): `at:label:n`,
    /// the `n`-th use of that label in the parent scope. The site's own counters start afresh
    /// inside it, so inserting an unlabelled site before it does not shift it.
    Site {
        /// The label (no `/` or `:`).
        label: String,
        /// Earlier uses of the label in the parent scope.
        index: u32,
    },
}

impl Segment {
    /// The body scope segment of the step keyed `key` whose ordinal among same-key steps of
    /// its scope is `ordinal`: from the step's identity, never from a running counter.
    pub fn step_body(key: ContentKey, ordinal: u32) -> Segment {
        let mut hex = key.to_hex();
        hex.truncate(16);
        Segment::Step { key: hex, ordinal }
    }

    /// Whether `label` may name a [`Segment::Site`]: non-empty, at most 64 characters, no `/`
    /// or `:`.
    pub fn valid_label(label: &str) -> bool {
        !label.is_empty() && label.chars().count() <= 64 && !label.contains(['/', ':'])
    }
}

impl fmt::Display for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Segment::Par { site, branch } => write!(f, "par:{site}:{branch}"),
            Segment::Pipe { stage, item } => write!(f, "pipe:{stage}:{item}"),
            Segment::Wf { name, call } => write!(f, "wf:{name}:{call}"),
            Segment::Step { key, ordinal } => write!(f, "step:{key}:{ordinal}"),
            Segment::Site { label, index } => write!(f, "at:{label}:{index}"),
        }
    }
}

/// Where a call sits in the run's call tree, from structure only: `""` for the root,
/// `par:0:2/pipe:1:4` for item 4 of stage 1 of a pipeline inside branch 2 of the first
/// `parallel`.
///
/// Cheap to clone (one shared string). Workflow names in `wf:` segments may not contain
/// `/` or `:`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ScopePath(Arc<str>);

/// Why a string is not a valid [`ScopePath`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid scope path {0:?}")]
pub struct InvalidScopePath(pub String);

impl ScopePath {
    /// The root scope (empty path).
    pub fn root() -> ScopePath {
        ScopePath(Arc::from(""))
    }

    /// Whether this is the root scope.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// This path extended by one segment.
    pub fn child(&self, segment: &Segment) -> ScopePath {
        if self.is_root() {
            ScopePath(Arc::from(segment.to_string()))
        } else {
            ScopePath(Arc::from(format!("{}/{segment}", self.0)))
        }
    }

    /// Parses and validates the textual form.
    ///
    /// # Errors
    /// [`InvalidScopePath`] when a segment is not `par:N:N`, `pipe:N:N`, `wf:NAME:N`,
    /// `step:HEX16:N` or `at:LABEL:N`.
    pub fn parse(text: &str) -> Result<ScopePath, InvalidScopePath> {
        if !text.is_empty() {
            for part in text.split('/') {
                parse_segment(part).ok_or_else(|| InvalidScopePath(text.to_owned()))?;
            }
        }
        Ok(ScopePath(Arc::from(text)))
    }

    /// The segments, outermost first.
    pub fn segments(&self) -> Vec<Segment> {
        if self.is_root() {
            return Vec::new();
        }
        // Valid by construction, so every part parses.
        self.0.split('/').filter_map(parse_segment).collect()
    }

    /// Whether `self` is `ancestor` or lies under it.
    pub fn is_within(&self, ancestor: &ScopePath) -> bool {
        ancestor.is_root()
            || (self.0.starts_with(&*ancestor.0)
                && (self.0.len() == ancestor.0.len() || self.0.as_bytes()[ancestor.0.len()] == b'/'))
    }

    /// The textual form.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn parse_segment(part: &str) -> Option<Segment> {
    let mut fields = part.split(':');
    let tag = fields.next()?;
    let a = fields.next()?;
    let b = fields.next()?;
    if fields.next().is_some() {
        return None;
    }
    let number = |s: &str| -> Option<u32> {
        if s.is_empty() || (s.len() > 1 && s.starts_with('0')) {
            return None;
        }
        s.parse().ok()
    };
    match tag {
        "par" => Some(Segment::Par { site: number(a)?, branch: number(b)? }),
        "pipe" => Some(Segment::Pipe { stage: number(a)?, item: number(b)? }),
        "wf" if !a.is_empty() => Some(Segment::Wf { name: a.to_owned(), call: number(b)? }),
        "step" if a.len() == 16 && a.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)) => {
            Some(Segment::Step { key: a.to_owned(), ordinal: number(b)? })
        }
        "at" if Segment::valid_label(a) => Some(Segment::Site { label: a.to_owned(), index: number(b)? }),
        _ => None,
    }
}

impl fmt::Debug for ScopePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ScopePath({:?})", &*self.0)
    }
}

impl fmt::Display for ScopePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for ScopePath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

thread_local! {
    /// Scope paths already validated on this thread: a journal repeats a few scopes many
    /// times, so each distinct one is parsed (and allocated) once.
    static SCOPES: std::cell::RefCell<foldhash::HashSet<Arc<str>>> = std::cell::RefCell::default();
}

impl<'de> Deserialize<'de> for ScopePath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ScopePath, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ScopePath;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a scope path")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<ScopePath, E> {
                if let Some(known) = SCOPES.with(|scopes| scopes.borrow().get(text).cloned()) {
                    return Ok(ScopePath(known));
                }
                let path = ScopePath::parse(text).map_err(E::custom)?;
                SCOPES.with(|scopes| {
                    let mut scopes = scopes.borrow_mut();
                    if scopes.len() < MAX_INTERNED {
                        scopes.insert(path.0.clone());
                    }
                });
                Ok(path)
            }
        }
        d.deserialize_str(Visitor)
    }
}

/// A short string that repeats across a journal's entries (a model ref, a role, a phase, an
/// agent type): shared, so a large journal holds each distinct value once.
pub type Name = Arc<str>;

/// Names are interned per decoding thread, up to a bound: past it they are allocated as
/// usual, so a journal with unusually many distinct names costs memory, never correctness.
const MAX_INTERNED: usize = 4096;

thread_local! {
    static NAMES: std::cell::RefCell<foldhash::HashSet<Name>> = std::cell::RefCell::default();
}

/// The shared copy of `text`.
pub(crate) fn intern(text: &str) -> Name {
    NAMES.with(|names| {
        let mut names = names.borrow_mut();
        if let Some(name) = names.get(text) {
            return name.clone();
        }
        let name: Name = Arc::from(text);
        if names.len() < MAX_INTERNED {
            names.insert(name.clone());
        }
        name
    })
}

fn interned<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Name>, D::Error> {
    struct Visitor;
    impl<'de> serde::de::Visitor<'de> for Visitor {
        type Value = Option<Name>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string or null")
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Option<Name>, E> {
            Ok(Some(intern(text)))
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Option<Name>, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Option<Name>, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<Name>, D::Error> {
            d.deserialize_str(self)
        }
    }
    d.deserialize_option(Visitor)
}

/// A JSON payload kept as its exact text; equal when the texts are equal.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Payload(pub Box<RawValue>);

impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        self.0.get() == other.0.get()
    }
}

impl Payload {
    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }
}

/// A JSON value as its compact text.
pub(super) fn raw_json(value: &Value) -> Box<RawValue> {
    // Serializing a `Value` cannot fail; `null` is the unreachable fallback.
    serde_json::value::to_raw_value(value)
        .unwrap_or_else(|_| RawValue::from_string("null".to_owned()).unwrap_or_default())
}

/// The identity and replay pipeline version new entries are written at (an entry's
/// `hash_version`).
pub const HASH_VERSION: u32 = 1;

/// The oldest hash version this build can replay.
pub const MIN_HASH_VERSION: u32 = 1;

/// One journal entry, decoded.
///
/// Identity is `(scope, key, ordinal)` qualified by `hash_version`. Everything else is
/// payload: the value or error, usage and cost, and the cosmetic fields (`label`, `phase`,
/// `agent_type`, `role`, `name`, `model`) that events and the cost report read but that never
/// enter a key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Position in the run's journal.
    pub seq: Seq,
    /// The identity pipeline version the entry was keyed under.
    pub hash_version: u32,
    /// What the entry records.
    pub kind: Kind,
    /// Its status.
    pub status: Status,
    /// The scope path of the call site.
    pub scope: ScopePath,
    /// The content key of the call's identity input.
    pub key: ContentKey,
    /// How many earlier calls with the same key the scope made before this one.
    pub ordinal: u32,
    /// A terminal entry's `running` entry, or a ref-entry's target.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub target: Option<Seq>,
    /// The result (JSON only), kept as its exact JSON text: a journal holds many values and
    /// reads few of them back, so values are parsed on demand ([`Entry::value`]) instead of
    /// being built into trees when the journal loads.
    #[serde(default, rename = "value", skip_serializing_if = "Option::is_none")]
    pub raw_value: Option<Payload>,
    /// The failure, for `error`, `limit` and `cancelled` entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Error>,
    /// Token usage of the work the entry completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// What the work cost, in nano-USD.
    #[serde(default, rename = "cost_nano_usd", skip_serializing_if = "Option::is_none")]
    pub cost: Option<Money>,
    /// The model that actually served the call (after any failover).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "interned")]
    pub served_by: Option<Name>,
    /// Why an agent call's last model turn ended, as its provider said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<crate::provider::StopReason>,
    /// Where the agent's transcript is, in the transcript store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_ref: Option<String>,
    /// An agent call's wire attempts, each priced and attributed by the model that served it,
    /// when more than one model served the call (a failover); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<crate::usage::AttemptRecord>,
    /// An agent call's attempts the provider refused before any stream byte (charged nothing).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub refused_attempts: u32,
    /// An agent call's attempts sent and never answered (no response status within the idle
    /// timeout, a transport error after connecting): each charged its whole grant, marked
    /// approximate, since the provider may have run it.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub unanswered_attempts: u32,
    /// Whether a task-class failure of this call replays instead of rerunning.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub memoize_outcome: bool,
    /// A step's terminal entry: the sandbox operations its body ran live (its own, and those of
    /// the steps and branches inside it), charged again when a replay serves the step instead
    /// of running it, so the operation budget counts a step the same either way. Zero in
    /// journals written before it was recorded.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub ops: u64,
    /// When the entry was written, in ms since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts: Option<i64>,
    /// The call's label (cosmetic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The enclosing phase (cosmetic).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "interned")]
    pub phase: Option<Name>,
    /// The agent profile name, for agent entries.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "interned")]
    pub agent_type: Option<Name>,
    /// The invocation role the model was resolved for, for agent entries.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "interned")]
    pub role: Option<Name>,
    /// The requested model, for agent entries.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "interned")]
    pub model: Option<Name>,
    /// The host function, child workflow or external key the entry is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A compact summary of an agent call's identity inputs, on its `running` entry, so a
    /// resume can say which field of a re-keyed call changed. Never part of a key.
    #[serde(default, rename = "ident", skip_serializing_if = "Option::is_none")]
    pub identity: Option<Box<IdentitySummary>>,
    /// Who asked for what the entry records: the name of the service token that started or
    /// resumed the run (its `run_action` decision), resolved a wait (its `resolution`) or
    /// cancelled the run (the cancellation's settlement). Absent for the CLI, the embedding
    /// API and a service without tokens. Never part of a key.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "interned")]
    pub by: Option<Name>,
}

/// What an agent call was keyed on, compactly (the model and agent type are on the entry).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentitySummary {
    /// The requested reasoning effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// The caller's key, when it keyed the call instead of the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The first 16 hex digits of the prompt's sha256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_hash: Option<String>,
    /// The prompt's first 80 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_head: Option<String>,
    /// The response schema's hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_hash: Option<String>,
    /// The toolset's hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toolset_hash: Option<String>,
}

impl IdentitySummary {
    /// The summary of an agent call keyed on `key` (when given) or `prompt`.
    pub fn of_agent(
        prompt: &str,
        key: Option<&str>,
        effort: Option<&str>,
        schema_hash: Option<&str>,
        toolset_hash: Option<&str>,
    ) -> IdentitySummary {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(prompt.as_bytes());
        let prompt_hash = hex::encode(&digest[..8]);
        IdentitySummary {
            effort: effort.map(str::to_owned),
            key: key.map(str::to_owned),
            prompt_hash: Some(prompt_hash),
            prompt_head: Some(prompt.chars().take(80).collect()),
            schema_hash: schema_hash.map(str::to_owned),
            toolset_hash: toolset_hash.map(str::to_owned),
        }
    }

    /// What identifies the call besides its scope and options: the caller's key, else the
    /// prompt's hash.
    pub fn call_id(&self) -> Option<&str> {
        self.key.as_deref().or(self.prompt_hash.as_deref())
    }
}

/// Whether two scope paths are one site shifted: the same segments, except that `parallel`
/// site numbers (the branch kept) or workflow call numbers (the name kept) may differ, as when
/// an unlabelled `parallel` or `workflow` call is inserted or removed before the site.
pub(crate) fn shifted(a: &[Segment], b: &[Segment]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|pair| match pair {
            (Segment::Par { branch: x, .. }, Segment::Par { branch: y, .. }) => x == y,
            (Segment::Wf { name: x, .. }, Segment::Wf { name: y, .. }) => x == y,
            (x, y) => x == y,
        })
}

impl Entry {
    /// What the entry paid that a price is known for: its cost, or (for a call an unpriced
    /// model served part of, whose cost is unknown) its priced attempts' costs.
    pub(crate) fn priced_cost(&self) -> Money {
        match self.cost {
            Some(cost) => cost,
            None => self.attempts.iter().filter_map(|a| a.cost).fold(Money::ZERO, Money::saturating_add),
        }
    }

    /// The entry's value, parsed.
    pub fn value(&self) -> Option<Value> {
        self.raw_value.as_ref().and_then(|raw| serde_json::from_str(raw.0.get()).ok())
    }

    /// Sets (or clears) the entry's value.
    pub fn set_value(&mut self, value: Option<&Value>) {
        self.raw_value = value.map(|v| Payload(raw_json(v)));
    }

    /// A new entry with every optional field empty.
    pub fn new(
        seq: Seq,
        kind: Kind,
        status: Status,
        scope: ScopePath,
        key: ContentKey,
        ordinal: u32,
    ) -> Entry {
        Entry {
            seq,
            hash_version: HASH_VERSION,
            kind,
            status,
            scope,
            key,
            ordinal,
            target: None,
            raw_value: None,
            error: None,
            usage: None,
            cost: None,
            served_by: None,
            finish_reason: None,
            transcript_ref: None,
            attempts: Vec::new(),
            refused_attempts: 0,
            unanswered_attempts: 0,
            memoize_outcome: false,
            ops: 0,
            ts: None,
            label: None,
            phase: None,
            agent_type: None,
            role: None,
            model: None,
            name: None,
            identity: None,
            by: None,
        }
    }
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}
