//! The store's [`Error`] and [`Result`], and how a store failure reaches the engine as a
//! `cairn::Error` (a full disk or a read-only file named in words a person acts on).

use super::run_id::RunId;

/// A storage failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An append's seq is not strictly after the stored tail: another writer raced this
    /// journal. Nothing of the batch became visible.
    #[error("journal order violation in run {run}: seq {seq} is not after the stored tail {tail}")]
    OrderViolation {
        /// The run.
        run: RunId,
        /// The offending seq.
        seq: u64,
        /// The stored tail seq.
        tail: u64,
    },
    /// A batch's own seqs are not strictly increasing.
    #[error("batch for run {run} is not in strictly increasing seq order")]
    UnorderedBatch {
        /// The run.
        run: RunId,
    },
    /// The run is leased by someone else, or the given lease is stale, foreign or expired.
    /// Retryable once the holder releases or its ttl elapses.
    #[error("run {run} is leased by another holder: {detail}")]
    LeaseHeld {
        /// The run.
        run: RunId,
        /// Who holds it, or why the given lease is not current.
        detail: String,
    },
    /// Stored data could not be read back (a corrupt line, an unreadable meta record).
    #[error("corrupt store data for {what}: {detail}")]
    Corrupt {
        /// What was being read.
        what: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A bad store URL or option.
    #[error("invalid store configuration: {0}")]
    Config(String),
    /// The file system failed.
    #[error("store i/o failed: {0}")]
    Io(#[from] std::io::Error),
    /// SQLite failed.
    #[error("sqlite failed: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL failed (or could not be reached).
    #[error("postgres failed: {0}")]
    Postgres(String),
}

impl From<Error> for crate::error::Error {
    fn from(err: Error) -> crate::error::Error {
        use crate::error::ErrorCode;
        if let Some(cause) = io_cause(&err) {
            return crate::error::Error::new(
                ErrorCode::StoreIo,
                format!("the store cannot be written: {cause} ({err})"),
            );
        }
        let code = match err {
            Error::Config(_) => ErrorCode::Config,
            Error::LeaseHeld { .. } => ErrorCode::RunBusy,
            _ => ErrorCode::Internal,
        };
        crate::error::Error::new(code, err.to_string())
    }
}

/// What a failure of the machine under a store was, in words a person acts on: no space, a
/// file-size limit, a read-only file or file system, an I/O error. `None` for every other
/// failure (order, lease, corruption, configuration).
fn io_cause(err: &Error) -> Option<String> {
    use std::io::ErrorKind;
    match err {
        Error::Io(io) => Some(match io.kind() {
            ErrorKind::StorageFull | ErrorKind::QuotaExceeded => "no space left on the device".into(),
            ErrorKind::FileTooLarge => file_size_limit().unwrap_or_else(|| "a file grew too large".into()),
            ErrorKind::ReadOnlyFilesystem => "the file system is read-only".into(),
            ErrorKind::PermissionDenied => "the store's files are not writable (permission denied)".into(),
            _ => format!("an I/O error: {io}"),
        }),
        Error::Sqlite(rusqlite::Error::SqliteFailure(failure, _)) => match failure.code {
            rusqlite::ErrorCode::DiskFull => Some("no space left on the device".into()),
            rusqlite::ErrorCode::ReadOnly => Some("the database file or its directory is read-only".into()),
            rusqlite::ErrorCode::CannotOpen => Some("the database file cannot be opened".into()),
            rusqlite::ErrorCode::SystemIoFailure => Some(
                file_size_limit()
                    .unwrap_or_else(|| "a disk I/O error (the disk may be full or failing)".into()),
            ),
            _ => None,
        },
        _ => None,
    }
}

/// The process's file-size limit (`ulimit -f`), when one is set: the likeliest cause of a
/// write that fails with "file too large" or a bare I/O error while space is left.
fn file_size_limit() -> Option<String> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max file size"))?;
    let soft = line.split_whitespace().nth(3)?;
    let bytes: u64 = soft.parse().ok()?;
    Some(format!("file too large: the process's file-size limit (ulimit -f) of {bytes} bytes was reached"))
}

/// The result of a store operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;
