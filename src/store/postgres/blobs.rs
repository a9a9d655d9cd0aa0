//! The PostgreSQL store's blobs: one row per blob in `blobs`, keyed by its ref.

use super::{PostgresStore, pg_err, pool_err, prepared};
use crate::store::common;
use crate::store::{Result, RunId, TranscriptStore};

impl TranscriptStore for PostgresStore {
    fn put_new(&self, blob_ref: &str, blob: &[u8]) -> Result<bool> {
        self.refuse_write()?;
        let run = common::parse_blob_ref(blob_ref)?.run;
        let (blob_ref, blob) = (blob_ref.to_owned(), blob.to_vec());
        self.block(move |pool, _| async move {
            let (client, stmt) = prepared(
                &pool,
                "INSERT INTO blobs (ref, run_id, data) VALUES ($1, $2, $3) ON CONFLICT (ref) DO NOTHING",
            )
            .await?;
            let stored = client.execute(&stmt, &[&blob_ref, &run.as_str(), &blob]).await.map_err(pg_err)?;
            Ok(stored == 1)
        })
    }

    fn put(&self, blob_ref: &str, blob: &[u8]) -> Result<()> {
        self.refuse_write()?;
        let run = common::parse_blob_ref(blob_ref)?.run;
        let (blob_ref, blob) = (blob_ref.to_owned(), blob.to_vec());
        self.block(move |pool, _| async move {
            let (client, stmt) = prepared(
                &pool,
                "INSERT INTO blobs (ref, run_id, data) VALUES ($1, $2, $3)
                     ON CONFLICT (ref) DO UPDATE SET data = excluded.data",
            )
            .await?;
            client.execute(&stmt, &[&blob_ref, &run.as_str(), &blob]).await.map_err(pg_err)?;
            Ok(())
        })
    }

    fn get(&self, blob_ref: &str) -> Result<Option<Vec<u8>>> {
        common::parse_blob_ref(blob_ref)?;
        let blob_ref = blob_ref.to_owned();
        self.block(move |pool, _| async move {
            let client = pool.get().await.map_err(pool_err)?;
            let stmt =
                client.prepare_cached("SELECT data FROM blobs WHERE ref = $1").await.map_err(pg_err)?;
            let row = client.query_opt(&stmt, &[&blob_ref]).await.map_err(pg_err)?;
            Ok(row.map(|row| row.get(0)))
        })
    }

    fn list(&self, run: &RunId) -> Result<Vec<String>> {
        let run = run.clone();
        self.block(move |pool, _| async move {
            let (client, stmt) =
                prepared(&pool, "SELECT ref FROM blobs WHERE run_id = $1 ORDER BY ref").await?;
            let rows = client.query(&stmt, &[&run.as_str()]).await.map_err(pg_err)?;
            Ok(rows.iter().map(|row| row.get(0)).collect())
        })
    }

    fn delete(&self, blob_ref: &str) -> Result<()> {
        self.refuse_write()?;
        common::parse_blob_ref(blob_ref)?;
        let blob_ref = blob_ref.to_owned();
        self.block(move |pool, _| async move {
            let (client, stmt) = prepared(&pool, "DELETE FROM blobs WHERE ref = $1").await?;
            client.execute(&stmt, &[&blob_ref]).await.map_err(pg_err)?;
            Ok(())
        })
    }
}
