//! Opening a store from a URL (`sqlite:PATH`, `jsonl:DIR`, `memory`), as the CLI's
//! `--store` flag and config file name one.

use std::path::Path;
use std::sync::Arc;

use super::{
    DEFAULT_SQLITE_PATH, Durability, Error, JournalStore, JsonlStore, LeasableStore, MemoryStore, Result,
    RunQueue, SqliteOptions, SqliteStore, TranscriptStore,
};
#[cfg(feature = "postgres")]
use super::{PostgresOptions, PostgresStore};

/// One opened store, seen through each seam it implements. All three handles share the
/// same underlying object.
#[derive(Debug, Clone)]
pub struct OpenedStore {
    /// The journal and run meta.
    pub journal: Arc<dyn JournalStore>,
    /// The lease capability (every shipped store has one; `jsonl`'s are OS file locks).
    pub leases: Option<Arc<dyn LeasableStore>>,
    /// The blob store.
    pub transcripts: Arc<dyn TranscriptStore>,
    /// The run queue (SQLite and PostgreSQL keep one; `None` for the others and for a
    /// read-only open).
    pub queue: Option<Arc<dyn RunQueue>>,
}

/// Opens the store a URL names, with default options:
///
/// - `sqlite:PATH` (or `sqlite` for [`DEFAULT_SQLITE_PATH`]): a [`SqliteStore`];
/// - `jsonl:DIR`: a [`JsonlStore`] over the directory;
/// - `memory`: a [`MemoryStore`] (nothing survives the process);
/// - `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?schema=NAME&pool_size=N&...]` (or
///   `postgresql://`): a [`PostgresStore`] in the schema `NAME` (default `cairn`), with libpq's
///   other URL parameters passed on.
///
/// # Errors
/// [`Error::Config`] for a URL of another shape; the store's own errors when it cannot open.
pub fn open(url: &str) -> Result<OpenedStore> {
    let (scheme, rest) = match url.split_once(':') {
        Some((scheme, rest)) => (scheme, Some(rest)),
        None => (url, None),
    };
    match (scheme, rest) {
        ("memory", None | Some("")) => {
            let store = Arc::new(MemoryStore::new());
            Ok(OpenedStore {
                journal: store.clone(),
                leases: Some(store.clone()),
                transcripts: store,
                queue: None,
            })
        }
        ("postgres" | "postgresql", Some(_)) => open_postgres(url),
        ("sqlite", rest) => {
            let path = rest.filter(|path| !path.is_empty()).unwrap_or(DEFAULT_SQLITE_PATH);
            if path.starts_with("//") {
                return Err(bad_url(url, "write sqlite:PATH with no '//' (e.g. sqlite:/var/lib/cairn.db)"));
            }
            let store = Arc::new(SqliteStore::open(Path::new(path), SqliteOptions::new())?);
            Ok(OpenedStore {
                journal: store.clone(),
                leases: Some(store.clone()),
                transcripts: store.clone(),
                queue: Some(store),
            })
        }
        ("jsonl", Some(dir)) if !dir.is_empty() => {
            if dir.starts_with("//") {
                return Err(bad_url(url, "write jsonl:DIR with no '//' (e.g. jsonl:./runs)"));
            }
            let store = Arc::new(JsonlStore::open(Path::new(dir), Durability::Normal)?);
            Ok(OpenedStore {
                journal: store.clone(),
                leases: Some(store.clone()),
                transcripts: store,
                queue: None,
            })
        }
        ("jsonl", _) => Err(bad_url(url, "a jsonl store needs a directory: jsonl:DIR")),
        _ => Err(bad_url(url, "expected sqlite:PATH, sqlite, jsonl:DIR, memory or postgres://HOST/DATABASE")),
    }
}

/// Opens the store a URL names for reading only, as `cairn runs`, `inspect` and `replay` do:
/// nothing is created, migrated or changed, so a read never alters the store's files (a
/// SQLite file that is not a cairn store is refused and left as it was). `Ok(None)` when
/// nothing exists at the URL's location yet.
///
/// # Errors
/// As [`open`]; [`Error::Config`] for a file that is not a cairn store.
pub fn open_read_only(url: &str) -> Result<Option<OpenedStore>> {
    let (scheme, rest) = match url.split_once(':') {
        Some((scheme, rest)) => (scheme, Some(rest)),
        None => (url, None),
    };
    match (scheme, rest) {
        ("sqlite", rest) => {
            let path = rest.filter(|path| !path.is_empty()).unwrap_or(DEFAULT_SQLITE_PATH);
            if path.starts_with("//") {
                return Err(bad_url(url, "write sqlite:PATH with no '//' (e.g. sqlite:/var/lib/cairn.db)"));
            }
            let Some(store) = SqliteStore::open_read_only(Path::new(path), SqliteOptions::new())? else {
                return Ok(None);
            };
            let store = Arc::new(store);
            Ok(Some(OpenedStore { journal: store.clone(), leases: None, transcripts: store, queue: None }))
        }
        ("postgres" | "postgresql", Some(_)) => open_postgres_read_only(url),
        ("jsonl", Some(dir)) if !dir.is_empty() && !dir.starts_with("//") && !Path::new(dir).is_dir() => {
            Ok(None)
        }
        _ => open(url).map(Some),
    }
}

#[cfg(feature = "postgres")]
fn open_postgres(url: &str) -> Result<OpenedStore> {
    let store = Arc::new(PostgresStore::open(url, PostgresOptions::new())?);
    Ok(OpenedStore {
        journal: store.clone(),
        leases: Some(store.clone()),
        transcripts: store.clone(),
        queue: Some(store),
    })
}

#[cfg(feature = "postgres")]
fn open_postgres_read_only(url: &str) -> Result<Option<OpenedStore>> {
    let Some(store) = PostgresStore::open_read_only(url, PostgresOptions::new())? else {
        return Ok(None);
    };
    let store = Arc::new(store);
    Ok(Some(OpenedStore { journal: store.clone(), leases: None, transcripts: store, queue: None }))
}

#[cfg(not(feature = "postgres"))]
fn open_postgres(url: &str) -> Result<OpenedStore> {
    Err(bad_url(url, "this cairn was built without the `postgres` feature"))
}

#[cfg(not(feature = "postgres"))]
fn open_postgres_read_only(url: &str) -> Result<Option<OpenedStore>> {
    open_postgres(url).map(Some)
}

fn bad_url(url: &str, hint: &str) -> Error {
    Error::Config(format!("unsupported store url {url:?}: {hint}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(feature = "postgres"))]
    #[test]
    fn postgres_urls_need_the_postgres_feature() {
        for url in ["postgres://h/db", "postgresql://u@h:5432/db?schema=cairn"] {
            let Err(Error::Config(message)) = open(url) else { panic!("{url}: not a config error") };
            assert!(message.contains("`postgres` feature"), "{message}");
            assert!(matches!(open_read_only(url), Err(Error::Config(_))), "{url}");
        }
    }

    #[test]
    fn bad_urls_are_config_errors() {
        for url in [
            "",
            "postgres:x",
            "postgres://h/db?schema=No",
            "memory:x",
            "jsonl:",
            "jsonl",
            "sqlite://x.db",
            "SQLITE:x",
        ] {
            let err = open(url).err();
            assert!(matches!(err, Some(Error::Config(_))), "{url:?}: {err:?}");
        }
    }

    #[test]
    fn each_scheme_opens_its_store() {
        let dir = tempfile::tempdir().unwrap();
        let memory = open("memory").unwrap();
        assert!(memory.leases.is_some());
        let db = dir.path().join("nested/cairn.db");
        let sqlite = open(&format!("sqlite:{}", db.display())).unwrap();
        assert!(sqlite.leases.is_some() && db.exists());
        let jsonl = open(&format!("jsonl:{}", dir.path().join("runs").display())).unwrap();
        assert!(jsonl.leases.is_some() && dir.path().join("runs").is_dir());
    }
}
