//! WAL checkpoints off the writer's path, in its pauses.
//!
//! SQLite's own auto-checkpoint runs inside the commit that crosses its threshold: every
//! thousandth page, one append pays for copying the log back into the database and for two
//! fsyncs, several milliseconds. That commit is an engine's paid result waiting to reach its
//! workflow. Even on another thread a checkpoint slows the writer down: it reads the log,
//! writes the database and fsyncs both while the writer appends (measured on a writer that
//! never pauses: 13–14 µs per commit with no checkpoint beside it, 20–22 µs with passes
//! running beside it). So the store hands checkpoints to a thread of its own, and the thread
//! waits for the writer to pause ([`IDLE`] without a commit) before it copies anything. An
//! engine's writer pauses for every model call, so its checkpoints cost its calls nothing.
//!
//! A writer that never pauses meets the cap instead: at four times the threshold a commit
//! checkpoints inline, as SQLite's own default would at the threshold. The log stays bounded
//! whatever the thread does, or if it does not run at all.

use std::ffi::c_int;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use rusqlite::hooks::Wal;
use rusqlite::wal::CheckpointMode;

use super::open::open_flags;
use super::options::SqliteOptions;

/// How many times the threshold the log may grow to before the writer checkpoints inline.
const INLINE_FACTOR: u32 = 4;

/// How long the writer must go without a commit before the thread checkpoints.
const IDLE: Duration = Duration::from_millis(2);

/// The background checkpoint thread of one [`SqliteStore`](super::SqliteStore).
pub(super) struct Checkpointer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    /// A pass is asked for or running; set without the lock, so a commit that finds one
    /// outstanding costs one atomic swap.
    requested: AtomicBool,
    /// When the writer last committed, in nanoseconds since `epoch`.
    last_commit: AtomicU64,
    epoch: Instant,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            requested: AtomicBool::new(false),
            last_commit: AtomicU64::new(0),
            epoch: Instant::now(),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        }
    }

    fn request(&self) {
        if !self.requested.swap(true, Ordering::AcqRel) {
            let _stop = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
            self.wake.notify_one();
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// How long ago the writer last committed.
    fn idle_for(&self) -> Duration {
        Duration::from_nanos(self.now().saturating_sub(self.last_commit.load(Ordering::Acquire)))
    }
}

impl Checkpointer {
    /// Starts the thread (its connection opens on first use) and installs the WAL hook on
    /// the writer, replacing SQLite's auto-checkpoint.
    pub(super) fn start(
        writer: &mut Connection,
        path: &Path,
        options: &SqliteOptions,
    ) -> rusqlite::Result<Self> {
        let shared = Arc::new(Shared::new());
        let threshold = c_int::try_from(options.checkpoint_pages.max(1)).unwrap_or(c_int::MAX);
        let cap = threshold.saturating_mul(INLINE_FACTOR as c_int);
        let hook = shared.clone();
        // The log size at the last request: while a reader pins old frames (so no pass can
        // start the log over), passes are asked for only as the log grows, not per commit.
        let mut requested_at: c_int = 0;
        writer.wal_hook(Some(move |wal: &mut Wal, pages: c_int| {
            hook.last_commit.store(hook.now(), Ordering::Release);
            if pages < requested_at {
                requested_at = 0; // The log started over.
            }
            if pages >= cap {
                // A failure here (another process checkpointing, say) leaves the log to a
                // later commit's hook; the commit itself has happened either way.
                let _ = wal.checkpoint_v2(CheckpointMode::PASSIVE);
            } else if pages >= threshold && pages >= requested_at.saturating_add(threshold / 2) {
                requested_at = pages;
                hook.request();
            }
            Ok(())
        }))?;
        let thread = {
            let shared = shared.clone();
            let path = path.to_path_buf();
            let options = options.clone();
            std::thread::Builder::new()
                .name("cairn-sqlite-checkpoint".into())
                .spawn(move || run(&shared, &path, &options))
                .map_err(|err| {
                    tracing::warn!(%err, "cannot start the sqlite checkpoint thread; the writer checkpoints itself");
                })
                .ok()
        };
        Ok(Checkpointer { shared, thread })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        *self.shared.stop.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The thread: waits for a request and for the writer to pause, checkpoints, repeats until
/// the store is dropped.
fn run(shared: &Shared, path: &Path, options: &SqliteOptions) {
    let mut conn: Option<Connection> = None;
    let mut warned = false;
    loop {
        {
            let mut stop = shared.stop.lock().unwrap_or_else(PoisonError::into_inner);
            while !*stop && !shared.requested.load(Ordering::Acquire) {
                stop = shared.wake.wait(stop).unwrap_or_else(PoisonError::into_inner);
            }
            // The writer's pause: it committed less than IDLE ago, so wait out the rest.
            loop {
                if *stop {
                    return;
                }
                let idle = shared.idle_for();
                if idle >= IDLE {
                    break;
                }
                stop = shared.wake.wait_timeout(stop, IDLE - idle).unwrap_or_else(PoisonError::into_inner).0;
            }
        }
        if conn.is_none() {
            match open(path, options) {
                Ok(opened) => conn = Some(opened),
                Err(err) => {
                    // The next request tries again; meanwhile the writer's inline cap keeps
                    // the log bounded.
                    if !warned {
                        tracing::warn!(%err, "the sqlite checkpoint thread cannot open the database; the writer checkpoints itself");
                        warned = true;
                    }
                    shared.requested.store(false, Ordering::Release);
                    continue;
                }
            }
        }
        let started = shared.now();
        if let Some(conn) = &conn {
            // Busy means another connection (another process's thread, or the writer's own
            // inline pass) is checkpointing already.
            if let Err(err) = conn.wal_checkpoint_v2(Some(rusqlite::MAIN_DB), CheckpointMode::PASSIVE) {
                tracing::debug!(%err, "background checkpoint did not run");
            }
        }
        // A commit since the pass began left frames it did not copy, and that commit's request
        // found this one outstanding and was dropped: keep the request, so the writer's next
        // pause copies them (without this, the last frames before a pause that came after a
        // mid-stream pass stayed in the log until the log grew by another half threshold).
        if shared.last_commit.load(Ordering::Acquire) < started {
            shared.requested.store(false, Ordering::Release);
        }
    }
}

fn open(path: &Path, options: &SqliteOptions) -> crate::store::Result<Connection> {
    let conn = Connection::open_with_flags(path, open_flags())?;
    // Its synchronous setting is the store's: a checkpoint's fsyncs are what make the copied
    // pages durable in the database file.
    super::open::configure(&conn, options)?;
    Ok(conn)
}
