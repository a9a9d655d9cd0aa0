//! The guards around the parser, and the decisions the rule folders cannot show alone.

use super::lint;
use crate::script::{Diagnostic, LintContext};

fn rules(source: &str) -> Vec<String> {
    lint(source, &LintContext::empty()).into_iter().map(|d| d.rule_id).collect()
}

fn errors(source: &str) -> Vec<Diagnostic> {
    lint(source, &LintContext::empty()).into_iter().filter(Diagnostic::is_error).collect()
}

#[test]
fn nesting_under_the_limit_parses_on_the_deep_stack() {
    for (open, close, depth) in [("(", ")", 190), ("{", "}", 190), ("-(", ")", 95)] {
        let source = format!("return {}1{}", open.repeat(depth), close.repeat(depth));
        assert!(errors(&source).is_empty(), "{open}: {:?}", errors(&source));
    }
    let functions = format!("return {}1{}", "(function() return ".repeat(90), " end)()".repeat(90));
    assert!(errors(&functions).is_empty(), "{:?}", errors(&functions));
    let blocks = format!("{}local x = 1{}\nreturn 1", "do ".repeat(180), " end".repeat(180));
    assert!(errors(&blocks).is_empty(), "{:?}", errors(&blocks));
}

#[test]
fn nesting_over_the_limit_is_rejected_before_parsing() {
    // Each of these would recurse once per level in the parser, the walk and the drop.
    let cases = [
        format!("return {}1{}", "(".repeat(5_000), ")".repeat(5_000)),
        format!("return {}", "{".repeat(5_000)),
        format!("return {}1", "- ".repeat(5_000)),
        format!("return {}1", "not ".repeat(5_000)),
        format!("return 1{}", " .. 1".repeat(5_000)),
        format!("return 2{}", " ^ 2".repeat(5_000)),
        format!("return 1{}", " + 1".repeat(5_000)),
        "function f() ".repeat(5_000),
        "if x then ".repeat(5_000),
    ];
    for source in cases {
        let diagnostics = lint(&source, &LintContext::empty());
        assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
        assert_eq!(diagnostics[0].rule_id, "syntax");
        assert!(diagnostics[0].message.contains("more than 200 deep"), "{}", diagnostics[0].message);
    }
}

#[test]
fn an_operator_chain_that_resets_at_commas_is_not_nesting() {
    let list = format!("return {{{}}}", vec!["1 + 2"; 5_000].join(", "));
    assert!(errors(&list).is_empty());
    let statements = "local a = 1 .. 2 .. 3\n".repeat(2_000) + "return a";
    assert!(errors(&statements).is_empty());
}

#[test]
fn inputs_that_panic_the_parser_are_reported_not_raised() {
    // full_moon's Lua 5.4 lexer panics on a backquote; the scan reports it first.
    assert_eq!(rules("return `x`"), ["foreign-syntax"]);
    assert_eq!(rules("local s = \"`\" return s"), Vec::<String>::new());
    assert_eq!(rules("-- a `quoted` word\nreturn 1"), Vec::<String>::new());
    assert_eq!(rules("return [[`]]"), Vec::<String>::new());
}

#[test]
fn empty_and_oversized_sources_are_syntax_errors() {
    assert_eq!(rules(""), ["syntax"]);
    assert_eq!(rules("  \n\t"), ["syntax"]);
    assert_eq!(rules("-- nothing\n--[[ at all ]]"), ["syntax"]);
    let huge = format!("return \"{}\"", "x".repeat(2 << 20));
    assert_eq!(rules(&huge), ["syntax"]);
}

#[test]
fn for_loop_variables_are_fresh_per_iteration_so_capturing_them_is_not_loop_capture() {
    // Lua 5.4 binds `i` and `x` afresh on every iteration: each closure sees its own value.
    let source = "local fs = {}\nfor i = 1, 3 do fs[i] = function() return i end end\n\
                  for _, x in ipairs(args.items) do fs[#fs + 1] = function() return x end end\nreturn fs";
    assert!(errors(source).is_empty(), "{:?}", errors(source));
    // A local outside the loop that the loop reassigns is the hazard.
    let source = "local fs = {}\nlocal last\nfor _, x in ipairs(args.items) do\n  last = x\n  \
                  fs[#fs + 1] = function() return last end\nend\nreturn fs";
    assert_eq!(rules(source), ["loop-capture"]);
    // A closure that itself updates the outer local shares it on purpose.
    let source = "local count = 0\nlocal fs = {}\nwhile count < 3 do\n  \
                  fs[#fs + 1] = function() count = count + 1 end\n  fs[#fs]()\nend\nreturn count";
    assert!(errors(source).is_empty(), "{:?}", errors(source));
}

#[test]
fn globals_must_be_declared_local() {
    assert_eq!(rules("x = 1\nreturn x"), ["unknown-variable"]);
    assert_eq!(rules("function f() end\nreturn f()"), ["unknown-variable"]);
    assert!(errors("local x\nx = 1\nlocal function f() return x end\nreturn f()").is_empty());
    // A method on a local table is a field assignment, not a global.
    assert!(
        errors("local t = {}\nfunction t.a() end\nfunction t:b() return self end\nreturn t:b()").is_empty()
    );
    assert_eq!(rules("function t.a() end\nreturn 1"), ["unknown-variable"]);
}

#[test]
fn string_methods_on_captured_values_are_not_writes() {
    let source = "local prefix = \"item \"\nlocal out = parallel(args.items, function(x)\n  \
                  return agent(prefix:upper() .. prefix:format(x) .. prefix:rep(2))\nend)\nreturn out";
    assert!(errors(source).is_empty(), "{:?}", errors(source));
}

#[test]
fn writes_to_locals_of_the_branch_itself_are_not_races() {
    let source = "local out = parallel(args.items, function(x)\n  local acc = {}\n  table.insert(acc, x)\n  \
                  acc.n = 1\n  local function add(y) acc[#acc + 1] = y end\n  add(2)\n  return acc\nend)\n\
                  return out";
    assert!(errors(source).is_empty(), "{:?}", errors(source));
}

#[test]
fn positions_count_characters_not_bytes() {
    let diagnostics = lint("local s = \"üé\" return s .. tpoic", &LintContext::empty());
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    assert_eq!((diagnostics[0].line, diagnostics[0].column), (1, 28));
    assert_eq!(diagnostics[0].end_column, Some(33));
}

#[test]
fn budget_reads_in_either_call_style() {
    assert!(
        errors("local a = budget.spent()\nlocal b = budget:remaining()\nreturn {a, b, args.text:upper()}")
            .is_empty()
    );
    assert_eq!(rules("return budget.left()"), ["unknown-function"]);
}
