//! The Lua call bound's tests: counts per site, and the reason and line of each unbounded
//! construct.

use serde_json::json;

use super::*;
use crate::script::bound::Known;

/// Each site as (line, max calls), or the unbounded reason and line.
fn counts(source: &str, args: Value) -> Result<Vec<(u32, u64)>, (String, u32)> {
    match call_bound(source, &args) {
        CallBound::Bounded { sites, .. } => {
            Ok(sites.iter().map(|site| (site.line, site.max_calls)).collect())
        }
        CallBound::Unbounded { reason, line, .. } => Err((reason, line)),
    }
}

#[test]
fn sequential_calls_and_literal_loops_multiply() {
    let source = "local a = agent(\"one\")\nfor i = 1, 3 do agent(\"x\" .. i) end\n\
                  for i = 10, 1, -2 do agent(\"y\") end\nfor _, t in ipairs({\"a\", \"b\"}) do agent(t) end\n\
                  for i = 1, 1000 do agent(\"z\") end\nreturn a";
    assert_eq!(counts(source, json!({})), Ok(vec![(1, 1), (2, 3), (3, 5), (4, 2), (5, 1000)]));
}

#[test]
fn args_sizes_bound_loops_and_fan_outs() {
    let args = json!({"items": ["a", "b", "c"], "groups": [{"members": [1, 2]}, {"members": [3]}], "n": 4});
    let source = "for _, item in ipairs(args.items) do agent(item) end\n\
                  parallel(args.items, function(item) return agent(item) end)\n\
                  pipeline(args.items, {function(x) return agent(x) end, function(x) return agent(x) end})\n\
                  for _, g in ipairs(args.groups) do for _, m in ipairs(g.members) do agent(\"m\") end end\n\
                  for i = 1, args.n do agent(\"n\") end\n\
                  for i = 1, #args.items do agent(\"len\") end\nreturn 1";
    // Each pipeline stage is a site of its own on line 3.
    assert_eq!(counts(source, args), Ok(vec![(1, 3), (2, 3), (3, 3), (3, 3), (4, 3), (5, 4), (6, 3)]));
}

#[test]
fn branches_bodies_and_functions_are_counted_where_they_run() {
    let source = "local function ask(q) return agent(q) end\n\
                  local r = parallel({function() return ask(\"a\") end, function() return agent(\"b\") end})\n\
                  step(\"s\", function() return ask(\"c\") end)\n\
                  phase(\"p\", function() return agent(\"d\") end)\n\
                  pcall(function() agent(\"e\") end)\n\
                  if args.flag then agent(\"f\") else agent(\"f\") agent(\"g\") end\n\
                  return r";
    // `ask` runs from a branch and from the step body; each side of the `if` is its own site.
    assert_eq!(counts(source, json!({})), Ok(vec![(1, 2), (2, 1), (4, 1), (5, 1), (6, 1), (6, 1), (6, 1)]));
}

#[test]
fn unbounded_constructs_name_themselves_and_their_line() {
    let cases = [
        ("local i = 0\nwhile i < 3 do\n  agent(\"x\")\n  i = i + 1\nend\nreturn i", "`while` loop", 2),
        ("repeat\n  agent(\"x\")\nuntil true\nreturn 1", "`repeat` loop", 1),
        ("return workflow(\"audit\", {})", "child workflow", 1),
        ("return orchestrate(\"ship it\")", "orchestrator", 1),
        ("local function f(n)\n  agent(\"x\")\n  return f(n - 1)\nend\nreturn f(3)", "calls itself", 1),
        ("local t = {}\nfunction t.run() return agent(\"x\") end\nreturn t.run()", "table field", 2),
        ("for _, x in ipairs(args.missing) do agent(x) end\nreturn 1", "size is not known", 1),
        ("for w in string.gmatch(args.text, \"%a+\") do agent(w) end\nreturn 1", "iterator", 1),
        ("local f = function() return agent(\"x\") end\nf = nil\nreturn 1", "changed variable", 1),
        (
            "local fs = {}\ntable.insert(fs, function() return agent(\"x\") end)\nreturn parallel(fs)",
            "cannot follow",
            2,
        ),
        ("return parallel(args.items, function(x) return agent(x) end)", "size is not known", 1),
        ("return agent(\"x\"", "does not parse", 1),
        ("::top::\nagent(\"x\")\nif args.again then goto top end\nreturn 1", "`goto` loop", 3),
    ];
    for (source, reason, line) in cases {
        match counts(source, json!({"text": "a b"})) {
            Err((got, got_line)) => {
                assert!(got.contains(reason), "{source}: {got}");
                assert_eq!(got_line, line, "{source}: {got}");
            }
            Ok(sites) => panic!("{source}: bounded {sites:?}"),
        }
    }
}

#[test]
fn tables_changed_anywhere_are_of_unknown_size() {
    for source in [
        "local t = {}\nt[#t + 1] = 1\nfor _, x in ipairs(t) do agent(\"x\") end\nreturn 1",
        "local t = {}\ntable.insert(t, 1)\nfor _, x in ipairs(t) do agent(\"x\") end\nreturn 1",
        "local t = {}\nlocal function fill(u) u[1] = 1 end\nfill(t)\nreturn parallel(t, function(x) return agent(x) end)",
        "local t = {}\nlocal u = t\nu[1] = 1\nreturn pipeline(t, {function(x) return agent(x) end})",
        "local t = {}\nlocal w = {t}\nw[1][1] = 1\nfor i = 1, #t do agent(\"x\") end\nreturn 1",
        "local t = {}\nt:add(1)\nfor _, x in ipairs(t) do agent(\"x\") end\nreturn 1",
    ] {
        assert!(counts(source, json!({})).is_err(), "{source}: {:?}", counts(source, json!({})));
    }
    // Reading a table (its length, a concat, a loop) leaves it known.
    let source = "local t = {\"a\", \"b\"}\nlog(\"info\", table.concat(t, \",\"))\n\
                  for _, x in ipairs(t) do agent(x) end\nreturn #t";
    assert_eq!(counts(source, json!({})), Ok(vec![(3, 2)]));
}

#[test]
fn parameters_and_loop_variables_changed_anywhere_are_unknown() {
    let args = json!({"groups": [{"members": [1, 2]}]});
    let source = "for _, g in ipairs(args.groups) do\n  table.insert(g.members, 3)\n  \
                  for _, m in ipairs(g.members) do agent(\"m\") end\nend\nreturn 1";
    assert!(counts(source, args.clone()).is_err());
    let source = "local function run(list)\n  list[#list + 1] = 0\n  \
                  for _, x in ipairs(list) do agent(\"x\") end\nend\nrun({1, 2})\nreturn 1";
    assert!(counts(source, args).is_err());
}

#[test]
fn forward_gotos_are_not_loops() {
    let source = "for i = 1, 3 do\n  if i == 2 then goto continue end\n  agent(\"x\")\n  ::continue::\nend\n\
                  ::again::\nlocal n = 0\nif n > 0 then goto again end\nreturn 1";
    assert_eq!(counts(source, json!({})), Ok(vec![(3, 3)]));
}

#[test]
fn loops_without_agent_calls_are_fine_whatever_their_size() {
    let source = "local n = 0\nwhile n < 10 do n = n + 1 end\nfor _ in string.gmatch(\"a b\", \"%a\") do n = n + 1 end\n\
                  for _, x in ipairs(args.whatever) do n = n + 1 end\nreturn agent(\"done \" .. n)";
    assert_eq!(counts(source, json!({})), Ok(vec![(5, 1)]));
}

#[test]
fn literal_options_reach_the_site() {
    let source = "local m = \"openai:gpt-5\"\n\
                  return agent(\"hi\", {max_turns = 3, tools = {\"web\"}, model = m, profile = args.p, role = compute()})";
    let CallBound::Bounded { sites, .. } = call_bound(source, &json!({"p": "writer"})) else {
        panic!("unbounded")
    };
    let site = &sites[0];
    assert_eq!(site.prompt, Known::Literal("hi".to_owned()));
    assert_eq!(site.max_turns, Known::Literal(3));
    assert_eq!(site.tools, Known::Literal(vec!["web".to_owned()]));
    assert_eq!(site.model, Known::Literal("openai:gpt-5".to_owned()));
    assert_eq!(site.profile, Known::Literal("writer".to_owned()));
    assert_eq!(site.role, Known::Computed);
    assert_eq!(site.schema, Known::Unset);
}

#[test]
fn hostile_sources_end_in_a_bound_or_a_reason() {
    let deep = format!("return {}1{}", "(".repeat(50_000), ")".repeat(50_000));
    assert!(counts(&deep, json!({})).is_err());
    // Nested literal loops multiply without overflow or unbounded work.
    let nested = "for a = 1, 1000000 do for b = 1, 1000000 do for c = 1, 1000000 do agent(\"x\") end end end\nreturn 1";
    assert_eq!(counts(nested, json!({})), Ok(vec![(1, 1_000_000_000_000_000_000)]));
    // Many functions calling each other in a chain stay within the inline depth.
    let mut chain = String::from("local function f0() return agent(\"x\") end\n");
    for i in 1..100 {
        chain.push_str(&format!("local function f{i}() return f{}() end\n", i - 1));
    }
    chain.push_str("return f99()");
    assert!(counts(&chain, json!({})).is_err());
}

#[test]
fn a_default_is_bounded_by_the_args_given_else_by_its_own_length() {
    let source = "local topics = args.topics or {\"a\", \"b\", \"c\"}\nparallel(topics, function(t) return agent(t) end)\nreturn 1";
    assert_eq!(counts(source, json!({})), Ok(vec![(2, 3)]));
    assert_eq!(counts(source, json!({"topics": ["x"]})), Ok(vec![(2, 1)]));
    let source = "for _, t in ipairs(args.topics or {\"a\", \"b\"}) do agent(t) end\nreturn 1";
    assert_eq!(counts(source, json!({})), Ok(vec![(1, 2)]));
    assert_eq!(counts(source, json!({"topics": ["x", "y", "z"]})), Ok(vec![(1, 3)]));
    // `a and b or c`: either branch's list, at its longest.
    let source =
        "local xs = args.flag and {1, 2, 3, 4} or {1}\nfor _, x in ipairs(xs) do agent(\"x\") end\nreturn 1";
    assert_eq!(counts(source, json!({})), Ok(vec![(2, 1)]));
    assert_eq!(counts(source, json!({"flag": true})), Ok(vec![(2, 4)]));
    // A computed left side: the default says nothing of its size.
    let source = "for _, t in ipairs(compute() or {1}) do agent(t) end\nreturn 1";
    assert!(matches!(counts(source, json!({})), Err((why, 1)) if why.contains("size is not known")));
    // No default: a loop over an args value the run is not given says so.
    match counts("return parallel(args.topics, function(t) return agent(t) end)", json!({})) {
        Err((why, 1)) => assert!(why.contains("missing") && why.contains("default"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn branches_count_their_larger_arm() {
    let source = "local x = agent(\"q\")\nif x == \"a\" then agent(\"1\") agent(\"2\") elseif x == \"b\" then agent(\"3\") else agent(\"4\") agent(\"5\") agent(\"6\") end\nreturn 1";
    assert_eq!(call_bound(source, &json!({})).max_agent_calls(), Some(4));
    // Each site keeps its own most.
    assert_eq!(counts(source, json!({})), Ok(vec![(1, 1), (2, 1), (2, 1), (2, 1), (2, 1), (2, 1), (2, 1)]));
}
