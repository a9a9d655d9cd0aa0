//! The script seam: the diagnostics every dialect reports, the lint context, and the script
//! dialect as data (the API card and one JSON Schema per global's options).
//!
//! The dialect lives in `dialect/` at the crate root, embedded here byte for byte, so the card
//! the planner reads, the schemas lint checks option maps against, and the schemas the runtime
//! validates options with are one source. Every dialect ([`rhai`] today) reports problems as
//! [`Diagnostic`]s of one shape, so one repair prompt renders lint findings and compile errors
//! alike.

pub(crate) mod args_check;
pub(crate) mod bound;
pub(crate) mod call_check;
pub(crate) mod captured;
pub(crate) mod child_args;
mod escape_check;
pub(crate) mod host;
#[cfg(feature = "lua")]
pub(crate) mod lua;
pub(crate) mod options;
pub(crate) mod rhai;
pub(crate) mod run_sandbox;
mod schema_check;
pub(crate) mod source;
mod suggest;
#[cfg(test)]
mod tests;
pub(crate) mod time_limit;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

pub use crate::diagnostic::{Diagnostic, Severity};

/// Every lint rule, by id, with what it reports. Each has a folder of examples under `lint/`.
/// Besides these, `internal` reports a failure of the linter itself (a bug, never the script's).
pub const RULES: &[(&str, &str)] = &[
    ("syntax", "the script does not parse, or is empty"),
    (
        "foreign-syntax",
        "a form of JavaScript, TypeScript, Python or Lua (=>, ===, console.log, def, None, local, ..), with the \
         rhai form to write instead",
    ),
    ("unknown-variable", "a variable that was never declared"),
    (
        "forbidden",
        "eval, import, export, print, debug, clocks, sleep, randomness and I/O outside the journaled \
         globals, module paths, and functions that redefine a global",
    ),
    ("unknown-function", "a call of a function that is no global, builtin or function of the script"),
    ("arity", "a global called with too few or too many arguments"),
    ("arg-type", "a literal argument of the wrong kind for a global"),
    ("unknown-option", "an option key the global's schema does not list"),
    ("option-type", "a literal option value the global's schema rejects"),
    ("closure-in-options", "a closure where only JSON may go: options, args, prompts, data, items"),
    ("unknown-profile", "a literal profile name that is not registered"),
    ("unknown-toolset", "a literal toolset name that is not registered"),
    ("unknown-host-function", "a literal host function name that is not registered"),
    ("unknown-workflow", "a literal child workflow name that is not registered"),
    (
        "workflow-args",
        "a literal args map of workflow() that lacks an arg the child requires, names one it does not take, or \
         gives a literal of the wrong type (a child declares its args on an @args line)",
    ),
    ("unknown-model", "a literal model ref outside the known models"),
    (
        "parallel-capture-assign",
        "a parallel branch or pipeline stage writing to a variable captured from outside it (a race), or a \
         closure that writes one and is stored, passed on or returned where lint cannot prove it runs in order",
    ),
    (
        "step-capture-assign",
        "a step body writing to a variable captured from outside it, a write a replay (which skips the body) loses",
    ),
    ("loop-capture", "a closure capturing a for-loop variable, which it would see by reference"),
    ("duplicate-agent-call", "identical agent calls in one body without a distinguishing key (a warning)"),
    ("dynamic-fn", "Fn() with a computed name, which hides from lint which function runs"),
    (
        "closure-text",
        "text made from a closure, always <closure>: name() is an error (nothing can dispatch or label on \
         it), to_debug(), to_string() and interpolation are warnings",
    ),
    (
        "template-escape",
        "an escape sequence (\\n, \\t, ...) in a rhai backtick string or a lua long string, which keeps it as \
         written (a warning)",
    ),
];

/// Sorts diagnostics by position (then rule and message, so equal positions are stable) and
/// drops exact duplicates, which a shared closure reached from two call sites can produce.
pub(crate) fn sort_diagnostics(diagnostics: &mut Vec<Diagnostic>) {
    diagnostics.sort_by(|a, b| {
        (a.line, a.column, &a.rule_id, &a.message, a.end_line, a.end_column).cmp(&(
            b.line,
            b.column,
            &b.rule_id,
            &b.message,
            b.end_line,
            b.end_column,
        ))
    });
    diagnostics.dedup();
}

/// What the engine has registered, so lint can reject a name the run would fail on and suggest
/// the one that was meant: `unknown profile 'reseacher' (did you mean 'researcher'?)`.
///
/// An empty set means nothing of that kind is registered, so every literal name of that kind is
/// reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LintContext {
    /// Registered agent profiles (the `profile` option of `agent`).
    pub profiles: BTreeSet<String>,
    /// Registered toolsets (the `tools` option of `agent`).
    pub toolsets: BTreeSet<String>,
    /// Registered host functions (the name given to `host_call`).
    pub host_functions: BTreeSet<String>,
    /// Registered child workflows (the name given to `workflow`).
    pub child_workflows: BTreeSet<String>,
    /// The JSON Schema of a child's arguments, for the children that have one: a literal args
    /// map of `workflow(NAME, args)` is checked against it (`workflow-args`).
    pub workflow_args: BTreeMap<String, serde_json::Value>,
    /// Model refs to accept in the `model` option; `None` accepts any well-formed ref, since a
    /// provider may serve models nobody listed.
    pub models: Option<BTreeSet<String>>,
}

impl LintContext {
    /// A context in which nothing is registered and any model ref is accepted.
    pub fn empty() -> Self {
        LintContext {
            profiles: BTreeSet::new(),
            toolsets: BTreeSet::new(),
            host_functions: BTreeSet::new(),
            child_workflows: BTreeSet::new(),
            workflow_args: BTreeMap::new(),
            models: None,
        }
    }
}

/// The API card: the text that teaches a planner model (and a person) the script dialect.
///
/// Byte-stable: it is `dialect/card.md` as built into the binary, and a test checks its option
/// lists against the schemas so the two cannot drift.
pub fn api_card() -> &'static str {
    include_str!("../../dialect/card.md")
}

/// The JSON Schema of a global's options map, by the global's name (`"agent"`, `"parallel"`,
/// `"pipeline"`, `"step"`, `"call"` or its Rhai name `"host_call"`, `"workflow"`,
/// `"await_external"`); `None` for a global that takes no options.
pub(crate) fn option_schema(global: &str) -> Option<&'static serde_json::Value> {
    let index = SCHEMA_SOURCES.iter().position(|(name, _)| *name == schema_name(global))?;
    schemas().get(index)
}

/// The schema files, by the dialect-neutral global name they describe.
const SCHEMA_SOURCES: [(&str, &str); 8] = [
    ("agent", include_str!("../../dialect/agent.schema.json")),
    ("parallel", include_str!("../../dialect/parallel.schema.json")),
    ("pipeline", include_str!("../../dialect/pipeline.schema.json")),
    ("step", include_str!("../../dialect/step.schema.json")),
    ("call", include_str!("../../dialect/call.schema.json")),
    ("workflow", include_str!("../../dialect/workflow.schema.json")),
    ("await_external", include_str!("../../dialect/await_external.schema.json")),
    ("orchestrate", include_str!("../../dialect/orchestrate.schema.json")),
];

/// Maps a dialect's spelling of a global onto the schema's name: Rhai reserves `call` for its own
/// function-pointer calls, so the host-function global is `host_call` there.
fn schema_name(global: &str) -> &str {
    if global == "host_call" { "call" } else { global }
}

/// The parsed schemas, in [`SCHEMA_SOURCES`] order; parsed once per process.
fn schemas() -> &'static [serde_json::Value] {
    static SCHEMAS: OnceLock<Vec<serde_json::Value>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        SCHEMA_SOURCES
            .iter()
            .map(|(name, text)| match serde_json::from_str(text) {
                Ok(value) => value,
                // The files are embedded at build time and a unit test parses every one, so
                // this arm is unreachable in a tested build; an empty object keeps it panic-free.
                Err(_) => {
                    debug_assert!(false, "dialect/{name}.schema.json is not JSON");
                    serde_json::Value::Object(serde_json::Map::new())
                }
            })
            .collect()
    })
}

/// A script global: its name, signature and argument shapes, as the card shows it and lint
/// checks calls against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Global {
    /// The name scripts call (Rhai spelling).
    pub name: &'static str,
    /// The signature as the card shows it.
    pub signature: &'static str,
    /// The positional parameters, in order; trailing optional ones may be left out.
    pub params: &'static [Param],
    /// Name of the options schema (see [`option_schema`]), if the global takes options.
    pub options: Option<&'static str>,
}

impl Global {
    /// Fewest arguments a call may pass.
    pub(crate) fn min_args(&self) -> usize {
        self.params.iter().filter(|param| !param.optional).count()
    }

    /// Most arguments a call may pass.
    pub(crate) fn max_args(&self) -> usize {
        self.params.len()
    }
}

/// One positional parameter of a [`Global`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Param {
    /// The name the signature and messages use.
    pub name: &'static str,
    /// What the argument must be.
    pub kind: ParamKind,
    /// Whether a call may leave it out.
    pub optional: bool,
}

/// What a global's argument must be. Values cross the sandbox boundary as JSON, so every kind
/// but the closure kinds rejects closures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ParamKind {
    /// A string.
    Text,
    /// Any JSON value.
    Json,
    /// An array of JSON values to fan out over.
    Items,
    /// The options map, checked against the global's schema.
    Options,
    /// One closure: a step or phase body, or the per-item closure of `parallel`'s map form.
    Body,
    /// An array of closures run concurrently (`parallel`'s list form).
    Branches,
    /// An array of closures applied in order to each item (`pipeline`).
    Stages,
}

const fn required(name: &'static str, kind: ParamKind) -> Param {
    Param { name, kind, optional: false }
}

const fn optional(name: &'static str, kind: ParamKind) -> Param {
    Param { name, kind, optional: true }
}

/// Every callable global of the dialect. `budget` (an object with `spent()` and `remaining()`)
/// and `args` (the run's input) are read-only variables, not functions, and are not listed.
///
/// `parallel` is listed in its list form; its map form takes [`PARALLEL_MAP_FORM`] and is told
/// apart by a closure in second position.
pub(crate) const GLOBALS: &[Global] = &[
    Global {
        name: "agent",
        signature: "agent(prompt, opts?)",
        params: &[required("prompt", ParamKind::Text), optional("opts", ParamKind::Options)],
        options: Some("agent"),
    },
    Global {
        name: "parallel",
        signature: "parallel(branches, opts?) | parallel(items, |item| ..., opts?)",
        params: &[required("branches", ParamKind::Branches), optional("opts", ParamKind::Options)],
        options: Some("parallel"),
    },
    Global {
        name: "pipeline",
        signature: "pipeline(items, stages, opts?)",
        params: &[
            required("items", ParamKind::Items),
            required("stages", ParamKind::Stages),
            optional("opts", ParamKind::Options),
        ],
        options: Some("pipeline"),
    },
    Global {
        name: "step",
        signature: "step(label, || ..., opts?)",
        params: &[
            required("label", ParamKind::Text),
            required("body", ParamKind::Body),
            optional("opts", ParamKind::Options),
        ],
        options: Some("step"),
    },
    Global {
        name: "host_call",
        signature: "host_call(name, args, opts?)",
        params: &[
            required("name", ParamKind::Text),
            required("args", ParamKind::Json),
            optional("opts", ParamKind::Options),
        ],
        options: Some("call"),
    },
    Global {
        name: "phase",
        signature: "phase(name, || ...)",
        params: &[required("name", ParamKind::Text), required("body", ParamKind::Body)],
        options: None,
    },
    Global {
        name: "log",
        signature: "log(level, msg, data?)",
        params: &[
            required("level", ParamKind::Text),
            required("msg", ParamKind::Text),
            optional("data", ParamKind::Json),
        ],
        options: None,
    },
    Global {
        name: "workflow",
        signature: "workflow(name, args, opts?)",
        params: &[
            required("name", ParamKind::Text),
            required("args", ParamKind::Json),
            optional("opts", ParamKind::Options),
        ],
        options: Some("workflow"),
    },
    Global {
        name: "await_external",
        signature: "await_external(key, opts?)",
        params: &[required("key", ParamKind::Text), optional("opts", ParamKind::Options)],
        options: Some("await_external"),
    },
    Global {
        name: "sleep",
        signature: "sleep(ms)",
        params: &[required("ms", ParamKind::Json)],
        options: None,
    },
    Global { name: "now", signature: "now()", params: &[], options: None },
    Global {
        name: "random",
        signature: "random(key?)",
        params: &[optional("key", ParamKind::Text)],
        options: None,
    },
    Global { name: "uuid", signature: "uuid()", params: &[], options: None },
    Global {
        name: "orchestrate",
        signature: "orchestrate(goal, opts?)",
        params: &[required("goal", ParamKind::Text), optional("opts", ParamKind::Options)],
        options: Some("orchestrate"),
    },
];

/// The parameters of `parallel(items, |item| ..., opts?)`, which runs the closure once per item,
/// concurrently: the fan-out form that binds each item afresh (see the `loop-capture` rule).
pub(crate) const PARALLEL_MAP_FORM: &[Param] = &[
    required("items", ParamKind::Items),
    required("body", ParamKind::Body),
    optional("opts", ParamKind::Options),
];

/// Looks a global up by its Rhai name.
pub(crate) fn global(name: &str) -> Option<&'static Global> {
    GLOBALS.iter().find(|global| global.name == name)
}

/// The levels `log` accepts.
pub(crate) const LOG_LEVELS: [&str; 4] = ["debug", "info", "warn", "error"];
