//! `search_text`: a walk of the tree under a path, bounded in files, bytes, time and matches,
//! that never follows a symbolic link and stops at once when its call is abandoned.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use regex::Regex;

use super::root::{Root, dir_join, normalized};
use crate::error::{Error, ErrorCode};

/// Matches `search_text` returns when no `max_results` is given.
pub(super) const SEARCH_DEFAULT_RESULTS: u64 = 100;

/// The largest `max_results` allowed.
pub(super) const SEARCH_MAX_RESULTS: u64 = 500;

/// Files larger than this are skipped by `search_text`: they are rarely source text, and
/// reading them would make one search slow.
const SEARCH_FILE_CAP: u64 = 1024 * 1024;

/// Files one search scans at most, to bound its time on a huge tree.
const SEARCH_MAX_FILES: usize = 20_000;

/// Bytes one search reads at most, for the same reason.
const SEARCH_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// Bytes of a matching line shown in a search result; longer lines are cut.
const SEARCH_LINE_CAP: usize = 500;

/// The default bound on one `search_text` call's time.
pub(crate) const SEARCH_DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The bounds of one toolset's searches (`max_scan_bytes`, `timeout_ms` in its config).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SearchBounds {
    /// Bytes one call reads at most.
    pub(crate) max_scan_bytes: u64,
    /// Time one call may take.
    pub(crate) timeout: Duration,
}

impl Default for SearchBounds {
    fn default() -> SearchBounds {
        SearchBounds { max_scan_bytes: SEARCH_MAX_BYTES, timeout: SEARCH_DEFAULT_TIMEOUT }
    }
}

/// One call's bounds: its deadline, its scan budget, and whether it was abandoned.
pub(super) struct Limits {
    pub(super) deadline: Instant,
    pub(super) bounds: SearchBounds,
    pub(super) abandoned: Arc<AtomicBool>,
}

impl Limits {
    /// Why the call must stop now, if it must.
    fn stop(&self) -> Option<Stop> {
        if self.abandoned.load(Ordering::Relaxed) {
            Some(Stop::Abandoned)
        } else if Instant::now() >= self.deadline {
            Some(Stop::Deadline)
        } else {
            None
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Stop {
    Abandoned,
    Deadline,
}

/// What a search walk still has to visit, as root-relative paths (opened beneath the root
/// handle when their turn comes): real directories and regular files, never links.
enum Item {
    Dir(String),
    File(String),
}

/// What a search skipped or where it stopped, for the closing note.
#[derive(Default)]
struct SearchStats {
    files: usize,
    bytes: u64,
    binary: usize,
    large: usize,
    links: usize,
    unreadable: usize,
    more_matches: bool,
    scan_cap: bool,
    deadline: bool,
}

pub(super) fn search_text(
    root: &Root,
    pattern: &Regex,
    arg: &str,
    max_results: u64,
    limits: &Limits,
) -> Result<String, Error> {
    let meta = root.beneath(arg, |rel| root.dir.metadata(rel))?;
    // Results name files by their real path under the root (a start through an inside link
    // reports where the files are); every open below still goes through the root handle.
    let start = match root.resolve(arg) {
        Ok(canonical) => match canonical.strip_prefix(&root.path) {
            Ok(inside) => normalized(&inside.to_string_lossy()),
            Err(_) => normalized(arg),
        },
        Err(e) => return Err(e),
    };
    let mut stack = vec![if meta.is_dir() { Item::Dir(start) } else { Item::File(start) }];
    let mut results: Vec<String> = Vec::new();
    let mut stats = SearchStats::default();
    'walk: while let Some(item) = stack.pop() {
        match limits.stop() {
            Some(Stop::Abandoned) => {
                return Err(Error::new(ErrorCode::Cancelled, "search_text was abandoned"));
            }
            Some(Stop::Deadline) => {
                stats.deadline = true;
                break 'walk;
            }
            None => {}
        }
        match item {
            Item::Dir(rel) => {
                // Opened beneath the root: a directory swapped for a link since it was
                // listed is refused, never followed out.
                let Ok(dir) = root.dir.open_dir(Path::new(&rel)) else {
                    stats.unreadable += 1;
                    continue;
                };
                let Ok(read) = dir.entries() else {
                    stats.unreadable += 1;
                    continue;
                };
                let mut entries: Vec<_> = read.filter_map(|e| e.ok()).collect();
                entries.sort_by_key(|e| e.file_name());
                // Reversed onto the stack so they come off in name order.
                for entry in entries.into_iter().rev() {
                    let Ok(file_type) = entry.file_type() else {
                        stats.unreadable += 1;
                        continue;
                    };
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if file_type.is_symlink() {
                        stats.links += 1;
                    } else if file_type.is_dir() {
                        if !name.starts_with('.') {
                            stack.push(Item::Dir(dir_join(&rel, &name)));
                        }
                    } else if file_type.is_file() {
                        stack.push(Item::File(dir_join(&rel, &name)));
                    }
                }
            }
            Item::File(rel) => {
                if stats.files >= SEARCH_MAX_FILES || stats.bytes >= limits.bounds.max_scan_bytes {
                    stats.scan_cap = true;
                    break 'walk;
                }
                let Some(text) = read_searchable(root, &rel, &mut stats, limits)? else {
                    continue;
                };
                for (index, line) in text.lines().enumerate() {
                    if index % 256 == 0 {
                        match limits.stop() {
                            Some(Stop::Abandoned) => {
                                return Err(Error::new(ErrorCode::Cancelled, "search_text was abandoned"));
                            }
                            Some(Stop::Deadline) => {
                                stats.deadline = true;
                                break 'walk;
                            }
                            None => {}
                        }
                    }
                    if !pattern.is_match(line) {
                        continue;
                    }
                    if results.len() as u64 >= max_results {
                        stats.more_matches = true;
                        break 'walk;
                    }
                    results.push(format!("{rel}:{}: {}", index + 1, clip(line, SEARCH_LINE_CAP)));
                }
            }
        }
    }
    let mut notes = Vec::new();
    if stats.more_matches {
        notes.push(format!(
            "[stopped at max_results={max_results}; more matches exist — narrow the pattern or path{}]",
            if max_results < SEARCH_MAX_RESULTS { ", or raise max_results (at most 500)" } else { "" }
        ));
    }
    if stats.scan_cap {
        notes.push(format!(
            "[stopped early after scanning {} files ({} bytes), the most one search reads; narrow the path]",
            stats.files, stats.bytes
        ));
    }
    if stats.deadline {
        notes.push(format!(
            "[stopped early at the {} s time limit of one search after {} files; narrow the pattern or path]",
            limits.bounds.timeout.as_secs_f64(),
            stats.files
        ));
    }
    let skipped: Vec<String> = [
        (stats.binary, "binary"),
        (stats.large, "over 1 MiB"),
        (stats.links, "symbolic links, not followed"),
        (stats.unreadable, "unreadable"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    if !skipped.is_empty() {
        notes.push(format!("[skipped: {}]", skipped.join(", ")));
    }
    if results.is_empty() {
        results.push(format!("no matches in {} files", stats.files));
    }
    results.extend(notes);
    Ok(results.join("\n"))
}

/// A file's text for searching, or `None` when it is skipped (too large, binary,
/// unreadable). Only a confinement refusal is an error: that must never be skipped quietly.
fn read_searchable(
    root: &Root,
    rel: &str,
    stats: &mut SearchStats,
    limits: &Limits,
) -> Result<Option<String>, Error> {
    let file = match root.open_file(rel) {
        Ok(file) => file,
        Err(e) if e.code == ErrorCode::ToolDenied => return Err(e),
        Err(_) => {
            stats.unreadable += 1;
            return Ok(None);
        }
    };
    if file.metadata().map(|m| m.len()).unwrap_or(u64::MAX) > SEARCH_FILE_CAP {
        stats.large += 1;
        return Ok(None);
    }
    // Bounded even if the file grew since its size was read, and by what the call may
    // still scan.
    let budget = limits.bounds.max_scan_bytes.saturating_sub(stats.bytes);
    let mut bytes = Vec::new();
    if file.take((SEARCH_FILE_CAP + 1).min(budget.saturating_add(1))).read_to_end(&mut bytes).is_err() {
        stats.unreadable += 1;
        return Ok(None);
    }
    stats.files += 1;
    stats.bytes += bytes.len() as u64;
    if bytes.len() as u64 > SEARCH_FILE_CAP {
        stats.large += 1;
        return Ok(None);
    }
    if bytes.len() as u64 > budget {
        // Past the call's scan budget: the walk stops at the next file.
        bytes.truncate(budget as usize);
    }
    if bytes.contains(&0) {
        stats.binary += 1;
        return Ok(None);
    }
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// `line` cut to at most `cap` bytes on a char boundary, marked when cut.
fn clip(line: &str, cap: usize) -> String {
    if line.len() <= cap {
        return line.to_owned();
    }
    let mut end = cap;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}
