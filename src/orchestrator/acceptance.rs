//! Acceptance policies: "the model called finish" turned into a checked completion contract,
//! evaluated exactly when `finish` validates and journaled as one verdict.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::roster::{ChildStatus, State};
use super::verdict::{Completion, Verdict};
use crate::error::Error;

/// Which children must have succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildPolicy {
    /// Every spawned child settled `ok` (a child still running or cancelled counts against
    /// it); no children is vacuously complete.
    AllOk,
    /// At least N children settled `ok`; the others are named as degraded.
    MinSuccessful(u32),
}

/// The acceptance policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acceptance {
    /// The child policy.
    pub policy: ChildPolicy,
    /// A finish whose roster is smaller than this is refused, under either policy; spawns
    /// that could never seat it are refused at admission (`roster_floor`).
    pub min_spawned_children: Option<u32>,
}

impl Acceptance {
    pub(crate) fn describe(&self) -> String {
        let policy = match self.policy {
            ChildPolicy::AllOk => "every child you spawn must succeed".to_owned(),
            ChildPolicy::MinSuccessful(n) => format!("at least {n} children must succeed"),
        };
        match self.min_spawned_children {
            Some(floor) => format!("{policy}, and at least {floor} children must be spawned"),
            None => policy,
        }
    }

    fn name(&self) -> String {
        match self.policy {
            ChildPolicy::AllOk => "all_ok".into(),
            ChildPolicy::MinSuccessful(n) => format!("min_successful:{n}"),
        }
    }
}

/// The JSON form: `{policy: "all_ok" | {min_successful: N}, min_spawned_children?: N}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AcceptanceWire {
    policy: PolicyWire,
    min_spawned_children: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum PolicyWire {
    Name(String),
    Min { min_successful: u32 },
}

impl AcceptanceWire {
    pub(crate) fn into_acceptance(self) -> Result<Acceptance, Error> {
        let policy = match self.policy {
            PolicyWire::Name(name) if name == "all_ok" => ChildPolicy::AllOk,
            PolicyWire::Name(name) => {
                return Err(Error::validation(format!(
                    "acceptance policy {name:?} is not \"all_ok\" or {{min_successful: N}}"
                )));
            }
            PolicyWire::Min { min_successful } => ChildPolicy::MinSuccessful(min_successful),
        };
        Ok(Acceptance { policy, min_spawned_children: self.min_spawned_children })
    }
}

/// The verdict over the roster as it stands when `finish` validates.
pub(crate) fn evaluate(acceptance: &Acceptance, state: &State, at_cap: bool) -> Verdict {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    let mut degraded = Vec::new();
    let mut ok = 0u32;
    for child in &state.roster {
        let status = child.effective_status();
        *counts.entry(status.as_str().to_owned()).or_insert(0) += 1;
        if status == ChildStatus::Ok {
            ok += 1;
        } else {
            degraded.push(format!("{} ({}) {}", child.handle, child.profile, status.as_str()));
        }
    }
    let spawned = state.admitted();
    let mut accepted = match acceptance.policy {
        ChildPolicy::AllOk => ok == spawned,
        ChildPolicy::MinSuccessful(n) => ok >= n,
    };
    let mut reasons = Vec::new();
    if !accepted {
        reasons.push(format!("policy {} not met: {ok} of {spawned} children ok", acceptance.name()));
    }
    if let Some(floor) = acceptance.min_spawned_children
        && spawned < floor
    {
        accepted = false;
        reasons.push(format!("{spawned} children spawned, the floor is {floor}"));
    }
    let counts_text: Vec<String> = counts.iter().map(|(status, n)| format!("{n} {status}")).collect();
    let message = if accepted {
        format!("accepted under {}: {}", acceptance.name(), counts_text.join(", "))
    } else {
        format!(
            "acceptance refused the finish: {} (children: {})",
            reasons.join("; "),
            counts_text.join(", ")
        )
    };
    let completion = if degraded.is_empty() && !at_cap { Completion::Complete } else { Completion::Partial };
    Verdict::Acceptance {
        accepted,
        completion,
        policy: acceptance.name(),
        spawned,
        counts,
        degraded,
        message,
    }
}
