//! Tidy checks over the crate's own source, run by `cargo test` (rust-analyzer's `tidy.rs`):
//! no circle in the import graph between files of `src/` beyond the listed exceptions, and no
//! file of `src/` past [`MAX_LINES`] lines unless its `//!` docs say why it reads better whole.
//! `CAIRN_TIDY_EDGES=1 cargo test --lib tidy -- --nocapture` prints every edge of a circle.

mod api;
mod graph;

use std::collections::{BTreeMap, BTreeSet};

/// Import edges left in place for now, each with why; every other circle fails the test.
/// An edge here that no longer exists fails it too, so the list only shrinks.
const ALLOWED_EDGES: &[(&str, &str, &str)] = &[
    // The engine's type-level recursion: what runs on the engine reaches back to it.
    (
        "src/engine/registry.rs",
        "src/engine/workflow.rs",
        "the engine holds registered workflows, each a function of a Ctx whose run state holds the engine",
    ),
    (
        "src/engine/registry.rs",
        "src/engine/dialect.rs",
        "the engine holds its dialects, and a dialect prepares scripts against the Engine",
    ),
];

#[test]
fn no_import_circles_between_files() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let graph = match graph::build(root) {
        Ok(graph) => graph,
        Err(e) => panic!("reading the crate: {e}"),
    };
    let mut stale = Vec::new();
    let mut edges: BTreeMap<String, BTreeSet<String>> =
        graph.edges.iter().map(|(from, targets)| (from.clone(), targets.keys().cloned().collect())).collect();
    for (from, to, _why) in ALLOWED_EDGES {
        let removed = edges.get_mut(*from).is_some_and(|targets| targets.remove(*to));
        if !removed {
            stale.push(format!("{from} → {to}"));
        }
    }
    let mut report = String::new();
    for component in graph::cycles(&edges) {
        if std::env::var_os("CAIRN_TIDY_EDGES").is_some() {
            for from in &component {
                for to in edges.get(from).into_iter().flatten().filter(|t| component.contains(t)) {
                    println!("EDGE {from} -> {to} ({})", graph.edges[from][to]);
                }
            }
        }
        let circle = graph::shortest_circle(&edges, &component, &component[0]);
        report.push_str(&format!("circle among {} files: {}\n", component.len(), component.join(", ")));
        for (i, from) in circle.iter().enumerate() {
            let to = &circle[(i + 1) % circle.len()];
            let evidence = graph.edges.get(from).and_then(|t| t.get(to)).cloned().unwrap_or_default();
            report.push_str(&format!("    {from} → {to}   (names `{evidence}`)\n"));
        }
    }
    assert!(stale.is_empty(), "allowed edges that no longer exist (remove them): {stale:?}");
    assert!(report.is_empty(), "import circles between files of src/:\n{report}");
}

/// One owner for run state, called one way (#32): the engine's entry (`engine/mod.rs`) is
/// imported by nothing below it; only the entry starts the lifecycle (`lifecycle.rs`); and
/// what `RunState` owns (the lease and inbox, the writer, liveness) never reaches back to
/// `RunState` or to the lifecycle that drives it.
#[test]
fn the_run_lifecycle_is_called_one_way() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let graph = match graph::build(root) {
        Ok(graph) => graph,
        Err(e) => panic!("reading the crate: {e}"),
    };
    const OWNED: &[&str] = &["src/engine/lease.rs", "src/engine/writer.rs", "src/engine/liveness.rs"];
    const DRIVERS: &[&str] = &["src/engine/run.rs", "src/engine/settle.rs", "src/engine/lifecycle.rs"];
    let mut wrong = Vec::new();
    for (from, targets) in &graph.edges {
        for (to, evidence) in targets {
            let back_to_entry = to == "src/engine/mod.rs" && from.starts_with("src/engine/");
            let starts_a_run = to == "src/engine/lifecycle.rs" && from != "src/engine/mod.rs";
            let owned_reaches_back = OWNED.contains(&from.as_str()) && DRIVERS.contains(&to.as_str());
            if back_to_entry || starts_a_run || owned_reaches_back {
                wrong.push(format!("{from} → {to} (names `{evidence}`)"));
            }
        }
    }
    assert!(wrong.is_empty(), "the run's lifecycle must be called one way: {wrong:#?}");
}

/// The most lines a file of `src/` has before it needs its reason (issue #32: "no file past
/// ~800 lines unless it is one concept that reads better whole").
const MAX_LINES: usize = 800;

/// What a longer file's `//!` docs say, in so many words, before its reason.
const LONG_REASON: &str = "reads better whole";

#[test]
fn no_long_file_without_its_reason() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    if let Err(e) = graph::rust_files(&root.join("src"), &mut files) {
        panic!("reading the crate: {e}");
    }
    let mut long = Vec::new();
    for path in files {
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => panic!("{}: {e}", path.display()),
        };
        let lines = text.lines().count();
        let docs: String = text
            .lines()
            .take_while(|line| line.starts_with("//!"))
            .map(|line| line.trim_start_matches("//!").trim())
            .collect::<Vec<_>>()
            .join(" ");
        if lines > MAX_LINES && !docs.contains(LONG_REASON) {
            let shown = path.strip_prefix(root).unwrap_or(&path).display().to_string();
            long.push(format!("{shown} ({lines} lines)"));
        }
    }
    long.sort();
    assert!(
        long.is_empty(),
        "files past {MAX_LINES} lines without a reason in their `//!` docs (split them, \
         or say \"... {LONG_REASON}: why\"): {long:?}"
    );
}
