//! Driver failures and out-of-range numbers as store errors.

use crate::store::{Error, Result};

/// A driver failure as a store error: the server's own message and SQLSTATE when it sent one.
pub(super) fn pg_err(err: tokio_postgres::Error) -> Error {
    match err.as_db_error() {
        Some(db) => Error::Postgres(format!("{} ({})", db.message(), db.code().code())),
        None => {
            let source = std::error::Error::source(&err).map(|s| format!(": {s}")).unwrap_or_default();
            Error::Postgres(format!("{err}{source}"))
        }
    }
}

pub(super) fn pool_err(err: deadpool_postgres::PoolError) -> Error {
    match err {
        deadpool_postgres::PoolError::Backend(err) => pg_err(err),
        other => Error::Postgres(format!("no connection to the store: {other}")),
    }
}

pub(super) fn to_i64(value: u64) -> Result<i64> {
    i64::try_from(value).map_err(|_| Error::Config(format!("{value} exceeds the postgres store's range")))
}

pub(super) fn to_u64(value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| Error::Corrupt {
        what: "postgres store".into(),
        detail: format!("negative epoch or seq {value}"),
    })
}
