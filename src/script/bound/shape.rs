//! The shape of a script as the cost bound reads it: what each dialect's front end lowers its
//! syntax tree into (`rhai/bound/lower.rs`, `lua/lint/bound/lower.rs`), and what the one
//! analysis (`eval.rs`) walks.
//!
//! A shape is a tree of [`Node`]s, each a statement or an expression with its position. It
//! keeps what the bound needs and nothing else: values as far as they are static (literals,
//! `args` paths, lists, maps, functions), the sites of agent calls and their options, loops
//! with what they iterate, branches, fan-outs, calls of the script's own functions and
//! closures, and the bindings the script changes somewhere. Each node also says whether it
//! counts a step of the analysis's budget, so both front ends spend the budget as the walk of
//! their syntax tree did.
//!
//! Where the two dialects mean different things by the same construct (how a list is indexed,
//! how a loop over known elements is walked), the shape says which dialect it is
//! ([`Dialect`]); every other rule is the same for both.

// The Lua front end builds forms Rhai's syntax has no counterpart for (tables, `goto`,
// numeric `for` steps, ...): a build without Lua never makes them.
#![cfg_attr(not(feature = "lua"), allow(dead_code))]

use std::collections::HashMap;

use serde_json::Value;

use super::reason::{Construct, Place};

/// A 1-based line and column.
pub(crate) type Pos = (u32, u32);

/// A function of [`Shape::functions`], by index.
pub(crate) type FnId = usize;

/// A script lowered for the bound.
#[derive(Debug)]
pub(crate) struct Shape {
    /// The top-level statements.
    pub(crate) main: Block,
    /// Every function body the script holds: Rhai's functions and closures, Lua's functions.
    pub(crate) functions: Vec<Function>,
    /// Rhai's script functions by name, in declaration order (closures have unique names).
    pub(crate) named: HashMap<String, Vec<FnId>>,
    /// Functions the interpreter calls by itself (Rhai getters, setters, operators,
    /// `to_string`): any that calls agents makes the script unbounded.
    pub(crate) implicit: Vec<String>,
    /// The names the script changes somewhere: their bindings do not hold what they were
    /// bound to.
    pub(crate) changed: HashMap<String, Change>,
    /// Whether `args` holds the run's args (false when the script rebinds it).
    pub(crate) args_known: bool,
    /// Which dialect's meaning the constructs have where the two differ.
    pub(crate) dialect: Dialect,
}

/// Where the two dialects' constructs mean different things.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// Arrays index from 0 (negative indexes from the end), a string iterates by character,
    /// an array literal holding unknown data is unknown, and an element picked by an unknown
    /// index must not be a function that calls agents. A loop over few known elements is
    /// walked element by element first (within a step budget), and nested calls are counted
    /// at every step.
    Rhai,
    /// Tables index from 1 and `pairs` walks a map in key order, a table of unknown items has
    /// a known length, a loop is walked once with an unknown element first (element by element
    /// only when that walk cannot bound it), and nested calls are counted where they are made.
    Lua,
}

/// How a changed name's binding is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Assigned somewhere: unknown wherever it is bound.
    Always,
    /// Changed through a reference (an alias, a method, an argument): unknown unless it holds
    /// a string, a number, a boolean or nil, which no reference can change.
    UnlessScalar,
}

/// A function body.
#[derive(Debug)]
pub(crate) struct Function {
    /// Its parameters, in order.
    pub(crate) params: Vec<String>,
    pub(crate) body: Block,
    /// Whether the body sees the run's `args`.
    pub(crate) sees_args: SeesArgs,
}

/// Whether a function's body sees the run's `args`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SeesArgs {
    /// Always (Lua: a chunk's functions see its globals).
    Always,
    /// Never (a Rhai `fn` sees only its parameters).
    Never,
    /// When its caller does (a Rhai closure).
    AsCaller,
}

/// Statements in a scope of their own. Its value is the last statement's; each other
/// statement's value is dropped where the next one starts.
#[derive(Debug, Default)]
pub(crate) struct Block {
    pub(crate) stmts: Vec<Node>,
    /// A Lua block's `return`, after its statements.
    pub(crate) ret: Option<Box<Node>>,
    /// Where the block starts.
    pub(crate) at: Pos,
}

/// A statement or an expression, at its position.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) at: Pos,
    /// Whether walking it counts a step of the analysis's budget.
    pub(crate) step: bool,
    pub(crate) kind: Kind,
}

/// What a node is.
#[derive(Debug)]
pub(crate) enum Kind {
    // ----- values -----
    /// A value known before the run.
    Const(Value),
    /// A value the bound does not follow.
    Unknown,
    /// A name's value.
    Var(String),
    /// A function value.
    Function(FnValue),
    /// An interpolated string: its parts, joined when all are known.
    Text(Vec<Node>),
    /// An array literal (Rhai) or the positional items of a table (Lua).
    List(Vec<Node>),
    /// A map literal (Rhai).
    Map(Vec<(String, Node)>),
    /// A Lua table with keyed fields: its fields in order, and its value when every field is
    /// a literal.
    Table { fields: Vec<TableField>, known: Option<Value> },
    /// A value, then accessors and calls applied to it in order.
    Chain { root: Root, steps: Vec<Access> },
    /// A prefix operator (Lua).
    Unary { op: UnaryOp, operand: Box<Node> },
    /// An infix operator (Lua).
    Binary { op: BinaryOp, lhs: Box<Node>, rhs: Box<Node> },
    /// `&&`, `||` or `??` over operands (Rhai).
    Logic { op: LogicOp, operands: Vec<Node> },
    /// An operator applied to arguments (Rhai's `+`, `..`, `==`, ...).
    Operator { name: String, args: Vec<Node> },
    /// A call by name (Rhai): the script's function, a cairn global, a closure held by a
    /// variable, or a builtin. `method`: called as a method whose receiver is not known.
    Call { name: String, args: Vec<Node>, method: bool },

    // ----- statements -----
    /// One more step of the budget at this position, then the node.
    Also(Box<Node>),
    /// The node's count; its value is unknown (and not checked for functions).
    Drop(Box<Node>),
    /// A block: its statements in their own scope.
    Block(Block),
    /// Each effect in order; the value is `()`.
    Seq(Vec<Effect>),
    /// Binds names to values, in order (a missing value is unknown).
    Let { names: Vec<(String, Pos)>, values: Vec<Node> },
    /// Conditions and their branches: the count of every condition, plus the larger branch
    /// per site; a condition known before the run picks its branch.
    If { cond: Box<Node>, then: Block, else_ifs: Vec<(Node, Block)>, otherwise: Block },
    /// A Rhai `switch`: every case condition counts, plus the larger case per site.
    Switch { subject: Box<Node>, cases: Vec<(Node, Node)> },
    /// A Rhai `try`/`catch`: both count; `at`: the catch variable's position.
    Try { body: Block, catch: Option<(String, Pos)>, handler: Block, at: Pos },
    /// A loop whose iterations have no static bound: bounded only when it calls no agents.
    While(While),
    /// A Lua `repeat ... until`: its body, then its condition in the body's scope; `at`:
    /// where an unbounded one is reported.
    Repeat { body: Block, until: Box<Node>, at: Pos },
    /// A loop over elements.
    For(For),
    /// `return` (or Rhai's `break` with a value): its values leave, unknown.
    Return { values: Vec<Node>, checked: bool },
    /// A Lua label.
    Label(String),
    /// A Lua `goto` to a label, at its `goto`.
    Goto { target: String, at: Pos },
}

/// A function value as the script writes it.
#[derive(Debug)]
pub(crate) enum FnValue {
    /// A Rhai function or closure by name, with the values it captured (a variable's value,
    /// or unknown), passed before its arguments.
    Named { name: String, captured: Vec<Option<String>> },
    /// A Lua function: its body, closing over the scope where the value is made; `name` is
    /// the name a `local function` sees itself by.
    Body { id: FnId, name: Option<String> },
}

/// A field of a Lua table.
#[derive(Debug)]
pub(crate) enum TableField {
    /// A positional item.
    Item(Node),
    /// `key = value` or `[key] = value`: its value goes where the bound does not follow it.
    Keyed { key: Option<Node>, value: Node, at: Pos },
}

/// Where a chain starts.
#[derive(Debug)]
pub(crate) enum Root {
    /// A value.
    Node(Box<Node>),
    /// A name that is a cairn global unless a local holds it (Lua).
    Name { name: String, at: Pos },
    /// Rhai's `args`, whose static path is followed by reference when it is the run's args.
    Args(Box<Node>),
}

/// One accessor or call of a chain.
#[derive(Debug)]
pub(crate) enum Access {
    /// `.name`.
    Field(String),
    /// `[key]`; `literal`: a string or integer literal that Rhai's `args` path follows.
    Index { key: Node, literal: bool },
    /// A Rhai method call: the function called with the receiver first.
    Method { name: String, args: Vec<Node>, at: Pos },
    /// A Lua call of the value (or of the global the chain names).
    Call { args: Vec<Node>, options: SiteOptions },
    /// A Lua method call (`value:name(...)`): not followed.
    Opaque(Vec<Node>),
}

/// How an agent call's options are read.
#[derive(Debug, Default)]
pub(crate) enum SiteOptions {
    /// From the value of the call's second argument (Rhai).
    #[default]
    FromValue,
    /// No options argument.
    Absent,
    /// A computed options argument.
    Computed,
    /// A table constructor's fields, each read statically (Lua).
    Fields(Vec<(String, OptionValue)>),
}

/// What one field of a Lua options table is statically.
#[derive(Debug)]
pub(crate) enum OptionValue {
    Known(Value),
    Computed,
    /// A name and a path of fields and literal keys from it, read in the scope of the call.
    Path {
        name: String,
        keys: Vec<PathKey>,
    },
}

/// One step of an [`OptionValue::Path`].
#[derive(Debug)]
pub(crate) enum PathKey {
    Field(String),
    /// `[literal]`: the key when it is a literal.
    Index(Option<Value>),
}

/// Lua's prefix operators.
#[derive(Debug, Clone, Copy)]
pub(crate) enum UnaryOp {
    Len,
    Neg,
    Other,
}

/// Lua's infix operators the bound reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinaryOp {
    Add,
    Sub,
    Mul,
    FloorDiv,
    And,
    Or,
    Other,
}

/// Rhai's short-circuit operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogicOp {
    And,
    Or,
    Coalesce,
}

/// One effect of a [`Kind::Seq`]: a node's count, its value dropped; `lose`: where the value
/// goes that the bound cannot follow, if it must not be a function that calls agents.
#[derive(Debug)]
pub(crate) struct Effect {
    pub(crate) node: Node,
    pub(crate) lose: Option<(Pos, Place)>,
}

/// A `while`, `loop` or `do` loop.
#[derive(Debug)]
pub(crate) struct While {
    /// The condition (evaluated once: its count adds to the body's).
    pub(crate) cond: Box<Node>,
    pub(crate) body: Block,
    /// Rhai's `do { } while`: a condition known false runs the body once.
    pub(crate) runs_once: bool,
    pub(crate) what: Construct,
    /// Where an unbounded one is reported.
    pub(crate) at: Pos,
}

/// A loop over elements.
#[derive(Debug)]
pub(crate) struct For {
    pub(crate) over: Over,
    /// The names each iteration binds (see [`Over`] for what each holds).
    pub(crate) names: Vec<(String, Pos)>,
    pub(crate) body: Block,
    /// Where an unbounded one is reported.
    pub(crate) at: Pos,
}

/// What a `for` loop iterates.
#[derive(Debug)]
pub(crate) enum Over {
    /// The elements of a value (Rhai): the names hold the element and its index.
    Elements(Box<Node>),
    /// A numeric range (Lua): the name holds the number.
    Steps { start: Box<Node>, end: Box<Node>, step: Option<Box<Node>> },
    /// `ipairs(collection)` or `pairs(collection)` (Lua), unless a local holds `via`, when it
    /// is an iterator over `otherwise`: the names hold the key and the value.
    Pairs { via: String, collection: Box<Node>, otherwise: Vec<Node> },
    /// Any other iterator (Lua): the names hold unknown values.
    Iterator(Vec<Node>),
}

impl Node {
    /// A node that counts a step.
    pub(crate) fn new(at: Pos, kind: Kind) -> Node {
        Node { at, step: true, kind }
    }

    /// A node that counts no step.
    pub(crate) fn quiet(at: Pos, kind: Kind) -> Node {
        Node { at, step: false, kind }
    }
}
