//! Whether a JSONL run's lock is held, read without taking it: the lock is an OS `flock` on
//! `<run>.lock`, which cannot be tested without being taken (and taking it, even shared, for
//! a moment would refuse a driver starting at that moment). On Linux `/proc/locks` lists every
//! held `flock` by device and inode; elsewhere nothing tells.

use std::fs::File;

/// Whether `/proc/locks` lists a granted `flock` on `file`; `None` when it cannot be read.
#[cfg(target_os = "linux")]
pub(super) fn locked(file: &File) -> Option<bool> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = file.metadata().ok()?;
    let dev = meta.dev();
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let id = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    // `1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF`; a waiter's line has `->` after the
    // number and holds nothing.
    Some(locks.lines().any(|line| {
        let mut fields = line.split_whitespace().skip(1);
        fields.next() == Some("FLOCK") && line.split_whitespace().nth(5) == Some(id.as_str())
    }))
}

/// Whether the lock on `file` is held: nothing tells here.
#[cfg(not(target_os = "linux"))]
pub(super) fn locked(_: &File) -> Option<bool> {
    None
}
