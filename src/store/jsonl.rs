//! The JSONL file store: one `<run>.jsonl` journal (one entry's JSON per line) and one
//! `<run>.meta.json` record per run under a directory, blobs under `<run>.blobs/`.
//!
//! The journal doubles as a human-readable log (`tail -f`, `grep`, `diff`), so lines are the
//! entries' exact bytes and nothing else. Appends go through one open file per run, with
//! the run's tail seq cached beside it, and each append's lines leave in one `write` call
//! before `append` returns (fsync'd too under [`Durability::Full`]). A failed write is
//! truncated back off the file, so a batch is all or nothing to readers.
//!
//! A crash can still cut the file mid-record. [`JsonlStore`] repairs that on the next read
//! of the run: a torn last line is truncated off (complete records glued in front of the
//! fragment are kept), a last line that is complete but lost its newline is served and
//! terminated by the next append, and records glued onto one line anywhere are split apart.
//! A damaged line anywhere but the end is refused as [`Error::Corrupt`]. Loading reads the
//! file in chunks and frames each line as the kernel writes it (`{"seq":N,` then one object
//! whose strings and brackets close at the newline) without parsing its payload, which
//! keeps a load close to the speed of reading the file; decoding is where a payload that
//! frames but is not JSON gets reported. Every other line, and the tail, is parsed
//! exactly. After a kill in
//! the middle of a multi-entry append, a prefix of that unacknowledged batch can survive
//! (at entry granularity), as if the crash had come between two single appends.
//!
//! One driver per run: the store grants leases as exclusive OS file locks (`<run>.lock`,
//! `flock`), held until released or until the holder exits, whatever the ttl; the lock file
//! keeps the run's epoch high-water mark, so fencing works as in the other stores. Only a
//! writer (an appender, or the lease holder) repairs a torn tail: a reader that holds no
//! lease serves the sound prefix and leaves the file as it is, since the tail may be another
//! process's append in progress. Run meta is replaced atomically (temp file, fsync, rename); blobs likewise, fsync'd only
//! under [`Durability::Full`].

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::Deserialize;

use super::common::{self, HeldLease};
use super::{
    Durability, Error, JournalStore, LeasableStore, Lease, RawEntry, Result, RunFilter, RunId, RunMeta,
    TranscriptStore,
};

/// How many journal files stay open at once; past it, idle runs' files are closed (and
/// rescanned when next appended to), so a long-lived process cannot run out of descriptors.
const MAX_OPEN_JOURNALS: usize = 64;

/// How many runs' slots the store remembers before it forgets the idle ones.
const MAX_SLOTS: usize = 1_024;

/// A [`JournalStore`] and [`TranscriptStore`] over a directory of JSONL files.
pub struct JsonlStore {
    dir: PathBuf,
    durability: Durability,
    /// One slot per run touched, each serializing that run's operations; the outer lock is
    /// held only to find a slot.
    slots: Mutex<HashMap<RunId, Arc<Mutex<RunSlot>>>>,
    /// How many slots hold an open journal file.
    open_journals: AtomicUsize,
    /// Makes temp file names unique within the process.
    temp_counter: AtomicU64,
    /// The leases this store holds: per run, the locked file and the lease it backs.
    locks: Mutex<HashMap<RunId, HeldLock>>,
}

/// A run's lease as this store holds it: the open, exclusively locked `<run>.lock` file.
struct HeldLock {
    /// Unlocked when closed (released, or the process ends).
    _file: File,
    lease: Lease,
}

/// What a lock file holds: the last holder and the run's epoch high-water mark.
#[derive(Debug, Default, serde::Serialize, Deserialize)]
struct LockRecord {
    #[serde(default)]
    owner: String,
    #[serde(default)]
    epoch: u64,
}

/// The state of one run's journal file.
#[derive(Default)]
struct RunSlot {
    /// The open journal, when the run has been appended to and not evicted since.
    journal: Option<RunFile>,
    /// The batch being written, kept to reuse its allocation.
    buffer: Vec<u8>,
}

/// An open journal file and what appending to it needs to know.
struct RunFile {
    /// Opened for append (and read, to scan it on open).
    file: File,
    /// The file's length after the last acknowledged append: where a failed write is cut.
    len: u64,
    /// The last stored seq, `None` while the journal is empty.
    tail: Option<u64>,
    /// Whether the last record lacks its newline (a crash cut exactly after its JSON), so
    /// the next append must terminate it before writing.
    unterminated: bool,
}

/// The one field a store reads from an entry; serde skips the rest without building it.
#[derive(Deserialize)]
struct SeqField {
    seq: u64,
}

/// What a scan of a journal file found.
struct Scan {
    entries: Vec<RawEntry>,
    /// How many leading bytes are sound; a torn tail lies beyond.
    keep_len: u64,
    /// Whether the last kept record lacks its newline.
    unterminated: bool,
}

impl JsonlStore {
    /// A store over `dir`, created if missing.
    ///
    /// # Errors
    /// [`Error::Io`] when the directory cannot be created.
    pub fn open(dir: &Path, durability: Durability) -> Result<JsonlStore> {
        fs::create_dir_all(dir)?;
        Ok(JsonlStore {
            dir: dir.to_path_buf(),
            durability,
            slots: Mutex::new(HashMap::new()),
            open_journals: AtomicUsize::new(0),
            temp_counter: AtomicU64::new(0),
            locks: Mutex::new(HashMap::new()),
        })
    }

    /// The directory the store keeps its files in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn journal_path(&self, run: &RunId) -> PathBuf {
        self.dir.join(format!("{run}.jsonl"))
    }

    fn meta_path(&self, run: &RunId) -> PathBuf {
        self.dir.join(format!("{run}.meta.json"))
    }

    fn lock_path(&self, run: &RunId) -> PathBuf {
        self.dir.join(format!("{run}.lock"))
    }

    /// Refuses a lease this store does not hold as the run's current one.
    fn check_held(&self, run: &RunId, given: &Lease) -> Result<()> {
        let locks = lock(&self.locks);
        let held = locks.get(run).map(|held| HeldLease {
            owner: held.lease.owner.clone(),
            epoch: held.lease.epoch,
            expires_at_ms: i64::MAX,
        });
        common::check_lease(run, given, held.as_ref(), 0)
    }

    /// Whether this store holds the run's lease.
    fn holds(&self, run: &RunId) -> bool {
        lock(&self.locks).contains_key(run)
    }

    /// Reads the run's journal without repairing or keeping anything: for a reader that is
    /// not the run's writer.
    fn read_journal(&self, run: &RunId) -> Result<Vec<RawEntry>> {
        let mut file = match File::open(self.journal_path(run)) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(err.into()),
        };
        Ok(scan(run, &mut file)?.entries)
    }

    fn blob_dir(&self, run: &RunId) -> PathBuf {
        self.dir.join(format!("{run}.blobs"))
    }

    /// A short temp file name no run file or blob can have (they never start with `.`).
    fn temp_name(&self) -> String {
        let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
        format!(".tmp.{}.{n}", std::process::id())
    }

    fn slot(&self, run: &RunId) -> Arc<Mutex<RunSlot>> {
        let mut slots = lock(&self.slots);
        if slots.len() >= MAX_SLOTS && !slots.contains_key(run) {
            self.prune(&mut slots);
        }
        Arc::clone(slots.entry(run.clone()).or_default())
    }

    /// Scans the run's journal, repairing a torn tail, and keeps the file open for the
    /// appends that usually follow (a resume loads, then appends). `None` when the run has
    /// no journal and `create` is off.
    fn scan_journal(&self, run: &RunId, slot: &mut RunSlot, create: bool) -> Result<Option<Vec<RawEntry>>> {
        if slot.journal.is_none() {
            let path = self.journal_path(run);
            let file = match OpenOptions::new().read(true).append(true).create(create).open(&path) {
                Ok(file) => file,
                Err(err) if err.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
                Err(err) => return Err(err.into()),
            };
            if create && self.durability == Durability::Full {
                sync_dir(&self.dir)?; // The file may be new; make its name durable.
            }
            slot.journal = Some(RunFile { file, len: 0, tail: None, unterminated: false });
            if self.open_journals.fetch_add(1, Ordering::Relaxed) + 1 > MAX_OPEN_JOURNALS {
                self.prune(&mut lock(&self.slots));
            }
        }
        let Some(journal) = slot.journal.as_mut() else {
            return Err(Error::Io(io::Error::other("journal file is not open")));
        };
        let scanned = (|| -> Result<Scan> {
            // Appends ignore the read position (the file is in append mode); reads start over.
            journal.file.seek(SeekFrom::Start(0))?;
            let scanned = scan(run, &mut journal.file)?;
            if scanned.keep_len < journal.file.metadata()?.len() {
                // Repair now, so that what this scan served is exactly what stays on disk.
                journal.file.set_len(scanned.keep_len)?;
                journal.file.sync_data()?;
            }
            Ok(scanned)
        })();
        match scanned {
            Ok(scanned) => {
                journal.len = scanned.keep_len;
                journal.tail = scanned.entries.last().map(RawEntry::seq);
                journal.unterminated = scanned.unterminated;
                Ok(Some(scanned.entries))
            }
            Err(err) => {
                // What the open file's state says is unknown now: rescan on next use.
                self.close_journal(slot);
                Err(err)
            }
        }
    }

    /// Drops the slots nobody holds (closing their files), so neither open descriptors nor
    /// the slot map grow with every run a long-lived process has touched. A slot is only
    /// handed out under the map lock, so one the map alone holds cannot be in use.
    fn prune(&self, slots: &mut HashMap<RunId, Arc<Mutex<RunSlot>>>) {
        slots.retain(|_, slot| {
            if Arc::strong_count(slot) > 1 {
                return true;
            }
            if let Ok(mut idle) = slot.try_lock() {
                self.close_journal(&mut idle);
            }
            false
        });
    }

    fn close_journal(&self, slot: &mut RunSlot) {
        if slot.journal.take().is_some() {
            self.open_journals.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn write_batch(&self, slot: &mut RunSlot, entries: &[RawEntry]) -> Result<()> {
        let RunSlot { journal, buffer } = slot;
        let Some(journal) = journal.as_mut() else {
            return Err(Error::Io(io::Error::other("journal file is not open")));
        };
        buffer.clear();
        if journal.unterminated {
            buffer.push(b'\n');
        }
        for entry in entries {
            buffer.extend_from_slice(entry.json().as_bytes());
            buffer.push(b'\n');
        }
        let written = journal.file.write_all(buffer).and_then(|()| match self.durability {
            Durability::Full => journal.file.sync_data(),
            Durability::Normal => Ok(()),
        });
        if let Err(err) = written {
            // Cut the partial batch back off. If even that fails, forget the open file: the
            // next use rescans it and repairs whatever the failed write left.
            if journal.file.set_len(journal.len).is_err() {
                self.close_journal(slot);
            }
            return Err(err.into());
        }
        journal.len += buffer.len() as u64;
        journal.unterminated = false;
        journal.tail = entries.last().map(RawEntry::seq);
        Ok(())
    }

    /// Writes `bytes` to `path` atomically: a temp file beside it, fsync'd when asked, then
    /// renamed over it.
    fn replace_file(&self, dir: &Path, path: &Path, bytes: &[u8], sync: bool) -> Result<()> {
        let temp = dir.join(self.temp_name());
        let written = (|| -> io::Result<()> {
            let mut file = File::create(&temp)?;
            file.write_all(bytes)?;
            if sync {
                file.sync_all()?;
            }
            fs::rename(&temp, path)
        })();
        if let Err(err) = written {
            let _ = fs::remove_file(&temp);
            return Err(err.into());
        }
        if self.durability == Durability::Full {
            sync_dir(dir)?;
        }
        Ok(())
    }

    fn read_meta(&self, run: &RunId) -> Result<Option<RunMeta>> {
        let path = self.meta_path(run);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(err.into()),
        };
        let meta = serde_json::from_slice(&bytes)
            .map_err(|err| Error::Corrupt { what: path.display().to_string(), detail: err.to_string() })?;
        Ok(Some(meta))
    }
}

impl fmt::Debug for JsonlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonlStore")
            .field("dir", &self.dir)
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

impl JournalStore for JsonlStore {
    fn append(&self, run: &RunId, entries: &[RawEntry], lease: Option<&Lease>) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        if let Some(lease) = lease {
            self.check_held(run, lease)?;
        }
        common::check_batch(run, entries)?;
        // The file is the only record of seq, so an entry whose text disagrees with its seq
        // would load back as a different entry: refuse it before it is written.
        for entry in entries {
            let text_seq = text_seq(entry.json());
            if text_seq != Some(entry.seq()) {
                return Err(Error::Corrupt {
                    what: format!("entry {} appended to run {run}", entry.seq()),
                    detail: match text_seq {
                        Some(seq) => format!("its text says seq {seq}"),
                        None => "its text is not a JSON object with a numeric seq".into(),
                    },
                });
            }
        }
        let slot = self.slot(run);
        let mut slot = lock(&slot);
        if slot.journal.is_none() {
            self.scan_journal(run, &mut slot, true)?;
        }
        let tail = slot.journal.as_ref().and_then(|journal| journal.tail);
        common::check_tail(run, tail, entries)?;
        self.write_batch(&mut slot, entries)
    }

    fn load(&self, run: &RunId) -> Result<Vec<RawEntry>> {
        let slot = self.slot(run);
        let mut slot = lock(&slot);
        // Only the run's writer repairs a torn tail; anyone else may be looking at another
        // process's append in progress.
        if slot.journal.is_none() && !self.holds(run) {
            return self.read_journal(run);
        }
        Ok(self.scan_journal(run, &mut slot, false)?.unwrap_or_default())
    }

    fn put_meta(&self, meta: &RunMeta, lease: Option<&Lease>) -> Result<()> {
        if let Some(lease) = lease {
            self.check_held(&meta.run_id, lease)?;
        }
        let bytes = serde_json::to_vec(meta).map_err(|err| Error::Corrupt {
            what: format!("meta of run {}", meta.run_id),
            detail: err.to_string(),
        })?;
        let slot = self.slot(&meta.run_id);
        let _slot = lock(&slot);
        self.replace_file(&self.dir, &self.meta_path(&meta.run_id), &bytes, true)
    }

    fn get_meta(&self, run: &RunId) -> Result<Option<RunMeta>> {
        self.read_meta(run)
    }

    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunMeta>> {
        let mut metas = Vec::new();
        for item in fs::read_dir(&self.dir)? {
            let item = item?;
            let name = item.file_name();
            let Some(run) = name.to_str().and_then(|name| name.strip_suffix(".meta.json")) else {
                continue;
            };
            let Ok(run) = RunId::parse(run) else { continue };
            // A run deleted since the directory was read is simply not listed.
            if let Some(meta) = self.read_meta(&run)?
                && filter.matches(&meta)
            {
                metas.push(meta);
            }
        }
        Ok(common::select_runs(metas, filter))
    }

    fn leases(&self) -> Option<&dyn LeasableStore> {
        Some(self)
    }

    fn delete(&self, run: &RunId, lease: Option<&Lease>) -> Result<()> {
        if let Some(lease) = lease {
            self.check_held(run, lease)?;
        }
        // The lease goes with the run (its lock file stays: it keeps the epoch high-water).
        lock(&self.locks).remove(run);
        let slot = self.slot(run);
        let mut slot = lock(&slot);
        self.close_journal(&mut slot);
        // Journal first: a crash in between leaves a listed run with an empty journal,
        // which a second delete clears, never a hidden journal a recreated run would inherit.
        remove_if_present(&self.journal_path(run))?;
        remove_if_present(&self.meta_path(run))?;
        if self.durability == Durability::Full {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }
}

impl LeasableStore for JsonlStore {
    /// Takes the run's exclusive OS file lock. The ttl is not used: the lock holds until
    /// [`LeasableStore::release`], a `delete`, or the end of the holding process (a killed
    /// driver frees the run at once).
    fn acquire(&self, run: &RunId, owner: &str, _ttl: std::time::Duration) -> Result<Lease> {
        let mut locks = lock(&self.locks);
        if let Some(held) = locks.get(run) {
            return Err(Error::LeaseHeld {
                run: run.clone(),
                detail: format!("owner {} holds it at epoch {}", held.lease.owner, held.lease.epoch),
            });
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.lock_path(run))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                // The holder writes its name just after locking: give it a moment to.
                let mut holder = String::new();
                for _ in 0..10 {
                    let mut text = String::new();
                    let _ = file.seek(SeekFrom::Start(0)).and_then(|_| file.read_to_string(&mut text));
                    holder = serde_json::from_str::<LockRecord>(&text).map(|r| r.owner).unwrap_or_default();
                    if !holder.is_empty() {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                let holder = if holder.is_empty() { "another process".to_owned() } else { holder };
                return Err(Error::LeaseHeld {
                    run: run.clone(),
                    detail: format!("owner {holder} holds its file lock"),
                });
            }
            Err(fs::TryLockError::Error(err)) => return Err(err.into()),
        }
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        let record: LockRecord = if text.trim().is_empty() {
            LockRecord::default()
        } else {
            serde_json::from_str(&text).map_err(|err| Error::Corrupt {
                what: self.lock_path(run).display().to_string(),
                detail: err.to_string(),
            })?
        };
        let epoch = record.epoch.checked_add(1).ok_or_else(|| Error::Corrupt {
            what: format!("epochs of run {run}"),
            detail: "the epoch counter is exhausted".into(),
        })?;
        let next = LockRecord { owner: owner.to_owned(), epoch };
        let bytes = serde_json::to_vec(&next)
            .map_err(|err| Error::Corrupt { what: format!("lock of run {run}"), detail: err.to_string() })?;
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&bytes)?;
        file.sync_data()?;
        let lease = Lease { run_id: run.clone(), owner: owner.to_owned(), epoch };
        locks.insert(run.clone(), HeldLock { _file: file, lease: lease.clone() });
        Ok(lease)
    }

    fn renew(&self, lease: &Lease, _ttl: std::time::Duration) -> Result<()> {
        self.check_held(&lease.run_id, lease)
    }

    fn release(&self, lease: &Lease) -> Result<()> {
        self.check_held(&lease.run_id, lease)?;
        // Closing the file drops the OS lock.
        lock(&self.locks).remove(&lease.run_id);
        Ok(())
    }
}

impl TranscriptStore for JsonlStore {
    fn put_new(&self, blob_ref: &str, blob: &[u8]) -> Result<bool> {
        let parsed = common::parse_blob_ref(blob_ref)?;
        let dir = self.blob_dir(&parsed.run);
        fs::create_dir_all(&dir)?;
        let path = dir.join(encode_blob_name(parsed.name));
        // Written whole beside it, then linked into place: a link never replaces a file, so
        // of two racing writers the file system picks one, and a reader never sees half a blob.
        let temp = dir.join(self.temp_name());
        let written = (|| -> io::Result<bool> {
            let mut file = File::create(&temp)?;
            file.write_all(blob)?;
            if self.durability == Durability::Full {
                file.sync_all()?;
            }
            match fs::hard_link(&temp, &path) {
                Ok(()) => Ok(true),
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(false),
                Err(err) => Err(err),
            }
        })();
        let _ = fs::remove_file(&temp);
        let stored = written?;
        if stored && self.durability == Durability::Full {
            sync_dir(&dir)?;
        }
        Ok(stored)
    }

    fn put(&self, blob_ref: &str, blob: &[u8]) -> Result<()> {
        let parsed = common::parse_blob_ref(blob_ref)?;
        let dir = self.blob_dir(&parsed.run);
        fs::create_dir_all(&dir)?;
        let path = dir.join(encode_blob_name(parsed.name));
        self.replace_file(&dir, &path, blob, self.durability == Durability::Full)
    }

    fn get(&self, blob_ref: &str) -> Result<Option<Vec<u8>>> {
        let parsed = common::parse_blob_ref(blob_ref)?;
        match fs::read(self.blob_dir(&parsed.run).join(encode_blob_name(parsed.name))) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err.into()),
        }
    }

    fn list(&self, run: &RunId) -> Result<Vec<String>> {
        let items = match fs::read_dir(self.blob_dir(run)) {
            Ok(items) => items,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(err.into()),
        };
        let mut refs = Vec::new();
        for item in items {
            let name = item?.file_name();
            // Temp files start with '.', which an encoded name never does.
            if let Some(name) = name.to_str().filter(|name| !name.starts_with('.')).and_then(decode_blob_name)
            {
                refs.push(format!("{run}/{name}"));
            }
        }
        // Sorted by ref, not by file name: the encoding does not preserve order.
        refs.sort_unstable();
        Ok(refs)
    }

    fn delete(&self, blob_ref: &str) -> Result<()> {
        let parsed = common::parse_blob_ref(blob_ref)?;
        remove_if_present(&self.blob_dir(&parsed.run).join(encode_blob_name(parsed.name)))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while a slot is held leaves at worst an open file whose cached state is
    // stale; every write path re-derives it or truncates back, so the data is still usable.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn remove_if_present(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err.into()),
        _ => Ok(()),
    }
}

/// Makes a directory's entries (a created, renamed or removed file) durable.
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)?.sync_all()?;
    Ok(())
}

/// The seq an entry's text carries, read the way a load will read it.
fn text_seq(json: &str) -> Option<u64> {
    if let Some(seq) = prefix_seq(json.as_bytes()) {
        return Some(seq);
    }
    if !json.trim_start().starts_with('{') {
        return None;
    }
    serde_json::from_str::<SeqField>(json).ok().map(|field| field.seq)
}

/// The seq of a text that starts `{"seq":N,` (or `{"seq":N}`), as the kernel writes it.
fn prefix_seq(bytes: &[u8]) -> Option<u64> {
    let rest = bytes.strip_prefix(br#"{"seq":"#)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || !matches!(rest.get(digits), Some(b',' | b'}')) || (rest[0] == b'0' && digits > 1) {
        return None;
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// How much of a journal file is read at a time. Lines are cut out of this buffer, so a
/// load holds its entries plus one chunk, never the file's bytes twice.
const READ_CHUNK: usize = 1 << 20;

/// Reads a journal file: every entry in order, and how much of the file is sound.
fn scan(run: &RunId, reader: &mut dyn Read) -> Result<Scan> {
    scan_in_chunks(run, reader, READ_CHUNK)
}

fn scan_in_chunks(run: &RunId, reader: &mut dyn Read, chunk: usize) -> Result<Scan> {
    let mut scanner = Scanner { run, entries: Vec::new(), offset: 0, line_no: 0 };
    let mut buffer: Vec<u8> = Vec::with_capacity(chunk);
    // The unconsumed bytes start at `start`; none before `searched` is a newline.
    let (mut start, mut searched) = (0, 0);
    loop {
        buffer.drain(..start);
        searched -= start;
        start = 0;
        // Appends into spare capacity: no zero-filling a chunk per read.
        let read = reader.take(chunk as u64).read_to_end(&mut buffer)?;
        if read == 0 {
            return scanner.finish(&buffer[start..]);
        }
        loop {
            // Framing finds the end of a line as the kernel writes it in the same pass that
            // checks it; other lines are cut at their newline and parsed.
            if let Some((seq, end)) = framed_line(&buffer[start..]) {
                scanner.framed(&buffer[start..start + end], seq)?;
                start += end + 1;
                searched = start;
                continue;
            }
            let from = searched.max(start);
            let Some(end) = buffer[from..].iter().position(|&b| b == b'\n') else {
                searched = buffer.len();
                break;
            };
            scanner.line(&buffer[start..from + end])?;
            start = from + end + 1;
            searched = start;
        }
    }
}

/// The line-by-line state of a [`scan`].
struct Scanner<'r> {
    run: &'r RunId,
    entries: Vec<RawEntry>,
    /// The length of the newline-terminated lines seen so far.
    offset: u64,
    line_no: usize,
}

impl Scanner<'_> {
    fn tail(&self) -> Option<u64> {
        self.entries.last().map(RawEntry::seq)
    }

    /// Takes a newline-terminated line that [`framed_line`] framed as one record.
    fn framed(&mut self, line: &[u8], seq: u64) -> Result<()> {
        let in_order = self.tail().is_none_or(|tail| seq > tail);
        match std::str::from_utf8(line)
            .ok()
            .filter(|_| in_order)
            .and_then(|text| RawEntry::new(seq, text).ok())
        {
            Some(entry) => {
                self.line_no += 1;
                self.offset += line.len() as u64 + 1;
                self.entries.push(entry);
                Ok(())
            }
            // Let the parsing path find (and name) what is wrong.
            None => self.line(line),
        }
    }

    /// Takes one newline-terminated line: damage here is corruption, never a tear.
    fn line(&mut self, line: &[u8]) -> Result<()> {
        self.line_no += 1;
        self.offset += line.len() as u64 + 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let records =
            split_line(line, self.tail()).map_err(|damage| corrupt(self.run, self.line_no, damage.detail))?;
        push_records(&mut self.entries, line, &records)
            .map_err(|detail| corrupt(self.run, self.line_no, detail))
    }

    /// Takes what follows the last newline, where a crash tears: a complete record there is
    /// served (unterminated), a fragment is cut off with whole records before it kept.
    fn finish(mut self, rest: &[u8]) -> Result<Scan> {
        let line_start = self.offset;
        if rest.iter().all(u8::is_ascii_whitespace) {
            // Nothing, or trailing blanks: drop them with the rest of a tear.
            return Ok(Scan { entries: self.entries, keep_len: line_start, unterminated: false });
        }
        self.line_no += 1;
        let (records, keep, unterminated) = match split_line(rest, self.tail()) {
            Ok(records) => (records, rest.len(), true),
            Err(Damage { detail, torn: false, .. }) => return Err(corrupt(self.run, self.line_no, detail)),
            Err(Damage { records, .. }) => {
                let keep = records.last().map_or(0, |&(_, _, end)| end);
                let unterminated = !records.is_empty();
                (records, keep, unterminated)
            }
        };
        push_records(&mut self.entries, rest, &records)
            .map_err(|detail| corrupt(self.run, self.line_no, detail))?;
        Ok(Scan { entries: self.entries, keep_len: line_start + keep as u64, unterminated })
    }
}

/// The fast path for a line as the kernel writes it: `{"seq":N,` first, then exactly one
/// object up to a newline. Returns the seq and the line's length (without its newline).
///
/// Framing tracks strings, escapes and nesting but does not validate numbers or literals:
/// the store never parses a payload, and decoding the entry reports one that is not JSON,
/// with its seq. Anything else (and every unterminated tail, where crashes tear) takes the
/// exact, parsing path.
fn framed_line(bytes: &[u8]) -> Option<(u64, usize)> {
    let seq = prefix_seq(bytes)?;
    let end = frame_object(bytes)?;
    (bytes.get(end) == Some(&b'\n')).then_some((seq, end))
}

/// Where the JSON object opening `bytes` ends, if its strings and brackets close.
fn frame_object(bytes: &[u8]) -> Option<usize> {
    if bytes.first() != Some(&b'{') {
        return None;
    }
    // One bit per open bracket, 1 for '{'; deeper nesting takes the parsing path.
    let (mut stack, mut depth) = (0u128, 0u32);
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        if in_string {
            if !matches!(byte, b'"' | b'\\' | 0..0x20) {
                i += 1;
                continue;
            }
            match byte {
                // An escape takes the next byte along, which must not be a raw control byte
                // (a newline there would carry the frame into the next line).
                b'\\' if bytes.get(i + 1).is_some_and(|&next| next >= 0x20) => i += 1,
                b'\\' => return None,
                b'"' => in_string = false,
                0..0x20 => return None,
                _ => {}
            }
        } else {
            match byte {
                b'"' => in_string = true,
                b'{' | b'[' if depth < 128 => {
                    stack = (stack << 1) | u128::from(byte == b'{');
                    depth += 1;
                }
                b'{' | b'[' | b'\n' | b'\r' => return None,
                b'}' | b']' => {
                    if depth == 0 || (stack & 1 == 1) != (byte == b'}') {
                        return None;
                    }
                    stack >>= 1;
                    depth -= 1;
                    if depth == 0 {
                        return Some(i + 1);
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    None
}

/// A record found on a line: its seq and its byte range.
type Record = (u64, usize, usize);

/// A line that is not a clean sequence of records.
struct Damage {
    /// The records before the damage.
    records: Vec<Record>,
    /// What is wrong.
    detail: String,
    /// Whether the damage could be a tear (unparseable bytes) rather than sound records in
    /// the wrong order, which no crash produces.
    torn: bool,
}

/// Splits one line into its records (one, or several when newlines were lost), each a
/// JSON object whose seq is after the previous one.
fn split_line(line: &[u8], mut tail: Option<u64>) -> Result<Vec<Record>, Damage> {
    let mut records = Vec::with_capacity(1);
    let mut stream = serde_json::Deserializer::from_slice(line).into_iter::<SeqField>();
    let mut start = 0;
    loop {
        let object_next = line[start..].iter().find(|b| !b.is_ascii_whitespace()).is_none_or(|&b| b == b'{');
        if !object_next {
            return Err(Damage { records, detail: "expected a JSON object".into(), torn: true });
        }
        match stream.next() {
            None => return Ok(records),
            Some(Ok(field)) => {
                if tail.is_some_and(|tail| field.seq <= tail) {
                    let detail =
                        format!("seq {} is not after the previous seq {}", field.seq, tail.unwrap_or(0));
                    return Err(Damage { records, detail, torn: false });
                }
                let end = stream.byte_offset();
                records.push((field.seq, start, end));
                tail = Some(field.seq);
                start = end;
            }
            Some(Err(err)) => {
                // A tear leaves a prefix (end of input) or garbage (syntax); a whole object
                // without a numeric seq is corruption.
                let torn = err.is_eof() || err.is_syntax();
                return Err(Damage { records, detail: err.to_string(), torn });
            }
        }
    }
}

/// Turns a line's records into entries: the whole line verbatim when it holds one record,
/// else each record's own bytes.
fn push_records(entries: &mut Vec<RawEntry>, line: &[u8], records: &[Record]) -> Result<(), String> {
    let whole_line = records.len() == 1;
    for &(seq, start, end) in records {
        let bytes = if whole_line { line } else { line[start..end].trim_ascii() };
        let text = std::str::from_utf8(bytes).map_err(|err| format!("not UTF-8: {err}"))?;
        // A CRLF line ending (an editor's) is not part of the entry.
        let text = text.strip_suffix('\r').unwrap_or(text);
        entries.push(RawEntry::new(seq, text).map_err(|err| err.to_string())?);
    }
    Ok(())
}

fn corrupt(run: &RunId, line_no: usize, detail: String) -> Error {
    Error::Corrupt { what: format!("journal of run {run}, line {line_no}"), detail }
}

/// Encodes a blob name (which may hold `/` and any character) as one safe file name:
/// `[A-Za-z0-9_.-]` stays, every other byte becomes `%XX`, and so does a leading `.`, so
/// no encoded name is hidden, `.`/`..`, or clashes with a temp file.
fn encode_blob_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, byte) in name.bytes().enumerate() {
        let keep = byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' || (byte == b'.' && i > 0);
        if keep {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The inverse of [`encode_blob_name`]; `None` for a file name it cannot have produced.
fn decode_blob_name(file_name: &str) -> Option<String> {
    let bytes = file_name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = file_name.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> RunId {
        RunId::parse("r").unwrap()
    }

    fn seqs(scan: &Scan) -> Vec<u64> {
        scan.entries.iter().map(RawEntry::seq).collect()
    }

    #[test]
    fn scan_keeps_sound_files_whole() {
        let text = b"{\"seq\":1}\n{\"seq\":2,\"a\":[1.50]}\n";
        let scan = scan(&run(), &mut &text[..]).unwrap();
        assert_eq!(seqs(&scan), [1, 2]);
        assert_eq!(scan.keep_len, text.len() as u64);
        assert!(!scan.unterminated);
        assert_eq!(scan.entries[1].json(), r#"{"seq":2,"a":[1.50]}"#);
    }

    #[test]
    fn scan_cuts_a_torn_tail_and_keeps_glued_records() {
        let text = b"{\"seq\":1}\n{\"seq\":2} {\"seq\":3}{\"seq\":4,\"x";
        let scan = scan(&run(), &mut &text[..]).unwrap();
        assert_eq!(seqs(&scan), [1, 2, 3]);
        assert_eq!(scan.entries[2].json(), r#"{"seq":3}"#);
        assert_eq!(&text[..scan.keep_len as usize], b"{\"seq\":1}\n{\"seq\":2} {\"seq\":3}");
        assert!(scan.unterminated);

        let torn_only = b"{\"seq\":1}\n{\"se";
        let scan = super::scan(&run(), &mut &torn_only[..]).unwrap();
        assert_eq!(seqs(&scan), [1]);
        assert_eq!(scan.keep_len, 10);
        assert!(!scan.unterminated);
    }

    #[test]
    fn scan_refuses_damage_before_the_tail() {
        for text in [
            &b"{\"seq\":1}\nnot json\n{\"seq\":3}\n"[..],
            b"{\"seq\":1}\n{\"seq\":1}\n",
            b"{\"seq\":1}\n{\"nope\":2}\n",
            b"[1]\n",
            b"{\"seq\":1} 7\n",
        ] {
            let err = scan(&run(), &mut &text[..]).err().unwrap();
            assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
        }
    }

    #[test]
    fn scan_is_the_same_whatever_the_chunk_size() {
        let texts: [&[u8]; 5] = [
            b"{\"seq\":1,\"a\":\"x\\\"}\"}\n\n{\"seq\":2}{\"seq\":3}\n{\"seq\":4,\"b\":[{}]}\n",
            b"{\"seq\":1}\n{\"seq\":2,\"long\":\"0123456789abcdef\"}\n{\"seq\":3,\"tor",
            b"{\"seq\":1}\n{\"seq\":2}",
            b"{\"seq\":1}\n  \t",
            b"",
        ];
        for text in texts {
            let whole = scan(&run(), &mut &text[..]).unwrap();
            for chunk in [1, 2, 3, 7, 64] {
                let chunked = scan_in_chunks(&run(), &mut &text[..], chunk).unwrap();
                assert_eq!(chunked.entries, whole.entries, "chunk {chunk}");
                assert_eq!((chunked.keep_len, chunked.unterminated), (whole.keep_len, whole.unterminated));
            }
        }
    }

    #[test]
    fn framed_lines_are_served_unparsed() {
        // Balanced but not JSON: the store frames, the kernel's decode reports it.
        let text = b"{\"seq\":1}\n{\"seq\":2,\"a\":1x}\n";
        let scan = scan(&run(), &mut &text[..]).unwrap();
        assert_eq!(scan.entries[1].json(), r#"{"seq":2,"a":1x}"#);
    }

    #[test]
    fn framing_finds_exactly_one_object() {
        assert_eq!(frame_object(br#"{"seq":1,"a":"}{\"]"}"#), Some(21));
        assert_eq!(frame_object(br#"{"seq":1,"a":[{"b":[]}]}"#), Some(24));
        assert_eq!(frame_object(br#"{"seq":1}{"seq":2}"#), Some(9));
        assert_eq!(frame_object(br#"{"seq":1,"a":[}]}"#), None);
        assert_eq!(frame_object(br#"{"seq":1,"a":"open}"#), None);
        assert_eq!(frame_object(b"{\"seq\":1,\"a\":\"\x01\"}"), None);
        assert_eq!(frame_object(b" {}"), None);
        assert_eq!(frame_object(b"{\"a\":\"x\\\n\"}"), None, "an escaped raw newline");
        assert_eq!(frame_object(b"{\"a\":1,\n\"b\":2}"), None, "a newline between tokens");
        assert_eq!(frame_object(&[b'['; 200]), None);
        let deep = format!("{{\"seq\":1,\"d\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert_eq!(frame_object(deep.as_bytes()), None, "deep nesting takes the parsing path");
        let scan = scan(&run(), &mut format!("{deep}\n").as_bytes()).unwrap();
        assert_eq!(scan.entries.len(), 1);
    }

    #[test]
    fn text_seq_reads_what_load_reads() {
        assert_eq!(text_seq(r#"{"seq":12,"a":1}"#), Some(12));
        assert_eq!(text_seq(r#"{"seq":12}"#), Some(12));
        assert_eq!(text_seq(r#"{"z":1,"seq":9}"#), Some(9));
        assert_eq!(text_seq(r#"{ "seq" : 7 }"#), Some(7));
        assert_eq!(text_seq(r#"{"seq":07}"#), None);
        assert_eq!(text_seq(r#"{"a":1}"#), None);
        assert_eq!(text_seq("[3]"), None);
    }

    #[test]
    fn blob_names_round_trip_through_file_names() {
        for name in ["a", "x/y.json", ".hidden", "é ü/%41", "a-b_c.d"] {
            let encoded = encode_blob_name(name);
            assert!(!encoded.contains('/') && !encoded.starts_with('.'), "{encoded}");
            assert_eq!(decode_blob_name(&encoded).as_deref(), Some(name));
        }
        assert_eq!(decode_blob_name("%4"), None);
    }
}
