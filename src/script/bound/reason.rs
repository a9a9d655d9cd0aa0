//! Why a script's agent calls have no static bound: every reason either dialect's bound gives,
//! worded once. The position travels beside the reason (in [`CallBound::Unbounded`]), so no
//! wording repeats it.

use std::fmt;

use super::CallBound;

/// Why the count of a script's agent calls has no static bound.
#[cfg_attr(not(feature = "lua"), allow(dead_code))]
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reason {
    /// The source does not parse: the parser's message.
    Parse(String),
    /// The source is over the size limit the parser reads.
    TooLarge,
    /// The analysis failed (a panic, or no thread to run it on).
    Internal,
    /// The walk ran out of its step budget.
    TooComplex,
    /// Functions call each other deeper than the walk follows.
    TooDeep,
    /// A loop with no static bound on its iterations calls agents.
    Loop(Construct),
    /// A loop or fan-out over a value of unknown size calls agents per element.
    UnknownSize(Construct),
    /// A loop or fan-out over a missing value (an args value the run is not given, with no
    /// default) calls agents per element.
    Missing(Construct),
    /// A numeric `for` loop whose bounds are not known before the run calls agents.
    UnknownBounds,
    /// A `for` loop over an iterator (no list to count) calls agents.
    Iterator,
    /// A loop or fan-out runs functions from a value the walk cannot follow.
    Unfollowable(Construct),
    /// A child workflow: its name when it is a literal.
    ChildWorkflow(Option<String>),
    /// An orchestrator spawns as many agents as it decides at run time.
    Orchestrate,
    /// A function calls itself: its name, when it has one.
    Recursion(Option<String>),
    /// A function that calls agents goes where the walk cannot follow it.
    Escape(Place),
    /// `Fn` with a computed name.
    ComputedFnName,
    /// A function the interpreter calls by itself (a Rhai getter, setter or operator) calls agents.
    Implicit(String),
}

/// A construct that repeats what it holds.
#[cfg_attr(not(feature = "lua"), allow(dead_code))]
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Construct {
    /// `while` (both dialects).
    While,
    /// Rhai's `loop`.
    Loop,
    /// Rhai's `do` loop.
    Do,
    /// Lua's `repeat` loop.
    Repeat,
    /// A Lua `goto` back to a label.
    Goto,
    /// A `for` loop over a collection.
    For,
    /// `parallel(items, f)` or `parallel([branches])`.
    Parallel,
    /// `pipeline(items, stages)`.
    Pipeline,
    /// A builtin method that runs a function per element (Rhai's `map`, `filter`, ...).
    Method(String),
}

/// Where a function goes that the walk cannot follow.
#[cfg_attr(not(feature = "lua"), allow(dead_code))]
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Place {
    /// A name that is assigned or changed somewhere.
    ChangedVariable(String),
    /// A field of a table.
    TableField,
    /// A function's return value.
    ReturnValue,
    /// The right side of an assignment.
    Assignment,
    /// What a generic `for` iterates.
    Iterator,
    /// An operand of `and`/`or`.
    AndOr,
    /// An argument of a function the walk does not follow.
    Argument,
    /// An argument passed through `pcall`.
    PcallArgument,
    /// Anything Rhai's walk loses a closure to.
    Unfollowed,
}

impl Reason {
    /// The unbounded result at a position.
    pub(crate) fn at(self, line: u32, column: u32) -> CallBound {
        CallBound::Unbounded { reason: self.to_string(), line, column }
    }

    /// Whether the walk gave up on its own budget, not on the script: a cheaper walk may still
    /// bound it.
    pub(crate) fn is_exhaustion(&self) -> bool {
        matches!(self, Reason::TooComplex | Reason::TooDeep)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Parse(message) => write!(f, "the script does not parse: {message}"),
            Reason::TooLarge => f.write_str("the script is over the size limit"),
            Reason::Internal => f.write_str("the bound analysis failed on this script (a bug in cairn)"),
            Reason::TooComplex => f.write_str("the script is too large or too deeply nested to bound"),
            Reason::TooDeep => {
                f.write_str("functions and closures call each other deeper than the bound follows")
            }
            Reason::Loop(what) => write!(f, "{what} calls agents and has no static bound on its iterations"),
            Reason::UnknownSize(what) => write!(
                f,
                "{what} calls agents once per element of a value whose size is not known before the run \
                 (a literal, a range or an args value is)"
            ),
            Reason::Missing(what) => write!(
                f,
                "{what} calls agents once per element of a value whose size is not known before the run: \
                 it is missing (an args value the run is not given?); give it in the run's args, or give it \
                 a default (`args.x ?? [...]` in Rhai, `args.x or {{...}}` in Lua)"
            ),
            Reason::UnknownBounds => {
                f.write_str("a numeric `for` loop calls agents and its bounds are not known before the run")
            }
            Reason::Iterator => f.write_str(
                "a `for` loop over an iterator calls agents, and an iterator has no static length",
            ),
            Reason::Unfollowable(what) => {
                write!(f, "{what} runs functions from a value the bound cannot follow")
            }
            Reason::ChildWorkflow(Some(name)) => {
                write!(f, "the child workflow '{name}' makes agent calls the script does not show")
            }
            Reason::ChildWorkflow(None) => f.write_str(
                "the child workflow with a computed name makes agent calls the script does not show",
            ),
            Reason::Orchestrate => f.write_str(
                "an orchestrator decides at run time how many agents it spawns (bounded by its max_spawns \
                 and the ceiling, not by the script)",
            ),
            Reason::Recursion(Some(name)) => {
                write!(f, "the function '{name}' calls itself, so its agent calls have no static bound")
            }
            Reason::Recursion(None) => {
                f.write_str("a function calls itself, so its agent calls have no static bound")
            }
            Reason::Escape(place) => write!(
                f,
                "a function that calls agents goes into {place}, where the bound cannot follow it; pass it \
                 straight to parallel, pipeline, step or phase, or call it directly"
            ),
            Reason::ComputedFnName => f.write_str("`Fn` with a computed name hides which function runs"),
            Reason::Implicit(name) => {
                write!(f, "the function '{name}' is called implicitly by Rhai and calls agents")
            }
        }
    }
}

impl fmt::Display for Construct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Construct::While => f.write_str("a `while` loop"),
            Construct::Loop => f.write_str("a `loop`"),
            Construct::Do => f.write_str("a `do` loop"),
            Construct::Repeat => f.write_str("a `repeat` loop"),
            Construct::Goto => f.write_str("a `goto` loop"),
            Construct::For => f.write_str("a `for` loop"),
            Construct::Parallel => f.write_str("a `parallel` fan-out"),
            Construct::Pipeline => f.write_str("a `pipeline`"),
            Construct::Method(name) => write!(f, "`{name}`"),
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::ChangedVariable(name) => write!(f, "the changed variable '{name}'"),
            Place::TableField => f.write_str("a table field"),
            Place::ReturnValue => f.write_str("a return value"),
            Place::Assignment => f.write_str("an assignment"),
            Place::Iterator => f.write_str("an iterator"),
            Place::AndOr => f.write_str("an and/or expression"),
            Place::Argument => f.write_str("an argument of a function the bound does not inline"),
            Place::PcallArgument => f.write_str("an argument of pcall"),
            Place::Unfollowed => f.write_str("a reassigned variable, a map, a return value or a builtin"),
        }
    }
}
