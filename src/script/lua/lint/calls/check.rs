//! The checks of a call of a cairn global: arity, each argument against its parameter, option
//! tables against their schemas, JSON arguments, registered names, duplicate agents and races.

use super::*;

impl Linter<'_, '_> {
    /// Checks a call of a cairn global: arity, each argument against its parameter, and the
    /// names it refers to.
    pub(super) fn check_global(
        &mut self,
        global: &'static Global,
        args: &[Arg<'_>],
        open: bool,
        pos: Pos,
    ) -> Static {
        let Some(params) = self.params_for(global, args) else {
            self.walk_args(args);
            return Static::Unknown;
        };
        if let Some(message) = call_check::arity(global, params, args.len(), open, &Words::LUA) {
            self.error_at("arity", pos, Some(global.name.len()), message);
            self.walk_args(args);
            return Static::Unknown;
        }
        for (param, arg) in params.iter().zip(args) {
            self.check_arg(global, param, arg);
        }
        for arg in args.iter().skip(params.len()) {
            self.walk_arg(arg);
        }
        let first_literal = args.first().and_then(Arg::string);
        match global.name {
            "host_call" => {
                if let Some((name, pos)) = first_literal {
                    self.check_registered(Registry::HostFunction, &name, pos);
                }
            }
            "workflow" => {
                if let Some((name, pos)) = first_literal {
                    self.check_registered(Registry::Workflow, &name, pos);
                    if let Some(arg) = args.get(1) {
                        self.check_workflow_args(&name, arg);
                    }
                }
            }
            "log" => {
                if let Some((level, pos)) = first_literal
                    && let Some(message) = call_check::log_level(&level)
                {
                    self.error_at("arg-type", pos, None, message);
                }
            }
            "agent" => self.check_duplicate_agent(args, pos),
            _ => {}
        }
        Static::Unknown
    }

    /// The parameters a call of `global` is checked against: `parallel` with a function second
    /// is the map form; `None` when a `parallel` call could be either form.
    pub(super) fn params_for(&self, global: &'static Global, args: &[Arg<'_>]) -> Option<&'static [Param]> {
        let second = args.get(1).map(|arg| self.peek_arg(arg));
        call_check::params_for(global, args.len(), second.as_ref().map(seen), || {
            args.first().and_then(Arg::table).is_some_and(|table| {
                table.fields().iter().any(|field| matches!(field, Field::NoKey(Expression::Function(_))))
            })
        })
    }

    pub(super) fn check_arg(&mut self, global: &Global, param: &Param, arg: &Arg<'_>) {
        let place = Place::of(global, param);
        match param.kind {
            ParamKind::Text => {
                self.check_shape(param.kind, place, arg);
                self.walk_arg(arg);
            }
            ParamKind::Json => self.check_json(arg, place),
            ParamKind::Items => {
                self.check_shape(param.kind, place, arg);
                self.check_json(arg, place);
            }
            ParamKind::Options => match arg.table() {
                Some(table) => self.check_options(global, table, place),
                None => {
                    self.check_shape(param.kind, place, arg);
                    self.walk_arg(arg);
                }
            },
            ParamKind::Body => {
                self.check_shape(param.kind, place, arg);
                self.immediate = arg.is_function_literal();
                let walked = self.walk_arg(arg);
                self.immediate = false;
                if global.name == "parallel"
                    && let Static::Function(id) = walked
                {
                    self.report_races(id, global.name);
                }
                if global.name == "step"
                    && let Static::Function(id) = walked
                {
                    self.report_step_writes(id);
                }
            }
            ParamKind::Branches | ParamKind::Stages => match arg.table() {
                Some(table) => {
                    for field in table.fields() {
                        let element = match field {
                            Field::NoKey(element) => element,
                            other => {
                                let message = format!(
                                    "{place} must be a list of functions, like {{function() ... end, function() ... end}}"
                                );
                                self.error_at("arg-type", pos_of(other), None, message);
                                continue;
                            }
                        };
                        let shape =
                            peek_literal(element).unwrap_or_else(|| self.peek_arg(&Arg::Expr(element)));
                        if let Some(called) = self.global_call(element) {
                            let unit = if param.kind == ParamKind::Branches { "branch" } else { "stage" };
                            let message = format!(
                                "each {unit} of {} must be a function, got a call of {called}, which runs at once; \
                                 wrap it: function() return {called}(...) end",
                                global.name
                            );
                            self.error_at("arg-type", pos_of(element), None, message);
                        } else if let Some(message) = call_check::element(
                            param.kind,
                            global.name,
                            seen(&shape),
                            type_phrase(&shape),
                            &Words::LUA,
                        ) {
                            self.error_at("arg-type", pos_of(element), None, message);
                        }
                        self.immediate = matches!(element, Expression::Function(_));
                        let walked = self.walk_expr(element);
                        self.immediate = false;
                        if let Static::Function(id) = walked {
                            self.report_races(id, global.name);
                        }
                    }
                }
                None => {
                    self.check_shape(param.kind, place, arg);
                    self.walk_arg(arg);
                }
            },
        }
    }

    /// The cairn global an expression calls directly (`agent(...)`), when it does.
    pub(super) fn global_call(&self, expr: &Expression) -> Option<&'static str> {
        let Expression::FunctionCall(call) = expr else { return None };
        let Prefix::Name(token) = call.prefix() else { return None };
        let mut suffixes = call.suffixes();
        let (Some(Suffix::Call(Call::AnonymousCall(_))), None) = (suffixes.next(), suffixes.next()) else {
            return None;
        };
        let name = ident(token);
        if self.lookup(name).is_some() {
            return None;
        }
        global(name).map(|global| global.name)
    }

    /// Checks an options table: each key against the schema, each value against its property
    /// and for closures.
    pub(super) fn check_options(&mut self, global: &Global, table: &TableConstructor, place: Place<'_>) {
        let schema = global.options.unwrap_or(global.name);
        for field in table.fields() {
            let (key, key_pos, value) = match field {
                Field::NameKey { key, value, .. } => (ident(key).to_owned(), token_pos(key), &**value),
                Field::ExpressionKey { key, value, .. } => match &**key {
                    Expression::String(token) if string_literal(token).is_some() => {
                        (string_literal(token).unwrap_or_default(), token_pos(token), &**value)
                    }
                    other => {
                        self.walk_expr(other);
                        self.check_json(&Arg::Expr(value), place);
                        continue;
                    }
                },
                Field::NoKey(value) => {
                    let message =
                        format!("{place} must be a table of name = value pairs, like {{label = \"...\"}}");
                    self.error_at("arg-type", pos_of(value), None, message);
                    self.check_json(&Arg::Expr(value), place);
                    continue;
                }
                _ => continue,
            };
            self.check_option(global, schema, &key, key_pos, value);
            self.check_json(&Arg::Expr(value), place);
        }
    }

    pub(super) fn check_option(
        &mut self,
        global: &Global,
        schema: &str,
        key: &str,
        key_pos: Pos,
        value: &Expression,
    ) {
        let property = match schema_check::option_property(global.name, schema, key) {
            None => return,
            Some(Ok(property)) => property,
            Some(Err(message)) => {
                self.error_at("unknown-option", key_pos, Some(key.chars().count()), message);
                return;
            }
        };
        let shape = self.peek_arg(&Arg::Expr(value));
        let view = match &shape {
            Static::Known(known) => Shape::Known(known),
            Static::Type(found) => Shape::Type(found),
            Static::EmptyTable | Static::Function(_) | Static::Unknown => Shape::Opaque,
        };
        if let Some(problem) = schema_check::option_value_problem(schema, key, property, view, lua_article) {
            let message = format!("option '{key}' of {}{problem}", global.name);
            self.error_at("option-type", pos_of(value), None, message);
            return;
        }
        if global.name != "agent" {
            return;
        }
        match (key, value) {
            ("profile", Expression::String(token)) => {
                if let Some(name) = string_literal(token) {
                    self.check_registered(Registry::Profile, &name, token_pos(token));
                }
            }
            ("model", Expression::String(token)) => {
                if let Some(name) = string_literal(token) {
                    self.check_registered(Registry::Model, &name, token_pos(token));
                }
            }
            ("tools", Expression::TableConstructor(table)) => {
                for field in table.fields() {
                    if let Field::NoKey(Expression::String(token)) = field
                        && let Some(name) = string_literal(token)
                    {
                        self.check_registered(Registry::Toolset, &name, token_pos(token));
                    }
                }
            }
            _ => {}
        }
    }

    /// Checks a value that must be JSON: no function anywhere in its literal structure.
    pub(super) fn check_json(&mut self, arg: &Arg<'_>, place: Place<'_>) {
        if let Some(table) = arg.table() {
            for field in table.fields() {
                match field {
                    Field::NoKey(value) => self.check_json(&Arg::Expr(value), place),
                    Field::NameKey { value, .. } => self.check_json(&Arg::Expr(value), place),
                    Field::ExpressionKey { key, value, .. } => {
                        self.walk_expr(key);
                        self.check_json(&Arg::Expr(value), place);
                    }
                    _ => {}
                }
            }
            return;
        }
        if let Static::Function(_) = self.walk_arg(arg) {
            self.closure_in_json(arg.pos(), place);
        }
    }

    /// Checks what an argument that is not a literal list or table is, against its parameter.
    fn check_shape(&mut self, kind: ParamKind, place: Place<'_>, arg: &Arg<'_>) {
        let shape = self.peek_arg(arg);
        match call_check::argument(kind, place, seen(&shape), type_phrase(&shape), &Words::LUA) {
            Some(Problem::Function) => self.closure_in_json(arg.pos(), place),
            Some(Problem::Shape(message)) => self.error_at("arg-type", arg.pos(), None, message),
            None => {}
        }
    }

    pub(super) fn closure_in_json(&mut self, pos: Pos, place: Place<'_>) {
        self.error_at("closure-in-options", pos, None, call_check::function_in_json(place, &Words::LUA));
    }

    pub(super) fn check_registered(&mut self, registry: Registry, name: &str, pos: Pos) {
        if let Some((rule, message)) = registered_problem(self.ctx, registry, name) {
            self.error_at(rule, pos, None, message);
        }
    }

    /// Warns on an agent call whose literal arguments repeat an earlier call in the same body
    /// with no `key` to tell them apart.
    pub(super) fn check_duplicate_agent(&mut self, args: &[Arg<'_>], pos: Pos) {
        let mut values = Vec::with_capacity(args.len());
        for arg in args {
            match self.peek_arg(arg) {
                Static::Known(value) => values.push(value),
                Static::EmptyTable => values.push(Value::Object(serde_json::Map::new())),
                _ => return,
            }
        }
        let Some(frame) = self.frames.last_mut() else { return };
        if let Some(message) = frame.agent_calls.repeats(values, pos.0, &Words::LUA) {
            self.report(Severity::Warning, "duplicate-agent-call", pos, Some(5), message);
        }
    }

    /// Reports every write a function run concurrently makes to a local from outside it.
    pub(super) fn report_races(&mut self, function: Option<usize>, global: &str) {
        let Some(facts) = function.and_then(|id| self.functions.get(id)) else { return };
        let messages: Vec<(Pos, usize, String)> = facts
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
        Static::EmptyTable => Seen::EmptyTable,
        Static::Function(_) => Seen::Function,
        Static::Unknown => Seen::Unknown,
    }
}
