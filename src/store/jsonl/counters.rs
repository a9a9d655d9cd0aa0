//! The JSONL store's counters, in sidecar files beside the journals (names start with `.`,
//! which no run id does):
//!
//! - `.counters.log`, started at the store's first append: one line `<calls> <spend nano-USD>`
//!   per tallied append, written after the batch's journal lines in one `O_APPEND` write, so
//!   appenders in several processes never interleave. It is the record; a crash between the journal write and this one loses that
//!   one batch's tally, as a crash of `Durability::Normal` can lose an unsynced append.
//! - `.counters.json`: the log's fold up to a byte offset, a cache. Read, the fold is brought
//!   up to the log's end (only the new lines are read) and written back; missing, unreadable
//!   or past the log's end (stale), it is rebuilt from the whole log.
//! - `.counters.uncounted`: present when the directory held journals before it had a log (a
//!   store written by an older cairn): the counters cannot cover them, and `/metrics` folds.
//!
//! Runs by status come from the meta records, as a listing reads them.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::money::Money;
use crate::store::{Error, Result, Tally};

/// The tally log.
pub(super) const LOG: &str = ".counters.log";
/// The cached fold of the log.
const FOLD: &str = ".counters.json";
/// The mark of a directory whose journals predate its log.
const UNCOUNTED: &str = ".counters.uncounted";

/// The log's fold up to `log_len` bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Fold {
    log_len: u64,
    calls: u64,
    spend_nano_usd: i64,
}

/// Starts the log of a directory that has none, before the store's first append: counting
/// from now when it holds no journal yet, else marked uncounted first. Safe against another
/// process starting it at once.
pub(super) fn start(dir: &Path) -> Result<()> {
    let log = dir.join(LOG);
    if log.exists() {
        return Ok(());
    }
    if has_journals(dir)? {
        File::create(dir.join(UNCOUNTED))?;
    }
    match OpenOptions::new().append(true).create_new(true).open(&log) {
        Err(err) if err.kind() != io::ErrorKind::AlreadyExists => Err(err.into()),
        _ => Ok(()),
    }
}

/// Whether the directory holds a journal file.
fn has_journals(dir: &Path) -> Result<bool> {
    for item in fs::read_dir(dir)? {
        if item?.file_name().to_str().is_some_and(|name| name.ends_with(".jsonl")) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Opens the log for appending.
pub(super) fn open_log(dir: &Path) -> Result<File> {
    Ok(OpenOptions::new().append(true).create(true).open(dir.join(LOG))?)
}

/// Appends one batch's tally to the log in one write (nothing for an empty tally).
pub(super) fn record(log: &mut File, tally: Tally, sync: bool) -> Result<()> {
    if tally == Tally::default() {
        return Ok(());
    }
    log.write_all(format!("{} {}\n", tally.calls, tally.spend.nano_usd()).as_bytes())?;
    if sync {
        log.sync_data()?;
    }
    Ok(())
}

/// The appended tallies, `None` for an uncounted directory. Brings the cached fold up to the
/// log's end and writes it back through `replace` (an atomic file replacement).
pub(super) fn read(dir: &Path, replace: impl FnOnce(&Path, &[u8]) -> Result<()>) -> Result<Option<Tally>> {
    if dir.join(UNCOUNTED).exists() {
        return Ok(None);
    }
    let mut log = match File::open(dir.join(LOG)) {
        Ok(log) => log,
        // Not started: nothing was appended here yet, unless an older cairn did.
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            return Ok(if has_journals(dir)? { None } else { Some(Tally::default()) });
        }
        Err(err) => return Err(err.into()),
    };
    let len = log.metadata()?.len();
    let cached = fs::read(dir.join(FOLD)).ok().and_then(|bytes| serde_json::from_slice::<Fold>(&bytes).ok());
    let start = cached.filter(|fold| fold.log_len <= len).unwrap_or_default();
    let mut fold = start;
    log.seek(SeekFrom::Start(start.log_len))?;
    let mut rest = Vec::new();
    log.take(len - start.log_len).read_to_end(&mut rest)?;
    // Only whole lines: a line being written right now is folded next time.
    let whole = rest.iter().rposition(|b| *b == b'\n').map_or(0, |at| at + 1);
    for line in rest[..whole].split(|b| *b == b'\n').filter(|line| !line.is_empty()) {
        let (calls, spend) = parse_line(line).ok_or_else(|| Error::Corrupt {
            what: format!("the counters log {}", dir.join(LOG).display()),
            detail: format!("line {:?} is not `<calls> <spend>`", String::from_utf8_lossy(line)),
        })?;
        fold.calls = fold.calls.saturating_add(calls);
        fold.spend_nano_usd = fold.spend_nano_usd.saturating_add(spend);
    }
    fold.log_len = start.log_len + whole as u64;
    if cached != Some(fold) {
        let bytes = serde_json::to_vec(&fold)
            .map_err(|err| Error::Corrupt { what: "the counters fold".into(), detail: err.to_string() })?;
        replace(&dir.join(FOLD), &bytes)?;
    }
    Ok(Some(Tally { calls: fold.calls, spend: Money::from_nano_usd(fold.spend_nano_usd) }))
}

fn parse_line(line: &[u8]) -> Option<(u64, i64)> {
    let text = std::str::from_utf8(line).ok()?;
    let (calls, spend) = text.split_once(' ')?;
    Some((calls.parse().ok()?, spend.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replace(path: &Path, bytes: &[u8]) -> Result<()> {
        Ok(fs::write(path, bytes)?)
    }

    #[test]
    fn the_fold_is_rebuilt_when_missing_or_stale_and_skips_a_partial_line() {
        let dir = tempfile::tempdir().unwrap();
        start(dir.path()).unwrap();
        let mut log = open_log(dir.path()).unwrap();
        let tally = |calls, nanos| Tally { calls, spend: Money::from_nano_usd(nanos) };
        record(&mut log, tally(2, 30), false).unwrap();
        record(&mut log, tally(0, 0), false).unwrap();
        record(&mut log, tally(1, 5), false).unwrap();
        assert_eq!(read(dir.path(), replace).unwrap(), Some(tally(3, 35)));
        // Cached: only what follows is read.
        record(&mut log, tally(4, 1), false).unwrap();
        assert_eq!(read(dir.path(), replace).unwrap(), Some(tally(7, 36)));
        // Stale (past the log's end): rebuilt from the whole log.
        fs::write(dir.path().join(FOLD), br#"{"log_len":9999,"calls":1,"spend_nano_usd":1}"#).unwrap();
        assert_eq!(read(dir.path(), replace).unwrap(), Some(tally(7, 36)));
        // Missing: rebuilt too.
        fs::remove_file(dir.path().join(FOLD)).unwrap();
        assert_eq!(read(dir.path(), replace).unwrap(), Some(tally(7, 36)));
        // A line being written is left for the next read.
        log.write_all(b"5 ").unwrap();
        assert_eq!(read(dir.path(), replace).unwrap(), Some(tally(7, 36)));
        log.write_all(b"5\n").unwrap();
        assert_eq!(read(dir.path(), replace).unwrap(), Some(tally(12, 41)));
    }

    #[test]
    fn a_directory_with_older_journals_is_uncounted() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("old.jsonl"), b"{\"seq\":1}\n").unwrap();
        start(dir.path()).unwrap();
        assert_eq!(read(dir.path(), replace).unwrap(), None);
        // Not started yet: counted (empty) without journals, uncounted with older ones.
        let fresh = tempfile::tempdir().unwrap();
        assert_eq!(read(fresh.path(), replace).unwrap(), Some(Tally::default()));
        fs::write(fresh.path().join("old.jsonl"), b"{\"seq\":1}\n").unwrap();
        assert_eq!(read(fresh.path(), replace).unwrap(), None);
        let started = tempfile::tempdir().unwrap();
        start(started.path()).unwrap();
        assert_eq!(read(started.path(), replace).unwrap(), Some(Tally::default()));
    }
}
