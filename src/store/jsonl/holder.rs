//! Whether a JSONL run's lock is held, read without taking it: the lock is an OS `flock` on
//! `<run>.lock`, which cannot be tested without being taken (and taking it, even shared, for
//! a moment would refuse a driver starting at that moment). On Linux the holder's own
//! descriptors (`/proc/PID/fdinfo/*`, for the process the lock file's record names) and
//! `/proc/locks` list every held `flock` by device and inode; elsewhere nothing tells.
//!
//! `/proc/locks` alone misses a held lock now and then: the kernel hands it out a page of
//! lines per `read`, and starts each `read` at a line *number*, so a lock released between two
//! reads above the held one shifts it into the part already read (measured: one scan in four
//! missed a held lock while another process took and dropped a lock in a loop, with a pause
//! between the reads as a loaded machine makes). The listing then called a live driver gone. A
//! process's `fdinfo` is one short file per descriptor, read whole at once, so the record's
//! holder is checked there first; `/proc/locks` (scanned again when a scan misses) covers the
//! moment between a new holder's lock and its record.

use std::fs::File;

/// Whether a granted `flock` on `file` is held, by the process `owner` names (`pid N on
/// HOST`, the lock file's record) or any other; `None` when it cannot be told.
#[cfg(target_os = "linux")]
pub(super) fn locked(file: &File, owner: &str) -> Option<bool> {
    locked_by(file, owner, listed_in_proc_locks)
}

/// [`locked`], with `scan` for one scan of `/proc/locks`.
#[cfg(target_os = "linux")]
fn locked_by(file: &File, owner: &str, scan: impl Fn(&str) -> Option<bool>) -> Option<bool> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = file.metadata().ok()?;
    let dev = meta.dev();
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let id = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    if pid_of(owner).is_some_and(|pid| held_by(pid, &id)) {
        return Some(true);
    }
    let mut listed = None;
    for _ in 0..SCANS {
        let found = scan(&id)?;
        if found {
            return Some(true);
        }
        listed = Some(found);
    }
    listed
}

/// How many scans of `/proc/locks` must all miss a lock before it is called free.
#[cfg(target_os = "linux")]
const SCANS: usize = 3;

/// The process a lock record's owner names (`pid N on HOST`).
#[cfg(target_os = "linux")]
fn pid_of(owner: &str) -> Option<u32> {
    owner.strip_prefix("pid ")?.split_once(' ')?.0.parse().ok()
}

/// Whether one of `pid`'s descriptors holds a `flock` on the file `id` names: its `fdinfo`
/// lists the lock (`lock:\t1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF`).
#[cfg(target_os = "linux")]
fn held_by(pid: u32, id: &str) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else { return false };
    fds.filter_map(Result::ok).any(|fd| {
        std::fs::read_to_string(fd.path()).is_ok_and(|info| {
            info.lines().filter(|line| line.starts_with("lock:")).any(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.get(2) == Some(&"FLOCK") && fields.get(6) == Some(&id)
            })
        })
    })
}

/// Whether one scan of `/proc/locks` lists a granted `flock` on the file `id` names; `None`
/// when it cannot be read. Read in large reads (each a page of whole lines), not the small
/// first read of `read_to_string`, which split even a short list in two.
#[cfg(target_os = "linux")]
fn listed_in_proc_locks(id: &str) -> Option<bool> {
    use std::io::Read as _;
    let mut locks = File::open("/proc/locks").ok()?;
    let mut text = Vec::new();
    let mut chunk = vec![0; 64 * 1024];
    loop {
        match locks.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(chunk.get(..n)?),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    // `1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF`; a waiter's line has `->` after the
    // number and holds nothing.
    Some(String::from_utf8_lossy(&text).lines().any(|line| {
        let mut fields = line.split_whitespace().skip(1);
        fields.next() == Some("FLOCK") && line.split_whitespace().nth(5) == Some(id)
    }))
}

/// Whether the lock on `file` is held: nothing tells here.
#[cfg(not(target_os = "linux"))]
pub(super) fn locked(_: &File, _: &str) -> Option<bool> {
    None
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn lock_file(dir: &std::path::Path) -> (File, File) {
        let path = dir.join("run.lock");
        let held = File::create(&path).unwrap();
        (held, File::open(&path).unwrap())
    }

    /// The record's holder is found through its own descriptors even when a scan of
    /// `/proc/locks` misses its lock (as one does when a lock above it is released between
    /// the kernel's pages): before, the listing then called a live driver gone.
    #[test]
    fn a_lock_held_by_the_recorded_owner_is_found_when_a_scan_misses_it() {
        let dir = tempfile::tempdir().unwrap();
        let (held, probe) = lock_file(dir.path());
        held.try_lock().unwrap();
        let owner = format!("pid {} on some host", std::process::id());
        let misses = std::cell::Cell::new(0);
        let scan = |_: &str| {
            misses.set(misses.get() + 1);
            Some(false)
        };
        assert_eq!(locked_by(&probe, &owner, scan), Some(true));
        assert_eq!(misses.get(), 0, "the holder's descriptors answered first");
        // Named by nobody (a new holder has not written its record yet): a scan that finds it
        // again after a miss tells.
        let scans = std::cell::Cell::new(0);
        let flaky = |_: &str| {
            scans.set(scans.get() + 1);
            Some(scans.get() > 1)
        };
        assert_eq!(locked_by(&probe, "", flaky), Some(true));
        assert_eq!(locked_by(&probe, "", |_| Some(false)), Some(false));
    }

    #[test]
    fn a_held_lock_is_listed_and_a_free_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let (held, probe) = lock_file(dir.path());
        let owner = format!("pid {} on some host", std::process::id());
        assert_eq!(locked(&probe, &owner), Some(false));
        held.try_lock().unwrap();
        assert_eq!(locked(&probe, &owner), Some(true));
        assert_eq!(locked(&probe, ""), Some(true), "/proc/locks lists it");
        held.unlock().unwrap();
        assert_eq!(locked(&probe, &owner), Some(false));
    }
}
