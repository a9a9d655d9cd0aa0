//! The commands that read: runs, inspect, lint.

use std::io::Write as _;
use std::path::PathBuf;

use clap::Args;
use serde_json::{Value, json};

use super::exit::{Exit, fail};
use super::follow::escaped;
use super::setup::{
    Globals, dialect_of, exit_of, lint_context, load_config, open_store_read_only, parse_args, parse_run_id,
    print_diagnostics, read_script, setup_over,
};
use crate::error::Error;
use crate::script::Diagnostic;
use crate::store::{self, RunFilter, RunStatus};
#[derive(Debug, Args)]
pub(super) struct ListArgs {
    /// Only runs in this status.
    #[arg(long)]
    status: Option<String>,
    /// Only runs carrying this tag (repeat for runs carrying every one of them).
    #[arg(long = "tag")]
    tags: Vec<String>,
    /// At most this many runs, newest first.
    #[arg(long)]
    limit: Option<usize>,
    /// Only runs listed after this run (the last one of the previous page).
    #[arg(long, value_name = "RUN")]
    after: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct InspectArgs {
    /// The run.
    run: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct LintArgs {
    /// The script.
    file: PathBuf,
    /// The script's dialect (rhai, lua); default: from the file's extension.
    #[arg(long)]
    dialect: Option<String>,
    /// Print the diagnostics as a JSON array (with `--bound`, an object with `diagnostics` and
    /// `cost_bound`).
    #[arg(long)]
    json: bool,
    /// Also print the static cost bound: the most agent calls the script can make and their
    /// worst-case cost, or why it has none.
    #[arg(long)]
    bound: bool,
    /// The run's args for the bound (JSON, or @FILE): they size loops and fan-outs over `args`.
    #[arg(long, requires = "bound")]
    args: Option<String>,
}

pub(super) fn list(globals: &Globals, args: &ListArgs) -> Exit {
    let statuses = match args.status.as_deref() {
        None => Vec::new(),
        Some(text) => match serde_json::from_value::<RunStatus>(json!(text)) {
            Ok(status) => vec![status],
            Err(_) => {
                return fail(
                    Exit::Usage,
                    format!(
                        "unknown status {text:?} (use running, ok, error, cancelled, exhausted, suspended or queued)"
                    ),
                );
            }
        },
    };
    let config = match load_config(globals) {
        Ok(config) => config,
        Err(e) => return fail(exit_of(&e), e),
    };
    let opened = match open_store_read_only(globals, &config) {
        Ok(Some(opened)) => opened,
        Ok(None) => {
            if args.json {
                println!("[]");
            } else {
                eprintln!("no runs");
            }
            return Exit::Ok;
        }
        Err(e) => return fail(exit_of(&e), e),
    };
    let after = match args.after.as_deref().map(parse_run_id).transpose() {
        Ok(None) => None,
        Ok(Some(run)) => match opened.journal.get_meta(&run) {
            Ok(Some(meta)) => Some(store::RunCursor::of(&meta)),
            Ok(None) => return fail(Exit::Usage, format!("unknown run {run} (given as --after)")),
            Err(e) => return fail(Exit::Error, e),
        },
        Err(exit) => return exit,
    };
    // Read in pages of at most `LIST_PAGE` runs, each printed before the next is read, so a
    // store of any size lists in bounded memory; each page starts after the previous one's
    // last run, so runs created meanwhile (newer, so before the cursor) never shift it.
    let mut filter = RunFilter { statuses, tags: args.tags.clone(), after, ..RunFilter::default() };
    let mut left = args.limit.unwrap_or(usize::MAX);
    let mut stdout = std::io::stdout().lock();
    // A closed pipe (`cairn runs | head`) ends the listing: nothing more to show.
    let closed = std::cell::Cell::new(false);
    let mut line = |text: String| {
        if writeln!(stdout, "{text}").is_err() {
            closed.set(true);
        }
    };
    let mut table: Option<super::listing::TablePrinter> = None;
    // JSON: the array `serde_json::to_string_pretty` would print, one element at a time (each
    // held until the next says whether a comma follows it).
    let mut held: Option<String> = None;
    let mut listed = 0usize;
    while left > 0 {
        filter.limit = Some(left.min(LIST_PAGE));
        let page = match opened.journal.list_runs(&filter) {
            Ok(page) => page,
            Err(e) => return fail(Exit::Error, e),
        };
        let full = page.len() == filter.limit.unwrap_or(0);
        left = left.saturating_sub(page.len());
        let next = page.last().map(store::RunCursor::of);
        let runs = super::listing::listed(opened.journal.as_ref(), page);
        for run in &runs {
            if args.json {
                let element = serde_json::to_string_pretty(&super::listing::json_of(run)).unwrap_or_default();
                match held.take() {
                    Some(previous) => line(format!("{previous},")),
                    None => line("[".into()),
                }
                held = Some(format!("  {}", element.replace('\n', "\n  ")));
            } else {
                if table.is_none() {
                    table = Some(super::listing::TablePrinter::new(&runs, &mut line));
                }
                if let Some(table) = table.as_mut() {
                    table.row(run, &mut line);
                }
            }
            listed += 1;
        }
        match next {
            Some(cursor) if full && !closed.get() => filter.after = Some(cursor),
            _ => break,
        }
    }
    match (args.json, table) {
        (true, _) if listed == 0 => line("[]".into()),
        (true, _) => {
            line(held.take().unwrap_or_default());
            line("]".into());
        }
        (false, Some(table)) => table.finish(&mut line),
        (false, None) => eprintln!("no runs"),
    }
    let _ = stdout.flush();
    Exit::Ok
}

/// The most runs `cairn runs` reads from the store at once.
const LIST_PAGE: usize = 500;

pub(super) fn inspect(globals: &Globals, args: &InspectArgs) -> Exit {
    let run_id = match parse_run_id(&args.run) {
        Ok(id) => id,
        Err(exit) => return exit,
    };
    let config = match load_config(globals) {
        Ok(config) => config,
        Err(e) => return fail(exit_of(&e), e),
    };
    let opened = match open_store_read_only(globals, &config) {
        Ok(Some(opened)) => opened,
        Ok(None) => return fail(Exit::Usage, format!("unknown run {run_id}")),
        Err(e) => return fail(exit_of(&e), e),
    };
    let meta = match opened.journal.get_meta(&run_id) {
        Ok(Some(meta)) => meta,
        Ok(None) => return fail(Exit::Usage, format!("unknown run {run_id}")),
        Err(e) => return fail(Exit::Error, e),
    };
    // The journal read page by page: what inspect shows of it, never the journal itself.
    let store = opened.journal.as_ref();
    let read = match super::inspect_read::inspect(store, &run_id) {
        Ok(read) => read,
        Err(e) => return fail(Exit::Error, e),
    };
    let super::inspect_read::Inspected { digest, orchestrations, tools } = read;
    let pending = digest.pending();
    let failure = digest.error.clone();
    let segments = digest.segments(meta.segments, meta.budget_ceiling);
    let actions = digest.actions.clone();
    let cost = &digest.cost;
    if args.json {
        // The entries are written as they are read again, between the other fields.
        let mut out =
            json!({ "meta": meta.to_output_json(), "pending": pending, "cost": cost, "segments": segments });
        if let Some(failure) = &failure {
            out["error"] = failure.clone();
        }
        if !orchestrations.is_empty() {
            out["orchestrations"] = json!(orchestrations);
        }
        if !tools.is_empty() {
            out["tools"] = json!(tools);
        }
        if !actions.is_empty() {
            out["actions"] = json!(actions);
        }
        let Value::Object(fields) = out else { return Exit::Error };
        let stdout = std::io::stdout();
        return match super::inspect_read::write_json(&mut stdout.lock(), store, &run_id, fields) {
            Ok(()) => Exit::Ok,
            Err(e) => fail(Exit::Error, e),
        };
    }
    println!("run       {}", meta.run_id);
    println!("workflow  {}", crate::text::for_terminal_line(meta.name.as_deref().unwrap_or("-")));
    println!("status    {}", meta.status);
    if let Some(failure) = &failure {
        println!("error     {}", failure_line(failure));
    }
    println!("created   {}", super::table::utc(meta.created_at_ms));
    println!("segments  {}", meta.segments);
    for segment in &segments {
        let ceiling = segment.ceiling.map_or("none".into(), |c| c.to_string());
        let how = if segment.overridden { " (raised on resume)" } else { "" };
        println!("  {:>6}  ceiling {ceiling}{how}", segment.index);
    }
    println!("ceiling   {}", meta.budget_ceiling.map_or("none".into(), |c| c.to_string()));
    println!("spent     {} ({} tokens)", cost.total.cost, cost.total.usage.total_tokens());
    println!("journal   {} entries", digest.entries);
    for (what, n) in &digest.counts {
        println!("  {n:>6}  {what}");
    }
    for (model, line) in &cost.by_model {
        let model = crate::text::for_terminal_line(model);
        println!(
            "model     {model}: {} in {} calls, {} tokens",
            line.cost,
            line.entries,
            line.usage.total_tokens()
        );
    }
    if !cost.unpriced.is_empty() {
        println!("unpriced  {} entries (usage known, cost not)", cost.unpriced.len());
    }
    out!("");
    let mut calls = super::calls::CallTable::new(|line| out!("{line}"));
    // The journal read a second time, page by page.
    for entry in crate::journal::entries(store, &run_id, 0) {
        match entry {
            Ok(entry) => calls.push(&entry),
            Err(e) => return fail(Exit::Error, e),
        }
    }
    if calls.finish() == 0 {
        out!("(no calls)");
    }
    out!("");
    super::orchestrate::print_report(&orchestrations);
    super::tool_report::print_tool_report(&tools);
    for action in &actions {
        let key = action["key"].as_str().map_or(String::new(), |k| format!(" {k:?}"));
        println!(
            "{}",
            escaped(&format!(
                "by        {}{key} by {} (seq {})",
                action["action"].as_str().unwrap_or("?"),
                action["by"].as_str().unwrap_or("?"),
                action["seq"]
            ))
        );
    }
    for p in &pending {
        let prompt = p["prompt"].as_str().map_or(String::new(), |p| format!(" — {p}"));
        println!(
            "{}",
            escaped(&format!(
                "pending   {} (seq {}): cairn resolve {run_id} {} '<json>'{prompt}",
                p["key"],
                p["seq"],
                p["key"].as_str().unwrap_or("")
            ))
        );
    }
    Exit::Ok
}

pub(super) fn lint(globals: &Globals, args: &LintArgs) -> Exit {
    let (_, source) = match read_script(&args.file) {
        Ok(found) => found,
        Err(exit) => return exit,
    };
    // Linting needs the configured names, not the store: nothing is opened or created.
    let in_memory = load_config(globals).and_then(|config| {
        let opened = store::open("memory").map_err(Error::from)?;
        setup_over(globals, config, opened, None, None)
    });
    let (setup, dialect) = match in_memory {
        Ok(setup) => match dialect_of(&setup.engine, &args.file, args.dialect.as_deref()) {
            Ok(dialect) => (setup, dialect),
            Err(exit) => return exit,
        },
        Err(e) => return fail(exit_of(&e), e),
    };
    let context = lint_context(&setup);
    let diagnostics = dialect.check(&source, &context);
    if args.bound {
        let run_args = match parse_args(args.args.as_deref()) {
            Ok(value) => value,
            Err(exit) => return exit,
        };
        let bound =
            crate::script::bound::cost_bound(&setup.engine, dialect.as_ref(), &source, &run_args, None);
        if args.json {
            let both = json!({"diagnostics": diagnostics, "cost_bound": bound});
            println!("{}", serde_json::to_string_pretty(&both).unwrap_or_else(|_| "{}".into()));
        } else {
            print_diagnostics(&args.file, &diagnostics, false);
            println!("cost bound: {}", escaped(&bound.to_string()));
        }
    } else {
        print_diagnostics(&args.file, &diagnostics, args.json);
    }
    if diagnostics.iter().any(Diagnostic::is_error) { Exit::Rejected } else { Exit::Ok }
}

/// A journaled failure (`{code, message, where}`) on one line: `code: message (at kind NAME,
/// seq N)`, every part shown safely.
fn failure_line(failure: &Value) -> String {
    let text = |v: &Value| crate::text::for_terminal_line(v.as_str().unwrap_or("")).into_owned();
    let mut line = format!("{}: {}", text(&failure["code"]), text(&failure["message"]));
    let at = &failure["where"];
    if let Some(seq) = at["seq"].as_u64() {
        let name = at["name"]
            .as_str()
            .map(|n| format!(" {}", crate::text::for_terminal_line(n)))
            .unwrap_or_default();
        line.push_str(&format!(" (at {}{name}, seq {seq})", text(&at["kind"])));
    }
    line
}
