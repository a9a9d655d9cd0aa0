//! The PostgreSQL store: journals, run meta, fenced leases, blobs and the run queue in one
//! PostgreSQL schema that workers on many hosts share.
//!
//! The store's traits are synchronous; this store runs its own small tokio runtime, and each
//! call hands its work to that runtime and waits for it (as a SQLite call waits for the disk),
//! so it works from inside and outside an async context alike. The caller waits on a plain
//! channel, never by polling a tokio future itself: a tokio future polled from inside another
//! runtime's task is charged to that task's cooperative budget, and once a task has made ~128
//! store calls in one poll every such future answers "not yet" and wakes itself, for ever (a
//! livelock that froze workers). Connections come from a `deadpool-postgres` pool.
//!
//! Every fenced write is one statement: a server-side function takes the lease row with
//! `FOR SHARE` (held to the end of the transaction), checks it, and writes, so a takeover
//! cannot commit between the check and the write; a stale lease's write is refused by the
//! database, never by a read in the client. An append's order check is the conditional upsert
//! of the run's head row (a row lock), so two appenders of one run are serialized too.
//!
//! Appends that arrive together share one transaction (group commit): one writer task takes
//! every queued batch and sends `BEGIN`, one append call per batch and `COMMIT` pipelined on
//! one connection; a batch that fails its checks writes nothing and fails alone.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio::sync::mpsc;
use tokio_postgres::NoTls;

mod blobs;
mod counters;
mod errors;
mod notify;
mod queue;
mod schema;

use self::errors::{pg_err, pool_err, to_i64, to_u64};
use super::common::{self, HeldLease};
use super::{Error, JournalStore, LeasableStore, Lease, RawEntry, Result, RunFilter, RunId, RunMeta};
use crate::clock::{SharedClock, SystemClock};

/// The PostgreSQL schema a store URL names when it names none.
pub(crate) const DEFAULT_SCHEMA: &str = "cairn";

/// How many batches one group commit takes at most.
const MAX_GROUP: usize = 256;

/// How to open a [`PostgresStore`].
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// The PostgreSQL schema that holds the store (`[a-z0-9_]`, 1 to 63 characters).
    pub schema: String,
    /// The most connections this store opens.
    pub pool_size: usize,
    /// Reads lease and claim expiry; inject a [`ManualClock`](crate::ManualClock) to test
    /// expiry without sleeping. Every process sharing a store must agree on the time.
    pub clock: SharedClock,
    /// Whether concurrent appends share a transaction. On by default.
    pub group_commit: bool,
    /// How long opening waits for the server, and a call for a pooled connection.
    pub connect_timeout: Duration,
}

impl PostgresOptions {
    /// The `cairn` schema, 16 connections, the system clock, group commit, a 10 s timeout.
    #[allow(clippy::new_without_default)] // Options are spelled out where a store is opened.
    pub fn new() -> PostgresOptions {
        PostgresOptions {
            schema: DEFAULT_SCHEMA.into(),
            pool_size: 16,
            clock: Arc::new(SystemClock),
            group_commit: true,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// A [`JournalStore`], [`LeasableStore`], [`TranscriptStore`](crate::TranscriptStore) and
/// [`RunQueue`](super::RunQueue) over one PostgreSQL schema.
pub struct PostgresStore {
    /// Where, for messages: host, port, database and schema (never a password).
    place: String,
    options: PostgresOptions,
    pool: Pool,
    /// The store's own runtime; `None` only while dropping.
    runtime: Option<tokio::runtime::Runtime>,
    /// The group-commit writer's queue.
    writer: mpsc::UnboundedSender<AppendJob>,
    read_only: bool,
    /// Wakes this process's followers of a run (fed by `LISTEN` once followed).
    watch: super::RunWatch,
    /// The notifier task's queue: runs to announce with `NOTIFY`; `None` when read-only.
    notifier: Option<mpsc::UnboundedSender<notify::Signal>>,
    /// Whether the notifier was asked to listen.
    listening: std::sync::atomic::AtomicBool,
}

/// One append waiting for the writer.
struct AppendJob {
    run: RunId,
    seqs: Vec<i64>,
    jsons: Vec<String>,
    lease: Option<Lease>,
    /// The batch's tally: model calls and their spend in nano-USD.
    calls: i64,
    spend: i64,
    done: std::sync::mpsc::SyncSender<Result<()>>,
}

impl PostgresStore {
    /// Opens (creating or migrating its schema) the store at a `postgres://` URL. The URL is
    /// libpq's, plus `schema=NAME` (default `cairn`) and `pool_size=N`, which override
    /// `options`.
    ///
    /// # Errors
    /// [`Error::Config`] for a bad URL, a schema that is not a cairn store or a store from a
    /// newer cairn; [`Error::Postgres`] when the server cannot be reached or refuses.
    pub fn open(url: &str, options: PostgresOptions) -> Result<PostgresStore> {
        PostgresStore::connect(url, options, false)
    }

    /// Opens an existing store for reading only: nothing is created, migrated or written
    /// (every session is read-only to the server too). `Ok(None)` when the schema holds no
    /// store yet.
    ///
    /// # Errors
    /// As [`PostgresStore::open`]; [`Error::Config`] for a store at an older version (open it
    /// once for writing to migrate it).
    pub fn open_read_only(url: &str, options: PostgresOptions) -> Result<Option<PostgresStore>> {
        match PostgresStore::connect(url, options, true) {
            Err(Error::Config(message)) if message == FRESH => Ok(None),
            other => other.map(Some),
        }
    }

    fn connect(url: &str, mut options: PostgresOptions, read_only: bool) -> Result<PostgresStore> {
        let (mut config, place) = parse_url(url, &mut options)?;
        let mut session = format!("-c search_path={}", options.schema);
        if read_only {
            session.push_str(" -c default_transaction_read_only=on");
        }
        config.options(&session);
        config.application_name("cairn");
        config.connect_timeout(options.connect_timeout);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cairn-postgres")
            .enable_all()
            .build()?;
        let notify_config = config.clone();
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(2))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(options.connect_timeout))
            .create_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|e| Error::Config(format!("postgres pool: {e}")))?;
        let schema_name = options.schema.clone();
        // Run on the store's runtime and waited for, so opening works inside another runtime too.
        let preparing = async move {
            let (mut client, connection) = config.connect(NoTls).await.map_err(pg_err)?;
            let driver = tokio::spawn(connection);
            let outcome = if read_only {
                match schema::identity(&client, &schema_name).await? {
                    schema::Identity::Fresh => Err(Error::Config(FRESH.into())),
                    schema::Identity::Cairn(version) if version < schema::VERSION => {
                        Err(Error::Config(format!(
                            "postgres store schema {schema_name:?} has version {version}; open it once with a \
                         writing command (cairn run, resume or worker) to migrate it"
                        )))
                    }
                    schema::Identity::Cairn(_) => Ok(()),
                }
            } else {
                schema::migrate(&mut client, &schema_name).await
            };
            drop(client);
            let _ = driver.await;
            outcome
        };
        let prepared = wait_for(&runtime, preparing).and_then(|outcome| outcome);
        if let Err(err) = prepared {
            runtime.shutdown_background();
            return Err(err);
        }
        let (writer, jobs) = mpsc::unbounded_channel();
        runtime.spawn(write_loop(pool.clone(), options.clock.clone(), jobs));
        let watch = super::RunWatch::new();
        let notifier = (!read_only).then(|| {
            let (signals, receiver) = mpsc::unbounded_channel();
            let channel = notify::channel_of(&options.schema);
            runtime.spawn(notify::notifier(notify_config, channel, watch.clone(), receiver));
            signals
        });
        Ok(PostgresStore {
            place,
            options,
            pool,
            runtime: Some(runtime),
            writer,
            read_only,
            watch,
            notifier,
            listening: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Runs `work` on the store's runtime and waits for it.
    fn block<T, F>(&self, work: impl FnOnce(Pool, SharedClock) -> F) -> Result<T>
    where
        F: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let Some(runtime) = &self.runtime else { return Err(Error::Postgres("the store is closed".into())) };
        wait_for(runtime, work(self.pool.clone(), self.options.clock.clone()))?
    }

    /// Refuses a lease of another run: it authorizes nothing here.
    fn refuse_foreign(&self, run: &RunId, lease: Option<&Lease>) -> Result<()> {
        match lease {
            Some(lease) if lease.run_id != *run => Err(fenced(run, lease, None, self.options.clock.now_ms())),
            _ => Ok(()),
        }
    }

    fn refuse_write(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::Config(format!("postgres store {} is open read-only", self.place)));
        }
        Ok(())
    }

    /// Grants the run's lease when no live lease holds it, or when the live one is `stale`.
    fn grant(&self, run: &RunId, owner: &str, ttl: Duration, stale: Option<&Lease>) -> Result<Lease> {
        self.refuse_write()?;
        let (run, owner) = (run.clone(), owner.to_owned());
        let (stale_owner, stale_epoch) = match stale {
            Some(s) => (Some(s.owner.clone()), Some(to_i64(s.epoch)?)),
            None => (None, None),
        };
        self.block(move |pool, clock| async move {
            let (client, stmt) = prepared(
                &pool,
                "SELECT granted, l_owner, l_epoch, l_expires FROM cairn_grant($1, $2, $3, $4, $5, $6)",
            )
            .await?;
            let now = clock.now_ms();
            let row = client
                .query_one(
                    &stmt,
                    &[&run.as_str(), &owner, &common::expiry(now, ttl), &now, &stale_owner, &stale_epoch],
                )
                .await
                .map_err(pg_err)?;
            let granted: bool = row.get(0);
            let held = HeldLease { owner: row.get(1), epoch: to_u64(row.get(2))?, expires_at_ms: row.get(3) };
            if !granted {
                return Err(common::held_by(&run, &held));
            }
            Ok(Lease { run_id: run, owner, epoch: held.epoch })
        })
    }
}

/// Runs `work` on `runtime` and blocks this thread until it is done. The result comes back
/// over a std channel: waiting never polls a tokio future here, so no caller's cooperative
/// budget is charged (see the module's note). `Err` when the task panicked or was dropped.
fn wait_for<T: Send + 'static>(
    runtime: &tokio::runtime::Runtime,
    work: impl Future<Output = T> + Send + 'static,
) -> Result<T> {
    let (done, outcome) = std::sync::mpsc::sync_channel(1);
    runtime.spawn(async move {
        let _ = done.send(work.await);
    });
    outcome.recv().map_err(|_| Error::Postgres("a postgres store task failed".into()))
}

/// The message by which `connect` tells `open_read_only` that there is no store yet.
const FRESH: &str = "\u{0}fresh";

impl Drop for PostgresStore {
    fn drop(&mut self) {
        // Allowed anywhere, also inside another runtime's task.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("place", &self.place)
            .field("group_commit", &self.options.group_commit)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

/// Splits a store URL into the driver's config and cairn's own parameters (`schema`,
/// `pool_size`), and names the place for messages without its password.
fn parse_url(text: &str, options: &mut PostgresOptions) -> Result<(tokio_postgres::Config, String)> {
    let bad = |why: String| Error::Config(format!("invalid postgres store url: {why}"));
    let mut url = url::Url::parse(text).map_err(|e| bad(e.to_string()))?;
    if !matches!(url.scheme(), "postgres" | "postgresql") {
        return Err(bad("expected postgres://USER@HOST:PORT/DATABASE".into()));
    }
    let mut kept = Vec::new();
    for (key, value) in url.query_pairs() {
        match &*key {
            "schema" => options.schema = value.into_owned(),
            "pool_size" => {
                options.pool_size = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=1024).contains(n))
                    .ok_or_else(|| bad(format!("pool_size must be 1 to 1024, not {value:?}")))?;
            }
            _ => kept.push((key.into_owned(), value.into_owned())),
        }
    }
    let schema_ok = !options.schema.is_empty()
        && options.schema.len() <= 63
        && options.schema.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !options.schema.starts_with(|c: char| c.is_ascii_digit());
    if !schema_ok {
        return Err(bad(format!(
            "schema {:?} must be 1-63 characters of [a-z0-9_], not starting with a digit",
            options.schema
        )));
    }
    if kept.is_empty() {
        url.set_query(None);
    } else {
        url.query_pairs_mut().clear().extend_pairs(kept);
    }
    let place = format!(
        "postgres://{}{}{} (schema {})",
        url.host_str().unwrap_or("localhost"),
        url.port().map(|p| format!(":{p}")).unwrap_or_default(),
        url.path(),
        options.schema
    );
    let config: tokio_postgres::Config = url.as_str().parse().map_err(|e| bad(format!("{e}")))?;
    Ok((config, place))
}

/// The fence columns a function returned, as the lease on record (`None`: no lease).
fn held_of(owner: Option<String>, epoch: Option<i64>, expires: Option<i64>) -> Result<Option<HeldLease>> {
    match (owner, epoch, expires) {
        (Some(owner), Some(epoch), Some(expires_at_ms)) => {
            Ok(Some(HeldLease { owner, epoch: to_u64(epoch)?, expires_at_ms }))
        }
        _ => Ok(None),
    }
}

/// The refusal of a fenced write whose lease the database found not current.
fn fenced(run: &RunId, lease: &Lease, held: Option<HeldLease>, now_ms: i64) -> Error {
    match common::check_lease(run, lease, held.as_ref(), now_ms) {
        Err(err) => err,
        // The database and the rule disagree only if the lease changed in between.
        Ok(()) => Error::LeaseHeld { run: run.clone(), detail: "the lease changed during the write".into() },
    }
}

/// The lease's owner and epoch as SQL parameters (`NULL` for an unfenced write).
fn lease_params(lease: Option<&Lease>) -> Result<(Option<String>, Option<i64>)> {
    match lease {
        Some(lease) => Ok((Some(lease.owner.clone()), Some(to_i64(lease.epoch)?))),
        None => Ok((None, None)),
    }
}

const APPEND_SQL: &str = "SELECT code, h_owner, h_epoch, h_expires, tail FROM cairn_append_counted($1, $2, $3, $4, $5, $6, $7, $8)";

/// The group-commit writer: takes every append queued meanwhile and commits them together.
async fn write_loop(pool: Pool, clock: SharedClock, mut jobs: mpsc::UnboundedReceiver<AppendJob>) {
    while let Some(first) = jobs.recv().await {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match jobs.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let outcomes = match commit_group(&pool, &*clock, &group).await {
            Ok(outcomes) => outcomes,
            Err(err) => group.iter().map(|_| Err(Error::Postgres(err.to_string()))).collect(),
        };
        for (job, outcome) in group.into_iter().zip(outcomes) {
            let _ = job.done.send(outcome);
        }
    }
}

/// Commits a group in one transaction (a lone batch in its own statement); one outcome per
/// batch. `Err` when the whole group failed.
async fn commit_group(
    pool: &Pool,
    clock: &dyn crate::clock::Clock,
    group: &[AppendJob],
) -> Result<Vec<Result<()>>> {
    let client = pool.get().await.map_err(pool_err)?;
    let append = client.prepare_cached(APPEND_SQL).await.map_err(pg_err)?;
    let now = clock.now_ms();
    let params: Vec<_> = group
        .iter()
        .map(|job| lease_params(job.lease.as_ref()).map(|(owner, epoch)| (job, owner, epoch)))
        .collect::<Result<_>>()?;
    let runs: Vec<&str> = group.iter().map(|job| job.run.as_str()).collect();
    let args: Vec<[&(dyn tokio_postgres::types::ToSql + Sync); 8]> = params
        .iter()
        .zip(&runs)
        .map(|((job, owner, epoch), run)| {
            let run = run as &(dyn tokio_postgres::types::ToSql + Sync);
            [run, &job.seqs, &job.jsons, owner, epoch, &now, &job.calls, &job.spend]
        })
        .collect();
    let calls = args.iter().map(|args| client.query_one(&append, args));
    let rows = if let [_] = group {
        futures::future::join_all(calls).await
    } else {
        let begin = client.prepare_cached("BEGIN").await.map_err(pg_err)?;
        let commit = client.prepare_cached("COMMIT").await.map_err(pg_err)?;
        // Polled in this order, so sent in this order, pipelined on one connection.
        let (began, rows, committed) = futures::join!(
            client.execute(&begin, &[]),
            futures::future::join_all(calls),
            client.execute(&commit, &[])
        );
        began.map_err(pg_err)?;
        committed.map_err(pg_err)?;
        rows
    };
    let mut outcomes = Vec::with_capacity(group.len());
    for (job, row) in group.iter().zip(rows) {
        let row = row.map_err(pg_err)?;
        let code: i32 = row.get(0);
        outcomes.push(match code {
            0 => Ok(()),
            1 => {
                let held = held_of(row.get(1), row.get(2), row.get(3))?;
                let lease =
                    job.lease.as_ref().ok_or_else(|| Error::Postgres("fence without a lease".into()))?;
                Err(fenced(&job.run, lease, held, now))
            }
            _ => {
                let tail: Option<i64> = row.get(4);
                let first = job.seqs.first().copied().unwrap_or(0);
                Err(Error::OrderViolation {
                    run: job.run.clone(),
                    seq: to_u64(first)?,
                    tail: to_u64(tail.unwrap_or(first))?,
                })
            }
        });
    }
    Ok(outcomes)
}

fn parse_meta(run: &str, json: &str) -> Result<RunMeta> {
    serde_json::from_str(json)
        .map_err(|err| Error::Corrupt { what: format!("meta of run {run}"), detail: err.to_string() })
}

impl JournalStore for PostgresStore {
    fn append_tallied(
        &self,
        run: &RunId,
        entries: &[RawEntry],
        lease: Option<&Lease>,
        tally: super::Tally,
    ) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        self.refuse_write()?;
        common::check_batch(run, entries)?;
        self.refuse_foreign(run, lease)?;
        let seqs = entries.iter().map(|e| to_i64(e.seq())).collect::<Result<Vec<_>>>()?;
        let jsons = entries.iter().map(|e| e.json().to_owned()).collect();
        let (done, outcome) = std::sync::mpsc::sync_channel(1);
        let calls = i64::try_from(tally.calls).unwrap_or(i64::MAX);
        let spend = tally.spend.nano_usd();
        let job = AppendJob { run: run.clone(), seqs, jsons, lease: lease.cloned(), calls, spend, done };
        if !self.options.group_commit {
            let clock = self.options.clock.clone();
            return self
                .block(move |pool, _| async move {
                    let group = [job];
                    let mut outcomes = commit_group(&pool, &*clock, &group).await?;
                    outcomes.pop().unwrap_or(Ok(()))
                })
                .inspect(|()| self.changed(run));
        }
        self.writer.send(job).map_err(|_| Error::Postgres("the store's writer stopped".into()))?;
        // A std channel, not a tokio one: see the module's note on cooperative budgets.
        outcome
            .recv()
            .unwrap_or_else(|_| Err(Error::Postgres("the store's writer stopped".into())))
            .inspect(|()| self.changed(run))
    }

    fn counters(&self) -> Result<Option<super::StoreCounters>> {
        self.block(|pool, _| async move { counters::read(&pool).await })
    }

    fn load_since(&self, run: &RunId, after: u64) -> Result<Vec<RawEntry>> {
        self.load_page(run, after, usize::MAX)
    }

    fn load_page(&self, run: &RunId, after: u64, limit: usize) -> Result<Vec<RawEntry>> {
        let Ok(after) = i64::try_from(after) else { return Ok(Vec::new()) };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let run = run.clone();
        self.block(move |pool, _| async move {
            let (client, stmt) = prepared(
                &pool,
                "SELECT seq, json FROM journal WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            )
            .await?;
            let rows = client.query(&stmt, &[&run.as_str(), &after, &limit]).await.map_err(pg_err)?;
            rows.iter()
                .map(|row| {
                    let seq = to_u64(row.get(0))?;
                    RawEntry::new(seq, row.get::<_, String>(1)).map_err(|err| Error::Corrupt {
                        what: format!("journal of run {run}"),
                        detail: err.to_string(),
                    })
                })
                .collect()
        })
    }

    fn watch(&self) -> Option<&super::RunWatch> {
        let notifier = self.notifier.as_ref()?;
        if !self.listening.swap(true, std::sync::atomic::Ordering::Relaxed) {
            let _ = notifier.send(notify::Signal::Listen);
        }
        Some(&self.watch)
    }

    fn load(&self, run: &RunId) -> Result<Vec<RawEntry>> {
        // Seqs start at 1.
        self.load_since(run, 0)
    }

    fn put_meta(&self, meta: &RunMeta, lease: Option<&Lease>) -> Result<()> {
        self.refuse_write()?;
        self.refuse_foreign(&meta.run_id, lease)?;
        let run = meta.run_id.clone();
        let json = serde_json::to_string(meta)
            .map_err(|err| Error::Corrupt { what: format!("meta of run {run}"), detail: err.to_string() })?;
        let (status, name, created, tags) =
            (meta.status.as_str(), meta.name.clone(), meta.created_at_ms, meta.tags.clone());
        let (owner, epoch) = lease_params(lease)?;
        let lease = lease.cloned();
        self.block(move |pool, clock| async move {
            let (client, stmt) = prepared(&pool, "SELECT ok, h_owner, h_epoch, h_expires FROM cairn_put_meta($1, $2, $3, $4, $5, $6, $7, $8, $9)",).await?;
            let now = clock.now_ms();
            let row = client
                .query_one(&stmt, &[&run.as_str(), &status, &name, &created, &tags, &json, &owner, &epoch, &now])
                .await
                .map_err(pg_err)?;
            check_fenced(&run, lease.as_ref(), &row, now)
        })
        .inspect(|()| self.changed(&meta.run_id))
    }

    fn get_meta(&self, run: &RunId) -> Result<Option<RunMeta>> {
        let run = run.clone();
        self.block(move |pool, _| async move {
            let (client, stmt) = prepared(&pool, "SELECT meta_json FROM runs WHERE run_id = $1").await?;
            let row = client.query_opt(&stmt, &[&run.as_str()]).await.map_err(pg_err)?;
            row.map(|row| parse_meta(run.as_str(), &row.get::<_, String>(0))).transpose()
        })
    }

    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunMeta>> {
        let statuses: Vec<String> = filter.statuses.iter().map(|s| s.as_str().to_owned()).collect();
        let name = filter.name.clone();
        let tags = filter.tags.clone();
        let limit = filter.limit.map(|limit| i64::try_from(limit).unwrap_or(i64::MAX));
        let after_ms = filter.after.as_ref().map(|cursor| cursor.created_at_ms);
        let after_run = filter.after.as_ref().map(|cursor| cursor.run_id.as_str().to_owned());
        self.block(move |pool, _| async move {
            // Run ids compare bytewise (COLLATE "C") as on every other store, whatever the
            // database's collation.
            let (client, stmt) = prepared(
                &pool,
                "SELECT run_id, meta_json FROM runs
                     WHERE (cardinality($1::text[]) = 0 OR status = ANY($1))
                       AND ($2::text IS NULL OR name = $2)
                       AND tags @> $3::text[]
                       AND ($5::bigint IS NULL OR created_at_ms < $5
                            OR (created_at_ms = $5 AND run_id COLLATE \"C\" < $6::text COLLATE \"C\"))
                     ORDER BY created_at_ms DESC, run_id COLLATE \"C\" DESC
                     LIMIT $4",
            )
            .await?;
            let rows = client
                .query(&stmt, &[&statuses, &name, &tags, &limit, &after_ms, &after_run])
                .await
                .map_err(pg_err)?;
            rows.iter().map(|row| parse_meta(row.get(0), row.get(1))).collect()
        })
    }

    fn delete(&self, run: &RunId, lease: Option<&Lease>) -> Result<()> {
        self.refuse_write()?;
        self.refuse_foreign(run, lease)?;
        let run = run.clone();
        let (owner, epoch) = lease_params(lease)?;
        let lease = lease.cloned();
        self.block(move |pool, clock| async move {
            let (client, stmt) =
                prepared(&pool, "SELECT ok, h_owner, h_epoch, h_expires FROM cairn_delete($1, $2, $3, $4)")
                    .await?;
            let now = clock.now_ms();
            let row =
                client.query_one(&stmt, &[&run.as_str(), &owner, &epoch, &now]).await.map_err(pg_err)?;
            check_fenced(&run, lease.as_ref(), &row, now)
        })
    }

    fn leases(&self) -> Option<&dyn LeasableStore> {
        if self.read_only { None } else { Some(self) }
    }

    /// Read-only opens answer too: reading the lease table writes nothing.
    fn lease_holder(&self, run: &RunId) -> Result<Option<Option<Lease>>> {
        LeasableStore::holder(self, run).map(Some)
    }

    fn queue(&self) -> Option<&dyn super::RunQueue> {
        if self.read_only { None } else { Some(self) }
    }
}

/// The outcome of a fenced function's `(ok, h_owner, h_epoch, h_expires)` row.
fn check_fenced(run: &RunId, lease: Option<&Lease>, row: &tokio_postgres::Row, now: i64) -> Result<()> {
    if row.get::<_, bool>(0) {
        return Ok(());
    }
    let held = held_of(row.get(1), row.get(2), row.get(3))?;
    match lease {
        Some(lease) => Err(fenced(run, lease, held, now)),
        None => Err(Error::Postgres("a write without a lease was fenced".into())),
    }
}

impl LeasableStore for PostgresStore {
    fn acquire(&self, run: &RunId, owner: &str, ttl: Duration) -> Result<Lease> {
        self.grant(run, owner, ttl, None)
    }

    fn take_over(&self, stale: &Lease, owner: &str, ttl: Duration) -> Result<Lease> {
        self.grant(&stale.run_id, owner, ttl, Some(stale))
    }

    fn holder(&self, run: &RunId) -> Result<Option<Lease>> {
        let run = run.clone();
        self.block(move |pool, clock| async move {
            let (client, stmt) =
                prepared(&pool, "SELECT owner, epoch FROM leases WHERE run_id = $1 AND expires_at_ms > $2")
                    .await?;
            let row = client.query_opt(&stmt, &[&run.as_str(), &clock.now_ms()]).await.map_err(pg_err)?;
            row.map(|row| Ok(Lease { run_id: run.clone(), owner: row.get(0), epoch: to_u64(row.get(1))? }))
                .transpose()
        })
    }

    fn renew(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        self.lease_write(
            lease,
            "UPDATE leases SET expires_at_ms = $5 WHERE run_id = $1 AND owner = $2 AND epoch = $3 AND expires_at_ms > $4",
            Some(ttl),
        )
    }

    fn release(&self, lease: &Lease) -> Result<()> {
        self.lease_write(
            lease,
            "DELETE FROM leases WHERE run_id = $1 AND owner = $2 AND epoch = $3 AND expires_at_ms > $4 AND $5::bigint IS NULL",
            None,
        )
    }
}

impl PostgresStore {
    /// After a committed write of `run`: wakes this process's followers now and announces
    /// the change to every other process on the database.
    fn changed(&self, run: &RunId) {
        self.watch.notify(run);
        if let Some(notifier) = &self.notifier {
            let _ = notifier.send(notify::Signal::Changed(run.clone()));
        }
    }

    /// One statement that changes a lease only while it is current (its `WHERE` is the
    /// fence); when it changed nothing, says why.
    fn lease_write(&self, lease: &Lease, sql: &'static str, ttl: Option<Duration>) -> Result<()> {
        self.refuse_write()?;
        let lease = lease.clone();
        let epoch = to_i64(lease.epoch)?;
        self.block(move |pool, clock| async move {
            let (client, stmt) = prepared(&pool, sql).await?;
            let now = clock.now_ms();
            let expires = ttl.map(|ttl| common::expiry(now, ttl));
            let run = &lease.run_id;
            let changed = client
                .execute(&stmt, &[&run.as_str(), &lease.owner, &epoch, &now, &expires])
                .await
                .map_err(pg_err)?;
            if changed == 1 {
                return Ok(());
            }
            let held = client
                .query_opt(
                    "SELECT owner, epoch, expires_at_ms FROM leases WHERE run_id = $1",
                    &[&run.as_str()],
                )
                .await
                .map_err(pg_err)?
                .map(|row| held_of(row.get(0), row.get(1), row.get(2)))
                .transpose()?
                .flatten();
            Err(fenced(run, &lease, held, now))
        })
    }
}

/// A pooled connection and one of its cached prepared statements: the opening of every
/// single-statement operation.
async fn prepared(pool: &Pool, sql: &str) -> Result<(deadpool_postgres::Object, tokio_postgres::Statement)> {
    let client = pool.get().await.map_err(pool_err)?;
    let stmt = client.prepare_cached(sql).await.map_err(pg_err)?;
    Ok((client, stmt))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_libpq_parameters_and_take_cairns_own() {
        let mut options = PostgresOptions::new();
        let (config, place) = parse_url(
            "postgres://u:secret@db.example:5433/app?schema=team_a&pool_size=4&sslmode=disable",
            &mut options,
        )
        .unwrap();
        assert_eq!((options.schema.as_str(), options.pool_size), ("team_a", 4));
        assert_eq!(config.get_dbname(), Some("app"));
        assert!(!place.contains("secret"), "{place}");
        for bad in [
            "postgres://h/db?schema=Bad",
            "postgres://h/db?schema=a;drop",
            "postgres://h/db?pool_size=0",
            "mysql://h/db",
            "postgres://h/db?schema=",
        ] {
            assert!(matches!(parse_url(bad, &mut PostgresOptions::new()), Err(Error::Config(_))), "{bad}");
        }
    }
}
