//! WAL checkpoints off the writer's path.
//!
//! SQLite's own auto-checkpoint runs inside the commit that crosses its threshold: every
//! thousandth page, one append pays for copying the log back into the database and for two
//! fsyncs, several milliseconds. That commit is an engine's paid result waiting to reach its
//! workflow, so the store moves the work to a thread of its own: the writer's WAL hook asks
//! for a checkpoint once the log holds `pages` frames, and the thread runs a `PASSIVE` one
//! (which never blocks the writer) on its own connection.
//!
//! A passive checkpoint cannot reset the log while a writer keeps appending: the log starts
//! over only when a write begins with every frame already copied back, and the writer has
//! appended more while the thread copied. So once the thread has finished a pass, the
//! writer's next commit checkpoints inline: only the frames of that last moment are left to
//! copy, and the commit after it starts the log over. And the hook keeps a cap: at four times
//! the threshold the writer checkpoints inline whatever the thread is doing, as SQLite's own
//! default would. The log stays bounded whether or not the thread keeps up, or runs at all.

use std::ffi::c_int;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use rusqlite::Connection;
use rusqlite::hooks::Wal;
use rusqlite::wal::CheckpointMode;

use super::{SqliteOptions, open_flags};

/// How many times the threshold the log may grow to before the writer checkpoints inline.
const INLINE_FACTOR: u32 = 4;

/// The background checkpoint thread of one [`SqliteStore`](super::SqliteStore).
pub(super) struct Checkpointer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    /// A pass is asked for or running; set without the lock, so a commit that finds one
    /// outstanding costs one atomic swap.
    requested: AtomicBool,
    /// The thread finished a pass the writer has not followed up inline yet.
    caught_up: AtomicBool,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Shared {
    fn request(&self) {
        if !self.requested.swap(true, Ordering::AcqRel) {
            let _stop = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
            self.wake.notify_one();
        }
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
        let shared = Arc::new(Shared::default());
        let threshold = c_int::try_from(options.checkpoint_pages.max(1)).unwrap_or(c_int::MAX);
        let cap = threshold.saturating_mul(INLINE_FACTOR as c_int);
        let hook = shared.clone();
        // The log size at the last request: while a reader pins old frames (so no pass can
        // start the log over), passes are asked for only as the log grows, not per commit.
        let mut requested_at: c_int = 0;
        writer.wal_hook(Some(move |wal: &mut Wal, pages: c_int| {
            if pages < requested_at {
                requested_at = 0; // The log started over.
            }
            // Clear a finished pass whenever the log is checkpointed, by either path.
            let caught_up = hook.caught_up.swap(false, Ordering::AcqRel);
            if caught_up || pages >= cap {
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

/// The thread: waits for a request, checkpoints, repeats until the store is dropped.
fn run(shared: &Shared, path: &Path, options: &SqliteOptions) {
    let mut conn: Option<Connection> = None;
    let mut warned = false;
    loop {
        {
            let mut stop = shared.stop.lock().unwrap_or_else(PoisonError::into_inner);
            while !*stop && !shared.requested.load(Ordering::Acquire) {
                stop = shared.wake.wait(stop).unwrap_or_else(PoisonError::into_inner);
            }
            if *stop {
                return;
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
        if let Some(conn) = &conn {
            // Busy means another connection (another process's thread, or the writer's own
            // inline pass) is checkpointing already.
            if let Err(err) = conn.wal_checkpoint_v2(Some(rusqlite::MAIN_DB), CheckpointMode::PASSIVE) {
                tracing::debug!(%err, "background checkpoint did not run");
            }
        }
        // In this order: a commit that sees no request outstanding must also see the pass
        // done, or it would ask for another instead of finishing this one.
        shared.caught_up.store(true, Ordering::Release);
        shared.requested.store(false, Ordering::Release);
    }
}

fn open(path: &Path, options: &SqliteOptions) -> super::Result<Connection> {
    let conn = Connection::open_with_flags(path, open_flags())?;
    // Its synchronous setting is the store's: a checkpoint's fsyncs are what make the copied
    // pages durable in the database file.
    super::configure(&conn, options)?;
    Ok(conn)
}
