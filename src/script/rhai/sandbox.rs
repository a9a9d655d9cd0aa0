//! The restricted Rhai engine scripts run in, and its parse-only twin the linter uses.
//!
//! The sandbox starts from `Engine::new_raw()` (no packages, no printing, no module resolver)
//! and adds back only pure packages: arithmetic, logic, strings, arrays, maps, blobs, iterators,
//! function pointers, math and bit fields. Rhai's language-core package is left out because it
//! carries `sleep`, `exit` and JSON parsing tied to the engine; the time package is left out
//! because ambient time breaks replay. Every `set_max_*` limit is set from [`SandboxLimits`],
//! and `eval`, `import`, `export`, `print` and `debug` are disabled symbols, so the parser itself
//! rejects them.
//!
//! The linter parses with the same limits but with those symbols enabled: a disabled symbol is
//! a bare "reserved keyword" parse error, while lint can point at the call and say what to use
//! instead. Lint rejects every one of them, so an AST that passed lint contains none.

use std::collections::HashSet;
use std::sync::OnceLock;

use ::rhai::packages::{
    ArithmeticPackage, BasicArrayPackage, BasicBlobPackage, BasicFnPackage, BasicIteratorPackage,
    BasicMapPackage, BasicMathPackage, BasicStringPackage, BitFieldPackage, LogicPackage, MoreStringPackage,
    Package,
};
use ::rhai::{Engine, Module, OptimizationLevel, Scope, Shared};

/// The resource limits of one script engine. Each bounds a way a hostile or buggy script could
/// exhaust the host; hitting one ends the run with `sandbox_limit`, never a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Operations one evaluation may run. The runner also counts operations across all branches
    /// of a run through `on_progress`; this is the per-evaluation backstop.
    pub max_operations: u64,
    /// Depth of nested function calls (recursion).
    pub max_call_levels: usize,
    /// Nesting depth of expressions at the top level of the script.
    pub max_expr_depth: usize,
    /// Nesting depth of expressions inside functions and closures.
    pub max_function_expr_depth: usize,
    /// Longest string, in bytes. Agent outputs are strings, so this is generous.
    pub max_string_size: usize,
    /// Longest array.
    pub max_array_size: usize,
    /// Most properties in one map.
    pub max_map_size: usize,
    /// Most variables in scope at once.
    pub max_variables: usize,
    /// Most script-defined functions, closures included (each closure is a function).
    pub max_functions: usize,
    /// Longest script source, in bytes, that compile and lint will parse; a bound on the time
    /// either can take.
    pub max_source_size: usize,
    /// The most tokens a script may have, counted by a linear scan before either parser runs
    /// (`script::source`): the parsers are superlinear on some inputs and the linter's tree
    /// takes about a kilobyte per token, so this bounds the time and memory of lint and compile.
    pub max_source_tokens: usize,
    /// The most memory, in bytes, a run's script threads may hold at once, all branches
    /// together. Measured by [`crate::CountingAlloc`] when it is the global allocator;
    /// without it only the per-value limits above hold.
    pub max_memory: u64,
    /// The most allocations a run's script threads may make, all branches together (a running
    /// count, never decreasing). Copying a value allocates once per array, map and string in
    /// it, work the operation count does not see: `a = [a]` in a loop copies the whole nest
    /// on every turn, quadratic time in a handful of operations. Measured by
    /// [`crate::CountingAlloc`] like `max_memory`.
    pub max_allocations: u64,
    /// The longest a script may run, in wall-clock time spent running script code, all of a
    /// run's threads together; time waiting for the engine (model calls, host calls, waits,
    /// branches to finish) is not counted. The backstop for work the operation budget cannot
    /// see: the interpreters' own operators and indexers walk a long string in one operation
    /// (`a == b`, `a < b`, `s[i]`, `m[k]`, a `switch`, a Lua table key). The default (10 s) is
    /// about four times what the default operation budget takes of cheap operations in a
    /// release build; raise both together.
    pub max_wall_time: std::time::Duration,
    /// The most journal entries (engine calls: `now`, `random`, steps, logs kept, agent calls)
    /// a run's script may make. Each is kept by the host for the rest of the run, so besides
    /// the memory they are charged, their number is capped; the default fits a million-call
    /// orchestration.
    pub max_journal_entries: u64,
}

impl SandboxLimits {
    /// The limits every run uses unless its host sets others.
    pub const STANDARD: SandboxLimits = SandboxLimits {
        max_operations: 50_000_000,
        max_call_levels: 48,
        max_expr_depth: 64,
        max_function_expr_depth: 48,
        max_string_size: 4 << 20,
        max_array_size: 16_384,
        max_map_size: 10_000,
        max_variables: 2_048,
        max_functions: 1_024,
        max_source_size: 256 << 10,
        max_source_tokens: 40_000,
        max_memory: 256 << 20,
        max_allocations: 10_000_000,
        max_wall_time: std::time::Duration::from_secs(10),
        max_journal_entries: 4_000_000,
    };
}

/// The keywords the sandbox disables at the parser.
pub(crate) const DISABLED_SYMBOLS: [&str; 5] = ["eval", "import", "export", "print", "debug"];

/// Names of the read-only variables every script sees: the run's input and the budget reader.
pub(crate) const SCRIPT_VARIABLES: [&str; 2] = ["args", "budget"];

/// Builds the engine scripts execute in: parser limits and strict variables as lint uses them,
/// the disabled symbols, and the pure packages.
///
/// The runner configures the rest on the returned engine: the cairn globals, `on_progress`
/// (the shared operation budget, cancellation and the deadline), and the `args` and `budget`
/// constants in the evaluation scope.
pub(crate) fn sandbox_engine(limits: &SandboxLimits) -> Engine {
    let mut engine = parser_engine(limits);
    for symbol in DISABLED_SYMBOLS {
        engine.disable_symbol(symbol);
    }
    for module in pure_packages() {
        engine.register_global_module(module.clone());
    }
    engine
}

/// The engine lint parses with: the sandbox's limits and strict variables, no optimisation (so
/// the AST mirrors the source, dead branches included), and no disabled symbols (so lint can
/// explain them). It registers no functions: parsing needs none.
pub(crate) fn parser_engine(limits: &SandboxLimits) -> Engine {
    stable_hashing();
    let mut engine = Engine::new_raw();
    engine.set_strict_variables(true);
    engine.set_optimization_level(OptimizationLevel::None);
    engine.set_max_operations(limits.max_operations);
    engine.set_max_call_levels(limits.max_call_levels);
    engine.set_max_expr_depths(limits.max_expr_depth, limits.max_function_expr_depth);
    engine.set_max_string_size(limits.max_string_size);
    engine.set_max_array_size(limits.max_array_size);
    engine.set_max_map_size(limits.max_map_size);
    engine.set_max_variables(limits.max_variables);
    engine.set_max_functions(limits.max_functions);
    engine.set_max_modules(0);
    engine
}

/// The seed of Rhai's function hashing in every cairn process.
///
/// Rhai names each closure `anon$<hash of its parameters and body>` and hashes with a seed that
/// is random per process unless one is set, so without this a closure's name (and any text
/// built from it) would differ from process to process. Scripts never see these names (closures
/// print as `<closure>`, errors drop them), but Rhai's own caught-error maps may carry them.
pub(crate) const HASHING_SEED: [u64; 4] =
    [0x6361_6972_6e00_0001, 0x7361_6e64_626f_7801, 0x0123_4567_89ab_cdef, 0x1];

/// Fixes Rhai's hashing seed to a constant of cairn's, process-wide, once.
///
/// Rhai allows the seed to be set only once and only before any Rhai engine exists, since
/// engines cache hashes computed with it. cairn calls this before it builds its first engine
/// (compile, lint and every run do), and the `cairn` binary calls it first thing. An embedder
/// that builds Rhai engines of its own before cairn's should call this first; if another seed
/// was set already, that seed stays (it is fixed too, so names are still stable) and this
/// returns it.
pub fn stable_hashing() -> Option<[u64; 4]> {
    static SEED: OnceLock<Option<[u64; 4]>> = OnceLock::new();
    *SEED.get_or_init(|| match ::rhai::config::hashing::set_hashing_seed(Some(HASHING_SEED)) {
        Ok(()) => Some(HASHING_SEED),
        Err(existing) => existing,
    })
}

/// The scope a script is compiled against: `args` and `budget` as constants, so strict
/// variables accepts them and assignment to them is a compile error. The runner evaluates with
/// a scope holding the same names bound to the real values.
pub(crate) fn compile_scope() -> Scope<'static> {
    let mut scope = Scope::new();
    for name in SCRIPT_VARIABLES {
        scope.push_constant(name, ());
    }
    scope
}

/// The pure packages, built once per process: they are immutable function tables, and building
/// them eagerly costs far more than a sandbox's other setup.
fn pure_packages() -> &'static [Shared<Module>] {
    static PACKAGES: OnceLock<Vec<Shared<Module>>> = OnceLock::new();
    PACKAGES.get_or_init(|| {
        vec![
            ArithmeticPackage::new().as_shared_module(),
            LogicPackage::new().as_shared_module(),
            BasicStringPackage::new().as_shared_module(),
            MoreStringPackage::new().as_shared_module(),
            BasicIteratorPackage::new().as_shared_module(),
            BasicFnPackage::new().as_shared_module(),
            BasicMathPackage::new().as_shared_module(),
            BasicArrayPackage::new().as_shared_module(),
            BasicBlobPackage::new().as_shared_module(),
            BasicMapPackage::new().as_shared_module(),
            BitFieldPackage::new().as_shared_module(),
        ]
    })
}

/// Names of the functions the pure packages provide, plus Rhai's keyword functions, which lint
/// accepts as calls. Generated from the packages' sources of the pinned rhai version (operators
/// and property getters left out); a test runs a sample through [`sandbox_engine`].
pub(crate) const BUILTIN_FUNCTIONS: &[&str] = &[
    // Keyword functions handled by the evaluator itself.
    "Fn",
    "call",
    "curry",
    "is_def_fn",
    "is_def_var",
    "is_shared",
    "type_of",
    // Arithmetic, logic and math.
    "E",
    "PI",
    "abs",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "ceiling",
    "cos",
    "cosh",
    "exp",
    "floor",
    "fraction",
    "hypot",
    "int",
    "is_even",
    "is_finite",
    "is_infinite",
    "is_nan",
    "is_odd",
    "is_zero",
    "ln",
    "log",
    "max",
    "min",
    "parse_float",
    "parse_int",
    "round",
    "round_down",
    "round_half_down",
    "round_half_up",
    "round_up",
    "sign",
    "sin",
    "sinh",
    "sqrt",
    "tan",
    "tanh",
    "to_binary",
    "to_degrees",
    "to_float",
    "to_hex",
    "to_int",
    "to_octal",
    "to_radians",
    // Bit fields.
    "get_bit",
    "get_bits",
    "set_bit",
    "set_bits",
    // Strings and conversions.
    "append",
    "bytes",
    "chars",
    "clear",
    "contains",
    "crop",
    "ends_with",
    "get",
    "index_of",
    "len",
    "make_lower",
    "make_upper",
    "pad",
    "pop",
    "remove",
    "replace",
    "set",
    "split",
    "split_rev",
    "starts_with",
    "sub_string",
    "to_blob",
    "to_chars",
    "to_debug",
    "to_lower",
    "to_string",
    "to_upper",
    "trim",
    "truncate",
    // Ranges, iterators and function pointers.
    "bits",
    "end",
    "is_anonymous",
    "is_empty",
    "is_exclusive",
    "is_inclusive",
    "name",
    "range",
    "start",
    // Arrays.
    "all",
    "chop",
    "dedup",
    "drain",
    "extract",
    "filter",
    "find",
    "find_map",
    "for_each",
    "insert",
    "map",
    "order",
    "order_by",
    "order_desc",
    "push",
    "reduce",
    "reduce_rev",
    "retain",
    "reverse",
    "shift",
    "some",
    "sort",
    "sort_by",
    "sort_desc",
    "splice",
    "zip",
    // Blobs.
    "as_string",
    "blob",
    "parse_be_float",
    "parse_be_int",
    "parse_le_float",
    "parse_le_int",
    "to_array",
    "write_ascii",
    "write_be",
    "write_le",
    "write_utf8",
    // Maps.
    "fill_with",
    "keys",
    "mixin",
    "to_json",
    "values",
];

/// Whether `name` is in [`BUILTIN_FUNCTIONS`]; lint asks for every call, so it is a set.
pub(crate) fn is_builtin(name: &str) -> bool {
    static SET: OnceLock<HashSet<&'static str>> = OnceLock::new();
    SET.get_or_init(|| BUILTIN_FUNCTIONS.iter().copied().collect()).contains(name)
}

/// Builtin methods that change their receiver in place; called on a variable captured by a
/// parallel branch, they race like an assignment.
pub(crate) const MUTATING_METHODS: &[&str] = &[
    "append",
    "chop",
    "clear",
    "crop",
    "dedup",
    "drain",
    "fill_with",
    "insert",
    "make_lower",
    "make_upper",
    "mixin",
    "pad",
    "pop",
    "push",
    "remove",
    "replace",
    "retain",
    "reverse",
    "set",
    "set_bit",
    "set_bits",
    "shift",
    "sort",
    "sort_by",
    "sort_desc",
    "splice",
    "trim",
    "truncate",
    "write_ascii",
    "write_be",
    "write_le",
    "write_utf8",
];
