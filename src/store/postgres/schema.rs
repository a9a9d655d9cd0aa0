//! The PostgreSQL store's schema: its identity row, its versioned migrations, and the
//! functions that do a fenced write in one statement.
//!
//! Everything lives in one PostgreSQL schema (`cairn` unless the URL names another), so the
//! store shares a database with anything else. The table `cairn_store` says whose the schema
//! is and at which version; a schema with tables but without that row is someone else's, and
//! cairn neither reads nor writes it. Opening migrates under a transaction-scoped advisory
//! lock, so two processes opening a fresh database at once apply each migration exactly once.

use tokio_postgres::GenericClient;

use super::errors::pg_err;
use crate::store::{Error, Result};

/// The schema version this build writes. A store stamped higher was made by a newer cairn.
pub(super) const VERSION: i32 = 4;

/// What `cairn_store.application` holds in a cairn store.
const APPLICATION: &str = "cairn";

/// Migration `n` (1-based) takes a store from version `n - 1` to `n`.
const MIGRATIONS: &[&str] = &[
    // 1: journals, meta, leases, blobs, the run queue and its counters.
    r#"
CREATE TABLE cairn_store (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    application text NOT NULL,
    version integer NOT NULL
);
CREATE TABLE journal (
    run_id text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    json text NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE heads (
    run_id text COLLATE "C" PRIMARY KEY,
    tail bigint NOT NULL
);
CREATE TABLE runs (
    run_id text COLLATE "C" PRIMARY KEY,
    status text NOT NULL,
    name text,
    created_at_ms bigint NOT NULL,
    tags text[] NOT NULL DEFAULT '{}',
    meta_json text NOT NULL
);
CREATE INDEX runs_by_created ON runs (created_at_ms, run_id);
CREATE INDEX runs_by_status ON runs (status, created_at_ms, run_id);
CREATE INDEX runs_by_tags ON runs USING gin (tags);
CREATE TABLE leases (
    run_id text COLLATE "C" PRIMARY KEY,
    owner text NOT NULL,
    epoch bigint NOT NULL,
    expires_at_ms bigint NOT NULL
);
CREATE TABLE epochs (
    run_id text COLLATE "C" PRIMARY KEY,
    high_water bigint NOT NULL
);
CREATE TABLE blobs (
    ref text COLLATE "C" PRIMARY KEY,
    run_id text COLLATE "C" NOT NULL,
    data bytea NOT NULL
);
CREATE INDEX blobs_by_run ON blobs (run_id, ref);
CREATE TABLE queue (
    run_id text COLLATE "C" PRIMARY KEY,
    enqueued_at_ms bigint NOT NULL,
    ready_at_ms bigint NOT NULL,
    owner text,
    epoch bigint NOT NULL DEFAULT 0,
    expires_at_ms bigint,
    attempts integer NOT NULL DEFAULT 0
);
CREATE INDEX queue_by_age ON queue (enqueued_at_ms, run_id);
CREATE TABLE counters (
    name text PRIMARY KEY,
    value bigint NOT NULL
);

-- The lease on record, locked (FOR SHARE) until the caller's transaction ends, so a
-- takeover cannot commit between this check and the write it guards.
CREATE FUNCTION cairn_fence(p_run text, p_owner text, p_epoch bigint, p_now bigint,
    OUT ok boolean, OUT h_owner text, OUT h_epoch bigint, OUT h_expires bigint)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT owner, epoch, expires_at_ms INTO h_owner, h_epoch, h_expires
        FROM leases WHERE run_id = p_run FOR SHARE;
    ok := FOUND AND h_owner = p_owner AND h_epoch = p_epoch AND p_now < h_expires;
END $$;

-- One batch: the fence (when a lease is given), the order check against the run's head
-- (a row lock), and the inserts; nothing is written unless every check passes.
-- code 0: appended; 1: the lease is not current (h_*: the lease on record); 2: order (tail).
CREATE FUNCTION cairn_append(p_run text, p_seqs bigint[], p_jsons text[], p_owner text,
    p_epoch bigint, p_now bigint,
    OUT code integer, OUT h_owner text, OUT h_epoch bigint, OUT h_expires bigint, OUT tail bigint)
LANGUAGE plpgsql AS $$
DECLARE
    fenced boolean;
BEGIN
    code := 0;
    IF p_owner IS NOT NULL THEN
        SELECT f.ok, f.h_owner, f.h_epoch, f.h_expires INTO fenced, h_owner, h_epoch, h_expires
            FROM cairn_fence(p_run, p_owner, p_epoch, p_now) AS f;
        IF NOT fenced THEN
            code := 1;
            RETURN;
        END IF;
    END IF;
    INSERT INTO heads AS h (run_id, tail) VALUES (p_run, p_seqs[array_length(p_seqs, 1)])
        ON CONFLICT (run_id) DO UPDATE SET tail = excluded.tail WHERE h.tail < p_seqs[1];
    IF NOT FOUND THEN
        SELECT h.tail INTO tail FROM heads AS h WHERE h.run_id = p_run;
        code := 2;
        RETURN;
    END IF;
    INSERT INTO journal (run_id, seq, json) SELECT p_run, s, j FROM unnest(p_seqs, p_jsons) AS t(s, j);
END $$;

-- The run's meta record, written when the lease (if given) is current.
CREATE FUNCTION cairn_put_meta(p_run text, p_status text, p_name text, p_created bigint,
    p_tags text[], p_json text, p_owner text, p_epoch bigint, p_now bigint,
    OUT ok boolean, OUT h_owner text, OUT h_epoch bigint, OUT h_expires bigint)
LANGUAGE plpgsql AS $$
BEGIN
    ok := true;
    IF p_owner IS NOT NULL THEN
        SELECT f.ok, f.h_owner, f.h_epoch, f.h_expires INTO ok, h_owner, h_epoch, h_expires
            FROM cairn_fence(p_run, p_owner, p_epoch, p_now) AS f;
        IF NOT ok THEN
            RETURN;
        END IF;
    END IF;
    INSERT INTO runs (run_id, status, name, created_at_ms, tags, meta_json)
        VALUES (p_run, p_status, p_name, p_created, p_tags, p_json)
        ON CONFLICT (run_id) DO UPDATE SET status = excluded.status, name = excluded.name,
        created_at_ms = excluded.created_at_ms, tags = excluded.tags, meta_json = excluded.meta_json;
END $$;

-- A run's journal, head, meta, lease and queue entry removed (the epochs row stays, so a
-- recreated run's leases still fence this incarnation's), when the lease (if given) is current.
CREATE FUNCTION cairn_delete(p_run text, p_owner text, p_epoch bigint, p_now bigint,
    OUT ok boolean, OUT h_owner text, OUT h_epoch bigint, OUT h_expires bigint)
LANGUAGE plpgsql AS $$
BEGIN
    ok := true;
    IF p_owner IS NOT NULL THEN
        SELECT f.ok, f.h_owner, f.h_epoch, f.h_expires INTO ok, h_owner, h_epoch, h_expires
            FROM cairn_fence(p_run, p_owner, p_epoch, p_now) AS f;
        IF NOT ok THEN
            RETURN;
        END IF;
    END IF;
    DELETE FROM journal WHERE run_id = p_run;
    DELETE FROM heads WHERE run_id = p_run;
    DELETE FROM runs WHERE run_id = p_run;
    DELETE FROM leases WHERE run_id = p_run;
    DELETE FROM queue WHERE run_id = p_run;
END $$;

-- A lease, granted when no live lease holds the run or the live one is the stale lease
-- named. The epochs row is locked first, so grants of one run are serialized.
CREATE FUNCTION cairn_grant(p_run text, p_owner text, p_expires bigint, p_now bigint,
    p_stale_owner text, p_stale_epoch bigint,
    OUT granted boolean, OUT l_owner text, OUT l_epoch bigint, OUT l_expires bigint)
LANGUAGE plpgsql AS $$
DECLARE
    high bigint;
BEGIN
    INSERT INTO epochs (run_id, high_water) VALUES (p_run, 0) ON CONFLICT (run_id) DO NOTHING;
    SELECT high_water INTO high FROM epochs WHERE run_id = p_run FOR UPDATE;
    SELECT owner, epoch, expires_at_ms INTO l_owner, l_epoch, l_expires FROM leases WHERE run_id = p_run;
    IF FOUND AND p_now < l_expires
        AND NOT (p_stale_owner IS NOT NULL AND l_owner = p_stale_owner AND l_epoch = p_stale_epoch) THEN
        granted := false;
        RETURN;
    END IF;
    high := high + 1;
    UPDATE epochs SET high_water = high WHERE run_id = p_run;
    INSERT INTO leases (run_id, owner, epoch, expires_at_ms) VALUES (p_run, p_owner, high, p_expires)
        ON CONFLICT (run_id) DO UPDATE SET owner = excluded.owner, epoch = excluded.epoch,
        expires_at_ms = excluded.expires_at_ms;
    granted := true;
    l_owner := p_owner;
    l_epoch := high;
    l_expires := p_expires;
END $$;
"#,
    // 2: a durable request to cancel a queued run, for the worker that drives it.
    r#"
ALTER TABLE queue ADD COLUMN cancel_requested_at_ms bigint;
"#,
    // 3: the append counters, added in the append's own statement. They cover the journal
    // only when they start with it: a store that already holds journal rows is marked
    // uncounted, and `/metrics` folds its journals.
    r#"
INSERT INTO counters (name, value)
    SELECT 'counted', CASE WHEN EXISTS (SELECT 1 FROM journal) THEN 0 ELSE 1 END
    ON CONFLICT (name) DO NOTHING;
CREATE FUNCTION cairn_append_counted(p_run text, p_seqs bigint[], p_jsons text[], p_owner text,
    p_epoch bigint, p_now bigint, p_calls bigint, p_spend bigint,
    OUT code integer, OUT h_owner text, OUT h_epoch bigint, OUT h_expires bigint, OUT tail bigint)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT a.code, a.h_owner, a.h_epoch, a.h_expires, a.tail INTO code, h_owner, h_epoch, h_expires, tail
        FROM cairn_append(p_run, p_seqs, p_jsons, p_owner, p_epoch, p_now) AS a;
    IF code = 0 AND (p_calls <> 0 OR p_spend <> 0) THEN
        INSERT INTO counters AS c (name, value) VALUES ('calls', p_calls), ('spend_nano_usd', p_spend)
            ON CONFLICT (name) DO UPDATE SET value = c.value + excluded.value;
    END IF;
END $$;
"#,
    // 4: runs by status as counters (`runs:STATUS`), kept by a trigger in the transaction of
    // every write of a run's row, so `/metrics` reads them instead of counting the runs. The
    // trigger comes first: it locks `runs` against writers until the backfill commits. Its
    // two rows are written in name order, so two status changes never wait on each other.
    r#"
CREATE FUNCTION cairn_count_runs() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    gone text;
    came text;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        gone := 'runs:' || OLD.status;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        came := 'runs:' || NEW.status;
    END IF;
    IF gone IS NOT DISTINCT FROM came THEN
        RETURN NULL;
    END IF;
    INSERT INTO counters AS c (name, value)
        SELECT d.name, d.delta FROM (VALUES (gone, -1::bigint), (came, 1::bigint)) AS d(name, delta)
        WHERE d.name IS NOT NULL ORDER BY d.name
        ON CONFLICT (name) DO UPDATE SET value = c.value + excluded.value;
    RETURN NULL;
END $$;
CREATE TRIGGER runs_counted AFTER INSERT OR DELETE OR UPDATE OF status ON runs
    FOR EACH ROW EXECUTE FUNCTION cairn_count_runs();
DELETE FROM counters WHERE name LIKE 'runs:%';
INSERT INTO counters (name, value) SELECT 'runs:' || status, count(*) FROM runs GROUP BY status;
"#,
];

/// What the store's schema is, as far as cairn is concerned.
pub(super) enum Identity {
    /// No such schema, or an empty one: a new store.
    Fresh,
    /// A cairn store at this version.
    Cairn(i32),
}

/// Tells a cairn store from anything else, reading only.
///
/// # Errors
/// [`Error::Config`] for a schema that holds someone else's tables, or a store from a newer
/// cairn.
pub(super) async fn identity(client: &impl GenericClient, schema: &str) -> Result<Identity> {
    let tables: Vec<String> = client
        .query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1",
            &[&schema],
        )
        .await
        .map_err(pg_err)?
        .iter()
        .map(|row| row.get(0))
        .collect();
    if tables.is_empty() {
        return Ok(Identity::Fresh);
    }
    let not_ours = |why: String| {
        Error::Config(format!(
            "postgres schema {schema:?} is not a cairn store ({why}); it was left untouched: name another \
             schema with ?schema=NAME in the store URL"
        ))
    };
    if !tables.iter().any(|t| t == "cairn_store") {
        let mut shown = tables.clone();
        shown.truncate(5);
        return Err(not_ours(format!("tables: {}", shown.join(", "))));
    }
    let row = client
        .query_opt(&format!("SELECT application, version FROM {}.cairn_store", quote(schema)), &[])
        .await
        .map_err(pg_err)?;
    let Some(row) = row else { return Err(not_ours("its cairn_store table is empty".into())) };
    let application: String = row.get(0);
    let version: i32 = row.get(1);
    if application != APPLICATION {
        return Err(not_ours(format!("it belongs to {application:?}")));
    }
    if version > VERSION {
        return Err(Error::Config(format!(
            "postgres store schema {schema:?} has version {version}, newer than this cairn's {VERSION}; use a \
             newer cairn"
        )));
    }
    Ok(Identity::Cairn(version))
}

/// Creates or migrates the store's schema, once, however many processes open it at once.
///
/// # Errors
/// As [`identity`]; the database's failure.
pub(super) async fn migrate(client: &mut tokio_postgres::Client, schema: &str) -> Result<()> {
    let tx = client.transaction().await.map_err(pg_err)?;
    // Every opener of this schema queues here; the lock ends with the transaction.
    tx.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &[&format!("cairn:{schema}")])
        .await
        .map_err(pg_err)?;
    let from = match identity(&tx, schema).await? {
        Identity::Fresh => 0,
        Identity::Cairn(version) => version,
    };
    if from < VERSION {
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {0}; SET LOCAL search_path TO {0}",
            quote(schema)
        ))
        .await
        .map_err(pg_err)?;
        for sql in MIGRATIONS.iter().skip(usize::try_from(from).unwrap_or(0)) {
            tx.batch_execute(sql).await.map_err(pg_err)?;
        }
        tx.execute(
            "INSERT INTO cairn_store (application, version) VALUES ($1, $2)
             ON CONFLICT (singleton) DO UPDATE SET version = excluded.version",
            &[&APPLICATION, &VERSION],
        )
        .await
        .map_err(pg_err)?;
    }
    tx.commit().await.map_err(pg_err)
}

/// A schema name quoted as an SQL identifier.
pub(super) fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    #[test]
    fn there_is_one_migration_per_version() {
        assert_eq!(super::MIGRATIONS.len(), super::VERSION as usize);
        assert_eq!(super::quote("a\"b"), "\"a\"\"b\"");
    }
}
