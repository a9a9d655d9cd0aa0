//! `read_file` and `list_dir`: a window of a text file's lines, and a directory's entries,
//! each bounded and saying so when cut.

use std::ffi::OsString;
use std::io::{self, BufRead, BufReader};

use super::root::{Root, dir_join, failed, io_failed};
use crate::error::{Error, ErrorCode};

/// Bytes of file text `read_file` returns at most, so one call cannot flood the context.
const READ_BYTE_CAP: usize = 256 * 1024;

/// Lines `read_file` returns when no `limit` is given, and the largest `limit` allowed.
pub(super) const READ_LINE_LIMIT: u64 = 2000;

/// How much of a file's head is sniffed for NUL bytes to call it binary (as git does).
pub(super) const BINARY_SNIFF: usize = 8 * 1024;

/// Entries `list_dir` shows at most.
pub(super) const LIST_CAP: usize = 1000;

pub(super) fn read_file(root: &Root, arg: &str, offset: u64, limit: u64) -> Result<String, Error> {
    let file = root.open_file(arg)?;
    let window = read_window(BufReader::with_capacity(64 * 1024, file), offset, limit, READ_BYTE_CAP)
        .map_err(|e| io_failed(arg, &e))?;
    let Some(window) = window else {
        return Err(failed(format!(
            "{arg:?} is a binary file (it contains NUL bytes); only text can be read"
        )));
    };
    Ok(window.render(offset, limit))
}

/// Why a read window ended before the end of the file.
#[derive(Debug, PartialEq)]
pub(super) enum Cut {
    /// The line limit was reached and more lines follow.
    Lines,
    /// The byte cap was reached and more text follows.
    Bytes,
}

/// The text `read_file` shows and how it ended.
#[derive(Debug)]
pub(super) struct Window {
    text: Vec<u8>,
    cut: Option<Cut>,
    /// Lines in the file, counted only when the whole file was read.
    total_lines: u64,
}

/// Reads lines `offset..offset + limit` of `reader`, at most `cap` bytes of them, without
/// ever holding more than that in memory. `None` when the text is binary.
pub(super) fn read_window(
    mut reader: impl BufRead,
    offset: u64,
    limit: u64,
    cap: usize,
) -> io::Result<Option<Window>> {
    let head = reader.fill_buf()?;
    if head[..head.len().min(BINARY_SNIFF)].contains(&0) {
        return Ok(None);
    }
    let end = offset.saturating_add(limit);
    let mut line: u64 = 0;
    let mut mid_line = false;
    let mut text = Vec::new();
    let mut cut = None;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        if line >= end {
            cut = Some(Cut::Lines);
            break;
        }
        let (len, newline) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let chunk = &buf[..len];
        if chunk.contains(&0) {
            return Ok(None);
        }
        if line >= offset {
            let room = cap - text.len();
            if len > room {
                text.extend_from_slice(&chunk[..room]);
                cut = Some(Cut::Bytes);
                break;
            }
            text.extend_from_slice(chunk);
        }
        reader.consume(len);
        if newline {
            line += 1;
        }
        mid_line = !newline;
    }
    let total_lines = line + u64::from(mid_line);
    Ok(Some(Window { text, cut, total_lines }))
}

impl Window {
    pub(super) fn render(mut self, offset: u64, limit: u64) -> String {
        // Saturating: `offset` is any u64 the model sent.
        let first = offset.saturating_add(1);
        let end = offset.saturating_add(limit);
        let note = match self.cut {
            None if self.text.is_empty() && self.total_lines == 0 => return "[the file is empty]".to_owned(),
            None if self.text.is_empty() => {
                return format!("[offset {offset} is past the end: the file has {} lines]", self.total_lines);
            }
            None => None,
            Some(Cut::Lines) => Some(format!(
                "[truncated: showed lines {first}-{end} (limit {limit}); more follow — continue with offset={end}]"
            )),
            Some(Cut::Bytes) => match self.text.iter().rposition(|&b| b == b'\n') {
                // End on a whole line, so continuing at the next offset loses nothing.
                Some(last) => {
                    self.text.truncate(last + 1);
                    let shown = self.text.iter().filter(|&&b| b == b'\n').count() as u64;
                    let next = offset.saturating_add(shown);
                    Some(format!(
                        "[truncated: showed lines {first}-{next} (the 256 KiB output cap); more follow — \
                         continue with offset={next}]"
                    ))
                }
                None => {
                    // One line longer than the cap: show its start, cut on a char boundary.
                    if let Err(e) = std::str::from_utf8(&self.text)
                        && e.error_len().is_none()
                    {
                        self.text.truncate(e.valid_up_to());
                    }
                    Some(format!(
                        "[truncated: line {first} is longer than the 256 KiB output cap and only its \
                         start is shown; the next line is at offset={first}]"
                    ))
                }
            },
        };
        let mut out = String::from_utf8_lossy(&self.text).into_owned();
        if let Some(note) = note {
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&note);
        }
        out
    }
}

pub(super) fn list_dir(root: &Root, arg: &str) -> Result<String, Error> {
    let meta = root.beneath(arg, |rel| root.dir.metadata(rel))?;
    if !meta.is_dir() {
        return Err(failed(format!("{arg:?} is not a directory; use read_file")));
    }
    // The listing is read through a handle opened beneath the root: whatever the path's
    // links do meanwhile, these are entries of a directory inside it.
    let dir = root.beneath(arg, |rel| root.dir.open_dir(rel))?;
    let mut entries: Vec<(OsString, Option<cap_std::fs::FileType>)> = dir
        .entries()
        .map_err(|e| io_failed(arg, &e))?
        .filter_map(|entry| entry.ok())
        .map(|entry| (entry.file_name(), entry.file_type().ok()))
        .collect();
    if entries.is_empty() {
        return Ok("[the directory is empty]".to_owned());
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut lines: Vec<String> = entries
        .iter()
        .take(LIST_CAP)
        .map(|(name, file_type)| {
            let shown = name.to_string_lossy();
            match file_type {
                Some(t) if t.is_dir() => format!("{shown}/"),
                Some(t) if t.is_symlink() => {
                    // Followed beneath the directory's handle, or along its canonical path
                    // beneath the root: a link that leaves is refused either way.
                    let target = dir.metadata(name).or_else(|_| {
                        let joined = dir_join(arg, &shown);
                        match root.beneath(&joined, |rel| root.dir.metadata(rel)) {
                            Ok(meta) => Ok(meta),
                            Err(e) if e.code == ErrorCode::ToolDenied => Err(true),
                            Err(_) => Err(false),
                        }
                    });
                    match target {
                        // A link that stays inside is shown as what it points at.
                        Ok(meta) if meta.is_dir() => format!("{shown}/"),
                        Ok(_) => shown.into_owned(),
                        Err(true) => {
                            format!("{shown}  [symbolic link leading outside the workspace root; refused]")
                        }
                        Err(false) => format!("{shown}  [broken symbolic link]"),
                    }
                }
                _ => shown.into_owned(),
            }
        })
        .collect();
    if entries.len() > LIST_CAP {
        lines.push(format!("[truncated: showed the first {LIST_CAP} of {} entries, by name]", entries.len()));
    }
    Ok(lines.join("\n"))
}
