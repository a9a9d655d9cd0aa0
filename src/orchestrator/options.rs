//! The options of an orchestration and their JSON form (the script global's map).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::acceptance::{self, Acceptance};
use super::validate::{self, FinishValidation};
use crate::error::Error;

/// What the orchestrator does when its budget nears the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AtCap {
    /// One finalization turn from the reserved share calls `finish` with what it has; the
    /// result carries `completion: partial` (default).
    #[default]
    FinishWithPartial,
    /// End with the typed `budget_exhausted` error.
    Fail,
}

/// Options of [`orchestrate`](crate::orchestrate) and [`Ctx::orchestrate`](crate::Ctx::orchestrate). Policy only: none of them enters a
/// call's identity except `profiles` (the spawn tool's allowlist is in its contract), `schema`
/// (the finish tool's contract) and `max_spawns` (in the orchestrator's prompt).
#[derive(Debug, Clone)]
pub struct OrchestrateOptions {
    /// The agent profiles children may be spawned with (an enforced allowlist); empty: every
    /// registered profile.
    pub profiles: Vec<String>,
    /// Most children admitted (refused spawns do not count); default 24.
    pub max_spawns: u32,
    /// Most orchestrator turns; default 32.
    pub max_turns: u32,
    /// The orchestrator's own turns draw on a sub-account of this share (parts per million) of
    /// what the ceiling leaves free when it starts; default 200,000 (20 %).
    pub orchestrator_share_ppm: u32,
    /// The termination account: this share (ppm) of the free amount is held back at the start
    /// for one finalization turn; default 50,000 (5 %).
    pub finalize_share_ppm: u32,
    /// What happens at the cap.
    pub at_cap: AtCap,
    /// A JSON Schema the finish result must match (checked by the finish tool's contract).
    pub schema: Option<Value>,
    /// The child completion policy evaluated when `finish` validates.
    pub acceptance: Option<Acceptance>,
    /// Host validators over the finish result and the repair loop.
    pub validation: FinishValidation,
    /// The claim-consistency pass after an accepted finish (`None`: off).
    pub claims: Option<ClaimPolicy>,
    /// The orchestrator's model (`provider:model`); default: the `orchestrate` role's route.
    pub model: Option<String>,
    /// Extra authored system text for the orchestrator.
    pub system: Option<String>,
}

impl Default for OrchestrateOptions {
    fn default() -> OrchestrateOptions {
        OrchestrateOptions {
            profiles: Vec::new(),
            max_spawns: 24,
            max_turns: 32,
            orchestrator_share_ppm: 200_000,
            finalize_share_ppm: 50_000,
            at_cap: AtCap::FinishWithPartial,
            schema: None,
            acceptance: None,
            validation: FinishValidation::default(),
            claims: None,
            model: None,
            system: None,
        }
    }
}

/// The JSON form of the options (the script global's map, `dialect/orchestrate.schema.json`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct OptionsWire {
    #[serde(default)]
    profiles: Vec<String>,
    max_spawns: Option<u32>,
    max_turns: Option<u32>,
    orchestrator_share: Option<f64>,
    finalize_share: Option<f64>,
    at_cap: Option<AtCap>,
    schema: Option<Value>,
    acceptance: Option<acceptance::AcceptanceWire>,
    validation: Option<validate::ValidationWire>,
    claims: Option<ClaimPolicy>,
    model: Option<String>,
    system: Option<String>,
}

fn share_ppm(name: &str, share: Option<f64>, default: u32) -> Result<u32, Error> {
    match share {
        None => Ok(default),
        Some(s) if s.is_finite() && (0.0..=1.0).contains(&s) => Ok((s * 1e6).round() as u32),
        Some(s) => {
            Err(Error::validation(format!("orchestrate option {name} must be between 0 and 1, not {s}")))
        }
    }
}

impl OrchestrateOptions {
    /// The options from their JSON form (the script global's map).
    ///
    /// # Errors
    /// `validation` for an unknown key, a value of the wrong type or out of range, or an
    /// invalid pattern.
    pub fn from_json(value: &Value) -> Result<OrchestrateOptions, Error> {
        let wire: OptionsWire = if value.is_null() {
            OptionsWire::default()
        } else {
            serde_json::from_value(value.clone())
                .map_err(|e| Error::validation(format!("orchestrate options: {e}")))?
        };
        let defaults = OrchestrateOptions::default();
        Ok(OrchestrateOptions {
            profiles: wire.profiles,
            max_spawns: wire.max_spawns.unwrap_or(defaults.max_spawns),
            max_turns: wire.max_turns.unwrap_or(defaults.max_turns).clamp(1, 256),
            orchestrator_share_ppm: share_ppm(
                "orchestrator_share",
                wire.orchestrator_share,
                defaults.orchestrator_share_ppm,
            )?,
            finalize_share_ppm: share_ppm(
                "finalize_share",
                wire.finalize_share,
                defaults.finalize_share_ppm,
            )?,
            at_cap: wire.at_cap.unwrap_or_default(),
            schema: wire.schema,
            acceptance: wire.acceptance.map(acceptance::AcceptanceWire::into_acceptance).transpose()?,
            validation: wire
                .validation
                .map(validate::ValidationWire::into_validation)
                .transpose()?
                .unwrap_or_default(),
            claims: wire.claims,
            model: wire.model,
            system: wire.system,
        })
    }
}

/// What happens when the judge finds a contradiction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimPolicy {
    /// Journal and return the findings (default).
    #[default]
    Report,
    /// Fail the orchestration with `acceptance_failed`.
    Fail,
}
