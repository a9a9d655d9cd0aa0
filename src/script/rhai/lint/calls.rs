//! Calls: cairn globals checked against their signatures and option schemas, the names they
//! refer to, builtins, script functions, and the functions the sandbox leaves out on purpose.

use ::rhai::{Expr, FnCallExpr, ImmutableString, Position};
use serde_json::Value;

use super::options::type_phrase;
use super::{Arg, Linter, Receiver, SEQUENTIAL_CALLERS, Static, Use, is_closure_literal, line_column};
use crate::script::call_check::{self, Place, Problem, Seen, Words};
use crate::script::rhai::sandbox::{BUILTIN_FUNCTIONS, is_builtin};
pub(super) use crate::script::schema_check::Registry;
use crate::script::schema_check::registered_problem;
use crate::script::{GLOBALS, Global, Param, ParamKind, Severity, global, suggest};

impl Linter<'_, '_> {
    /// Checks a call (a method call passes its receiver as the first argument) and walks its
    /// arguments.
    pub(super) fn visit_call(&mut self, call: &FnCallExpr, pos: Position, receiver: Receiver<'_>) -> Static {
        let name = call.name.as_str();
        // `ctx.agent(...)` on a variable that does not exist (already reported as unknown):
        // the global was meant, so its arguments are checked as a plain call's.
        let receiver = match receiver {
            Receiver::Expr(Expr::Variable(variable, ..))
                if global(name).is_some() && self.resolve(&variable.1).is_none() =>
            {
                Receiver::None
            }
            other => other,
        };
        let mut args: Vec<Arg<'_>> = Vec::with_capacity(call.args.len() + 1);
        match receiver {
            Receiver::None => {}
            Receiver::Unknown => args.push(Arg { expr: None, walked: true }),
            Receiver::Expr(expr) => args.push(Arg { expr: Some(expr), walked: true }),
        }
        args.extend(call.args.iter().map(|expr| Arg { expr: Some(expr), walked: false }));
        let is_method = !matches!(receiver, Receiver::None);

        if call.op_token.is_some() || !::rhai::is_valid_identifier(name) {
            self.walk_args(&args);
            return Static::Unknown;
        }
        if !call.namespace.is_empty() && call.namespace.root() != "global" {
            let message =
                format!("'{}::{name}' is not available; scripts have no modules", call.namespace.root());
            self.error_at("forbidden", pos, None, message);
            self.walk_args(&args);
            return Static::Unknown;
        }
        let user_defined =
            self.functions.names.contains(name) || (!is_method && self.resolve(name).is_some());
        if !is_method && !self.functions.names.contains(name) && self.resolve(name).is_some() {
            // `f(x)` of a closure variable: its writes happen here.
            self.closure_call_writes(&call.name, pos, name.chars().count());
        }
        if !user_defined && let Some(instead) = forbidden(name) {
            let message = format!("{name}() is not available; {instead}");
            self.error_at("forbidden", pos, Some(name.chars().count()), message);
            self.walk_args(&args);
            return Static::Unknown;
        }
        if !user_defined && let Some(global) = global(name) {
            if !(name == "log" && is_math_log(&args)) {
                return self.check_global(global, &args, pos);
            }
        } else if !user_defined && !self.is_known_function(name, is_method) {
            let budget_methods: &[&str] = if is_method { &["spent", "remaining"] } else { &[] };
            let candidates = GLOBALS
                .iter()
                .map(|global| global.name)
                .chain(BUILTIN_FUNCTIONS.iter().copied())
                .chain(budget_methods.iter().copied())
                .chain(self.functions.names.iter().map(ImmutableString::as_str));
            let kind = if is_method { "method" } else { "function" };
            let message = match (missing_builtin_hint(name), suggest::did_you_mean(name, candidates)) {
                _ if !is_method && let Some(instead) = self.registered_name_hint(name) => {
                    format!("unknown function '{name}'; {instead}")
                }
                (Some(hint), _) => format!("unknown {kind} '{name}'; {hint}"),
                (None, Some(candidate)) => format!("unknown {kind} '{name}' (did you mean '{candidate}'?)"),
                (None, None) => format!(
                    "unknown {kind} '{name}'; the globals are {}, and rhai's builtins for strings, arrays, \
                     maps and math",
                    global_names()
                ),
            };
            self.error_at("unknown-function", pos, Some(name.chars().count()), message);
        } else if name == "call" && !is_method {
            self.check_fn_pointer_call(&args, pos);
        } else if name == "Fn" && !is_method {
            self.check_dynamic_fn(args.first().and_then(|arg| arg.expr), pos);
            self.check_fn_pointer_name(&args);
        }
        let used = if is_builtin(name) && SEQUENTIAL_CALLERS.contains(&name) {
            Use::Sequential
        } else {
            Use::Escapes
        };
        for arg in &args {
            self.walk_arg_as(arg, used);
            // A stored closure handed to a builtin (`map`, `filter`, `for_each`, `reduce`,
            // `sort`, ...) or a function is called there: its writes happen here.
            if !arg.walked
                && let Some(Expr::Variable(variable, _, arg_pos)) = arg.expr
            {
                self.closure_call_writes(&variable.1, *arg_pos, variable.1.chars().count());
            }
        }
        Static::Unknown
    }

    /// A registered name called as if it were a function: how to call what it names.
    fn registered_name_hint(&self, name: &str) -> Option<String> {
        let ctx = self.ctx;
        if ctx.toolsets.contains(name) {
            Some(format!(
                "'{name}' is a toolset: give it to an agent, agent(prompt, #{{tools: [\"{name}\"]}})"
            ))
        } else if ctx.profiles.contains(name) {
            Some(format!("'{name}' is a profile: write agent(prompt, #{{profile: \"{name}\"}})"))
        } else if ctx.host_functions.contains(name) {
            Some(format!("'{name}' is a host function: write host_call(\"{name}\", #{{...}})"))
        } else if ctx.child_workflows.contains(name) {
            Some(format!("'{name}' is a child workflow: write workflow(\"{name}\", args)"))
        } else {
            None
        }
    }

    fn is_known_function(&self, name: &str, is_method: bool) -> bool {
        is_builtin(name)
            || self.functions.names.contains(name)
            || self.assumed.contains(name)
            || (is_method && matches!(name, "spent" | "remaining"))
    }

    /// Rhai reserves `call(fn_ptr, ...)` for calling a function pointer; a string first
    /// argument means the host-function global was meant.
    fn check_fn_pointer_call(&mut self, args: &[Arg<'_>], pos: Position) {
        let first = args.first().and_then(|arg| arg.expr).map(|expr| self.peek(expr));
        if let Some(Static::Known(Value::String(_)) | Static::Type("string")) = first {
            let message = "call() calls a function pointer in rhai; call a host function with \
                           host_call(name, args, opts?)"
                .to_owned();
            self.error_at("unknown-function", pos, Some(4), message);
        }
    }

    /// `Fn("name")` builds a pointer from a name: the name must be a function the script can call.
    fn check_fn_pointer_name(&mut self, args: &[Arg<'_>]) {
        let Some(Expr::StringConstant(target, pos)) = args.first().and_then(|arg| arg.expr) else { return };
        let target = target.as_str();
        if let Some(instead) = forbidden(target) {
            self.error_at("forbidden", *pos, None, format!("{target}() is not available; {instead}"));
        } else if global(target).is_none() && !self.is_known_function(target, false) {
            let message = format!("Fn(\"{target}\") names no function the script can call");
            self.error_at("unknown-function", *pos, None, message);
        }
    }

    fn walk_args(&mut self, args: &[Arg<'_>]) {
        for arg in args {
            self.walk_arg(arg);
        }
    }

    /// Walks an argument whose closure, if it is one, is reported where it lands (a race, or
    /// a closure where JSON must go).
    fn walk_arg(&mut self, arg: &Arg<'_>) -> Static {
        self.walk_arg_as(arg, Use::Reported)
    }

    fn walk_arg_as(&mut self, arg: &Arg<'_>, used: Use) -> Static {
        match arg.expr {
            Some(expr) if !arg.walked => self.walk_expr_as(expr, used),
            Some(expr) => self.peek(expr),
            None => Static::Unknown,
        }
    }

    /// Checks a call of a cairn global: arity, each argument against its parameter, and the
    /// names it refers to.
    fn check_global(&mut self, global: &'static Global, args: &[Arg<'_>], pos: Position) -> Static {
        let Some(params) = self.params_for(global, args) else {
            self.walk_args(args);
            return Static::Unknown;
        };
        if let Some(message) = call_check::arity(global, params, args.len(), false, &Words::RHAI) {
            self.error_at("arity", pos, Some(global.name.len()), message);
            self.walk_args(args);
            return Static::Unknown;
        }
        for (param, arg) in params.iter().zip(args) {
            self.check_arg(global, param, arg);
        }
        let first_literal = match args.first().and_then(|arg| arg.expr) {
            Some(Expr::StringConstant(text, pos)) => Some((text.as_str(), *pos)),
            _ => None,
        };
        match global.name {
            "host_call" => {
                if let Some((name, pos)) = first_literal {
                    self.check_registered(Registry::HostFunction, name, pos);
                }
            }
            "workflow" => {
                if let Some((name, pos)) = first_literal {
                    self.check_registered(Registry::Workflow, name, pos);
                    if let Some(expr) = args.get(1).and_then(|arg| arg.expr) {
                        self.check_workflow_args(name, expr);
                    }
                }
            }
            "log" => {
                if let Some((level, pos)) = first_literal
                    && let Some(message) = call_check::log_level(level)
                {
                    self.error_at("arg-type", pos, None, message);
                }
            }
            "agent" => self.check_duplicate_agent(args, pos),
            _ => {}
        }
        Static::Unknown
    }

    /// The parameters a call of `global` is checked against: `parallel` with a closure second
    /// is the map form. `None` when a `parallel` call could be either form, so only the
    /// arguments' own contents are checked.
    fn params_for(&self, global: &'static Global, args: &[Arg<'_>]) -> Option<&'static [Param]> {
        let second = args.get(1).and_then(|arg| arg.expr).map(|expr| self.peek(expr));
        call_check::params_for(global, args.len(), second.as_ref().map(seen), || {
            // A computed second argument is options (list form) when the first is a list of
            // closures; otherwise it may be a closure the walk cannot see.
            match args.first().and_then(|arg| arg.expr) {
                Some(Expr::Array(elements, _)) => {
                    elements.iter().any(|element| matches!(self.peek(element), Static::Closure(_)))
                }
                _ => false,
            }
        })
    }

    fn check_arg(&mut self, global: &Global, param: &Param, arg: &Arg<'_>) {
        let Some(expr) = arg.expr else { return };
        let place = Place::of(global, param);
        match param.kind {
            ParamKind::Text => {
                self.check_shape(param.kind, place, expr);
                self.walk_arg(arg);
            }
            ParamKind::Json => self.check_json(arg, place),
            ParamKind::Items => {
                self.check_shape(param.kind, place, expr);
                self.check_json(arg, place);
            }
            ParamKind::Options => match expr {
                Expr::Map(map, _) if !arg.walked => {
                    let schema = global.options.unwrap_or(global.name);
                    for (key, value) in &map.0 {
                        self.check_option(global, schema, &key.name, key.pos, value);
                        self.check_json(&Arg { expr: Some(value), walked: false }, place);
                    }
                }
                _ => {
                    self.check_shape(param.kind, place, expr);
                    self.walk_arg(arg);
                }
            },
            ParamKind::Body => {
                self.check_shape(param.kind, place, expr);
                let used = if global.name == "parallel" { Use::Reported } else { Use::Sequential };
                self.immediate = !arg.walked && is_closure_literal(expr);
                let walked = self.walk_arg_as(arg, used);
                self.immediate = false;
                if global.name == "parallel"
                    && let Static::Closure(id) = walked
                {
                    self.report_races(id, global.name);
                }
                if global.name == "step"
                    && let Static::Closure(id) = walked
                {
                    self.report_step_writes(id);
                }
            }
            ParamKind::Branches | ParamKind::Stages => match expr {
                Expr::Array(elements, _) if !arg.walked => {
                    for element in elements {
                        let shape = self.peek(element);
                        if let Some(message) = call_check::element(
                            param.kind,
                            global.name,
                            seen(&shape),
                            type_phrase(&shape),
                            &Words::RHAI,
                        ) {
                            self.error_at("arg-type", element.position(), None, message);
                        }
                        self.immediate = is_closure_literal(element);
                        let walked = self.walk_expr_as(element, Use::Reported);
                        self.immediate = false;
                        if let Static::Closure(id) = walked {
                            self.report_races(id, global.name);
                        }
                    }
                }
                _ => {
                    self.check_shape(param.kind, place, expr);
                    self.walk_arg(arg);
                }
            },
        }
    }

    /// Checks a value that must be JSON: no closure anywhere in its literal structure.
    fn check_json(&mut self, arg: &Arg<'_>, place: Place<'_>) {
        let Some(expr) = arg.expr else { return };
        if arg.walked {
            if let Static::Closure(_) = self.peek(expr) {
                self.closure_in_json(expr.position(), place);
            }
            return;
        }
        match expr {
            Expr::Array(elements, _) => {
                for element in elements {
                    self.check_json(&Arg { expr: Some(element), walked: false }, place);
                }
            }
            Expr::Map(map, _) => {
                for (_, value) in &map.0 {
                    self.check_json(&Arg { expr: Some(value), walked: false }, place);
                }
            }
            _ => {
                if let Static::Closure(_) = self.walk_expr_as(expr, Use::Reported) {
                    self.closure_in_json(expr.position(), place);
                }
            }
        }
    }

    /// Checks what an argument that is not a literal list or map is, against its parameter.
    fn check_shape(&mut self, kind: ParamKind, place: Place<'_>, expr: &Expr) {
        let shape = self.peek(expr);
        match call_check::argument(kind, place, seen(&shape), type_phrase(&shape), &Words::RHAI) {
            Some(Problem::Function) => self.closure_in_json(expr.position(), place),
            Some(Problem::Shape(message)) => self.error_at("arg-type", expr.position(), None, message),
            None => {}
        }
    }

    fn closure_in_json(&mut self, pos: Position, place: Place<'_>) {
        self.error_at("closure-in-options", pos, None, call_check::function_in_json(place, &Words::RHAI));
    }

    /// Reports a literal name the engine has not registered.
    pub(super) fn check_registered(&mut self, registry: Registry, name: &str, pos: Position) {
        if let Some((rule, message)) = registered_problem(self.ctx, registry, name) {
            self.error_at(rule, pos, None, message);
        }
    }

    /// Warns on an agent call whose literal arguments repeat an earlier call in the same body
    /// with no `key` to tell them apart: the journal would tell them apart only by order.
    fn check_duplicate_agent(&mut self, args: &[Arg<'_>], pos: Position) {
        let mut values = Vec::with_capacity(args.len());
        for arg in args {
            let Some(Static::Known(value)) = arg.expr.map(|expr| self.peek(expr)) else { return };
            values.push(value);
        }
        let (line, _) = line_column(pos);
        let Some(frame) = self.frames.last_mut() else { return };
        if let Some(message) = frame.agent_calls.repeats(values, line, &Words::RHAI) {
            self.report(Severity::Warning, "duplicate-agent-call", pos, Some(5), message);
        }
    }

    /// A closure that goes where lint cannot follow it (see [`Use::Escapes`]) must not write a
    /// variable from outside it: if it reaches `parallel` or `pipeline`, that write races. A
    /// closure run only in order never races, but lint cannot prove that of one it loses track
    /// of, so it refuses the write there rather than miss the race.
    pub(super) fn check_escape(&mut self, closure: Option<usize>, used: Use) {
        if used != Use::Escapes {
            return;
        }
        let Some(facts) = closure.and_then(|id| self.closures.get(id)) else { return };
        let messages: Vec<(Position, usize, String)> = facts
            .escaping
            .iter()
            .map(|mutation| {
                let message = format!(
                    "{} captured variable '{}' in a closure that is stored, passed on or returned, so it may run \
                     as a parallel branch or pipeline stage and race; return a value from the closure and combine \
                     the results where it runs",
                    mutation.what, mutation.name
                );
                (mutation.pos, mutation.len, message)
            })
            .collect();
        for (pos, len, message) in messages {
            self.error_at("parallel-capture-assign", pos, Some(len), message);
        }
    }

    /// Reports every write a closure run concurrently makes to a variable from outside it.
    fn report_races(&mut self, closure: Option<usize>, global: &str) {
        let Some(facts) = closure.and_then(|id| self.closures.get(id)) else { return };
        let messages: Vec<(Position, usize, String)> = facts
            .escaping
            .iter()
            .map(|mutation| {
                (mutation.pos, mutation.len, call_check::race(&mutation.what, &mutation.name, global))
            })
            .collect();
        for (pos, len, message) in messages {
            self.error_at("parallel-capture-assign", pos, Some(len), message);
        }
    }
}

/// What the shared checks see of a value.
fn seen(shape: &Static) -> Seen<'_> {
    match shape {
        Static::Known(value) => Seen::Known(value),
        Static::Type(name) => Seen::Type(name),
        Static::Closure(_) => Seen::Function,
        Static::Unknown => Seen::Unknown,
    }
}

/// The global names, comma-separated, for messages.
fn global_names() -> String {
    GLOBALS.iter().map(|global| global.name).collect::<Vec<_>>().join(", ")
}

/// `log(x)` and `log(x, base)` are Rhai's logarithm, not the cairn global: one argument that
/// is not text, or a number first.
fn is_math_log(args: &[Arg<'_>]) -> bool {
    match args.first().and_then(|arg| arg.expr) {
        Some(Expr::StringConstant(..) | Expr::InterpolatedString(..)) => false,
        Some(Expr::IntegerConstant(..) | Expr::FloatConstant(..)) => true,
        _ => args.len() == 1,
    }
}

/// What to write instead of a function other languages have and Rhai does not, for the names
/// planners reach for most.
fn missing_builtin_hint(name: &str) -> Option<&'static str> {
    let hint = match name {
        "join" => "rhai arrays have no join; use reduce(|text, x| text + x + \", \", \"\")",
        "sum" => "use reduce(|total, x| total + x, 0)",
        "count" | "length" | "size" => "use len()",
        "str" | "String" => "use x.to_string(), or an interpolated string: `${x}`",
        "forEach" => "write for x in xs { ... }",
        "then" => "calls return their result directly; write let r = agent(...); and use r",
        "format" | "sprintf" => "use an interpolated string: `text ${value}`",
        "parse_json" | "json_parse" | "from_json" => {
            "give the agent a schema option and it returns the parsed value"
        }
        "stringify" | "json_encode" | "json_stringify" => "use to_json() on a map, or interpolate the value",
        "append_all" | "extend" | "concat" => "use + to join arrays, or append()",
        _ => return None,
    };
    Some(hint)
}

/// What to use instead of a function the sandbox leaves out on purpose.
fn forbidden(name: &str) -> Option<&'static str> {
    const TIME: &str = "use now(), the journaled clock (epoch milliseconds)";
    const RANDOM: &str = "use random(key?), the journaled random number in [0, 1)";
    const IO: &str = "scripts have no I/O; call a registered host function with host_call(name, args) or \
                      give an agent tools";
    let instead = match name {
        "eval" => "write the code directly; scripts cannot build code at run time",
        "print" | "debug" => "use log(level, msg, data?), which emits a run event",
        "wait" => "use sleep(ms) to wait on the clock, or await_external(key) to wait for input",
        "exit" | "quit" | "abort" => "return the result as the script's last value, or throw an error",
        "timestamp" | "time" | "date" | "clock" | "elapsed" | "now_ms" | "system_time" | "unix_time"
        | "current_time" | "utc_now" => TIME,
        "rand" | "rand_int" | "rand_float" | "rand_bool" | "random_int" | "random_float" | "shuffle"
        | "sample" | "seed" => RANDOM,
        "uuid_v4" | "new_uuid" | "guid" => "use uuid(), the journaled id",
        "read_file" | "write_file" | "open_file" | "file" | "fs_read" | "fs_write" | "read_dir" | "http"
        | "http_get" | "http_post" | "fetch" | "request" | "env" | "get_env" | "env_var" | "exec"
        | "system" | "shell" | "command" | "run_command" => IO,
        _ => return None,
    };
    Some(instead)
}
