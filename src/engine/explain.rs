//! Explaining a resume before paying for it: when a resumed run's agent call misses the
//! journal while a completed, paid agent call that is recognizably the same call waits ahead
//! in the same scope (not yet taken by a live call, and sharing the live call's label, its
//! caller key or its prompt), the call was re-keyed: its model, prompt, tools, schema or
//! options changed. Unless the resume accepts re-keying, the engine refuses to dispatch it,
//! names the call and each identity field that changed (old value against new), stops the
//! run and reports every such call it met as one `rekey_refused` error.
//!
//! A step is recognizably the same step by its label: a step that misses while a completed
//! step with its label waits ahead had its body, key or deps edited (or a step with that label
//! was inserted before it), and is refused and explained the same way, since running its body
//! again re-runs every call inside it. Accepted, the old step is journaled as superseded and
//! what its old body journaled goes with it.
//!
//! A call whose prompt changed and that has no label (or key) to pin it is indistinguishable
//! from a newly inserted call: it runs live, and the journaled call it replaced is counted as
//! orphaned in the preview. Label calls whose prompts you edit to have those explained too.

use super::run::RunState;
use super::writer::Durability;
use crate::error::{Error, ErrorCode};
use crate::journal::{self, Candidate, ContentKey, Entry, IdentitySummary, Kind, ScopePath, Seq, Status};

/// A live agent call, as its identity summary and the fields kept beside it.
pub(crate) struct LiveAgent<'a> {
    pub(crate) model: &'a str,
    pub(crate) agent_type: Option<&'a str>,
    pub(crate) summary: &'a IdentitySummary,
    pub(crate) label: Option<&'a str>,
}

/// Checks a live agent call of a resumed run against the journal; `Ok(None)` lets it run,
/// `Ok(Some(line))` describes the re-key it is (in a dry run, to report), `Err` refuses it.
///
/// # Errors
/// `rekey_refused` when the call re-keys a completed call and the resume did not accept it;
/// the run is stopped and the refusal lists every such call at settlement.
pub(crate) fn check(
    state: &RunState,
    scope: &ScopePath,
    live: &LiveAgent<'_>,
) -> Result<Option<String>, Error> {
    let rekeys = &state.rekeys;
    if rekeys.accept && !state.dry_run {
        accept(state, scope, live)?;
        return Ok(None);
    }
    let (label, ident) = live.recognition();
    let candidates =
        state.unconsumed_at_cursor(scope, |c| c.kind == Kind::Agent && c.resembles(label, ident));
    let line = {
        let mut claimed = rekeys.claimed.lock().unwrap_or_else(|p| p.into_inner());
        let mut found = None;
        for candidate in candidates.iter().filter(|c| !claimed.contains(&c.first)) {
            let first = state.stored.fetch(candidate.first)?;
            if same_call(&first, live) {
                found = Some((candidate, first));
                break;
            }
        }
        let Some((candidate, first)) = found else {
            // No call of this scope it replaces: the same call, paid at a scope this one
            // shifted from, would otherwise be paid again in silence.
            let Some(line) = moved(state, scope, live, &mut claimed)? else { return Ok(None) };
            drop(claimed);
            return refuse(state, line);
        };
        let Some(terminal) = candidate.terminal.filter(|_| candidate.terminal_status == Some(Status::Ok))
        else {
            // Not completed (failed, cancelled or cut off): it would run again anyway.
            return Ok(None);
        };
        let terminal = state.stored.fetch(terminal)?;
        claimed.insert(first.seq);
        describe(&first, &terminal, live)
    };
    refuse(state, line)
}

impl LiveAgent<'_> {
    /// The hashes a journaled call that may be this one carries: its label's, and its caller
    /// key's or prompt hash's (see [`journal::recognition`]).
    fn recognition(&self) -> (u32, u32) {
        let label = self.label.map_or(0, journal::recognition);
        let ident = self.summary.call_id().map_or(0, journal::recognition);
        (label, ident)
    }
}

/// Whether a journaled call's hashes say it may be the live call hashed `label` and `ident`
/// (its entries decide).
trait Resembles {
    fn resembles(&self, label: u32, ident: u32) -> bool;
}

impl Resembles for Candidate {
    fn resembles(&self, label: u32, ident: u32) -> bool {
        (label != 0 && self.label == label) || (ident != 0 && self.ident == ident)
    }
}

/// Refuses a re-keyed call described by `line` (in a dry run, returns the line to report).
fn refuse(state: &RunState, line: String) -> Result<Option<String>, Error> {
    if state.dry_run {
        return Ok(Some(line));
    }
    state.rekeys.refused.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    state.refuse_rekey();
    Err(Error::new(ErrorCode::RekeyRefused, "the call's identity changed since it was paid"))
}

/// A completed call with the live call's very identity, journaled at the scope this one was
/// shifted from (an unlabelled `parallel` or `workflow` call inserted or removed before its
/// site renumbered the site): described, and claimed so no other live call names it.
fn moved(
    state: &RunState,
    scope: &ScopePath,
    live: &LiveAgent<'_>,
    claimed: &mut std::collections::HashSet<Seq>,
) -> Result<Option<String>, Error> {
    let Some(ident) = live.summary.call_id().map(journal::recognition) else { return Ok(None) };
    let candidates = state.lock_replay().moved(scope, ident);
    let mut found = None;
    for (first, terminal) in candidates {
        let first = state.stored.fetch(first)?;
        if first.model.as_deref() == Some(live.model)
            && first.agent_type.as_deref() == live.agent_type
            && first.identity.as_deref() == Some(live.summary)
        {
            found = Some((first, terminal));
            break;
        }
    }
    let Some((first, terminal)) = found else { return Ok(None) };
    if !claimed.insert(first.seq) {
        return Ok(None);
    }
    let terminal = state.stored.fetch(terminal)?;
    let label = first.label.as_deref().map(|l| format!(" '{l}'")).unwrap_or_default();
    let cost = terminal.cost.map(|c| format!(", paid {c}")).unwrap_or_default();
    let prompt = live.summary.prompt_head.as_deref().map(|p| format!(" ({p:?})")).unwrap_or_default();
    Ok(Some(format!(
        "agent call{label}{prompt} (seq {}{cost}): unchanged, but its scope moved from '{}' to '{scope}' (an \
         unlabelled parallel or workflow call was inserted or removed before it); label the sites \
         (#{{label: \"...\"}} in Rhai, {{label = \"...\"}} in Lua) so they keep their scopes",
        first.seq.0, first.scope
    )))
}

/// An accepted re-key: the completed call the live one replaces (as [`check`] would have
/// named it) is journaled as superseded, so neither this segment nor a later replay counts it
/// as orphaned.
fn accept(state: &RunState, scope: &ScopePath, live: &LiveAgent<'_>) -> Result<(), Error> {
    let (label, ident) = live.recognition();
    let candidates = state.unconsumed_at_cursor(scope, |c| {
        c.kind == Kind::Agent && c.terminal_status == Some(Status::Ok) && c.resembles(label, ident)
    });
    let first = {
        let mut claimed = state.rekeys.claimed.lock().unwrap_or_else(|p| p.into_inner());
        let mut found = None;
        for candidate in candidates.iter().filter(|c| !claimed.contains(&c.first)) {
            if same_call(&*state.stored.fetch(candidate.first)?, live) {
                found = Some(candidate.first);
                break;
            }
        }
        let Some(first) = found else { return Ok(()) };
        claimed.insert(first);
        first
    };
    supersede(state, scope, first)
}

/// Journals that the completed call whose first entry is `first` was replaced by an accepted
/// re-key (a `rekey_accepted` decision), and tells this execution's replay so.
fn supersede(state: &RunState, scope: &ScopePath, first: Seq) -> Result<(), Error> {
    let value = journal::rekey_value(first);
    let identity = serde_json::json!({ "kind": "decision", "value": value });
    let key = journal::content_key(&identity).unwrap_or(ContentKey::from_bytes([0; 32]));
    let mut entry = Entry::new(Seq(0), Kind::Decision, Status::Ok, scope.clone(), key, 0);
    entry.set_value(Some(&value));
    state.append_one(entry, Durability::Deferred)?;
    state.lock_replay().supersede(first);
    Ok(())
}

/// Whether a journaled agent call is recognizably the live one: the same label, the same
/// caller key, or the same prompt.
fn same_call(old: &Entry, live: &LiveAgent<'_>) -> bool {
    if old.label.is_some() && old.label.as_deref() == live.label {
        return true;
    }
    let Some(was) = old.identity.as_deref() else { return false };
    let now = live.summary;
    match (&was.key, &now.key) {
        (Some(a), Some(b)) => a == b,
        (None, None) => was.prompt_hash.is_some() && was.prompt_hash == now.prompt_hash,
        _ => false,
    }
}

/// `agent call seq 3 (label x): model: echo:a → echo:b; prompt: "…" → "…"`.
fn describe(old: &Entry, terminal: &Entry, live: &LiveAgent<'_>) -> String {
    let mut changes = Vec::new();
    let show = |v: Option<&str>| v.map_or_else(|| "none".to_owned(), |v| format!("{v:?}"));
    let old_model = old.model.as_deref().unwrap_or("?");
    if old_model != live.model {
        changes.push(format!("model: {old_model} → {}", live.model));
    }
    if old.agent_type.as_deref() != live.agent_type {
        changes.push(format!("agent type: {} → {}", show(old.agent_type.as_deref()), show(live.agent_type)));
    }
    match old.identity.as_deref() {
        Some(was) => {
            let now = live.summary;
            let mut changed = |field: &str, was: Option<&str>, now: Option<&str>| {
                changes.push(format!("{field}: {} → {}", show(was), show(now)));
            };
            if was.key != now.key {
                changed("key", was.key.as_deref(), now.key.as_deref());
            }
            if was.prompt_hash != now.prompt_hash && (was.key.is_none() || now.key.is_none()) {
                changed("prompt", was.prompt_head.as_deref(), now.prompt_head.as_deref());
            }
            if was.effort != now.effort {
                changed("effort", was.effort.as_deref(), now.effort.as_deref());
            }
            if was.schema_hash != now.schema_hash {
                changed("schema", was.schema_hash.as_deref(), now.schema_hash.as_deref());
            }
            if was.toolset_hash != now.toolset_hash {
                changed("tools", was.toolset_hash.as_deref(), now.toolset_hash.as_deref());
            }
        }
        None if changes.is_empty() => {
            changes.push("prompt or options (the journal predates identity summaries)".into());
        }
        None => {}
    }
    if changes.is_empty() {
        changes.push("its identity (no summarized field differs)".into());
    }
    let label = old.label.as_deref().or(live.label).map(|l| format!(" '{l}'")).unwrap_or_default();
    let scope = if old.scope.is_root() { String::new() } else { format!(" in scope '{}'", old.scope) };
    let cost = terminal.cost.map(|c| format!(", paid {c}")).unwrap_or_default();
    format!("agent call{label} (seq {}{scope}{cost}): {}", old.seq.0, changes.join("; "))
}

/// Checks a live step of a resumed run against the journal, as [`check`] does an agent call:
/// a completed step with the same label waiting ahead in this scope means the step's body,
/// key or deps changed since it ran. A resume that accepts re-keying journals the old step
/// as superseded, its old body with it.
///
/// # Errors
/// `rekey_refused` when the resume did not accept re-keying; the run is stopped.
pub(crate) fn check_step(state: &RunState, scope: &ScopePath, label: &str) -> Result<(), Error> {
    let rekeys = &state.rekeys;
    if state.dry_run {
        return Ok(());
    }
    let hash = journal::recognition(label);
    let candidates = state.unconsumed_at_cursor(scope, |c| c.kind == Kind::Step && c.label == hash);
    let line = {
        let mut claimed = rekeys.claimed.lock().unwrap_or_else(|p| p.into_inner());
        let mut found = None;
        for candidate in candidates.iter().filter(|c| !claimed.contains(&c.first)) {
            let first = state.stored.fetch(candidate.first)?;
            if first.label.as_deref() == Some(label) {
                found = Some((candidate, first));
                break;
            }
        }
        let Some((candidate, first)) = found else { return Ok(()) };
        let Some(terminal) = candidate.terminal.filter(|_| candidate.terminal_status == Some(Status::Ok))
        else {
            return Ok(());
        };
        let terminal = state.stored.fetch(terminal)?;
        claimed.insert(first.seq);
        if rekeys.accept {
            let first = first.seq;
            drop(claimed);
            return supersede(state, scope, first);
        }
        let scope =
            if first.scope.is_root() { String::new() } else { format!(" in scope '{}'", first.scope) };
        let mut value = terminal.value().map(|v| v.to_string()).unwrap_or_else(|| "null".to_owned());
        if value.chars().count() > 60 {
            value = value.chars().take(57).collect::<String>() + "...";
        }
        format!(
            "step '{label}' (seq {}{scope}, returned {value}): its body, key or deps changed, or a step with \
             this label was inserted before it; running it again re-runs every call inside it",
            first.seq.0
        )
    };
    rekeys.refused.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    state.refuse_rekey();
    Err(Error::new(ErrorCode::RekeyRefused, "the step's identity changed since it ran"))
}
