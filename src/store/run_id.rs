//! [`RunId`]: the identifier of one run, valid as a file name and a row key.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// An identifier of one run.
///
/// Run ids name files in the JSONL store and rows in SQLite, so they are restricted to
/// `[A-Za-z0-9._-]`, 1 to 128 characters, not starting with `.`. Fresh ids are ULIDs. Cheap
/// to clone: every event and store call of a run carries one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RunId(Arc<str>);

/// Why a string is not a valid [`RunId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid run id {0:?}: use 1-128 characters from [A-Za-z0-9._-], not starting with '.'")]
pub struct InvalidRunId(pub String);

impl RunId {
    /// A fresh, time-ordered run id (a ULID).
    pub fn generate() -> RunId {
        RunId(ulid::Ulid::generate().to_string().into())
    }

    /// Validates `id` as a run id.
    ///
    /// # Errors
    /// [`InvalidRunId`] when it is empty, too long, starts with `.` or holds other characters.
    pub fn parse(id: &str) -> Result<RunId, InvalidRunId> {
        let ok = !id.is_empty()
            && id.len() <= 128
            && !id.starts_with('.')
            && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if ok { Ok(RunId(id.into())) } else { Err(InvalidRunId(id.to_owned())) }
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for RunId {
    type Err = InvalidRunId;
    fn from_str(s: &str) -> Result<RunId, InvalidRunId> {
        RunId::parse(s)
    }
}

impl TryFrom<String> for RunId {
    type Error = InvalidRunId;
    fn try_from(s: String) -> Result<RunId, InvalidRunId> {
        RunId::parse(&s)
    }
}

impl From<RunId> for String {
    fn from(id: RunId) -> String {
        id.0.to_string()
    }
}
