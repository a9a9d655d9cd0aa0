//! The orchestrator's decision entries and their replay.
//!
//! Every dynamic verdict is one `decision` entry in the orchestration's scope, keyed by its
//! place in the orchestration's sequence of verdicts (`{kind: decision, type: orchestrate, n}`)
//! and carrying the tool call that made it (`call`: the lane and the id the agent loop minted,
//! `item`: the child's index in a batch). Entries are queued before their effect (a child's
//! `running` entry, a cancellation, the agent's terminal entry) and so precede it in the
//! journal. A resume folds them back in order ([`Orch::restore`]); a tool call the resumed loop
//! answers again finds its verdict by `(call, item)` and takes it as journaled, whatever the
//! live budget or options now say.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use super::orch::Orch;
use super::roster::{Child, State};
use super::verdict::{DECISION_TYPE, Decision, Verdict};
use crate::engine::Durability;
use crate::error::Error;
use crate::journal::{self, ContentKey, Entry, Kind, Seq, Status};

/// The key of the `n`-th decision of an orchestration.
fn key(n: usize) -> Result<ContentKey, Error> {
    journal::content_key(&json!({ "kind": "decision", "type": DECISION_TYPE, "n": n }))
        .map_err(|e| Error::internal(e.to_string()))
}

/// Folds one verdict into the roster: the pure state change, the same on a live decision and
/// on a restored one. Effects (starting a child, cancelling one) are the caller's.
pub(crate) fn fold(state: &mut State, decision: &Decision) {
    match &decision.verdict {
        Verdict::Admit { child, profile, prompt, schema, est_cost_nano_usd, .. } => {
            state.roster.push(Child::new(
                *child,
                profile.clone(),
                prompt.clone(),
                schema.clone(),
                est_cost_nano_usd.map(crate::money::Money::from_nano_usd),
            ));
        }
        Verdict::Cancel { child } => {
            if let Some(c) = state.roster.get_mut(*child as usize) {
                c.cancel_decided = true;
            }
        }
        _ => {}
    }
    state.by_call.insert((decision.call.clone(), decision.item), state.decisions.len());
    state.decisions.push(decision.clone());
}

impl Orch {
    /// Folds the journaled decisions back, in order, and starts the children they admitted
    /// and never cancelled: each replays from its own scope (a completed one at zero cost).
    ///
    /// # Errors
    /// `internal` when the store cannot give back a journaled decision.
    pub(crate) fn restore(self: &std::sync::Arc<Self>) -> Result<(), Error> {
        let run = &self.ctx.run;
        let mut n = 0usize;
        while let Ok(key) = key(n)
            && let crate::journal::Outcome::Replay(entry) = run.lookup_fact(&self.ctx.scope, key)?.outcome
            && let Some(decision) = entry.value().as_ref().and_then(parse)
        {
            fold(&mut self.lock(), &decision);
            n += 1;
        }
        let (to_start, cancelled): (Vec<u32>, Vec<u32>) = {
            let state = self.lock();
            let (live, dead): (Vec<&Child>, Vec<&Child>) =
                state.roster.iter().partition(|c| !c.cancel_decided);
            (live.iter().map(|c| c.n).collect(), dead.iter().map(|c| c.n).collect())
        };
        // A cancelled child never runs again: what it journaled is accounted for by the
        // decision, not orphaned.
        for child in cancelled {
            self.ctx.run.cover(&self.ctx.scope.child(&super::roster::child_segment(child)));
        }
        for child in to_start {
            self.start(child);
        }
        Ok(())
    }

    /// The verdict of `(call, item)`: the journaled one when a resume restored it, else
    /// `live`'s, journaled (queued before anything the caller does with it) and folded.
    pub(crate) fn decide(
        &self,
        call: &str,
        item: u32,
        live: impl FnOnce(&State) -> Verdict,
    ) -> Result<Verdict, Error> {
        let mut state = self.lock();
        if let Some(&index) = state.by_call.get(&(call.to_owned(), item)) {
            return Ok(state.decisions[index].verdict.clone());
        }
        let verdict = live(&state);
        let n = state.decisions.len();
        let key = key(n)?;
        // Each `n` is journaled once per orchestration scope: a resume restores every one.
        let mut entry = Entry::new(Seq(0), Kind::Decision, Status::Ok, self.ctx.scope.clone(), key, 0);
        let mut value = serde_json::to_value(&verdict).map_err(|e| Error::internal(e.to_string()))?;
        if let Value::Object(map) = &mut value {
            map.insert("type".into(), json!(DECISION_TYPE));
            map.insert("n".into(), json!(n));
            map.insert("call".into(), json!(call));
            map.insert("item".into(), json!(item));
        }
        entry.set_value(Some(&value));
        // Queued before the effect: everything the caller does next is journaled after it
        // (the journal is written in queue order). Lazily: a tool's answer awaits durability
        // of all its verdicts at once, and carries them in one write with its children's
        // `running` entries.
        self.ctx.run.append_one(entry, Durability::Lazy)?;
        let decision = Decision { call: call.to_owned(), item, verdict: verdict.clone() };
        fold(&mut state, &decision);
        Ok(verdict)
    }
}

/// A journaled decision's value back as a decision.
pub(crate) fn parse(value: &Value) -> Option<Decision> {
    if value.get("type")?.as_str()? != DECISION_TYPE {
        return None;
    }
    let call = value.get("call")?.as_str()?.to_owned();
    let item = value.get("item")?.as_u64()? as u32;
    let verdict: Verdict = serde_json::from_value(value.clone()).ok()?;
    Some(Decision { call, item, verdict })
}

/// Each orchestration of a journal, folded from its decision entries and its children's
/// terminal entries: `{scope, children: [{handle, profile, status, cost_nano_usd, cost_usd}], decisions:
/// [{seq, n, call, decision, ...}]}`, in journal order. What `cairn inspect` shows.
#[cfg_attr(not(feature = "cli"), allow(dead_code))] // read by the CLI
pub(crate) fn journal_report(entries: &[Entry]) -> Vec<Value> {
    let mut scopes: Vec<String> = Vec::new();
    let mut decided: Vec<(String, u64, Decision)> = Vec::new();
    for entry in entries.iter().filter(|e| e.kind == Kind::Decision) {
        let Some(decision) = entry.value().as_ref().and_then(parse) else { continue };
        let scope = entry.scope.to_string();
        if !scopes.contains(&scope) {
            scopes.push(scope.clone());
        }
        decided.push((scope, entry.seq.0, decision));
    }
    if scopes.is_empty() {
        return Vec::new();
    }
    // What each scope's entries say of a child there, in one pass over the journal (a child
    // looked up by a scan of the journal each made a 10,000-child report quadratic).
    let mut ends: HashMap<String, ChildEnd> = HashMap::new();
    for entry in entries {
        let terminal = entry.kind == Kind::Agent && entry.status.is_terminal();
        let refused = entry.kind == Kind::Decision && entry.status == Status::Error;
        if !terminal && !refused {
            continue;
        }
        let end = ends.entry(entry.scope.to_string()).or_default();
        if terminal {
            // The last terminal entry in journal order is the child's status.
            end.status = Some(entry.status.as_str());
            end.cost_nano_usd += entry.cost.map_or(0, crate::money::Money::nano_usd);
        }
        end.refused |= refused;
    }
    scopes
        .into_iter()
        .map(|scope| {
            let mine: Vec<&(String, u64, Decision)> =
                decided.iter().filter(|(s, _, _)| *s == scope).collect();
            let cancelled: HashSet<u32> = mine
                .iter()
                .filter_map(
                    |(_, _, d)| if let Verdict::Cancel { child } = d.verdict { Some(child) } else { None },
                )
                .collect();
            let children: Vec<Value> = mine
                .iter()
                .filter_map(|(_, _, d)| match &d.verdict {
                    Verdict::Admit { child, profile, .. } => Some((*child, profile.clone())),
                    _ => None,
                })
                .map(|(child, profile)| {
                    let child_scope = format!("{scope}/{}", super::roster::child_segment(child));
                    let end = ends.get(&child_scope);
                    // A child whose own call admission refused ends there: the refusal (a
                    // `decision` entry in its scope) is its terminal entry (#23.5).
                    let status = if cancelled.contains(&child) {
                        "cancelled"
                    } else if let Some(status) = end.and_then(|e| e.status) {
                        status
                    } else if end.is_some_and(|e| e.refused) {
                        "limit"
                    } else {
                        "running"
                    };
                    let cost = end.map_or(0, |e| e.cost_nano_usd);
                    json!({
                        "handle": super::roster::handle(child),
                        "profile": profile,
                        "status": status,
                        "cost_nano_usd": cost,
                        "cost_usd": crate::money::Money::from_nano_usd(cost).as_usd(),
                    })
                })
                .collect();
            let decisions: Vec<Value> = mine
                .iter()
                .map(|(_, seq, d)| {
                    let mut value = serde_json::to_value(&d.verdict).unwrap_or(Value::Null);
                    if let Value::Object(map) = &mut value {
                        map.insert("seq".into(), json!(seq));
                        map.insert("call".into(), json!(d.call));
                        map.insert("item".into(), json!(d.item));
                        // The journal keeps amounts as integers; a report pairs each with its
                        // decimal, as every amount in JSON is written (`docs/reference/json.md`).
                        let amounts: Vec<(String, i64)> = map
                            .iter()
                            .filter_map(|(name, v)| {
                                Some((name.strip_suffix("_nano_usd")?.to_owned(), v.as_i64()?))
                            })
                            .collect();
                        for (stem, nanos) in amounts {
                            map.insert(
                                format!("{stem}_usd"),
                                json!(crate::money::Money::from_nano_usd(nanos).as_usd()),
                            );
                        }
                        // The journal holds the whole prompt and result; the report a line.
                        for long in ["prompt", "result"] {
                            if let Some(text) = map.get(long).map(|v| match v {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            }) {
                                map.insert(long.into(), json!(super::roster::summarize(&text, 120)));
                            }
                        }
                    }
                    value
                })
                .collect();
            json!({ "scope": scope, "children": children, "decisions": decisions })
        })
        .collect()
}

/// What the journal says of the child in one scope: its last terminal agent entry's status, the
/// spend of every terminal agent entry, and whether its admission was refused.
#[derive(Debug, Default)]
struct ChildEnd {
    status: Option<&'static str>,
    cost_nano_usd: i64,
    refused: bool,
}
