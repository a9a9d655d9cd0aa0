//! The run meta a resume may change before its segment runs, as it stood before: what a
//! refused re-key puts back when the segment settles.

use serde_json::Value;

use crate::store::{RunMeta, RunStatus};

/// What a resume may change in run meta before its segment runs, as it stood before: what a
/// refused re-key puts back.
#[derive(Debug, Clone)]
pub(super) struct Before {
    status: RunStatus,
    source_ref: Option<String>,
    source_hash: Option<String>,
    previous_sources: Option<Value>,
}

impl Before {
    pub(super) fn of(meta: &RunMeta) -> Before {
        Before {
            status: meta.status,
            source_ref: meta.source_ref.clone(),
            source_hash: meta.source_hash.clone(),
            previous_sources: meta.extra.get("previous_sources").cloned(),
        }
    }

    /// Puts the status and the stored script back.
    pub(super) fn restore(&self, meta: &mut RunMeta) {
        meta.status = self.status;
        meta.source_ref.clone_from(&self.source_ref);
        meta.source_hash.clone_from(&self.source_hash);
        match &self.previous_sources {
            Some(list) => {
                meta.extra.insert("previous_sources".into(), list.clone());
            }
            None => {
                meta.extra.remove("previous_sources");
            }
        }
    }
}
