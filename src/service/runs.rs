//! The run routes: submit (queue) a script, list runs, show one, read its journal, resolve
//! an external wait, cancel, resume.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::ApiError;
use super::state::{AppState, blocking};
use crate::engine::{Resolution, RunDigest};
use crate::error::Error;
use crate::journal;
use crate::money::Money;
use crate::store::{RunCursor, RunFilter, RunId, RunMeta, RunStatus};
use crate::{RunOptions, Script};

/// The body of `POST /v1/runs`: a script (`source`) or a planner goal (`goal`), exactly one.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SubmitRun {
    /// The script's source.
    #[serde(default)]
    pub source: Option<String>,
    /// A goal, in words, for the planner to write the script from.
    #[serde(default)]
    pub goal: Option<String>,
    /// The script's dialect, or the dialect the planner writes (`rhai` by default).
    #[serde(default)]
    pub dialect: Option<String>,
    /// The run's arguments (`{}` by default).
    #[serde(default)]
    pub args: Option<Value>,
    /// Its budget ceiling in USD (the server's maximum by default).
    #[serde(default, alias = "budget")]
    pub budget_usd: Option<f64>,
    /// With a goal: the planning conversation's own ceiling in USD (the server's maximum by
    /// default).
    #[serde(default, alias = "planning_budget")]
    pub planning_budget_usd: Option<f64>,
    /// With a goal: run the accepted script even when its cost bound exceeds the run's
    /// ceiling (the ceiling still holds).
    #[serde(default)]
    pub force: Option<bool>,
    /// Its run id (a fresh ULID by default).
    #[serde(default)]
    pub run_id: Option<String>,
    /// Its workflow name (`http` by default; a planned run's is `planned`).
    #[serde(default)]
    pub name: Option<String>,
}

/// A request body as JSON: 413 past the size limit, 400 when it is not the expected JSON.
pub(crate) fn json_body<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let bytes = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", "the request body is too large")
        } else {
            ApiError::bad_request(format!("could not read the request body: {e}"))
        }
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))
}

pub(crate) fn parse_run_id(id: &str) -> Result<RunId, ApiError> {
    RunId::parse(id).map_err(|_| ApiError::unknown_run(&crate::text::for_terminal_line(id)))
}

pub(crate) fn meta_of(engine: &crate::Engine, run: &RunId) -> Result<RunMeta, ApiError> {
    engine.journal_store().get_meta(run)?.ok_or_else(|| ApiError::unknown_run(run.as_str()))
}

/// `POST /v1/runs`: validates and queues a script's run; `202 {run_id}`.
pub(super) async fn submit(
    State(state): State<AppState>,
    caller: Option<axum::Extension<super::auth::Caller>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    // Which token submitted the run: a tag in its meta (`token:NAME`) and the `by` of its
    // journaled `start` action.
    let by = caller.and_then(|axum::Extension(c)| c.0);
    let tags: Vec<String> = by.iter().map(|name| format!("token:{name}")).collect();
    let submit: SubmitRun = json_body(body)?;
    let budget = budget_of("budget_usd", submit.budget_usd, state.options.max_budget)?;
    let run_id = submit.run_id.as_deref().map(RunId::parse).transpose().map_err(|_| {
        ApiError::bad_request("run_id must be 1 to 128 characters of letters, digits, '-' and '_'")
    })?;
    let args = submit.args.unwrap_or_else(|| json!({}));
    if !args.is_object() {
        return Err(ApiError::bad_request("args must be a JSON object"));
    }
    let dialect = submit.dialect.unwrap_or_else(|| "rhai".into());
    let source = match (submit.source, submit.goal) {
        (Some(source), None) => source,
        (None, Some(goal)) => {
            if submit.name.is_some() {
                return Err(ApiError::bad_request("a goal's run is named \"planned\"; drop name"));
            }
            let planning_budget =
                budget_of("planning_budget_usd", submit.planning_budget_usd, state.options.max_budget)?;
            let run = super::plan::GoalRun {
                run_id: run_id.unwrap_or_else(RunId::generate),
                goal,
                plan: crate::planner::PlanOptions {
                    dialect,
                    budget_usd: planning_budget,
                    args: Some(args.clone()),
                    ..crate::planner::PlanOptions::default()
                },
                args,
                budget_usd: budget,
                force: submit.force.unwrap_or(false),
            };
            return submit_goal(state, run).await;
        }
        _ => return Err(ApiError::bad_request("the body takes exactly one of source (a script) and goal")),
    };
    if submit.planning_budget_usd.is_some() || submit.force.is_some() {
        return Err(ApiError::bad_request("planning_budget_usd and force go with a goal, not a script"));
    }
    let name = submit.name.unwrap_or_else(|| "http".into());
    let run_id = blocking(&state, move |engine| {
        if let Some(id) = &run_id
            && engine.journal_store().get_meta(id)?.is_some()
        {
            return Err(ApiError::conflict(format!("run {id} already exists")));
        }
        let script = Script::new(&dialect, &name, &source);
        let asked = run_id.clone();
        let options = RunOptions { budget_usd: budget, run_id, tags, by, ..RunOptions::default() };
        match engine.enqueue_script(&script, args, options) {
            Ok(run_id) => Ok(run_id),
            Err(e) if e.code == crate::error::ErrorCode::Validation => {
                let diagnostics = diagnostics_of(engine, &dialect, &source);
                Err(ApiError::from(e).with_details(json!({ "diagnostics": diagnostics })))
            }
            Err(e) => Err(refusal_of_submission(e, asked.as_ref())),
        }
    })
    .await?;
    Ok((StatusCode::ACCEPTED, Json(json!({ "run_id": run_id }))).into_response())
}

/// How a submission the engine refused is answered. 409 only for a run id the client gave that
/// another submission holds (`run_busy`, a lost race) or that exists, naming that id; 503 with
/// `Retry-After` when the store was too slow or failed (`store_io`: nothing was queued, the
/// same request may be sent again); the error's own mapping otherwise.
fn refusal_of_submission(e: crate::Error, asked: Option<&RunId>) -> ApiError {
    use crate::error::ErrorCode;
    match (e.code, asked) {
        // Lost a race for the run id to another submission.
        (ErrorCode::RunBusy, Some(asked)) => ApiError::conflict(format!("run {asked} already exists")),
        (ErrorCode::Config, _) if e.message.contains("already exists") => ApiError::conflict(e.message),
        (ErrorCode::StoreIo, _) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", e.message).with_retry_after(1)
        }
        _ => ApiError::from(e),
    }
}

/// A goal's submission: checks the planning options (a bad dialect or budget is refused
/// before anything is written), reserves the run id, and plans in the background; `202
/// {run_id, planning_run_id}` at once.
async fn submit_goal(state: AppState, run: super::plan::GoalRun) -> Result<Response, ApiError> {
    let reserved = run.clone();
    let planning_run_id = blocking(&state, move |engine| {
        let planning_run_id = crate::planner::planning_run_id(engine, &reserved.goal, &reserved.plan)?;
        let store = engine.journal_store();
        // Under the run's lease, so two submissions of one run id cannot both reserve it.
        let lease = match store.leases() {
            Some(leases) => Some(
                leases
                    .acquire(&reserved.run_id, "cairn-serve-reserve", std::time::Duration::from_secs(30))
                    .map_err(|_| ApiError::conflict(format!("run {} already exists", reserved.run_id)))?,
            ),
            None => None,
        };
        let outcome = (|| {
            if store.get_meta(&reserved.run_id)?.is_some() {
                return Err(ApiError::conflict(format!("run {} already exists", reserved.run_id)));
            }
            super::plan::reserve(engine, &reserved, &planning_run_id, lease.as_ref())?;
            Ok(planning_run_id)
        })();
        if let (Some(leases), Some(lease)) = (store.leases(), lease.as_ref()) {
            let _ = leases.release(lease);
        }
        outcome
    })
    .await?;
    let run_id = run.run_id.clone();
    tokio::spawn(super::plan::plan_and_queue(state, run));
    Ok((StatusCode::ACCEPTED, Json(json!({ "run_id": run_id, "planning_run_id": planning_run_id })))
        .into_response())
}

/// The budget a submitted run gets: its own when within the server's maximum, else the maximum.
fn budget_of(field: &str, asked: Option<f64>, max: Option<Money>) -> Result<Option<f64>, ApiError> {
    match (asked, max) {
        (Some(usd), _) if !usd.is_finite() || usd <= 0.0 => {
            Err(ApiError::bad_request(format!("{field} must be a positive number of USD")))
        }
        (Some(usd), Some(max)) if usd > max.as_usd() => Err(ApiError::bad_request(format!(
            "{field} {usd} is above the server's maximum of {} USD per run",
            max.as_usd()
        ))),
        (Some(usd), _) => Ok(Some(usd)),
        (None, Some(max)) => Ok(Some(max.as_usd())),
        (None, None) => Ok(None),
    }
}

/// A rejected script's diagnostics, as the linter reports them.
fn diagnostics_of(engine: &crate::Engine, dialect: &str, source: &str) -> Value {
    let Ok(dialect) = engine.dialect(dialect) else { return json!([]) };
    let registered = engine.registered();
    let context = crate::script::LintContext {
        profiles: registered.profiles.into_iter().collect(),
        toolsets: Default::default(),
        host_functions: registered.host_functions.into_iter().collect(),
        child_workflows: registered.workflows.into_iter().collect(),
        workflow_args: registered.workflow_args,
        models: None,
    };
    let diagnostics: Vec<_> = dialect
        .check(source, &context)
        .into_iter()
        .filter(|d| d.severity == crate::script::Severity::Error)
        .collect();
    serde_json::to_value(diagnostics).unwrap_or_else(|_| json!([]))
}

/// The query of `GET /v1/runs`.
#[derive(Debug, Deserialize)]
pub(super) struct ListQuery {
    /// Only runs in this status.
    pub status: Option<String>,
    /// Only runs carrying this tag.
    pub tag: Option<String>,
    /// At most this many, newest first ([`LIST_DEFAULT`] by default, [`LIST_MAX`] at most).
    pub limit: Option<usize>,
    /// The page after this cursor: the `next` of the previous page (a run id).
    pub after: Option<String>,
    /// With `true`, each run carries its settled `cost_nano_usd` (folded from its journal).
    pub cost: Option<bool>,
}

/// How many runs a page of `GET /v1/runs` holds by default.
pub(super) const LIST_DEFAULT: usize = 100;
/// The most a page of `GET /v1/runs` holds.
pub(super) const LIST_MAX: usize = 1000;

/// `GET /v1/runs`: a page of the runs, newest first, with their status; `next` is the
/// cursor of the following page (absent on the last).
pub(super) async fn list(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let statuses = match query.status.as_deref().map(str::trim) {
        // `status=` filters nothing, as no `status` does.
        None | Some("") => Vec::new(),
        Some(text) => vec![
            serde_json::from_value::<RunStatus>(json!(text))
                .map_err(|_| ApiError::bad_request(format!("unknown status {text:?}")))?,
        ],
    };
    let tags: Vec<String> = query.tag.iter().filter(|t| !t.trim().is_empty()).cloned().collect();
    let limit = query.limit.unwrap_or(LIST_DEFAULT).min(LIST_MAX);
    let after = match query.after.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => Some(
            RunId::parse(text)
                .map_err(|_| ApiError::bad_request("after must be the next cursor of a page (a run id)"))?,
        ),
    };
    let with_cost = query.cost.unwrap_or(false);
    blocking(&state, move |engine| {
        let store = engine.journal_store();
        // The page after the cursor run's place in the newest-first order, `(created_at_ms,
        // run_id)`: the store reads `limit + 1` runs whatever it holds, and runs created
        // between two pages come before the cursor, so paging neither repeats nor skips one.
        let after = match &after {
            Some(run) => match store.get_meta(run)? {
                Some(meta) => Some(RunCursor::of(&meta)),
                None => return Err(ApiError::bad_request(format!("after {run} is no run of this listing"))),
            },
            None => None,
        };
        let filter =
            RunFilter { statuses, tags, limit: Some(limit.saturating_add(1)), after, ..RunFilter::default() };
        let listed = store.list_runs(&filter)?;
        let page = listed.get(..limit.min(listed.len())).unwrap_or_default();
        let next = if listed.len() > limit { page.last().map(|m| m.run_id.clone()) } else { None };
        let mut runs = Vec::with_capacity(page.len());
        for meta in page {
            let mut value = meta.to_output_json();
            if with_cost {
                // Read page by page: a long run's journal is never held whole.
                let mut ledger = journal::Ledger::default();
                for entry in journal::entries(engine.journal_store().as_ref(), &meta.run_id, 0) {
                    ledger.add(&entry.map_err(ApiError::from)?);
                }
                value["cost_nano_usd"] = json!(ledger.spent.nano_usd());
                value["cost_usd"] = json!(ledger.spent.as_usd());
            }
            runs.push(value);
        }
        let mut body = json!({ "runs": runs });
        if let Some(next) = next {
            body["next"] = json!(next);
        }
        Ok(Json(body))
    })
    .await
}

/// `GET /v1/runs/{id}`: the run's meta, status, pending waits, outcome and cost report (what
/// `cairn inspect --json` prints, less the entries).
pub(super) async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let run = parse_run_id(&id)?;
    blocking(&state, move |engine| {
        let meta = meta_of(engine, &run)?;
        // The journal read page by page into what this route shows of it.
        let digest = RunDigest::read(engine.journal_store().as_ref(), &run, |_| {})?;
        let pending = digest.pending();
        // The script the run executes (a planned run's accepted source), as stored with it.
        let source = match &meta.source_ref {
            Some(reference) => engine
                .inner()
                .transcripts
                .get(reference)?
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
            None => None,
        };
        Ok(Json(json!({
            "run_id": meta.run_id,
            "status": meta.status,
            "meta": meta.to_output_json(),
            "source": source,
            // A plan's failure (the run never ran), else the one its settlement journaled.
            "error": meta.extra.get(super::plan::ERROR_FIELD).cloned().or(digest.error),
            "planning": super::plan::planning_of(engine, &meta)?,
            "pending": pending,
            "cost": digest.cost,
            // Who (which service token) started, resumed, resolved and cancelled it.
            "actions": digest.actions,
            "entries": digest.entries,
        })))
    })
    .await
}

pub(crate) fn entries_of(engine: &crate::Engine, run: &RunId) -> Result<Vec<journal::Entry>, ApiError> {
    let raw = engine.journal_store().load(run)?;
    journal::decode_all(&raw).map_err(|e| ApiError::from(Error::from(e)))
}

/// The query of `GET /v1/runs/{id}/journal`.
#[derive(Debug, Deserialize)]
pub(super) struct JournalQuery {
    /// Only entries after this seq (0 by default: from the start).
    pub after: Option<u64>,
    /// At most this many ([`JOURNAL_DEFAULT`] by default, [`JOURNAL_MAX`] at most).
    pub limit: Option<usize>,
}

/// How many entries a page of `GET /v1/runs/{id}/journal` holds by default.
pub(super) const JOURNAL_DEFAULT: usize = 1000;
/// The most a page of `GET /v1/runs/{id}/journal` holds.
pub(super) const JOURNAL_MAX: usize = 10_000;

/// `GET /v1/runs/{id}/journal?after=SEQ&limit=N`: a page of the run's journal entries, in
/// seq order; `next_after` is the `after` of the following page (absent on the last).
pub(super) async fn journal(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<JournalQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let run = parse_run_id(&id)?;
    let after = query.after.unwrap_or(0);
    let limit = query.limit.unwrap_or(JOURNAL_DEFAULT);
    if limit == 0 || limit > JOURNAL_MAX {
        return Err(ApiError::bad_request(format!("limit must be 1 to {JOURNAL_MAX}")));
    }
    blocking(&state, move |engine| {
        meta_of(engine, &run)?;
        // One page (and one entry past it, to tell whether more follow): memory grows with
        // the page, never with the journal.
        let mut raw = engine.journal_store().load_page(&run, after, limit + 1)?;
        let more = raw.len() > limit;
        raw.truncate(limit);
        let entries = journal::decode_all(&raw).map_err(|e| ApiError::from(Error::from(e)))?;
        let mut body = json!({ "run_id": run, "entries": entries });
        if more && let Some(last) = raw.last() {
            body["next_after"] = json!(last.seq());
        }
        Ok(Json(body))
    })
    .await
}

/// `POST /v1/runs/{id}/resolve/{key}`: resolves the run's `await_external(key)` with the JSON
/// body; a parked queued run returns to the queue. The first resolution wins: any later one
/// is answered 409 `already_resolved` with the value that won. 404 `unknown_wait` for a key
/// the run never waited on; 409 `no_open_wait` when its wait is no longer open.
pub(super) async fn resolve(
    State(state): State<AppState>,
    caller: Option<axum::Extension<super::auth::Caller>>,
    Path((id, key)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let by = caller.and_then(|axum::Extension(c)| c.0);
    let run = parse_run_id(&id)?;
    let value: Value = json_body(body)?;
    let serial = state.resolving.clone();
    blocking(&state, move |engine| {
        // One resolution at a time in this server: the check below and the write it guards
        // are one step for every client of this server.
        let _serial = serial.lock().unwrap_or_else(|p| p.into_inner());
        meta_of(engine, &run)?;
        let entries = entries_of(engine, &run)?;
        if !entries
            .iter()
            .any(|e| e.kind == journal::Kind::External && e.name.as_deref() == Some(key.as_str()))
        {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_wait",
                format!("run {run} never waited on key {:?}", crate::text::for_terminal_line(&key)),
            ));
        }
        if let Some(winner) = closed_with(&entries, &key) {
            return Err(ApiError::already_resolved(&key, winner));
        }
        // A resolution another client left for the run's driver is the winner too.
        if let Some(winner) = engine.queued_resolution(&run, &key)? {
            return Err(ApiError::already_resolved(&key, Some(winner)));
        }
        let resolution = engine.resolve_by(&run, &key, value, by.as_deref()).map_err(|e| {
            if e.code == crate::error::ErrorCode::Config {
                ApiError::conflict(e.message)
            } else if e.code == crate::error::ErrorCode::Validation
                && e.message.contains("has no wait on key")
            {
                ApiError::new(StatusCode::CONFLICT, "no_open_wait", e.message)
            } else {
                ApiError::from(e)
            }
        })?;
        let resolution = match resolution {
            Resolution::Applied => "applied",
            Resolution::Queued => "queued",
            Resolution::AlreadyResolved => {
                // Another resolver (maybe another server on this store) won: its value is
                // journaled, or waits in the run's inbox for the run's driver.
                let entries = entries_of(engine, &run)?;
                let winner = match closed_with(&entries, &key).flatten() {
                    Some(value) => Some(value),
                    None => engine.queued_resolution(&run, &key)?,
                };
                return Err(ApiError::already_resolved(&key, winner));
            }
        };
        Ok(Json(json!({ "run_id": run, "key": key, "resolution": resolution })))
    })
    .await
}

/// When the newest wait on `key` is closed: `Some` of the value that closed it (the first
/// resolution journaled for it), `Some(None)` when the journal holds no such value.
fn closed_with(entries: &[journal::Entry], key: &str) -> Option<Option<Value>> {
    let wait = entries.iter().rev().find(|e| {
        e.kind == journal::Kind::External
            && e.status == journal::Status::Suspended
            && e.name.as_deref() == Some(key)
    })?;
    if !journal::Resolutions::fold(entries.iter()).is_closed(wait.seq) {
        return None;
    }
    let first = entries.iter().find(|e| e.kind == journal::Kind::Resolution && e.target == Some(wait.seq));
    Some(first.and_then(journal::Entry::value))
}

/// `POST /v1/runs/{id}/cancel`: a run nobody drives (queued, suspended, left by a worker that
/// died) is cancelled now (200, status `cancelled`); a run a worker drives, in this process or
/// another, is asked to cancel through the store and its worker cancels it within a poll (202,
/// `cancel: requested`; follow the run to see it settle); 409 once it settled, or while a
/// process outside the run queue drives it.
pub(super) async fn cancel(
    State(state): State<AppState>,
    caller: Option<axum::Extension<super::auth::Caller>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let by = caller.and_then(|axum::Extension(c)| c.0);
    let run = parse_run_id(&id)?;
    blocking(&state, move |engine| {
        meta_of(engine, &run)?;
        match engine.cancel_run_by(&run, by.as_deref())? {
            crate::CancelOutcome::Cancelled => {
                Ok(Json(json!({ "run_id": run, "status": RunStatus::Cancelled })).into_response())
            }
            crate::CancelOutcome::Requested => {
                Ok((StatusCode::ACCEPTED, Json(json!({ "run_id": run, "cancel": "requested" })))
                    .into_response())
            }
            crate::CancelOutcome::Settled(status) => {
                Err(ApiError::conflict(format!("run {run} is {status}; a settled run cannot be cancelled")))
            }
        }
    })
    .await
}

/// Whether a driver holds the run's lease now.
fn driven(engine: &crate::Engine, run: &RunId) -> Result<bool, ApiError> {
    let Some(leases) = engine.journal_store().leases() else { return Ok(false) };
    match leases.acquire(run, "cairn-serve-resume-check", std::time::Duration::from_secs(5)) {
        Ok(lease) => {
            let _ = leases.release(&lease);
            Ok(false)
        }
        Err(crate::store::Error::LeaseHeld { .. }) => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// The optional body of `POST /v1/runs/{id}/resume`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ResumeBody {
    /// A new ceiling in USD from the resume on: within the server's maximum, and not below
    /// what the run has spent.
    #[serde(default)]
    pub budget_usd: Option<f64>,
}

/// `POST /v1/runs/{id}/resume`: puts a suspended, failed or exhausted run back in the queue,
/// or a `running` one whose driver died (nobody holds its lease); a worker resumes it from
/// its journal. With `{"budget_usd": X}` the run's ceiling is raised
/// to X from that resume on (refused above the server's `--max-budget` or below the run's
/// settled spend, with nothing written).
pub(super) async fn resume(
    State(state): State<AppState>,
    caller: Option<axum::Extension<super::auth::Caller>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let by = caller.and_then(|axum::Extension(c)| c.0);
    let run = parse_run_id(&id)?;
    let body: ResumeBody = if body.iter().all(u8::is_ascii_whitespace) {
        ResumeBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("invalid resume body: {e}")))?
    };
    let raise = match body.budget_usd {
        Some(usd) => budget_of("budget_usd", Some(usd), state.options.max_budget)?,
        None => None,
    };
    blocking(&state, move |engine| {
        let meta = meta_of(engine, &run)?;
        // A run left `running` by a driver that died (its lease lapsed) resumes too.
        let undriven = meta.status == RunStatus::Running && !driven(engine, &run)?;
        if !undriven && !matches!(meta.status, RunStatus::Suspended | RunStatus::Error | RunStatus::Exhausted)
        {
            return Err(ApiError::conflict(format!(
                "run {run} is {}; only a suspended, failed or exhausted run resumes",
                meta.status
            )));
        }
        if meta.source_ref.is_none() && meta.extra.contains_key(super::plan::PLANNING_FIELD) {
            return Err(ApiError::conflict(format!(
                "run {run} has no script to resume: its plan produced none; submit the goal again"
            )));
        }
        let Some(queue) = engine.journal_store().queue() else {
            return Err(ApiError::bad_request("this store keeps no run queue"));
        };
        if let Some(usd) = raise {
            engine.raise_ceiling_on_resume(&run, usd)?;
        }
        // Journaled before the run is back in the queue, so before any worker drives it.
        if let Some(by) = &by {
            engine.record_resume(&run, by)?;
        }
        queue.enqueue(&run)?;
        Ok((StatusCode::ACCEPTED, Json(json!({ "run_id": run }))).into_response())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn answer(e: crate::Error, asked: Option<&RunId>) -> (StatusCode, Option<String>, Value) {
        let response = refusal_of_submission(e, asked).into_response();
        let retry = response
            .headers()
            .get(axum::http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let status = response.status();
        let body = futures::executor::block_on(axum::body::to_bytes(response.into_body(), 1 << 16)).unwrap();
        (status, retry, serde_json::from_slice(&body).unwrap())
    }

    #[test]
    fn a_submission_refused_for_a_slow_store_is_retryable_and_a_lost_race_names_the_run() {
        // The store took longer than the submission's lease: 503, to send again.
        let slow = crate::Error::new(ErrorCode::StoreIo, "the store took longer than ... run r1");
        let (status, retry, body) = answer(slow, None);
        assert_eq!((status, retry.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("1")));
        assert_eq!(body["code"], "store_unavailable");
        // A run id the client gave, held by another submission: 409 naming it.
        let asked = RunId::parse("given").unwrap();
        let busy = crate::Error::new(ErrorCode::RunBusy, "run given is being driven by another process");
        let (status, _, body) = answer(busy, Some(&asked));
        assert_eq!(
            (status, body["message"].as_str()),
            (StatusCode::CONFLICT, Some("run given already exists"))
        );
        // No id given: never "run  already exists"; the engine's own words name the run.
        let busy = crate::Error::new(ErrorCode::RunBusy, "run gen-1 is being driven by another process");
        let (status, _, body) = answer(busy, None);
        assert_eq!(status, StatusCode::CONFLICT);
        assert!(body["message"].as_str().is_some_and(|m| m.contains("run gen-1")), "{body}");
    }
}
