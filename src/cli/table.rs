//! Tables for a person: a header line and rows of cells in fixed-width columns. Every cell
//! passes [`crate::text::for_terminal_line`] before it is measured (names, labels and models
//! come from scripts, configs and providers), and a cell wider than its column is cut with
//! `…`, so one row is always one line.

use crate::money::Money;

/// One column: its header, its width in characters, and whether it aligns right (numbers).
#[derive(Debug, Clone, Copy)]
pub(super) struct Column {
    pub(super) header: &'static str,
    pub(super) width: usize,
    pub(super) right: bool,
}

impl Column {
    pub(super) const fn left(header: &'static str, width: usize) -> Column {
        Column { header, width, right: false }
    }

    pub(super) const fn right(header: &'static str, width: usize) -> Column {
        Column { header, width, right: true }
    }
}

/// The header line of `columns`.
pub(super) fn header(columns: &[Column]) -> String {
    let cells: Vec<&str> = columns.iter().map(|c| c.header).collect();
    row(columns, &cells)
}

/// One row: each cell escaped, cut to its column's width and padded; the last column is not
/// padded on the right.
pub(super) fn row<S: AsRef<str>>(columns: &[Column], cells: &[S]) -> String {
    let mut line = String::new();
    for (i, (column, cell)) in columns.iter().zip(cells).enumerate() {
        if i > 0 {
            line.push_str("  ");
        }
        let text = fit(&crate::text::for_terminal_line(cell.as_ref()), column.width);
        let pad = column.width.saturating_sub(text.chars().count());
        let last = i + 1 == columns.len();
        if column.right {
            line.extend(std::iter::repeat_n(' ', pad));
            line.push_str(&text);
        } else {
            line.push_str(&text);
            if !last {
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
    }
    line
}

/// `text` cut to `width` characters, the last one `…` when anything was cut.
fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// An amount for a table: `$0.000013`, or `-` for none.
pub(super) fn money(amount: Option<Money>) -> String {
    amount.map_or_else(|| "-".to_owned(), |m| m.to_string())
}

/// A duration for a table: `850 ms`, `12.4 s`, `3m 05s`, or `-` for none.
pub(super) fn duration(ms: Option<i64>) -> String {
    match ms {
        None => "-".to_owned(),
        Some(ms) if ms < 1_000 => format!("{} ms", ms.max(0)),
        Some(ms) if ms < 60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        Some(ms) => format!("{}m {:02}s", ms / 60_000, ms % 60_000 / 1000),
    }
}

/// `YYYY-MM-DD HH:MM:SS` UTC for epoch milliseconds.
pub(super) fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formats_epoch_millis() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_764_456_000_000), "2025-11-29 22:40:00");
    }

    #[test]
    fn cells_are_escaped_cut_and_aligned() {
        let columns = [Column::left("NAME", 6), Column::right("N", 4), Column::left("LAST", 10)];
        assert_eq!(header(&columns), "NAME       N  LAST");
        assert_eq!(row(&columns, &["a\u{1b}[2Jb", "7", "x"]), "a\\u{1…     7  x");
        assert_eq!(row(&columns, &["two\nlines", "12345", "é"]), "two\\n…  123…  é");
    }

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(duration(None), "-");
        assert_eq!(duration(Some(850)), "850 ms");
        assert_eq!(duration(Some(12_400)), "12.4 s");
        assert_eq!(duration(Some(185_000)), "3m 05s");
    }
}
