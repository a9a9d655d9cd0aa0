//! `now`, `random` and `uuid`: live values journaled as facts (single-phase `rand` entries
//! bound by scope and ordinal, `random(key)` by key), so every replay sees the first value.
//! Time comes from the engine's clock and randomness from the run's seeded generator, never
//! from the process.

use serde_json::{Value, json};

use super::ctx::Ctx;
use super::identity::value_key;
use super::run::{Durability, RunState};
use crate::error::Error;
use crate::journal::{Kind, Outcome, Status};

impl Ctx {
    pub(super) async fn journaled_fact(
        &self,
        identity: Value,
        make: impl FnOnce(&RunState) -> Value,
    ) -> Result<Value, Error> {
        self.check_stopped()?;
        let key = value_key(&identity)?;
        let matched = self.run.lookup(&self.scope, key)?;
        match matched.outcome {
            Outcome::Replay(entry) => Ok(entry.value().unwrap_or(Value::Null)),
            Outcome::Skip => Ok(Value::Null),
            Outcome::Wait(_) => Err(Error::internal("a journaled value is recorded as suspended")),
            Outcome::Live | Outcome::Rerun { .. } => {
                let mut entry = self.entry(Kind::Rand, Status::Ok, key, matched.ordinal);
                entry.set_value(Some(&make(&self.run)));
                Ok(self.run.append_one(entry, Durability::Deferred)?.value().unwrap_or(Value::Null))
            }
        }
    }

    /// The current time in ms since the epoch, journaled: identical on every replay.
    ///
    /// # Errors
    /// `cancelled`; `journal_miss` in a dry run past the journal.
    pub async fn now(&self) -> Result<i64, Error> {
        let value =
            self.journaled_fact(json!({ "kind": "rand", "fn": "now" }), |run| json!(run.now_ms())).await?;
        value.as_i64().ok_or_else(|| Error::internal("journaled now() is not an integer"))
    }

    /// A float in `[0, 1)`, journaled; with a key it binds by key instead of by position.
    ///
    /// # Errors
    /// As for [`Ctx::now`].
    pub async fn random(&self, key: Option<&str>) -> Result<f64, Error> {
        let identity = json!({ "kind": "rand", "fn": "random", "key": key });
        let value = self
            .journaled_fact(identity, |run| json!((run.next_random_u64() >> 11) as f64 / (1u64 << 53) as f64))
            .await?;
        value.as_f64().ok_or_else(|| Error::internal("journaled random() is not a number"))
    }

    /// A version-4 UUID, journaled.
    ///
    /// # Errors
    /// As for [`Ctx::now`].
    pub async fn uuid(&self) -> Result<String, Error> {
        let value = self
            .journaled_fact(json!({ "kind": "rand", "fn": "uuid" }), |run| {
                let mut bytes = [0u8; 16];
                bytes[..8].copy_from_slice(&run.next_random_u64().to_le_bytes());
                bytes[8..].copy_from_slice(&run.next_random_u64().to_le_bytes());
                bytes[6] = (bytes[6] & 0x0f) | 0x40;
                bytes[8] = (bytes[8] & 0x3f) | 0x80;
                let hex = hex::encode(bytes);
                json!(format!(
                    "{}-{}-{}-{}-{}",
                    &hex[..8],
                    &hex[8..12],
                    &hex[12..16],
                    &hex[16..20],
                    &hex[20..]
                ))
            })
            .await?;
        value.as_str().map(str::to_owned).ok_or_else(|| Error::internal("journaled uuid() is not a string"))
    }
}
