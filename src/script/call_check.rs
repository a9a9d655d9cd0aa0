//! What both linters check of a call of a cairn global, and how each finding is worded: the
//! arity, each argument's shape against its parameter, functions where only JSON may go, the
//! form of a `parallel` call, a log level, an agent call that repeats another, a race.
//!
//! Each linter walks its own syntax tree and says what it sees of an argument ([`Seen`], with
//! its own phrase for it: "a list" in Lua, "an array" in Rhai); the decisions and the
//! messages are made here, once, in the dialect's words ([`Words`]).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;

use serde_json::Value;

use crate::script::{Global, LOG_LEVELS, PARALLEL_MAP_FORM, Param, ParamKind, suggest};

/// How a dialect writes the constructs the messages show.
#[derive(Debug)]
pub(crate) struct Words {
    /// What a function value is called: "closure" in Rhai, "function" in Lua.
    pub(crate) closure: &'static str,
    /// A list of data.
    pub(crate) list: &'static str,
    /// An options map.
    pub(crate) map: &'static str,
    /// A body of `step`, `phase` or `parallel`'s map form.
    pub(crate) body: &'static str,
    /// A `parallel` branch.
    pub(crate) branch: &'static str,
    /// A fan-out over data.
    pub(crate) fan_out: &'static str,
    /// A `pipeline` stage.
    pub(crate) stage: &'static str,
    /// A list of branches or stages.
    pub(crate) functions: &'static str,
    /// The `key` option.
    pub(crate) key: &'static str,
    /// A global's signature as the dialect writes it.
    pub(crate) signature: fn(&Global) -> String,
}

impl Words {
    /// Rhai's words.
    pub(crate) const RHAI: Words = Words {
        closure: "closure",
        list: "an array",
        map: "a map like #{label: \"...\"}",
        body: "a closure like || { ... }",
        branch: "a closure like || agent(...)",
        fan_out: "parallel(items, |item| ...)",
        stage: "a closure like |item| ...",
        functions: "an array of closures",
        key: "key: \"...\"",
        signature: |global| global.signature.to_owned(),
    };

    /// Lua's words.
    #[cfg_attr(not(feature = "lua"), allow(dead_code))]
    pub(crate) const LUA: Words = Words {
        closure: "function",
        list: "a list (a table like {a, b})",
        map: "a table like {label = \"...\"}",
        body: "a function like function() ... end",
        branch: "a function like function() return agent(...) end",
        fan_out: "parallel(items, function(item) ... end)",
        stage: "a function like function(item) ... end",
        functions: "a list of functions",
        key: "key = \"...\"",
        signature: lua_signature,
    };
}

/// A global's signature in Lua's words: closures as `function() ... end`.
#[cfg_attr(not(feature = "lua"), allow(dead_code))]
pub(crate) fn lua_signature(global: &Global) -> String {
    global.signature.replace("|item| ...", "function(item) ... end").replace("|| ...", "function() ... end")
}

/// What a linter sees of an argument's value.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Seen<'a> {
    /// A literal.
    Known(&'a Value),
    /// A value of a known JSON type.
    Type(&'a str),
    /// Lua's `{}`: an empty list or an empty map.
    #[cfg_attr(not(feature = "lua"), allow(dead_code))]
    EmptyTable,
    /// A function (a Rhai closure).
    Function,
    /// Anything computed.
    Unknown,
}

/// What is wrong with an argument.
#[derive(Debug, PartialEq)]
pub(crate) enum Problem {
    /// A function where only JSON may go (rule `closure-in-options`).
    Function,
    /// The wrong shape (rule `arg-type`), worded.
    Shape(String),
}

/// How a message names an argument position: "the prompt of agent", "the options of step".
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place<'g> {
    noun: &'static str,
    global: &'g str,
}

impl<'g> Place<'g> {
    pub(crate) fn of(global: &'g Global, param: &Param) -> Place<'g> {
        let noun = if param.kind == ParamKind::Options { "options" } else { param.name };
        Place { noun, global: global.name }
    }
}

impl fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the {} of {}", self.noun, self.global)
    }
}

/// The arity message of a call of `global` with `args` arguments against `params`, when it
/// has too few or too many (`open`: its last argument may stand for any number, Lua's `...`).
pub(crate) fn arity(
    global: &Global,
    params: &[Param],
    args: usize,
    open: bool,
    words: &Words,
) -> Option<String> {
    let min = params.iter().filter(|param| !param.optional).count();
    let max = params.len();
    let fixed = if open { args.saturating_sub(1) } else { args };
    if !((!open && args < min) || fixed > max) {
        return None;
    }
    let expected = match (min, max) {
        (0, 0) => "no arguments".to_owned(),
        (min, max) if min == max => format!("{min} argument{}", if min == 1 { "" } else { "s" }),
        (min, max) if max == min + 1 => format!("{min} or {max} arguments"),
        (min, max) => format!("{min} to {max} arguments"),
    };
    Some(format!("{} takes {expected} ({}), got {args}", global.name, (words.signature)(global)))
}

/// The parameters a call of `global` is checked against: `parallel` with a function second
/// (or three arguments) is the map form; `None` when a `parallel` call could be either form
/// (a computed second argument, and a first that is not a literal list of functions), so only
/// the arguments' own contents are checked.
pub(crate) fn params_for(
    global: &'static Global,
    args: usize,
    second: Option<Seen<'_>>,
    first_is_branches: impl FnOnce() -> bool,
) -> Option<&'static [Param]> {
    if global.name != "parallel" {
        return Some(global.params);
    }
    match (args, second) {
        (3, _) | (_, Some(Seen::Function)) => Some(PARALLEL_MAP_FORM),
        (2, Some(Seen::Unknown)) => first_is_branches().then_some(global.params),
        _ => Some(global.params),
    }
}

/// What is wrong with an argument that is not a literal list or map: `seen` is what the linter
/// sees of it, `phrase` its words for that.
pub(crate) fn argument(
    kind: ParamKind,
    place: Place<'_>,
    seen: Seen<'_>,
    phrase: &str,
    words: &Words,
) -> Option<Problem> {
    let wrong = |what: &str| Some(Problem::Shape(format!("{place} must be {what}, got {phrase}")));
    match (kind, seen) {
        (ParamKind::Text | ParamKind::Options, Seen::Function) => Some(Problem::Function),
        (ParamKind::Text, Seen::Known(Value::String(_)) | Seen::Type("string") | Seen::Unknown) => None,
        (ParamKind::Text, _) => wrong("a string"),
        (
            ParamKind::Items,
            Seen::Known(Value::Array(_))
            | Seen::Type("array")
            | Seen::EmptyTable
            | Seen::Unknown
            | Seen::Function,
        ) => None,
        (ParamKind::Items, _) => wrong(words.list),
        (ParamKind::Options, Seen::Known(Value::Object(_)) | Seen::Type("object") | Seen::Unknown) => None,
        (ParamKind::Options, _) => wrong(words.map),
        (ParamKind::Body, Seen::Known(_) | Seen::Type(_) | Seen::EmptyTable) => wrong(words.body),
        (ParamKind::Branches | ParamKind::Stages, Seen::Known(_) | Seen::Type(_) | Seen::Function) => {
            wrong(words.functions)
        }
        _ => None,
    }
}

/// What is wrong with one element of a literal list of branches or stages.
pub(crate) fn element(
    kind: ParamKind,
    global: &str,
    seen: Seen<'_>,
    phrase: &str,
    words: &Words,
) -> Option<String> {
    if !matches!(seen, Seen::Known(_) | Seen::Type(_) | Seen::EmptyTable) {
        return None;
    }
    Some(if kind == ParamKind::Branches {
        format!(
            "each branch of {global} must be {}, got {phrase}; to fan out over data use {}",
            words.branch, words.fan_out
        )
    } else {
        format!("each stage of {global} must be {}, got {phrase}", words.stage)
    })
}

/// The message of a function where only JSON may go.
pub(crate) fn function_in_json(place: Place<'_>, words: &Words) -> String {
    format!(
        "a {closure} cannot go in {place}: only JSON values cross into the engine; {closure}s go only in \
         parallel branches, pipeline stages, and step and phase bodies",
        closure = words.closure
    )
}

/// The message of a log level that is not one.
pub(crate) fn log_level(level: &str) -> Option<String> {
    (!LOG_LEVELS.contains(&level)).then(|| {
        format!(
            "log level '{level}' is not one of {}{}",
            LOG_LEVELS.join(", "),
            suggest::suffix(level, LOG_LEVELS)
        )
    })
}

/// The agent calls of one body whose arguments are all literals and that have no `key`, each
/// with the line it first stands on: a later identical call is told apart only by its order.
#[derive(Debug, Default)]
pub(crate) struct AgentCalls(HashMap<String, u32>);

impl AgentCalls {
    /// Notes an agent call at `line` with the literal arguments `literals`; the warning when it
    /// repeats an earlier call of the body.
    pub(crate) fn repeats(&mut self, literals: Vec<Value>, line: u32, words: &Words) -> Option<String> {
        if literals.get(1).and_then(|options| options.get("key")).is_some() {
            return None;
        }
        match self.0.entry(Value::Array(literals).to_string()) {
            Entry::Occupied(first) => Some(format!(
                "this agent call repeats the identical call on line {}; the journal tells them apart only by \
                 order, so give each a distinct key option ({})",
                first.get(),
                words.key
            )),
            Entry::Vacant(slot) => {
                slot.insert(line);
                None
            }
        }
    }
}

/// The message of a write, inside a branch or stage of `global`, to a captured variable.
pub(crate) fn race(what: &str, name: &str, global: &str) -> String {
    let (site, others, unit) = if global == "pipeline" {
        ("pipeline stage", "items", "stage")
    } else {
        ("parallel branch", "branches", "branch")
    };
    format!(
        "{what} captured variable '{name}' inside a {site} races with the other {others}; return a value from \
         each {unit} and combine the results after {global} returns"
    )
}
