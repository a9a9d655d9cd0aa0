//! Issue 24's property test, through the `cairn` binary in both dialects: generated scripts
//! with steps, callbacks (`map`, `filter`, `sort`, `for_each` with closures), aliases, Lua
//! tables with mixed keys, fan-outs nested and labelled, pipelines, caught failures and writes
//! to captured state (some lint sees, some it cannot), and edits of them (insert, delete or
//! move a call or a step, edit a step's body or a prompt).
//!
//! Each seed makes one program, rendered in Rhai and in Lua. For each script: lint refuses it,
//! or two runs in fresh processes make the same journal, output and exit, and `cairn replay`
//! of the run reaches every journaled call and nothing live. For each edit of a script whose
//! run ended well: the resume with the edited script pays for exactly the calls the edit
//! changed (an agent call the edited script makes, run fresh, that the first run did not
//! complete at the same scope), and returns what the edited script returns run fresh; or it
//! refuses with `rekey_refused`, explaining, having paid no more than that, and then, with
//! `--accept-rekey`, pays exactly that and returns the same.
//!
//! CI draws [`DEFAULT_SEEDS`] seeds and runs every seed in `tests/determinism/seeds.txt`;
//! `CAIRN_DET_SEEDS=N` draws N; `DET_SEED=S` (or `A..B`) runs chosen seeds through
//! `one_grammar_seed`; `CAIRN_DET_LATENCY_MS=N` gives the echo model a latency. A seed that
//! fails is kept in `seeds.txt`, and its scripts in `tests/determinism/` (`grammar_SEED.rhai`,
//! `grammar_SEED.lua`), where the corpus test runs them on every CI run.

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use serde_json::Value;

use crate::determinism_sandbox::journal_projection;
use crate::determinism_steps::{Ran, cairn, script_dir};

/// Seeds drawn on every CI run (each runs a Rhai and a Lua script, and an edit of each).
const DEFAULT_SEEDS: u32 = 8;

/// The echo model answers at once: the test is about what the scripts do, and a zero latency
/// changes nothing a script can see (replies are the same, only interleavings differ).
/// `CAIRN_DET_LATENCY_MS=N` sets another latency, for other interleavings.
fn config() -> String {
    let latency = std::env::var("CAIRN_DET_LATENCY_MS").ok().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
    format!("[providers.echo]\nkind = \"echo\"\nlatency_ms = {latency}\n")
}

// ---- the program -------------------------------------------------------------------------------

/// A statement of a generated program. `id` names its variables, labels and prompts; `d` is a
/// constant its body uses (a step body's edit changes it); `tag` marks an edited prompt.
#[derive(Debug, Clone, Copy)]
struct Stmt {
    kind: Kind,
    id: u32,
    d: i64,
    tag: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `agent` with a prompt built from captured state.
    Agent,
    /// A step whose body is a constant expression.
    StepPure,
    /// A step whose body makes an agent call.
    StepAgent,
    /// `map`, `filter`, `sort` and `for_each` with closures.
    Callbacks,
    /// `map` whose closure calls `agent`.
    CallbackAgent,
    /// An alias of a captured list, written outside any branch (a copy in Rhai, the list
    /// itself in Lua).
    Alias,
    /// A write to a captured map outside any branch.
    Mutate,
    /// `parallel` over a list, one agent call a branch.
    ParMap,
    /// `parallel` whose branches are steps.
    ParSteps,
    /// `parallel` whose branches copy a captured list, write the copy and call back over it.
    ParCopy,
    /// `parallel` over a list of closures.
    ParList,
    /// A `parallel` inside each branch of another.
    Nested,
    /// A labelled `parallel`.
    Labelled,
    /// A two-stage `pipeline`.
    Pipeline,
    /// A step whose value has no JSON form (Lua: a table mixing list and named keys), caught.
    MixedTable,
    /// A fail-fast `parallel` whose failure is caught (its sibling makes no call).
    FailCaught,
    /// A branch writing a captured list through a route lint does not follow.
    HostileHidden,
    /// A branch writing a captured list directly (lint refuses it).
    HostileSeen,
}

impl Kind {
    const ALL: [Kind; 18] = [
        Kind::Agent,
        Kind::StepPure,
        Kind::StepAgent,
        Kind::Callbacks,
        Kind::CallbackAgent,
        Kind::Alias,
        Kind::Mutate,
        Kind::ParMap,
        Kind::ParSteps,
        Kind::ParCopy,
        Kind::ParList,
        Kind::Nested,
        Kind::Labelled,
        Kind::Pipeline,
        Kind::MixedTable,
        Kind::FailCaught,
        Kind::HostileHidden,
        Kind::HostileSeen,
    ];

    fn hostile(self) -> bool {
        matches!(self, Kind::HostileHidden | Kind::HostileSeen)
    }

    /// Whether it holds a step or branch body that uses `d`.
    fn has_body(self) -> bool {
        matches!(
            self,
            Kind::StepPure
                | Kind::StepAgent
                | Kind::ParSteps
                | Kind::ParList
                | Kind::MixedTable
                | Kind::FailCaught
        )
    }

    /// Whether it holds a prompt that uses `tag`.
    fn has_prompt(self) -> bool {
        matches!(
            self,
            Kind::Agent
                | Kind::StepAgent
                | Kind::CallbackAgent
                | Kind::ParMap
                | Kind::ParCopy
                | Kind::ParList
                | Kind::Nested
                | Kind::Labelled
                | Kind::Pipeline
                | Kind::HostileHidden
        )
    }
}

impl Stmt {
    fn prompt(&self) -> String {
        if self.tag == 0 { format!("p{}", self.id) } else { format!("p{}e{}", self.id, self.tag) }
    }

    fn rhai(&self) -> String {
        let (k, d, p) = (self.id, self.d, self.prompt());
        match self.kind {
            Kind::Agent => format!("let v{k} = agent(`{p} ${{xs.len()}} ${{m.n}}`); out.push(v{k});"),
            Kind::StepPure => format!("let v{k} = step(\"s{k}\", || {d} * 2); out.push(v{k});"),
            Kind::StepAgent => {
                format!("let v{k} = step(\"s{k}\", || agent(\"{p} inside {d}\")); out.push(v{k});")
            }
            Kind::Callbacks => format!(
                "let v{k} = xs.map(|x| x * {d}).filter(|x| x > 2); v{k}.sort(|a, b| b - a); \
                 let e{k} = []; v{k}.for_each(|| {{ e{k}.push(this) }}); out.push(e{k}.len());"
            ),
            Kind::CallbackAgent => {
                format!("let v{k} = xs.map(|x| agent(`{p} cb ${{x}}`)); out.push(v{k}.len());")
            }
            Kind::Alias => format!("let a{k} = xs; a{k}.push({d}); out.push(a{k}.len());"),
            Kind::Mutate => format!("m.n += {d};"),
            Kind::ParMap => {
                format!(
                    "let v{k} = parallel(xs, |i| agent(`{p} item ${{i}} ${{m.n}}`)); out.push(v{k}.len());"
                )
            }
            Kind::ParSteps => {
                format!("let v{k} = parallel(xs, |i| step(`b{k} ${{i}}`, || i * {d})); out.push(v{k}.len());")
            }
            Kind::ParCopy => format!(
                "let v{k} = parallel(xs, |i| {{ let mine = xs; mine.push(i); let ys = mine.map(|x| x + i); \
                 ys.sort(|a, b| b - a); agent(`{p} ro ${{ys}}`) }}); out.push(v{k}.len());"
            ),
            Kind::ParList => format!(
                "let v{k} = parallel([|| agent(\"{p} a\"), || step(\"l{k}\", || {d}), || xs.len()]); out.push(v{k}.len());"
            ),
            Kind::Nested => format!(
                "let v{k} = parallel([1, 2], |o| parallel(xs, |i| agent(`{p} n ${{o}} ${{i}}`)).len()); out.push(v{k}.len());"
            ),
            Kind::Labelled => format!(
                "let v{k} = parallel(xs, |i| agent(`{p} lab ${{i}}`), #{{label: \"L{k}\"}}); out.push(v{k}.len());"
            ),
            Kind::Pipeline => {
                format!(
                    "let v{k} = pipeline(xs, [|x| agent(`{p} pl ${{x}}`), |x| x.len()]); out.push(v{k}.len());"
                )
            }
            // A value with no JSON form returned by a step, or by a branch (a fail-fast failure).
            Kind::MixedTable if k % 2 == 0 => {
                format!(
                    "try {{ step(\"m{k}\", || #{{b: {d}, a: || 1}}) }} catch (e) {{ notes.push(e.message) }}"
                )
            }
            Kind::MixedTable => format!(
                "try {{ parallel([|| #{{b: {d}, a: || 1}}, || {d}]); }} catch (e) {{ notes.push(e.message) }}"
            ),
            Kind::FailCaught => {
                format!(
                    "try {{ parallel([|| {{ throw \"no {k} {d}\" }}, || {d}]); }} catch (e) {{ notes.push(e.message) }}"
                )
            }
            Kind::HostileHidden => format!(
                "let f{k} = |v| this.push(v); let v{k} = parallel(xs, |i| {{ let a = agent(`{p} h ${{i}}`); \
                 if i == 2 {{ notes.call(f{k}, i); }} a }}); out.push(v{k}.len());"
            ),
            // Directly, or through an alias of a closure that writes.
            Kind::HostileSeen if k % 2 == 0 => {
                format!("let v{k} = parallel(xs, |i| {{ xs.push(i); i }}); out.push(v{k}.len());")
            }
            Kind::HostileSeen => format!(
                "let note{k} = |x| notes.push(x); let v{k} = parallel(xs, |i| {{ let r = note{k}; r.call(i); i }}); \
                 out.push(v{k}.len());"
            ),
        }
    }

    fn lua(&self) -> String {
        let (k, d, p) = (self.id, self.d, self.prompt());
        let push = |value: &str| format!("out[#out + 1] = {value}");
        match self.kind {
            Kind::Agent => {
                format!("local v{k} = agent('{p} ' .. #xs .. ' ' .. m.n) {}", push(&format!("v{k}")))
            }
            Kind::StepPure => {
                format!("local v{k} = step('s{k}', function() return {d} * 2 end) {}", push(&format!("v{k}")))
            }
            Kind::StepAgent => format!(
                "local v{k} = step('s{k}', function() return agent('{p} inside {d}') end) {}",
                push(&format!("v{k}"))
            ),
            Kind::Callbacks => format!(
                "local v{k} = filter(map(xs, function(x) return x * {d} end), function(x) return x > 2 end) \
                 table.sort(v{k}, function(a, b) return a > b end) local e{k} = {{}} \
                 for_each(v{k}, function(x) e{k}[#e{k} + 1] = x end) {}",
                push(&format!("#e{k}"))
            ),
            Kind::CallbackAgent => format!(
                "local v{k} = map(xs, function(x) return agent('{p} cb ' .. x) end) {}",
                push(&format!("#v{k}"))
            ),
            Kind::Alias => format!("local a{k} = xs a{k}[#a{k} + 1] = {d} {}", push(&format!("#a{k}"))),
            Kind::Mutate => format!("m.n = m.n + {d}"),
            Kind::ParMap => format!(
                "local v{k} = parallel(xs, function(i) return agent('{p} item ' .. i .. ' ' .. m.n) end) {}",
                push(&format!("#v{k}"))
            ),
            Kind::ParSteps => format!(
                "local v{k} = parallel(xs, function(i) return step('b{k} ' .. i, function() return i * {d} end) end) {}",
                push(&format!("#v{k}"))
            ),
            Kind::ParCopy => format!(
                "local v{k} = parallel(xs, function(i) local mine = copy(xs) mine[#mine + 1] = i \
                 local ys = map(mine, function(x) return x + i end) table.sort(ys, function(a, b) return a > b end) \
                 return agent('{p} ro ' .. table.concat(ys, ',')) end) {}",
                push(&format!("#v{k}"))
            ),
            Kind::ParList => format!(
                "local v{k} = parallel({{function() return agent('{p} a') end, \
                 function() return step('l{k}', function() return {d} end) end, function() return #xs end}}) {}",
                push(&format!("#v{k}"))
            ),
            Kind::Nested => format!(
                "local v{k} = parallel({{1, 2}}, function(o) return #parallel(xs, function(i) \
                 return agent('{p} n ' .. o .. ' ' .. i) end) end) {}",
                push(&format!("#v{k}"))
            ),
            Kind::Labelled => format!(
                "local v{k} = parallel(xs, function(i) return agent('{p} lab ' .. i) end, {{label = 'L{k}'}}) {}",
                push(&format!("#v{k}"))
            ),
            Kind::Pipeline => format!(
                "local v{k} = pipeline(xs, {{function(x) return agent('{p} pl ' .. x) end, function(x) return #x end}}) {}",
                push(&format!("#v{k}"))
            ),
            Kind::MixedTable if k % 2 == 0 => format!(
                "local ok{k}, e{k} = pcall(step, 'm{k}', function() return {{1, 2, name = 'x', alpha = {d}}} end) \
                 notes[#notes + 1] = type(e{k}) == 'table' and e{k}.message or tostring(e{k})"
            ),
            Kind::MixedTable => format!(
                "local ok{k}, e{k} = pcall(parallel, {{function() return {{1, 2, name = 'x', alpha = {d}}} end, \
                 function() return {d} end}}) notes[#notes + 1] = type(e{k}) == 'table' and e{k}.message or tostring(e{k})"
            ),
            Kind::FailCaught => format!(
                "local ok{k}, e{k} = pcall(parallel, {{function() error('no {k} {d}') end, function() return {d} end}}) \
                 notes[#notes + 1] = type(e{k}) == 'table' and e{k}.message or tostring(e{k})"
            ),
            Kind::HostileHidden => format!(
                "local function h{k}() return notes end local v{k} = parallel(xs, function(i) \
                 local a = agent('{p} h ' .. i) if i == 2 then local t = h{k}() t[#t + 1] = i end return a end) {}",
                push(&format!("#v{k}"))
            ),
            Kind::HostileSeen if k % 2 == 0 => {
                format!(
                    "local v{k} = parallel(xs, function(i) xs[#xs + 1] = i return i end) {}",
                    push(&format!("#v{k}"))
                )
            }
            Kind::HostileSeen => format!(
                "local v{k} = parallel(xs, function(i) local c = notes c[#c + 1] = i return i end) {}",
                push(&format!("#v{k}"))
            ),
        }
    }
}

/// A program in a dialect: the captured state, the statements, an ending that uses it all.
fn render(ext: &str, stmts: &[Stmt]) -> String {
    let body: Vec<String> = stmts.iter().map(|s| if ext == "rhai" { s.rhai() } else { s.lua() }).collect();
    if ext == "rhai" {
        format!(
            "let xs = [1, 2, 3];\nlet m = #{{n: 0}};\nlet notes = [];\nlet out = [];\n{}\n\
             let fin = agent(`end ${{xs.len()}} ${{m.n}} ${{notes.len()}}`);\n#{{fin: fin, out: out, notes: notes}}\n",
            body.join("\n")
        )
    } else {
        format!(
            "local xs = {{1, 2, 3}}\nlocal m = {{n = 0}}\nlocal notes = {{}}\nlocal out = {{}}\n\
             local function map(t, f) local r = {{}} for i, v in ipairs(t) do r[i] = f(v) end return r end\n\
             local function filter(t, f) local r = {{}} for _, v in ipairs(t) do if f(v) then r[#r + 1] = v end end return r end\n\
             local function copy(t) local r = {{}} for i, v in ipairs(t) do r[i] = v end return r end\n\
             local function for_each(t, f) for _, v in ipairs(t) do f(v) end end\n{}\n\
             return {{fin = agent('end ' .. #xs .. ' ' .. m.n .. ' ' .. #notes), out = out, notes = notes}}\n",
            body.join("\n")
        )
    }
}

// ---- drawing from a seed -------------------------------------------------------------------------

/// SplitMix64: a seed is the whole case, so a failing seed is all it takes to reproduce one.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// An edit of a program.
#[derive(Debug, Clone, Copy)]
enum Edit {
    Insert(usize, Stmt),
    Delete(usize),
    Move(usize, usize),
    StepBody(usize),
    Prompt(usize),
}

fn program(seed: u64) -> (Vec<Stmt>, Edit) {
    let mut draw = Draw(seed);
    let len = 2 + draw.below(5);
    let stmts: Vec<Stmt> = (0..len)
        .map(|i| {
            // Writes to shared state are drawn one time in twelve.
            let kind = if draw.below(12) == 0 {
                [Kind::HostileHidden, Kind::HostileSeen][draw.below(2)]
            } else {
                let safe: Vec<Kind> = Kind::ALL.iter().copied().filter(|k| !k.hostile()).collect();
                safe[draw.below(safe.len())]
            };
            Stmt { kind, id: i as u32 + 1, d: 2 + draw.below(4) as i64, tag: 0 }
        })
        .collect();
    let steps: Vec<usize> = (0..len).filter(|&i| stmts[i].kind.has_body()).collect();
    let prompts: Vec<usize> = (0..len).filter(|&i| stmts[i].kind.has_prompt()).collect();
    let edit = loop {
        match draw.below(5) {
            0 => {
                let kind = [Kind::Agent, Kind::StepPure, Kind::ParMap, Kind::StepAgent][draw.below(4)];
                break Edit::Insert(draw.below(len + 1), Stmt { kind, id: 90, d: 7, tag: 0 });
            }
            1 => break Edit::Delete(draw.below(len)),
            2 => break Edit::Move(draw.below(len), draw.below(len)),
            3 if !steps.is_empty() => break Edit::StepBody(steps[draw.below(steps.len())]),
            4 if !prompts.is_empty() => break Edit::Prompt(prompts[draw.below(prompts.len())]),
            _ => {}
        }
    };
    (stmts, edit)
}

fn apply(stmts: &[Stmt], edit: Edit) -> Vec<Stmt> {
    let mut out = stmts.to_vec();
    match edit {
        Edit::Insert(at, stmt) => out.insert(at, stmt),
        Edit::Delete(at) => {
            out.remove(at);
        }
        Edit::Move(from, to) => {
            let stmt = out.remove(from);
            out.insert(to.min(out.len()), stmt);
        }
        Edit::StepBody(at) => out[at].d += 1,
        Edit::Prompt(at) => out[at].tag += 1,
    }
    out
}

// ---- running -----------------------------------------------------------------------------------

/// A script in a fresh directory with the zero-latency echo model.
fn prepared(ext: &str, source: &str) -> (tempfile::TempDir, String) {
    let (dir, file) = script_dir(ext, source);
    std::fs::write(dir.path().join("cairn.toml"), config()).unwrap();
    (dir, file)
}

fn entries(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("j/r1.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Agent entries with `status` among `entries`, counted by (scope, key).
fn agent_calls(entries: &[Value], status: &str) -> BTreeMap<(String, String), usize> {
    let mut calls = BTreeMap::new();
    for entry in entries.iter().filter(|e| e["kind"] == "agent" && e["status"] == status) {
        let id = (
            entry["scope"].as_str().unwrap_or("").to_owned(),
            entry["key"].as_str().unwrap_or("").to_owned(),
        );
        *calls.entry(id).or_default() += 1;
    }
    calls
}

/// The value a run printed with `--json` (or `None`), as text without source positions: a
/// journaled failure keeps the position its code had (`at line 6, column 22`, `w.lua:6:`),
/// and code that only moved keeps its identity, so a resume serves the old position where a
/// fresh run of the edited script says the new one.
fn value_of(ran: &Ran) -> Option<String> {
    let value = serde_json::from_str::<Value>(&ran.stdout).ok().map(|v| v["value"].to_string())?;
    let mut out = String::with_capacity(value.len());
    let mut rest = value.as_str();
    while let Some(at) =
        ["line ", "column ", ".lua:"].iter().filter_map(|m| rest.find(m).map(|i| (i, m.len()))).min()
    {
        let (start, len) = at;
        out.push_str(&rest[..start + len]);
        rest = &rest[start + len..];
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 {
            out.push('N');
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    Some(out)
}

/// Runs one script of a seed; `Err` says what broke.
fn check_script(name: &str, ext: &str, stmts: &[Stmt], edit: Edit) -> Result<(), String> {
    let source = render(ext, stmts);
    let fail = |what: String| Err(format!("{name}: {what}\n--- script ---\n{source}"));
    let (dir, file) = prepared(ext, &source);
    let lint = cairn(dir.path(), &["lint", &file]);
    if lint.code == Some(6) {
        return Ok(());
    }
    if lint.code != Some(0) {
        return fail(format!("lint: {}", lint.text()));
    }

    // Two runs in fresh processes: the same journal, output and exit.
    let first = cairn(dir.path(), &["run", &file, "--run-id", "r1", "-q", "--json"]);
    let (other, _) = prepared(ext, &source);
    let second = cairn(other.path(), &["run", &file, "--run-id", "r1", "-q", "--json"]);
    if !matches!(first.code, Some(0 | 1)) {
        return fail(format!("the run ended {:?}: {}", first.code, first.text()));
    }
    let journals = (
        journal_projection(&dir.path().join("j/r1.jsonl")),
        journal_projection(&other.path().join("j/r1.jsonl")),
    );
    if journals.0 != journals.1 {
        let only: Vec<_> = journals.0.iter().filter(|l| !journals.1.contains(l)).take(3).collect();
        let other_only: Vec<_> = journals.1.iter().filter(|l| !journals.0.contains(l)).take(3).collect();
        return fail(format!(
            "two runs journal differently:\n first only: {only:#?}\n second only: {other_only:#?}"
        ));
    }
    if (first.code, &first.stdout, first.ending()) != (second.code, &second.stdout, second.ending()) {
        return fail(format!("two runs end differently:\n{}\n---\n{}", first.text(), second.text()));
    }
    let replay = cairn(dir.path(), &["replay", "r1"]);
    if replay.code != Some(0) || !replay.text().contains(" 0 live, 0 orphaned") {
        return fail(format!("replay: {}", replay.text()));
    }

    // The edit, on a run that ended well and wrote nothing to shared state.
    if first.code != Some(0) || stmts.iter().any(|s| s.kind.hostile()) {
        return Ok(());
    }
    let edited = render(ext, &apply(stmts, edit));
    let (fresh_dir, fresh_file) = prepared(ext, &edited);
    let fresh = cairn(fresh_dir.path(), &["run", &fresh_file, "--run-id", "r1", "-q", "--json"]);
    if fresh.code != Some(0) {
        return fail(format!(
            "{edit:?}: the edited script run fresh: {}\n--- edited ---\n{edited}",
            fresh.text()
        ));
    }
    let wanted = agent_calls(&entries(fresh_dir.path()), "running");
    let paid = agent_calls(&entries(dir.path()), "ok");
    let expected: usize =
        wanted.iter().map(|(id, n)| n.saturating_sub(paid.get(id).copied().unwrap_or(0))).sum();
    let before = entries(dir.path()).len();
    std::fs::write(dir.path().join(&fresh_file), &edited).unwrap();
    let live = || agent_calls(&entries(dir.path())[before..], "running").values().sum::<usize>();
    let resumed = cairn(dir.path(), &["resume", "r1", "--script", &fresh_file, "--json", "-q"]);
    let context = || format!("{edit:?}: expected {expected} live calls\n--- edited ---\n{edited}");
    let resumed = match resumed.code {
        Some(0) => resumed,
        Some(1) if resumed.text().contains("rekey_refused") && resumed.text().contains("--accept-rekey") => {
            if live() > expected {
                return fail(format!(
                    "a refused resume paid {} calls: {}\n{}",
                    live(),
                    resumed.text(),
                    context()
                ));
            }
            let accepted = cairn(
                dir.path(),
                &["resume", "r1", "--script", &fresh_file, "--accept-rekey", "--json", "-q"],
            );
            if accepted.code != Some(0) {
                return fail(format!("the accepted resume: {}\n{}", accepted.text(), context()));
            }
            accepted
        }
        _ => return fail(format!("the resume: {}\n{}", resumed.text(), context())),
    };
    if live() != expected {
        return fail(format!("the resume paid {} calls: {}\n{}", live(), resumed.text(), context()));
    }
    if value_of(&resumed) != value_of(&fresh) {
        return fail(format!(
            "the resume returned {:?}, the edited script run fresh {:?}\n{}",
            value_of(&resumed),
            value_of(&fresh),
            context()
        ));
    }
    Ok(())
}

/// Runs a seed's program in both dialects.
fn run_seed(seed: u64) -> Result<(), String> {
    let (stmts, edit) = program(seed);
    for ext in ["rhai", "lua"] {
        check_script(&format!("seed {seed} ({ext})"), ext, &stmts, edit)?;
    }
    Ok(())
}

fn drawn_seeds() -> u32 {
    std::env::var("CAIRN_DET_SEEDS").ok().and_then(|n| n.parse().ok()).unwrap_or(DEFAULT_SEEDS)
}

/// Writes a failing seed's scripts into the corpus, so the corpus test runs them from now on.
fn keep(seed: u64) -> String {
    let (stmts, _) = program(seed);
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/determinism");
    for ext in ["rhai", "lua"] {
        let _ = std::fs::write(corpus.join(format!("grammar_{seed}.{ext}")), render(ext, &stmts));
    }
    format!(
        "kept as tests/determinism/grammar_{seed}.{{rhai,lua}}; add {seed} to tests/determinism/seeds.txt"
    )
}

/// Every seed that ever failed, on every run.
#[test]
fn every_grammar_seed_that_ever_failed_holds_now() {
    let seeds: Vec<u64> = include_str!("../determinism/seeds.txt")
        .lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .filter(|line| !line.is_empty())
        .map(|line| line.parse().unwrap())
        .collect();
    let failures: Vec<String> = seeds.into_iter().filter_map(|seed| run_seed(seed).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Reproduces seeds: `DET_SEED=<seed>` or `DET_SEED=<from>..<to>` (without it, seed 1);
/// with `DET_KEEP=1`, writes their scripts into the corpus first.
#[test]
fn one_grammar_seed() {
    let spec = std::env::var("DET_SEED").unwrap_or_else(|_| "1".into());
    let seeds: Vec<u64> = match spec.split_once("..") {
        Some((from, to)) => (from.parse().unwrap()..to.parse().unwrap()).collect(),
        None => vec![spec.parse().unwrap()],
    };
    if std::env::var("DET_KEEP").is_ok() {
        seeds.iter().for_each(|&seed| {
            keep(seed);
        });
    }
    let failures: Vec<String> = seeds.into_iter().filter_map(|seed| run_seed(seed).err()).collect();
    assert!(failures.is_empty(), "{} failed:\n{}", failures.len(), failures.join("\n\n"));
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: drawn_seeds(),
        failure_persistence: None,
        max_shrink_iters: 0,
        ..ProptestConfig::default()
    })]

    /// Drawn seeds: each program in both dialects refused by lint or deterministic with a
    /// clean replay, and each edit paying exactly for what it changed or refused explained.
    #[test]
    fn generated_programs_and_their_edits_hold_in_both_dialects(seed in any::<u64>()) {
        if let Err(broken) = run_seed(seed) {
            prop_assert!(false, "{broken}\n{}", keep(seed));
        }
    }
}
