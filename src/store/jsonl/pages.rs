//! Reading a journal file a page at a time: a reader that streams a journal (`cairn replay`,
//! a resumed run serving its journaled values, the service's journal route and event
//! stream) reads from where its last page ended instead of framing the file from its start
//! on every page.
//!
//! The store remembers, per run, a few line starts in the file, each with the seq of the record
//! that opens it: the line of the last page's last record (where the next page usually
//! starts) and one every [`STRIDE`] bytes (where a read of an earlier seq starts: a replay
//! reading values out of order). Seqs only grow through a journal file, so every record before
//! a line opened by seq `n` has a smaller seq, and a read of the records after seq `a` may
//! start at any remembered line opened by a seq at most `a + 1`. A remembered line is checked
//! before it is used (a newline before it, and its text opening with its seq); one that no
//! longer fits the file (another process deleted the run and wrote it again) is forgotten and
//! the read starts over from the file's start.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::scan::{Position, Visit, scan_from};
use crate::store::{Error, RawEntry, Result, RunId};

/// How far apart the remembered positions of a run are, in bytes: a read by seq frames at
/// most this much of the file before it reaches its record (plus one page's chunk).
const STRIDE: u64 = 32 * 1024;

/// How much of the file a page read takes at a time.
const PAGE_CHUNK: usize = 64 * 1024;

/// How many runs' positions the store keeps; past it, they are all forgotten (and relearned
/// as runs are read again).
const MAX_RUNS: usize = 1_024;

/// A remembered line start: its offset and the seq of the record that opens it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    offset: u64,
    first: u64,
}

impl Mark {
    /// Whether a read of the records after seq `after` may start here.
    fn serves(&self, after: u64) -> bool {
        self.first <= after.saturating_add(1)
    }

    /// Where a scan from this line starts.
    fn position(&self) -> Position {
        Position { offset: self.offset, tail: self.first.checked_sub(1) }
    }
}

/// The lines the store remembers in its runs' journal files.
#[derive(Default)]
pub(super) struct Marks {
    runs: Mutex<HashMap<RunId, RunMarks>>,
}

/// One run's remembered lines.
#[derive(Default)]
struct RunMarks {
    /// One line every [`STRIDE`] bytes or more, in file order.
    stride: Vec<Mark>,
    /// The line of the last page's last record.
    cursor: Option<Mark>,
}

impl RunMarks {
    /// The remembered line furthest into the file from which the records after `after` can
    /// be read.
    fn start(&self, after: u64) -> Option<Mark> {
        let strided = self.stride.partition_point(|mark| mark.serves(after));
        let mark = strided.checked_sub(1).map(|i| self.stride[i]);
        match (self.cursor, mark) {
            (Some(cursor), Some(mark)) if cursor.serves(after) && cursor.offset > mark.offset => Some(cursor),
            (Some(cursor), None) if cursor.serves(after) => Some(cursor),
            _ => mark,
        }
    }

    /// Remembers lines a read passed.
    fn learn(&mut self, passed: &[Mark], cursor: Option<Mark>) {
        for &mark in passed {
            let last = self.stride.last().map_or(0, |last| last.offset);
            if mark.offset >= last + STRIDE {
                self.stride.push(mark);
            }
        }
        if cursor.is_some() {
            self.cursor = cursor;
        }
    }
}

impl Marks {
    /// Forgets a run's lines (its journal was deleted).
    pub(super) fn forget(&self, run: &RunId) {
        lock(&self.runs).remove(run);
    }

    fn start(&self, run: &RunId, after: u64) -> Option<Mark> {
        lock(&self.runs).get(run).and_then(|marks| marks.start(after))
    }

    fn learn(&self, run: &RunId, passed: &[Mark], cursor: Option<Mark>) {
        let mut runs = lock(&self.runs);
        if runs.len() >= MAX_RUNS && !runs.contains_key(run) {
            runs.clear();
        }
        runs.entry(run.clone()).or_default().learn(passed, cursor);
    }
}

/// At most `limit` of the run's entries after seq `after`, read from the journal at `path`
/// without repairing anything (a torn tail is another process's append in progress, or the
/// next writer's to repair): what [`JournalStore::load_page`](crate::store::JournalStore::load_page)
/// returns.
pub(super) fn read_page(
    path: &Path,
    run: &RunId,
    marks: &Marks,
    after: u64,
    limit: usize,
) -> Result<Vec<RawEntry>> {
    if limit == 0 || after == u64::MAX {
        return Ok(Vec::new());
    }
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err.into()),
    };
    if let Some(mark) = marks.start(run, after) {
        if opens(&mut file, mark)? {
            let read = read_from(&mut file, run, mark.position(), after, limit)?;
            marks.learn(run, &read.passed, read.cursor);
            return Ok(read.page);
        }
        // The line is not where it was: the run was written again.
        marks.forget(run);
    }
    let read = read_from(&mut file, run, Position::START, after, limit)?;
    marks.learn(run, &read.passed, read.cursor);
    Ok(read.page)
}

/// What one read found.
struct PageRead {
    page: Vec<RawEntry>,
    /// Lines it passed, [`STRIDE`] bytes or more apart.
    passed: Vec<Mark>,
    /// The line of the page's last record.
    cursor: Option<Mark>,
}

/// Whether `mark` is a line of the file: a newline before it, and its text opening with its
/// seq as the kernel writes it. Leaves the file positioned at the line.
fn opens(file: &mut File, mark: Mark) -> Result<bool> {
    let expected = match mark.offset.checked_sub(1) {
        Some(before) => {
            file.seek(SeekFrom::Start(before))?;
            format!("\n{{\"seq\":{}", mark.first)
        }
        None => {
            file.seek(SeekFrom::Start(0))?;
            format!("{{\"seq\":{}", mark.first)
        }
    };
    let mut found = vec![0u8; expected.len() + 1];
    let mut read = 0;
    while read < found.len() {
        match file.read(&mut found[read..])? {
            0 => break,
            n => read += n,
        }
    }
    let fits = read == found.len()
        && found.starts_with(expected.as_bytes())
        && matches!(found[expected.len()], b',' | b'}');
    file.seek(SeekFrom::Start(mark.offset))?;
    Ok(fits)
}

/// Reads a page starting at `from`, where the file is positioned.
fn read_from(file: &mut File, run: &RunId, from: Position, after: u64, limit: usize) -> Result<PageRead> {
    if from.offset == 0 {
        file.seek(SeekFrom::Start(0))?;
    }
    let mut page = Vec::new();
    let mut passed = Vec::new();
    let mut cursor = None;
    // The last line a record was seen on, and the last line remembered.
    let (mut line_at, mut last_passed) = (None, from.offset);
    let mut visit = |seq: u64, text: &str, line: Position| -> Result<Visit> {
        let opens_line = line_at != Some(line.offset);
        line_at = Some(line.offset);
        if opens_line && line.offset >= last_passed + STRIDE {
            passed.push(Mark { offset: line.offset, first: seq });
            last_passed = line.offset;
        }
        if opens_line {
            cursor = Some(Mark { offset: line.offset, first: seq });
        }
        if seq <= after {
            return Ok(Visit::Continue);
        }
        page.push(RawEntry::new(seq, text).map_err(|err| Error::Corrupt {
            what: format!("journal of run {run}"),
            detail: err.to_string(),
        })?);
        Ok(if page.len() >= limit { Visit::Stop } else { Visit::Continue })
    };
    scan_from(run, file, PAGE_CHUNK, from, &mut visit)?;
    // Glued records past the limit (a line that lost its newlines) are read with their line.
    page.truncate(limit);
    Ok(PageRead { page, passed, cursor })
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Remembered lines are checked before use: a poisoned map is still safe to read.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
