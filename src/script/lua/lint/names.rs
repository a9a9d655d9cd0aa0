//! The names a Lua script may use besides its own locals: the cairn globals, the parts of Lua's
//! standard library the sandbox keeps, and what to write instead of the parts it leaves out.

/// The read-only variables every script sees: the run's input and the budget reader.
pub(super) const SCRIPT_VARIABLES: [&str; 2] = ["args", "budget"];

/// The methods of `budget`.
pub(super) const BUDGET_METHODS: [&str; 2] = ["remaining", "spent"];

/// Lua's base functions the sandbox keeps.
pub(super) const BASE_FUNCTIONS: &[&str] = &[
    "assert",
    "error",
    "getmetatable",
    "ipairs",
    "next",
    "pairs",
    "pcall",
    "rawequal",
    "rawlen",
    "select",
    "setmetatable",
    "tonumber",
    "tostring",
    "type",
    "xpcall",
];

/// Lua's global values that are not functions or libraries.
pub(super) const BASE_VALUES: &[&str] = &["_VERSION"];

/// The standard libraries the sandbox keeps, with the functions (and constants) each keeps.
pub(super) const LIBRARIES: &[(&str, &[&str])] = &[
    (
        "math",
        &[
            "abs",
            "acos",
            "asin",
            "atan",
            "ceil",
            "cos",
            "deg",
            "exp",
            "floor",
            "fmod",
            "huge",
            "log",
            "max",
            "maxinteger",
            "min",
            "mininteger",
            "modf",
            "pi",
            "rad",
            "sin",
            "sqrt",
            "tan",
            "tointeger",
            "type",
            "ult",
        ],
    ),
    (
        "string",
        &[
            "byte", "char", "find", "format", "gmatch", "gsub", "len", "lower", "match", "pack", "packsize",
            "rep", "reverse", "sub", "unpack", "upper",
        ],
    ),
    ("table", &["concat", "insert", "move", "pack", "remove", "sort", "unpack"]),
    ("utf8", &["char", "charpattern", "codepoint", "codes", "len", "offset"]),
];

/// The functions of a kept library, by the library's name.
pub(super) fn library(name: &str) -> Option<&'static [&'static str]> {
    LIBRARIES.iter().find(|(library, _)| *library == name).map(|(_, functions)| *functions)
}

/// Whether a method name is one of the string library's, callable as `s:name(...)`.
pub(super) fn is_string_method(name: &str) -> bool {
    library("string").is_some_and(|functions| functions.contains(&name))
}

const TIME: &str = "use now(), the journaled clock (epoch milliseconds)";
const RANDOM: &str = "use random(key?), the journaled random number in [0, 1)";
const IO: &str = "scripts have no I/O; call a registered host function with host_call(name, args) or give \
                  an agent tools";
const CODE: &str = "scripts have no modules and cannot build code at run time; write the code directly";

/// The globals the sandbox leaves out on purpose, each refused by lint with what to use
/// instead ([`forbidden_global`]). Some exist at run time all the same (`coroutine`, `rawget`,
/// `rawset`, `_G`): lint is what a script must pass, so the card lists them as not available.
#[cfg(test)]
pub(super) const REFUSED_GLOBALS: &[&str] = &[
    "coroutine",
    "rawget",
    "rawset",
    "_G",
    "_ENV",
    "io",
    "os",
    "debug",
    "print",
    "require",
    "package",
    "dofile",
    "loadfile",
    "load",
    "loadstring",
    "module",
    "collectgarbage",
    "gcinfo",
    "newproxy",
    "setfenv",
    "getfenv",
];

/// The members of kept libraries the sandbox leaves out, each refused by lint with what to use
/// instead ([`forbidden_member`]).
#[cfg(test)]
pub(super) const REFUSED_MEMBERS: &[(&str, &str)] =
    &[("math", "random"), ("math", "randomseed"), ("string", "dump")];

/// The Lua card's list of what a script may use, made from the lists above (the ones lint
/// checks against): the base functions and values, each kept library with its functions, and
/// what is refused with what to use instead, grouped by that advice, wrapped at 100 columns.
/// `dialect/card.lua.md` holds it between `<!-- libraries -->` markers; a test checks it is this
/// text and that the runtime has everything it lists as available.
#[cfg(test)]
pub(super) fn card_block() -> String {
    let code = |names: &[&str]| names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    let mut out = String::new();
    wrap(&mut out, &format!("Base functions: {}; the value {}.", code(BASE_FUNCTIONS), code(BASE_VALUES)));
    for (library, functions) in LIBRARIES {
        let methods = if *library == "string" { " (also as methods, `s:upper()`)" } else { "" };
        wrap(&mut out, &format!("`{library}`{methods}: {}.", code(functions)));
    }
    out.push_str("Not available (lint refuses each and says what to use instead):\n");
    let mut groups: Vec<(&str, Vec<String>)> = Vec::new();
    let refused = REFUSED_GLOBALS.iter().map(|name| (name.to_string(), forbidden_global(name))).chain(
        REFUSED_MEMBERS
            .iter()
            .map(|(library, name)| (format!("{library}.{name}"), forbidden_member(library, name))),
    );
    for (name, instead) in refused {
        let instead = instead.unwrap_or("not available");
        match groups.iter_mut().find(|(advice, _)| *advice == instead) {
            Some((_, names)) => names.push(name),
            None => groups.push((instead, vec![name])),
        }
    }
    for (instead, names) in groups {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        wrap(&mut out, &format!("- {}: {instead}", code(&names)));
    }
    out
}

/// Appends `text` as lines of at most 100 characters, broken at spaces (continuation lines of a
/// `- ` item indented by two).
#[cfg(test)]
fn wrap(out: &mut String, text: &str) {
    let indent = if text.starts_with("- ") { "  " } else { "" };
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > 100 {
            out.push_str(&line);
            out.push('\n');
            line = indent.to_owned();
        } else if !line.is_empty() && line != indent {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
}

/// What to use instead of a global the sandbox leaves out on purpose (a whole library or a base
/// function), by name.
pub(super) fn forbidden_global(name: &str) -> Option<&'static str> {
    let instead = match name {
        "io" | "os" => IO,
        "debug" => "use log(level, msg, data?), which emits a run event",
        "print" => "use log(level, msg, data?), which emits a run event",
        "require" | "package" | "dofile" | "loadfile" | "load" | "loadstring" | "module" => CODE,
        "collectgarbage" | "gcinfo" | "newproxy" => "memory is managed by the sandbox; remove the call",
        "coroutine" => {
            "the engine runs branches itself; run work concurrently with parallel(...) or write a plain loop"
        }
        "_G" | "_ENV" => "call the globals by name",
        "setfenv" | "getfenv" => "environments are fixed; call the globals by name",
        "rawset" => "assign through the table instead: t[k] = v",
        "rawget" => "index the table instead: t[k]",
        _ => return None,
    };
    Some(instead)
}

/// What to use instead of a library function the sandbox leaves out on purpose, by library and
/// function name. `None` also for whole libraries that are left out (see [`forbidden_global`]).
pub(super) fn forbidden_member(library: &str, name: &str) -> Option<&'static str> {
    let instead = match (library, name) {
        ("os", "time" | "clock" | "date" | "difftime") => TIME,
        ("os", "exit") => "return the result from the script's top level, or raise an error with error(msg)",
        ("os", "getenv" | "execute" | "remove" | "rename" | "tmpname" | "setlocale") => IO,
        ("math", "random" | "randomseed") => RANDOM,
        ("string", "dump") => "functions cannot be serialized; scripts cannot build code at run time",
        _ => return None,
    };
    Some(instead)
}

/// What to write instead of a global name other languages have and Lua does not.
pub(super) fn foreign_global_hint(name: &str) -> Option<&'static str> {
    let hint = match name {
        "null" | "undefined" | "None" | "NULL" => "Lua's empty value is nil",
        "True" => "Lua's booleans are true and false",
        "False" => "Lua's booleans are true and false",
        "console" => "use log(level, msg, data?), which emits a run event",
        "JSON" | "json" | "cjson" => {
            "values cross into the engine as tables already; give the agent a schema option and it returns \
             the parsed value"
        }
        "Math" => "use the math library (math.floor, math.max, ...); for randomness use random(key?)",
        "Date" | "time" | "clock" | "timestamp" => TIME,
        "len" | "length" | "size" | "count" => "use the length operator: #t",
        "str" | "String" | "to_string" => "use tostring(x)",
        "int" | "Number" | "parseInt" | "parseFloat" | "float" => "use tonumber(x) or math.floor(x)",
        "range" => "count with a numeric for loop: for i = 1, n do ... end",
        "unpack" => "use table.unpack",
        "this" | "self" => {
            "globals are called bare, and a function sees only its parameters and the locals \
                            around it"
        }
        "ctx" => "globals are called bare, as in agent(prompt), not ctx.agent(prompt)",
        "rand" | "randint" | "random_int" => RANDOM,
        "uuid4" | "uuid_v4" | "guid" => "use uuid(), the journaled id",
        "wait" | "setTimeout" => {
            "use sleep(ms) to wait on the clock, or await_external(key) to wait for input"
        }
        "eval" | "exec" => CODE,
        "call" => "call a host function with host_call(name, args, opts?)",
        "try" | "catch" | "except" => "catch errors with pcall(function() ... end)",
        _ => return None,
    };
    Some(hint)
}

/// What to write instead of a library function other languages have and Lua's does not.
pub(super) fn foreign_member_hint(library: &str, name: &str) -> Option<&'static str> {
    let hint = match (library, name) {
        ("string", "split") => "Lua has no split; iterate the parts with s:gmatch(\"[^,]+\")",
        ("string", "trim" | "strip") => "trim with s:match(\"^%s*(.-)%s*$\")",
        ("string", "startswith" | "starts_with" | "startsWith") => "compare s:sub(1, #prefix) == prefix",
        ("string", "endswith" | "ends_with" | "endsWith") => "compare s:sub(-#suffix) == suffix",
        ("string", "contains" | "includes") => "search with s:find(part, 1, true)",
        ("string", "join") => "use table.concat(list, sep)",
        ("table", "push" | "append" | "add") => "use table.insert(t, value)",
        ("table", "join") => "use table.concat(list, sep)",
        ("table", "len" | "length" | "size" | "count" | "getn") => "use the length operator: #t",
        ("table", "keys" | "values") => "collect them with a for k, v in pairs(t) do ... end loop",
        ("table", "map" | "filter" | "foreach" | "forEach" | "reduce") => {
            "write a for _, v in ipairs(t) do ... end loop"
        }
        ("math", "round") => "use math.floor(x + 0.5)",
        ("math", "pow") => "use the ^ operator: x ^ y",
        ("math", "clamp") => "use math.max(lo, math.min(hi, x))",
        _ => return None,
    };
    Some(hint)
}

/// What to write instead of a method other languages' arrays and strings have, called with `:`
/// on a value (`list:push(x)`), when the script defines no method of that name.
pub(super) fn foreign_method_hint(name: &str) -> Option<&'static str> {
    let hint = match name {
        "push" | "append" | "add" => "use table.insert(t, value)",
        "pop" => "use table.remove(t)",
        "join" => "use table.concat(list, sep)",
        "split" => "Lua has no split; iterate the parts with s:gmatch(\"[^,]+\")",
        "trim" | "strip" => "trim with s:match(\"^%s*(.-)%s*$\")",
        "length" | "size" | "count" => "use the length operator: #t",
        "map" | "filter" | "forEach" | "for_each" | "reduce" => {
            "write a for _, v in ipairs(t) do ... end loop"
        }
        "keys" | "values" => "collect them with a for k, v in pairs(t) do ... end loop",
        "contains" | "includes" => "search a string with s:find(part, 1, true), a table with a loop",
        "to_json" | "toJSON" | "to_string" | "toString" => "use tostring(x) for text",
        _ => return None,
    };
    Some(hint)
}
