//! The planner's overhead outside model calls, per draft: extracting the script from the reply,
//! `ScriptDialect::check` (lint and compile in one pass) and, for a rejected draft, rendering the
//! repair prompt with its diagnostics as JSON. Goal: under 10 ms per draft for a 200-line script,
//! so the repair loop's cost is the model's alone.
//!
//! The workload is the realistic 200-line release-notes workflow of the lint bench
//! (`planner_draft.rhai`), in a reply with prose around its fenced block. Run with
//! `cargo bench --bench planner`.

use std::collections::BTreeSet;
use std::hint::black_box;
use std::sync::Arc;

use cairn::__internal::{extract_script, repair_prompt};
use cairn::{Diagnostic, Engine, LintContext, MemoryStore};
use criterion::{Criterion, criterion_group, criterion_main};

const SCRIPT: &str = include_str!("planner_draft.rhai");

fn context() -> LintContext {
    let names = |items: &[&str]| items.iter().map(|item| (*item).to_owned()).collect::<BTreeSet<String>>();
    let mut ctx = LintContext::empty();
    ctx.profiles = names(&["critic", "researcher", "writer"]);
    ctx.toolsets = names(&["files", "web"]);
    ctx.host_functions = names(&["fetch_page", "search_docs"]);
    ctx.child_workflows = names(&["audit", "summarize"]);
    ctx
}

/// One draft's planner-side work: extract, check, and the repair prompt when it has errors.
fn overhead(reply: &str, check: &dyn Fn(&str) -> Vec<Diagnostic>) -> usize {
    let source = extract_script(reply);
    let diagnostics = check(source);
    let errors: Vec<Diagnostic> = diagnostics.into_iter().filter(Diagnostic::is_error).collect();
    if errors.is_empty() {
        return source.len();
    }
    repair_prompt("Draft, review and publish release notes", "rhai", source, &errors).len()
}

fn bench_planner(c: &mut Criterion) {
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::builder(store).build().expect("an engine");
    let dialect = engine.dialect("rhai").expect("the rhai dialect");
    let ctx = context();
    let check = |source: &str| dialect.check(source, &ctx);
    assert!(SCRIPT.lines().count() >= 200, "the workload is a 200-line script");

    let accepted = format!("Here is the workflow.\n\n```rhai\n{SCRIPT}```\n\nIt fans out per commit.");
    assert!(check(extract_script(&accepted)).iter().all(|d| !d.is_error()), "the accepted draft lints clean");
    c.bench_function("plan_overhead_accepted_200_lines", |b| {
        b.iter(|| overhead(black_box(&accepted), &check))
    });

    // The same script with mistakes a model makes: an unknown function, a misspelled option.
    let broken = SCRIPT.replacen("log(\"info\"", "console_log(\"info\"", 1).replacen("label:", "lable:", 1);
    let rejected = format!("Here is the workflow.\n\n```rhai\n{broken}```\n");
    assert!(
        check(extract_script(&rejected)).iter().any(Diagnostic::is_error),
        "the broken draft is rejected"
    );
    c.bench_function("plan_overhead_rejected_200_lines", |b| {
        b.iter(|| overhead(black_box(&rejected), &check))
    });

    // Once per plan (not per draft): the compact card, derived from the full one.
    c.bench_function("plan_compact_card", |b| {
        b.iter(|| cairn::__internal::compact_card(black_box(dialect.card())).len())
    });
}

criterion_group!(benches, bench_planner);
criterion_main!(benches);
