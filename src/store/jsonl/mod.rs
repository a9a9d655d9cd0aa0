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

mod blobs;
mod counters;
mod holder;
mod pages;
mod scan;

use self::scan::{Scan, scan, scan_tail, text_seq};
use super::common::{self, HeldLease};
use super::{
    Durability, Error, JournalStore, LeasableStore, Lease, RawEntry, Result, RunFilter, RunId, RunMeta,
};

/// How many journal files stay open at once; past it, idle runs' files are closed (and
/// rescanned when next appended to), so a long-lived process cannot run out of descriptors.
const MAX_OPEN_JOURNALS: usize = 64;

/// How many runs' slots the store remembers before it forgets the idle ones.
const MAX_SLOTS: usize = 1_024;

/// A [`JournalStore`] and [`TranscriptStore`](crate::TranscriptStore) over a directory of JSONL files.
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
    /// The counters' tally log, opened for appending at the first append (see `counters`).
    counter_log: Mutex<Option<File>>,
    /// Where page reads of each run's journal may start (see `pages`).
    marks: pages::Marks,
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

impl JsonlStore {
    /// A store over `dir`, created if missing.
    ///
    /// # Errors
    /// [`Error::Io`] when the directory cannot be created.
    pub fn open(dir: &Path, durability: Durability) -> Result<JsonlStore> {
        fs::create_dir_all(dir)?;
        Ok(JsonlStore {
            counter_log: Mutex::new(None),
            dir: dir.to_path_buf(),
            durability,
            slots: Mutex::new(HashMap::new()),
            open_journals: AtomicUsize::new(0),
            temp_counter: AtomicU64::new(0),
            locks: Mutex::new(HashMap::new()),
            marks: pages::Marks::default(),
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
    /// no journal and `create` is off. The entries are kept only when `keep` asks for them:
    /// an append needs the tail alone, and a long journal's entries would all be in memory.
    fn scan_journal(
        &self,
        run: &RunId,
        slot: &mut RunSlot,
        create: bool,
        keep: bool,
    ) -> Result<Option<Vec<RawEntry>>> {
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
            let scanned =
                if keep { scan(run, &mut journal.file)? } else { scan_tail(run, &mut journal.file)? };
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
                journal.tail = scanned.tail;
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
        // Before any journal of this store exists: a directory whose journals predate its
        // tally log is marked uncounted when the log starts.
        if lock(&self.counter_log).is_none() {
            counters::start(&self.dir)?;
            let log = counters::open_log(&self.dir)?;
            lock(&self.counter_log).get_or_insert(log);
        }
        let slot = self.slot(run);
        let mut slot = lock(&slot);
        if slot.journal.is_none() {
            self.scan_journal(run, &mut slot, true, false)?;
        }
        let tail = slot.journal.as_ref().and_then(|journal| journal.tail);
        common::check_tail(run, tail, entries)?;
        self.write_batch(&mut slot, entries)?;
        // Still under the run's slot: the run's tallies are logged in its append order.
        match lock(&self.counter_log).as_mut() {
            Some(log) => counters::record(log, tally, self.durability == Durability::Full),
            None => Err(Error::Io(io::Error::other("the counters log is not open"))),
        }
    }

    fn counters(&self) -> Result<Option<super::StoreCounters>> {
        let Some(appended) =
            counters::read(&self.dir, |path, bytes| self.replace_file(&self.dir, path, bytes, false))?
        else {
            return Ok(None);
        };
        let metas = self.list_runs(&RunFilter::default())?;
        Ok(Some(common::fold_counters(metas.iter().map(|meta| (meta.status, 1)), appended)))
    }

    fn load(&self, run: &RunId) -> Result<Vec<RawEntry>> {
        let slot = self.slot(run);
        let mut slot = lock(&slot);
        // Only the run's writer repairs a torn tail; anyone else may be looking at another
        // process's append in progress.
        if slot.journal.is_none() && !self.holds(run) {
            return self.read_journal(run);
        }
        Ok(self.scan_journal(run, &mut slot, false, true)?.unwrap_or_default())
    }

    fn load_since(&self, run: &RunId, after: u64) -> Result<Vec<RawEntry>> {
        self.load_page(run, after, usize::MAX)
    }

    fn load_page(&self, run: &RunId, after: u64, limit: usize) -> Result<Vec<RawEntry>> {
        pages::read_page(&self.journal_path(run), run, &self.marks, after, limit)
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
        self.marks.forget(run);
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

    /// The run's lock holder, read without taking the lock (see `holder.rs`): the lock file's
    /// record while some process holds the lock. Where that cannot be told, a record that
    /// names an owner is taken as held, the cautious answer.
    fn holder(&self, run: &RunId) -> Result<Option<Lease>> {
        if let Some(held) = lock(&self.locks).get(run) {
            return Ok(Some(held.lease.clone()));
        }
        let mut file = match File::open(self.lock_path(run)) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(err.into()),
        };
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        let record: LockRecord = serde_json::from_str(&text).unwrap_or_default();
        let held = holder::locked(&file, &record.owner).unwrap_or(!record.owner.is_empty());
        Ok(held.then(|| Lease { run_id: run.clone(), owner: record.owner, epoch: record.epoch }))
    }

    fn release(&self, lease: &Lease) -> Result<()> {
        self.check_held(&lease.run_id, lease)?;
        // Closing the file drops the OS lock.
        lock(&self.locks).remove(&lease.run_id);
        Ok(())
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
