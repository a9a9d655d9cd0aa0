//! The fs-read root: the canonical directory every path is confined to, the lexical and
//! resolved checks that word a refusal, the handle every open goes through, and how results
//! name paths under it.

use std::fs::{self, File};
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, ErrorCode};

pub(super) fn denied(message: String) -> Error {
    Error::new(ErrorCode::ToolDenied, message)
}

pub(super) fn failed(message: String) -> Error {
    Error::new(ErrorCode::ToolFailed, message)
}

/// An I/O failure on a path the model named, worded for the model; the root's absolute
/// location never appears in messages.
pub(super) fn io_failed(arg: &str, e: &io::Error) -> Error {
    match e.kind() {
        io::ErrorKind::NotFound => failed(format!("{arg:?} does not exist")),
        io::ErrorKind::PermissionDenied => failed(format!("{arg:?} cannot be read: permission denied")),
        _ => failed(format!("{arg:?} cannot be read: {e}")),
    }
}

/// The canonical root every path is confined to, and a handle of it every open goes through.
#[derive(Debug)]
pub(super) struct Root {
    pub(super) path: PathBuf,
    pub(super) dir: cap_std::fs::Dir,
}

impl Root {
    /// Resolves a model-supplied path to a canonical path under the root, or refuses it.
    pub(super) fn resolve(&self, arg: &str) -> Result<PathBuf, Error> {
        Root::lexical(arg)?;
        let rel = Path::new(arg);
        let joined = self.path.join(rel);
        self.resolve_joined(arg, &joined)
    }

    /// Refuses absolute paths and `..` that climbs above the root, before any file system
    /// access, so the refusal says why.
    pub(super) fn lexical(arg: &str) -> Result<(), Error> {
        let rel = Path::new(arg);
        let mut depth: usize = 0;
        for component in rel.components() {
            match component {
                Component::Prefix(_) | Component::RootDir => {
                    return Err(denied(format!(
                        "{arg:?} is an absolute path; paths must be relative to the workspace root"
                    )));
                }
                Component::CurDir => {}
                Component::ParentDir => {
                    depth = depth.checked_sub(1).ok_or_else(|| {
                        denied(format!("{arg:?} uses `..` to climb out of the workspace root"))
                    })?;
                }
                Component::Normal(_) => depth += 1,
            }
        }
        Ok(())
    }

    fn resolve_joined(&self, arg: &str, joined: &Path) -> Result<PathBuf, Error> {
        let joined = joined.to_owned();
        match fs::canonicalize(&joined) {
            Ok(canonical) => {
                self.confine(arg, &canonical)?;
                Ok(canonical)
            }
            Err(e) => {
                // Check what does exist before answering: "not found" behind a link that
                // leaves the root would tell the model which names exist out there.
                let mut probe = joined.as_path();
                while let Some(parent) = probe.parent() {
                    if let Ok(canonical) = fs::canonicalize(parent) {
                        self.confine(arg, &canonical)?;
                        break;
                    }
                    probe = parent;
                }
                if e.kind() == io::ErrorKind::NotFound
                    && fs::symlink_metadata(&joined).is_ok_and(|m| m.file_type().is_symlink())
                {
                    return Err(failed(format!("{arg:?} is a symbolic link whose target does not exist")));
                }
                Err(io_failed(arg, &e))
            }
        }
    }

    /// Refuses a canonical path outside the root. A lexically clean path can only get
    /// there through a symbolic link, so that is what the message blames.
    fn confine(&self, arg: &str, canonical: &Path) -> Result<(), Error> {
        if canonical.starts_with(&self.path) {
            Ok(())
        } else {
            Err(denied(format!(
                "{arg:?} leads outside the workspace root through a symbolic link; \
                 only files under the root may be read"
            )))
        }
    }

    /// Confirms that what was actually opened lies under the root, closing the gap between
    /// resolving a path and opening it (a link swapped in meanwhile).
    #[cfg(target_os = "linux")]
    pub(super) fn verify_opened(&self, arg: &str, file: &File) -> Result<(), Error> {
        use std::os::fd::AsRawFd;
        // Without /proc there is nothing more to learn; the resolve-time check stands.
        match fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
            Ok(actual) if actual.is_absolute() => self.confine(arg, &actual),
            _ => Ok(()),
        }
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) fn verify_opened(&self, _arg: &str, _file: &File) -> Result<(), Error> {
        Ok(())
    }

    /// Runs `op` on the model's path `arg` beneath the root handle, which refuses to leave
    /// the root whatever links the path crosses at that instant. A refusal or failure is
    /// worded by [`Root::resolve`]'s checks; a link inside the root with an absolute target
    /// (which the handle will not follow) is retried along its canonical path, again beneath
    /// the handle.
    pub(super) fn beneath<T>(&self, arg: &str, op: impl Fn(&Path) -> io::Result<T>) -> Result<T, Error> {
        Root::lexical(arg)?;
        let rel = if arg.is_empty() { Path::new(".") } else { Path::new(arg) };
        let error = match op(rel) {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        let canonical = self.resolve(arg)?;
        if error.kind() == io::ErrorKind::PermissionDenied
            && let Ok(inside) = canonical.strip_prefix(&self.path)
        {
            let inside = if inside.as_os_str().is_empty() { Path::new(".") } else { inside };
            return op(inside).map_err(|e| self.refusal(arg, &e));
        }
        Err(io_failed(arg, &error))
    }

    /// A failure of an open beneath the root, after the path looked inside: a link that was
    /// swapped meanwhile shows up here as a refusal.
    fn refusal(&self, arg: &str, error: &io::Error) -> Error {
        match self.resolve(arg) {
            Err(worded) => worded,
            Ok(_) if error.kind() == io::ErrorKind::PermissionDenied => {
                denied(format!("{arg:?} cannot be opened beneath the workspace root"))
            }
            Ok(_) => io_failed(arg, error),
        }
    }

    /// Opens a regular file at `arg` beneath the root.
    pub(super) fn open_file(&self, arg: &str) -> Result<File, Error> {
        // Checked before opening as well as after: opening a FIFO would block (it is also
        // opened non-blocking, should one be swapped in between).
        let meta = self.beneath(arg, |rel| self.dir.metadata(rel))?;
        if meta.is_dir() {
            return Err(failed(format!("{arg:?} is a directory; use list_dir")));
        }
        if !meta.is_file() {
            return Err(failed(format!("{arg:?} is not a regular file")));
        }
        let mut options = cap_std::fs::OpenOptions::new();
        options.read(true);
        #[cfg(unix)]
        {
            use cap_std::fs::OpenOptionsExt;
            options.custom_flags(libc::O_NONBLOCK);
        }
        let file = self.beneath(arg, |rel| self.dir.open_with(rel, &options))?.into_std();
        self.verify_opened(arg, &file)?;
        if !file.metadata().map_err(|e| io_failed(arg, &e))?.is_file() {
            return Err(failed(format!("{arg:?} is not a regular file")));
        }
        Ok(file)
    }
}

/// The model's path with `.` dropped and `..` applied (it was checked not to climb above the
/// root), `/`-separated, `.` for the root itself: how results name files.
pub(super) fn normalized(arg: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    for component in Path::new(arg).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    if parts.is_empty() { ".".to_owned() } else { parts.join("/") }
}

/// `name` under the model's directory argument, as a root-relative path.
pub(super) fn dir_join(dir: &str, name: &str) -> String {
    let dir = dir.trim_end_matches('/');
    if dir.is_empty() || dir == "." { name.to_owned() } else { format!("{dir}/{name}") }
}
