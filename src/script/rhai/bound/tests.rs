use serde_json::json;

use super::*;
use crate::script::bound::Known;

fn calls(source: &str, args: Value) -> Option<u64> {
    call_bound(source, &args).max_agent_calls()
}

fn reason(source: &str, args: Value) -> (String, u32, u32) {
    match call_bound(source, &args) {
        CallBound::Unbounded { reason, line, column } => (reason, line, column),
        CallBound::Bounded { sites, .. } => panic!("expected unbounded, got {sites:?}"),
    }
}

#[test]
fn literal_ranges_and_arrays_multiply_through_nesting() {
    assert_eq!(calls(r#"for i in 0..3 { agent("a") }"#, json!({})), Some(3));
    assert_eq!(calls(r#"for i in 1..=3 { agent("a") }"#, json!({})), Some(3));
    assert_eq!(calls(r#"for i in 5..2 { agent("a") }"#, json!({})), Some(0));
    assert_eq!(calls(r#"for i in range(0, 10, 3) { agent("a") }"#, json!({})), Some(4));
    assert_eq!(calls(r#"for x in ["a", "b"] { for y in 0..4 { agent(x + y) } }"#, json!({})), Some(8));
    assert_eq!(calls(r#"for c in "abc" { agent(c) }"#, json!({})), Some(3));
    assert_eq!(calls(r#"let n = 4; for i in 0..n * 2 { agent("a") }"#, json!({})), Some(8));
}

#[test]
fn args_sizes_are_known_because_args_are_given() {
    let args = json!({"items": [1, 2, 3, 4], "n": 5, "groups": [{"xs": [1, 2]}, {"xs": [1, 2, 3]}]});
    assert_eq!(calls(r#"for x in args.items { agent(`${x}`) }"#, args.clone()), Some(4));
    assert_eq!(calls(r#"for i in 0..args.n { agent("a") }"#, args.clone()), Some(5));
    assert_eq!(calls(r#"let items = args.items; parallel(items, |x| agent(`${x}`))"#, args.clone()), Some(4));
    assert_eq!(calls(r#"for i in 0..args.items.len() { agent("a") }"#, args.clone()), Some(4));
    // Nested sizes differ per element: walked element by element.
    assert_eq!(calls(r#"for g in args.groups { for x in g.xs { agent(`${x}`) } }"#, args.clone()), Some(5));
    assert_eq!(
        calls(r#"parallel(args.groups, |g| parallel(g.xs, |x| agent(`${x}`)))"#, args.clone()),
        Some(5)
    );
    let (why, line, column) = reason("\nfor x in args.missing { agent(`${x}`) }", args);
    assert!(why.contains("`for` loop") && why.contains("size"), "{why}");
    assert_eq!((line, column), (2, 1));
}

#[test]
fn fan_outs_count_items_branches_and_stages() {
    let args = json!({"xs": ["a", "b", "c"]});
    assert_eq!(calls(r#"parallel(args.xs, |x| agent(x))"#, args.clone()), Some(3));
    assert_eq!(calls(r#"parallel([|| agent("a"), || agent("b")], #{settle: true})"#, args.clone()), Some(2));
    assert_eq!(calls(r#"pipeline(args.xs, [|x| agent(x), |y| agent(y), |z| z + 1])"#, args.clone()), Some(6));
    assert_eq!(calls(r#"step("s", || { agent("a"); agent("b") })"#, args.clone()), Some(2));
    assert_eq!(calls(r#"phase("p", || parallel(args.xs, |x| agent(x)))"#, args.clone()), Some(3));
    assert_eq!(calls(r#"args.xs.map(|x| agent(x))"#, args.clone()), Some(3));
    assert_eq!(calls(r#"let r = args.xs.filter(|x| x != "a"); r"#, args), Some(0));
}

/// Each site at its count.
fn per_site(source: &str, args: Value) -> Vec<u64> {
    match call_bound(source, &args) {
        CallBound::Bounded { sites, .. } => sites.iter().map(|site| site.max_calls).collect(),
        CallBound::Unbounded { reason, .. } => panic!("unbounded: {reason}"),
    }
}

#[test]
fn branches_count_their_larger_arm_and_known_conditions_pick_one() {
    let src = r#"if args.deep { agent("a"); agent("a2") } else { agent("b") }"#;
    assert_eq!(calls(src, json!({"deep": true})), Some(2));
    assert_eq!(calls(src, json!({"deep": false})), Some(1));
    // Unknown condition: one arm runs, the larger; each site keeps its own most.
    let src = r#"let x = agent("q"); if x == "y" { agent("a"); agent("a2") } else { agent("b") }"#;
    assert_eq!(calls(src, json!({})), Some(3));
    assert_eq!(per_site(src, json!({})), vec![1, 1, 1, 1]);
    let src =
        r#"let x = agent("q"); switch x { "a" => agent("1"), "b" => { agent("2"); agent("3") }, _ => () }"#;
    assert_eq!(calls(src, json!({})), Some(3));
    // In a loop, each iteration takes one arm: three iterations of the larger.
    let src = r#"for i in 0..3 { if agent("q") == "y" { agent("a"); agent("b") } else { agent("c") } }"#;
    assert_eq!(calls(src, json!({})), Some(9));
    // Nested branches: the larger arm of the larger arm.
    let src = r#"let x = agent("q");
        if x == "a" { if x == "b" { agent("1"); agent("2"); agent("3") } else { agent("4") } } else { agent("5"); agent("6") }"#;
    assert_eq!(calls(src, json!({})), Some(4));
    let src = r#"try { agent("a") } catch (e) { agent("b") }"#;
    assert_eq!(calls(src, json!({})), Some(2));
    // The samples' default pattern: an `if` expression over args.
    let src = r#"let topics = if args.topics == () { ["a", "b", "c"] } else { args.topics };
        parallel(topics, |t| agent(t))"#;
    assert_eq!(calls(src, json!({})), Some(3));
    assert_eq!(calls(src, json!({"topics": ["x"]})), Some(1));
    let src = r#"let n = if agent("q") == "y" { 2 } else { 5 }; for i in 0..n { agent("a") }"#;
    assert_eq!(calls(src, json!({})), None);
    let src =
        r#"let xs = if agent("q") == "y" { [1, 2] } else { [1, 2, 3, 4, 5] }; for x in xs { agent("a") }"#;
    assert_eq!(calls(src, json!({})), Some(6));
}

#[test]
fn while_loop_and_do_are_unbounded_only_when_they_call_agents() {
    let (why, line, _) = reason("let i = 0;\nwhile i < 3 {\n agent(\"a\");\n i += 1;\n}", json!({}));
    assert!(why.contains("`while` loop"), "{why}");
    assert_eq!(line, 2);
    assert!(reason(r#"loop { agent("a"); break; }"#, json!({})).0.contains("`loop`"));
    assert!(reason(r#"do { agent("a") } while true;"#, json!({})).0.contains("`do` loop"));
    assert_eq!(calls(r#"let i = 0; while i < 3 { i += 1; } agent("a")"#, json!({})), Some(1));
    assert_eq!(calls(r#"do { agent("a") } while false;"#, json!({})), Some(1));
    assert_eq!(calls(r#"while false { agent("a") }"#, json!({})), Some(0));
}

#[test]
fn functions_are_inlined_at_each_call_and_recursion_is_unbounded() {
    let src = r#"fn ask(q) { agent(q) } fn fan(xs) { for x in xs { ask(x) } } fan(args.xs); ask("z")"#;
    assert_eq!(calls(src, json!({"xs": [1, 2, 3]})), Some(4));
    let (why, ..) = reason(r#"fn f(n) { agent("a"); f(n - 1) } f(3)"#, json!({}));
    assert!(why.contains("'f' calls itself"), "{why}");
    let (why, ..) = reason(r#"fn f(n) { g(n) } fn g(n) { agent("a"); f(n) } f(3)"#, json!({}));
    assert!(why.contains("calls itself"), "{why}");
    // A function that calls no agent may recurse freely... as long as it is not reached.
    assert_eq!(calls(r#"fn f(n) { if n > 0 { f(n - 1) } } agent("a")"#, json!({})), Some(1));
}

#[test]
fn closures_count_where_they_run_and_unbounded_where_they_escape() {
    let args = json!({"xs": [1, 2]});
    assert_eq!(calls(r#"let f = |x| agent(`${x}`); parallel(args.xs, f)"#, args.clone()), Some(2));
    assert_eq!(calls(r#"let f = |x| agent(`${x}`); f.call(1); f(2); call(f, 3)"#, args.clone()), Some(3));
    assert_eq!(
        calls(r#"let p = "x"; let f = |y| agent(p + y); for i in 0..3 { f.call("z") }"#, args.clone()),
        Some(3)
    );
    assert_eq!(calls(r#"let f = Fn("agent"); f.call("hi")"#, args.clone()), Some(1));
    assert_eq!(
        calls(r#"fn ask(q) { agent(q) } let f = Fn("ask"); parallel(args.xs, f)"#, args.clone()),
        Some(2)
    );
    let fs = r#"let fs = [|| agent("a"), || agent("b")]; for f in fs { f.call() } parallel(fs)"#;
    assert_eq!(calls(fs, args.clone()), Some(4));
    let (why, ..) = reason(r#"let fs = []; fs.push(|| agent("a")); for f in fs { f.call() }"#, args.clone());
    assert!(why.contains("function that calls agents"), "{why}");
    let (why, ..) = reason(r#"fn make() { || agent("a") } let f = make(); f.call()"#, args.clone());
    assert!(why.contains("function that calls agents"), "{why}");
    let (why, ..) = reason(r#"let f = || 1; f = || agent("a"); f.call()"#, args.clone());
    assert!(why.contains("function that calls agents"), "{why}");
    // Closures that call no agent go anywhere.
    assert_eq!(calls(r#"let fs = []; fs.push(|| 1); let g = fs[0]; agent("a")"#, args), Some(1));
}

#[test]
fn children_and_mutated_sizes_are_unbounded_with_their_construct() {
    let (why, line, column) = reason("agent(\"a\");\n  workflow(\"research\", #{})", json!({}));
    assert!(why.contains("child workflow 'research'"), "{why}");
    assert_eq!((line, column), (2, 3));
    // An orchestrator spawns as many children as it decides: never counted as zero.
    let (why, line, _) =
        reason("agent(\"a\");\nlet r = orchestrate(\"plan a trip\", #{max_spawns: 3});", json!({}));
    assert!(why.contains("orchestrator"), "{why}");
    assert_eq!(line, 2);
    let (why, ..) = reason(
        r#"let items = []; for i in 0..3 { items.push(i) } parallel(items, |i| agent(`${i}`))"#,
        json!({}),
    );
    assert!(why.contains("`parallel` fan-out"), "{why}");
    let (why, ..) = reason(r#"let xs = agent("list").split(","); for x in xs { agent(x) }"#, json!({}));
    assert!(why.contains("`for` loop"), "{why}");
    // Iterating an unknown value without calling agents is fine.
    assert_eq!(
        calls(r#"let xs = agent("list").split(","); for x in xs { log("info", x) }"#, json!({})),
        Some(1)
    );
    let (why, line, _) = reason("let x = ;", json!({}));
    assert!(why.contains("does not parse"), "{why}");
    assert_eq!(line, 1);
}

#[test]
fn sites_carry_their_literal_options_and_merge_over_contexts() {
    let src = r#"
        for t in args.topics {
            agent(`Summarize ${t}`, #{model: "echo:x", max_output_tokens: 400, tools: ["fs"], schema: #{type: "object"}, profile: args.p});
        }
        agent(args.prompt, #{max_turns: 3, est_cost: 0.05})
    "#;
    let CallBound::Bounded { sites, .. } = call_bound(src, &json!({"topics": ["a", "bbbb"], "prompt": "hi"}))
    else {
        panic!("bounded");
    };
    assert_eq!(sites.len(), 2);
    let first = &sites[0];
    assert_eq!((first.line, first.max_calls), (3, 2));
    assert_eq!(first.prompt, Known::Literal("Summarize bbbb".into()));
    assert_eq!(first.model, Known::Literal("echo:x".into()));
    assert_eq!(first.max_output_tokens, Known::Literal(400));
    assert_eq!(first.tools, Known::Literal(vec!["fs".into()]));
    assert!(matches!(first.schema, Known::Literal(_)));
    // args.p is missing: () is no profile name.
    assert_eq!(first.profile, Known::Computed);
    let second = &sites[1];
    assert_eq!(second.prompt, Known::Literal("hi".into()));
    assert_eq!(second.max_turns, Known::Literal(3));
    assert_eq!(second.est_cost, Known::Literal(crate::Money::from_usd(0.05).unwrap()));
    assert_eq!(second.model, Known::Unset);
    let CallBound::Bounded { sites, .. } = call_bound(r#"let o = agent("o"); agent("x", o)"#, &json!({}))
    else {
        panic!("bounded");
    };
    assert_eq!(sites[1].model, Known::Computed);
}

#[test]
fn the_sample_scripts_bound_as_written() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    let expect = [
        ("adversarial_panel.rhai", Some(5)),
        ("code_review.rhai", Some(4)),
        ("deploy_approval.rhai", Some(2)),
        ("digest.rhai", Some(4)),
        ("phase_chain.rhai", Some(5)),
        ("exhausted_fanout.rhai", None),
        ("loop_until_dry.rhai", None),
    ];
    for (file, expected) in expect {
        let source = std::fs::read_to_string(dir.join(file)).unwrap();
        assert_eq!(calls(&source, json!({})), expected, "{file}: {:?}", call_bound(&source, &json!({})));
    }
}

#[test]
fn hostile_input_never_panics() {
    for source in ["", "fn", "((((", "let x = [", "agent(", "for x in { }", "\u{0}", "switch { }"] {
        let _ = call_bound(source, &json!(null));
    }
    let deep = format!("{}agent(\"a\"){}", "for i in 0..2 { ".repeat(40), " }".repeat(40));
    let _ = call_bound(&deep, &json!({}));
}

#[test]
fn pointers_to_agent_calling_globals_and_overloads_do_not_escape() {
    let (why, ..) = reason(r#"let f = Fn("agent").curry("x"); f.call()"#, json!({}));
    assert!(why.contains("function that calls agents"), "{why}");
    let (why, ..) = reason(
        r#"fn ask() { agent("a") } fn ask(x) { x } let f = Fn("ask"); let g = f.curry(1); g.call()"#,
        json!({}),
    );
    assert!(why.contains("function that calls agents"), "{why}");
    // `x.f(a)` runs `f(a)` with `this`, or `f(x, a)`.
    assert_eq!(calls(r#"fn ask() { agent(this) } "q".ask()"#, json!({})), Some(1));
    assert_eq!(calls(r#"fn ask(q, n) { for i in 0..n { agent(q) } } "q".ask(3)"#, json!({})), Some(3));
}

#[test]
fn deep_call_chains_stop_within_a_small_stack() {
    // A chain of functions deeper than the sandbox's call levels, each with nested blocks.
    let mut source = String::new();
    for i in 0..80 {
        source.push_str(&format!(
            "fn f{i}(x) {{ if x > 0 {{ for j in 0..2 {{ let y = [[[x]]]; f{}(x - 1) }} }} }}\n",
            i + 1
        ));
    }
    source.push_str("fn f80(x) { agent(\"end\") }\nf0(agent(\"n\").len())");
    let bound = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(move || call_bound(&source, &json!({})))
        .unwrap()
        .join()
        .unwrap();
    assert!(matches!(bound, CallBound::Unbounded { .. }), "{bound:?}");
}

#[test]
fn paths_into_args_follow_properties_keys_and_indexes() {
    let args = json!({"groups": [{"xs": [1]}, {"xs": [1, 2, 3]}], "k": "groups"});
    assert_eq!(calls(r#"for x in args["groups"][1].xs { agent("a") }"#, args.clone()), Some(3));
    assert_eq!(calls(r#"for x in args.groups[-2].xs { agent("a") }"#, args.clone()), Some(1));
    // A computed key: followed as a value.
    assert_eq!(calls(r#"for x in args[args.k][1].xs { agent("a") }"#, args.clone()), Some(3));
    assert_eq!(calls(r#"for x in args.groups[1].xs.len() - 1 .. 5 { agent("a") }"#, args.clone()), Some(3));
    // `args` shadowed by a closure parameter or reassigned is not the run's args.
    assert_eq!(calls(r#"parallel([[1, 2]], |args| { for x in args { agent("a") } })"#, args), Some(2));
}

#[test]
fn functions_rhai_calls_implicitly_may_not_call_agents() {
    let (why, ..) = reason(r#"fn to_string() { agent("hidden") } let m = #{a: 1}; `${m}`"#, json!({}));
    assert!(why.contains("'to_string' is called implicitly"), "{why}");
    assert_eq!(calls(r#"fn to_string() { "x" } agent("a")"#, json!({})), Some(1));
}

#[test]
fn a_default_is_bounded_by_the_args_given_else_by_its_own_length() {
    let src = r#"for t in args.topics ?? ["a", "b", "c"] { agent(t) }"#;
    assert_eq!(calls(src, json!({})), Some(3));
    assert_eq!(calls(src, json!({"topics": ["x"]})), Some(1));
    assert_eq!(calls(src, json!({"topics": ["x", "y", "z", "w", "v"]})), Some(5));
    let src = r#"let topics = args.topics ?? ["a", "b"]; parallel(topics, |t| agent(t))"#;
    assert_eq!(calls(src, json!({})), Some(2));
    // A computed left side: the default says nothing of its size.
    let src = r#"for t in agent("list").split(",") ?? ["a"] { agent(t) }"#;
    let (why, ..) = reason(src, json!({}));
    assert!(why.contains("size is not known"), "{why}");
    // No default: a loop over an args value the run is not given says so.
    let (why, line, _) = reason("\nparallel(args.topics, |t| agent(t))", json!({}));
    assert!(
        why.contains("`parallel` fan-out") && why.contains("missing") && why.contains("default"),
        "{why}"
    );
    assert_eq!(line, 2);
}
