//! Lint and compile of a realistic 200-line workflow script: the planner's repair loop runs
//! both on every draft, so they must stay far below a model turn (goal: under 5 ms). The same
//! script with a dozen mistakes of other languages and misspellings measures the recovering
//! path: the pre-scan, one rewritten parse per error it cannot rewrite, and the lint.
//!
//! The Lua twin of the workload (`lint/parallel-capture-assign/good_release_notes.lua`, which
//! the lint folder test also checks) measures Lua lint the same way.
//!
//! Run with `cargo bench --bench lint`.

use std::collections::BTreeSet;
use std::hint::black_box;

use cairn::__internal::rhai::{compile, lint};
use cairn::LintContext;
use criterion::{Criterion, criterion_group, criterion_main};

/// A release-notes workflow in the shape planners write: phases, fan-out in both forms, a
/// pipeline, steps, host calls, a child workflow, a human approval and structured output.
const SCRIPT: &str = r#"// Draft, review and publish release notes for one repository.
// Input: args.repo (owner/name) and args.since (a tag). Output: the published
// notes with the publishing receipt, or the draft when publishing is declined.
let repo = args.repo;
let since = args.since;
let started = now();
log("info", "release notes started", #{repo: repo, since: since});

let commit_schema = #{
    type: "object",
    properties: #{
        kind: #{type: "string", enum: ["feature", "fix", "chore", "docs"]},
        summary: #{type: "string"},
        breaking: #{type: "boolean"},
    },
    required: ["kind", "summary", "breaking"],
};

let review_schema = #{
    type: "object",
    properties: #{
        ok: #{type: "boolean"},
        problems: #{type: "array", items: #{type: "string"}},
    },
    required: ["ok", "problems"],
};

fn section_title(kind) {
    switch kind {
        "feature" => "New features",
        "fix" => "Fixes",
        "docs" => "Documentation",
        _ => "Other changes",
    }
}

fn group_by_kind(items) {
    let groups = #{};
    for item in items {
        if item == () { continue; }
        let kind = item.kind;
        if !groups.contains(kind) {
            groups[kind] = [];
        }
        groups[kind].push(item);
    }
    groups
}

fn render_section(title, items) {
    let lines = [`## ${title}`, ""];
    for item in items {
        let marker = if item.breaking { " (breaking)" } else { "" };
        lines.push(`- ${item.summary}${marker}`);
    }
    lines.reduce(|text, line| text + line + "\n", "")
}

let commits = phase("collect", || {
    let raw = host_call("search_docs", #{repo: repo, since: since, kind: "commits"}, #{key: `commits-${repo}`});
    let pages = host_call("fetch_page", #{url: `https://example.com/${repo}/compare`}, #{on_error: "null"});
    let listed = step("normalize commits", || {
        let out = [];
        for c in raw {
            let message = c.message;
            message.trim();
            if message.len() > 0 {
                out.push(#{sha: c.sha, message: message});
            }
        }
        out
    }, #{deps: [repo, since]});
    #{commits: listed, compare: pages}
});

let classified = phase("classify", || {
    parallel(commits.commits, |commit| agent(
        `Classify this commit and summarize it in one line:\n${commit.message}`,
        #{
            profile: "researcher",
            schema: commit_schema,
            max_turns: 2,
            max_output_tokens: 400,
            on_error: "null",
            label: "classify",
        },
    ), #{concurrency: 8, label: "classify commits"})
});

let groups = group_by_kind(classified);
let kinds = groups.keys();
kinds.sort();

let sections = phase("draft", || {
    pipeline(kinds, [
        |kind| #{kind: kind, text: render_section(section_title(kind), groups[kind])},
        |section| agent(
            `Polish this release notes section. Keep every item, fix grammar only:\n${section.text}`,
            #{profile: "writer", max_turns: 3, key: `polish-${section.kind}`},
        ),
    ], #{on_item_error: "collect", concurrency: 4})
});

let draft = sections.results.reduce(|text, part| text + part + "\n", `# ${repo} release notes\n\n`);

let reviews = phase("review", || {
    parallel([
        || agent(`Check these notes for missing breaking changes:\n${draft}`, #{
            profile: "critic",
            schema: review_schema,
            key: "review-breaking",
            effort: "high",
        }),
        || agent(`Check these notes for tone and clarity:\n${draft}`, #{
            profile: "critic",
            schema: review_schema,
            key: "review-tone",
        }),
        || workflow("audit", #{text: draft, repo: repo}, #{budget: 0.5, on_error: "null"}),
    ], #{settle: true, label: "reviews"})
});

// Collect every problem the reviewers reported; a failed reviewer is itself
// a problem, so the revision sees it.
let problems = [];
for review in reviews {
    if review.status != "ok" {
        problems.push(`a reviewer failed: ${review.error}`);
        continue;
    }
    let value = review.value;
    if value == () { continue; }
    if type_of(value) == "map" && value.contains("problems") {
        for problem in value.problems {
            problems.push(problem);
        }
    }
}

let final_text = if problems.len() > 0 {
    log("warn", "reviewers found problems", #{count: problems.len()});
    agent(`Revise the notes to fix these problems:\n${problems}\n\nNotes:\n${draft}`, #{
        profile: "writer",
        max_turns: 4,
        key: "revise",
        result: "value",
    })
} else {
    draft
};

// Budget check before the paid tail of the run: publishing and the sampled audit.
let spent = budget.spent();
let left = budget.remaining();
if left != () && left < 1.0 {
    log("warn", "little budget left before publishing", #{left: left});
}

let approval = await_external("publish-approval", #{
    prompt: `Publish the ${repo} release notes? ${problems.len()} problems were fixed.`,
    schema: #{
        type: "object",
        properties: #{approved: #{type: "boolean"}, note: #{type: "string"}},
        required: ["approved"],
    },
});

if !approval.approved {
    log("info", "publishing declined", #{note: approval.note});
    return #{published: false, draft: final_text, spent: spent};
}

let receipt = host_call("fetch_page", #{url: `https://example.com/${repo}/publish`, body: final_text}, #{
    key: `publish-${repo}`,
    label: "publish",
});

// One in ten runs gets an independent summary, sampled deterministically:
// random() is journaled, so a resumed run makes the same choice.
let run_id = uuid();
let sample = random("audit-sample");
if sample < 0.1 {
    workflow("summarize", #{text: final_text}, #{key: "sampled-summary", on_error: "null"});
}

let finished = now();
log("info", "release notes published", #{
    repo: repo,
    ms: finished - started,
    sections: kinds.len(),
    run: run_id,
});

#{
    published: true,
    receipt: receipt,
    sections: kinds,
    problems: problems,
    spent: spent,
    text: final_text,
}
"#;

fn context() -> LintContext {
    let names = |items: &[&str]| items.iter().map(|item| (*item).to_owned()).collect::<BTreeSet<String>>();
    let mut ctx = LintContext::empty();
    ctx.profiles = names(&["critic", "researcher", "writer"]);
    ctx.toolsets = names(&["files", "web"]);
    ctx.host_functions = names(&["fetch_page", "search_docs"]);
    ctx.child_workflows = names(&["audit", "summarize"]);
    ctx
}

/// [`SCRIPT`] as a model fresh from JavaScript, Python and Lua drafts it: each replacement
/// puts in one mistake, and every one must be reported in a single lint.
fn with_mistakes() -> String {
    let replacements = [
        (
            "log(\"info\", \"release notes started\", #{repo: repo, since: since})",
            "console.log(\"started\", {repo: repo})",
        ),
        ("if item == () { continue; }", "if item === null { continue; }"),
        ("if message.len() > 0 {", "if message.length > 0 and True {"),
        ("            profile: \"researcher\",", "            profle: \"researcher\","),
        ("if value == () { continue; }", "if value is None { continue; }"),
        ("if left != () && left < 1.0 {", "if left ~= nil && left < 1.0 {"),
        ("let finished = now();", "let finished = Date.now();"),
        ("let run_id = uuid();", "let run_id = uuid_v4();"),
        ("let spent = budget.spent();", "let spent = budget.spend();"),
        ("let left = budget.remaining();", "let left = await budget.remaining();"),
    ];
    let mut script = SCRIPT.to_owned();
    for (from, to) in replacements {
        assert!(script.contains(from), "the workload has {from:?}");
        script = script.replacen(from, to, 1);
    }
    script
}

fn bench_lint(c: &mut Criterion) {
    let ctx = context();
    assert!(SCRIPT.lines().count() >= 200, "the workload is a 200-line script");
    let diagnostics = lint(SCRIPT, &ctx);
    assert!(diagnostics.is_empty(), "the workload lints clean: {diagnostics:#?}");
    c.bench_function("lint_200_lines", |b| b.iter(|| lint(black_box(SCRIPT), &ctx)));
    c.bench_function("compile_200_lines", |b| b.iter(|| compile(black_box(SCRIPT), &ctx)));
    let broken = with_mistakes();
    let found = lint(&broken, &ctx);
    assert!(found.len() >= 12, "every mistake is reported in one pass: {found:#?}");
    c.bench_function("lint_200_lines_with_mistakes", |b| b.iter(|| lint(black_box(&broken), &ctx)));

    assert!(LUA_SCRIPT.lines().count() >= 200, "the Lua workload is a 200-line script");
    let diagnostics = cairn::__internal::lua::lint(LUA_SCRIPT, &ctx);
    assert!(diagnostics.is_empty(), "the Lua workload lints clean: {diagnostics:#?}");
    c.bench_function("lua_lint_200_lines", |b| {
        b.iter(|| cairn::__internal::lua::lint(black_box(LUA_SCRIPT), &ctx))
    });
}

/// The same release-notes workflow in Lua.
const LUA_SCRIPT: &str = include_str!("../lint/parallel-capture-assign/good_release_notes.lua");

criterion_group!(benches, bench_lint);
criterion_main!(benches);
