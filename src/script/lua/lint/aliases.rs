//! Writes lint follows through other names: a local holding a captured table (`local c =
//! counts`, `local t = tasks[1]`), the value variable of a loop over one (`for _, t in
//! ipairs(tasks)`), and a helper's parameter (`local function add(t, v) t[#t + 1] = v end`
//! called as `add(acc, 1)`). Each write into the table such a name holds is also a write into
//! the table it came from, so `parallel-capture-assign` and `step-capture-assign` see it
//! where it races (the runtime refuses it too, but only when the write runs, after whatever
//! the branch did first).

use full_moon::ast::{Call, Expression, FunctionArgs, GenericFor, Prefix, Suffix, Var};

use super::calls::Arg;
use super::values::{ident, token_pos};
use super::walk::{Linter, Mutation};

impl Linter<'_, '_> {
    /// The local whose table `expr` is or is inside of (`counts`, `tasks[1]`, `m.list`),
    /// followed to the local it aliases in turn.
    pub(super) fn table_of(&self, expr: &Expression) -> Option<usize> {
        let token = match expr {
            Expression::Var(Var::Name(token)) => token,
            Expression::Var(Var::Expression(var)) => match var.prefix() {
                Prefix::Name(token) => token,
                _ => return None,
            },
            _ => return None,
        };
        let binding = self.lookup(ident(token))?;
        Some(self.bindings[binding].alias.unwrap_or(binding))
    }

    /// The table a generic `for` traverses: `ipairs(t)`, `pairs(t)` or `next, t`.
    pub(super) fn traversed_table(&self, generic: &GenericFor) -> Option<usize> {
        let expressions: Vec<&Expression> = generic.expressions().iter().collect();
        match expressions.as_slice() {
            [Expression::FunctionCall(call), ..] => {
                let Prefix::Name(callee) = call.prefix() else { return None };
                let callee = ident(callee);
                if !matches!(callee, "ipairs" | "pairs") || self.lookup(callee).is_some() {
                    return None;
                }
                let suffixes: Vec<&Suffix> = call.suffixes().collect();
                let [Suffix::Call(Call::AnonymousCall(args))] = suffixes.as_slice() else { return None };
                let FunctionArgs::Parentheses { arguments, .. } = &**args else { return None };
                self.table_of(arguments.iter().next()?)
            }
            [Expression::Var(Var::Name(next)), table, ..]
                if ident(next) == "next" && self.lookup("next").is_none() =>
            {
                self.table_of(table)
            }
            _ => None,
        }
    }

    /// A write into the table a local holds: recorded as a write to its function's parameter
    /// (when the local is one) and to the local it aliases (when it holds another's table).
    pub(super) fn table_write_through(&mut self, mutation: &Mutation) {
        let binding = self.bindings[mutation.binding];
        if let Some(index) = binding.param
            && let Some(frame) = self.frames.get_mut(binding.frame)
        {
            frame.param_writes.push((index, mutation.clone()));
        }
        if let Some(root) = binding.alias.filter(|&root| root != mutation.binding) {
            let name = self.lookup_name(root).unwrap_or_else(|| "table".to_owned());
            let what = format!("{} '{}', which holds", mutation.what, mutation.name);
            self.record_mutation(root, &name, mutation.pos, mutation.len, what, false);
        }
    }

    /// A call of the local function `callee`: each table it writes through a parameter is the
    /// table passed there, written here.
    pub(super) fn argument_writes(&mut self, callee: usize, args: &[Arg<'_>]) {
        let Some(facts) = self.bindings[callee].function.and_then(|id| self.functions.get(id)) else {
            return;
        };
        if facts.param_writes.is_empty() {
            return;
        }
        let writes = facts.param_writes.clone();
        let name = self.lookup_name(callee).unwrap_or_else(|| "function".to_owned());
        for (index, write) in writes {
            let Some(token) = args.get(index).and_then(Arg::root_name) else { continue };
            let root = ident(token);
            let Some(binding) = self.lookup(root) else { continue };
            let what = format!("calling '{name}', which writes its parameter '{}', on", write.name);
            self.record_mutation(binding, root, token_pos(token), root.chars().count(), what, false);
        }
    }

    /// A local function handed to a call (`table.sort(xs, cmp)`, `each(xs, add)`): the callee
    /// may call it, so each write it makes to a local from outside it happens here too.
    pub(super) fn callback_writes(&mut self, args: &[Arg<'_>], pos: super::values::Pos) {
        for arg in args {
            if let Arg::Expr(Expression::Var(Var::Name(token))) = arg
                && let Some(binding) = self.lookup(ident(token))
                && self.bindings[binding].function.is_some()
            {
                self.closure_call_writes(binding, pos);
            }
        }
    }
}
