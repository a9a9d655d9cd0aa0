//! Unit tests of the Rhai dialect: the sandbox engine, compile, and the pieces of Rhai's AST the
//! lint rules depend on (so a change in the pinned version fails here, loudly, first).

use ::rhai::{Dynamic, Engine, EvalAltResult, Expr, Scope, Stmt};

use super::sandbox::{DISABLED_SYMBOLS, SandboxLimits, compile_scope, sandbox_engine};
use super::*;
use crate::script::LintContext;

/// Evaluates a compiled script in the sandbox with `args` bound, as the runner will.
fn run(compiled: &CompiledRhai, engine: &Engine, args: Dynamic) -> Result<Dynamic, Box<EvalAltResult>> {
    let mut scope = Scope::new();
    scope.push_constant("args", args);
    scope.push_constant("budget", ());
    engine.eval_ast_with_scope(&mut scope, compiled.ast())
}

#[test]
fn a_compiled_script_runs_in_the_sandbox_with_the_pure_builtins() {
    // One line per family of builtins lint accepts; each must also exist in the sandbox.
    let source = r#"
        let words = "b a c".split(" ");
        words.sort();
        let upper = words.map(|w| w.to_upper());
        let joined = upper.reduce(|acc, w| acc + w, "");
        let m = #{x: 1, y: 2};
        let keys = m.keys();
        keys.sort();
        let total = [1, 2, 3].filter(|n| n > 1).len() + m.values().len();
        let trimmed = "  pad  ".trim_copy();
        let maths = floor(2.7) + abs(-1) + max(1, 2) + sqrt(4.0);
        let text = `${joined}:${keys}:${total}:${maths.to_int()}:${type_of(m)}`;
        let f = |x| x * 2;
        let g = Fn("to_string");
        let reads_args = || args.n * 2;
        #{text: text, called: f.call(21), pointer: g.call(7), contains: "abc".contains("b"), arg: reads_args.call()}
    "#
    .replace("let trimmed = \"  pad  \".trim_copy();\n", "");
    let compiled = compile(&source, &LintContext::empty()).expect("compiles");
    let engine = sandbox_engine(&SandboxLimits::STANDARD);
    let mut args = ::rhai::Map::new();
    args.insert("n".into(), Dynamic::from(5_i64));
    let value = run(&compiled, &engine, args.into()).expect("runs");
    let map = value.cast::<::rhai::Map>();
    assert_eq!(map["text"].to_string(), "ABC:[\"x\", \"y\"]:4:7:map");
    assert_eq!(map["called"].as_int(), Ok(42));
    assert_eq!(map["pointer"].to_string(), "7");
    assert_eq!(map["contains"].as_bool(), Ok(true));
    assert_eq!(map["arg"].as_int(), Ok(10), "a closure reads the args constant");
}

#[test]
fn the_sandbox_parser_rejects_every_disabled_symbol_and_lint_names_each() {
    let engine = sandbox_engine(&SandboxLimits::STANDARD);
    let cases = [
        ("eval", "eval(\"1\")"),
        ("import", "import \"x\" as y;\n1"),
        ("export", "export let x = 1;\nx"),
        ("print", "print(1)"),
        ("debug", "debug(1)"),
    ];
    assert_eq!(cases.map(|(symbol, _)| symbol), DISABLED_SYMBOLS);
    for (symbol, source) in cases {
        assert!(
            engine.compile_with_scope(&compile_scope(), source).is_err(),
            "{symbol} parses in the sandbox"
        );
        let diagnostics = lint(source, &LintContext::empty());
        assert!(
            diagnostics.iter().any(|d| d.rule_id == "forbidden" && d.message.contains(symbol)),
            "lint misses {symbol}: {diagnostics:?}"
        );
    }
}

#[test]
fn the_sandbox_has_no_clock_sleep_or_exit() {
    let engine = sandbox_engine(&SandboxLimits::STANDARD);
    for source in ["timestamp()", "wait(1)", "exit()", "parse_json(\"{}\")"] {
        let error = engine.eval::<Dynamic>(source).expect_err(source);
        assert!(matches!(*error, EvalAltResult::ErrorFunctionNotFound(..)), "{source}: {error}");
    }
}

#[test]
fn the_sandbox_enforces_its_limits() {
    let limits = SandboxLimits { max_operations: 10_000, max_call_levels: 8, ..SandboxLimits::STANDARD };
    let engine = sandbox_engine(&limits);
    let error = engine.eval::<Dynamic>("let x = 0; loop { x += 1; }").expect_err("loops forever");
    assert!(matches!(*error, EvalAltResult::ErrorTooManyOperations(..)), "{error}");
    let error = engine.eval::<Dynamic>("fn f(n) { f(n + 1) } f(0)").expect_err("recurses forever");
    assert!(matches!(*error, EvalAltResult::ErrorStackOverflow(..)), "{error}");
    let error = engine.eval::<Dynamic>("let s = \"ab\"; loop { s += s; }").expect_err("grows forever");
    assert!(matches!(*error, EvalAltResult::ErrorDataTooLarge(..)), "{error}");
}

/// The measurement behind `loop-capture`: Rhai closures capture by reference, so closures made
/// in a `for` loop all see the loop variable's last value, while the map form binds afresh.
#[test]
fn closures_capture_loop_variables_by_reference() {
    let engine = sandbox_engine(&SandboxLimits::STANDARD);
    let shared = "let fs = []; for i in 0..3 { fs.push(|| i); } fs.map(|f| f.call())";
    assert_eq!(
        engine
            .eval::<::rhai::Array>(shared)
            .expect("runs")
            .iter()
            .map(|v| v.as_int().ok())
            .collect::<Vec<_>>(),
        [Some(2); 3]
    );
    let fresh = "[0, 1, 2].map(|i| || i).map(|f| f.call())";
    let values: Vec<_> =
        engine.eval::<::rhai::Array>(fresh).expect("runs").iter().map(|v| v.as_int().ok()).collect();
    assert_eq!(values, [Some(0), Some(1), Some(2)]);
    assert!(lint(shared, &LintContext::empty()).iter().any(|d| d.rule_id == "loop-capture"));
    assert!(lint(fresh, &LintContext::empty()).is_empty());
}

/// The closure representation the scope rules read: a capturing closure is a block of
/// `Share(captured)` then `curry(<fn pointer>, captured...)`, and its function's parameters are
/// the captured variables first.
#[test]
fn a_capturing_closure_is_share_then_curry() {
    let compiled =
        compile("let a = 1;\nlet f = |x| x + a;\nf.call(1)", &LintContext::empty()).expect("compiles");
    let Stmt::Var(var, ..) = &compiled.ast().statements()[1] else { panic!("a let statement") };
    let Expr::Stmt(block) = &var.1 else { panic!("a statement block, got {:?}", var.1) };
    let [Stmt::Share(shared), Stmt::Expr(curry)] = block.statements() else { panic!("share then curry") };
    assert_eq!(shared.iter().map(|(ident, _)| ident.name.as_str()).collect::<Vec<_>>(), ["a"]);
    let Expr::FnCall(call, _) = &**curry else { panic!("a call") };
    assert_eq!(call.name.as_str(), "curry");
    assert!(matches!(&call.args[0], Expr::DynamicConstant(pointer, _) if pointer.is_fnptr()));
    let def = compiled.ast().iter_fn_def().next().expect("the closure's function");
    assert!(def.name.starts_with("anon$"));
    assert_eq!(def.params.iter().map(|p| p.as_str()).collect::<Vec<_>>(), ["a", "x"]);
}

#[test]
fn compile_accepts_warnings_and_rejects_errors() {
    let ctx = LintContext::empty();
    let compiled =
        compile("let a = agent(\"same\");\nlet b = agent(\"same\");\n[a, b]", &ctx).expect("warnings only");
    assert_eq!(compiled.warnings().len(), 1);
    assert_eq!(compiled.warnings()[0].rule_id, "duplicate-agent-call");
    let rejected = compile("let a = agent(\"x\", #{bogus: 1});\nwait(1);\na", &ctx).expect_err("errors");
    let rules: Vec<&str> = rejected.iter().map(|d| d.rule_id.as_str()).collect();
    assert_eq!(rules, ["unknown-option", "forbidden"]);
}

#[test]
fn huge_or_deep_input_is_a_diagnostic_not_a_crash() {
    let ctx = LintContext::empty();
    let sources = [
        format!("let x = 1{};\nx", "+1".repeat(20_000)),
        format!("let x = #{{}};\nx{}", ".a".repeat(5_000)),
        format!("let x = {}1{};\nx", "(".repeat(2_000), ")".repeat(2_000)),
        format!("let x = {}1{};\nx", "[".repeat(2_000), "]".repeat(2_000)),
        format!("let f = {}1;\nf", "|| ".repeat(2_000)),
        format!("let x = \"{}\";\nx", "a".repeat(2 << 20)),
        "\u{0}\u{feff}🦀 let".to_owned(),
    ];
    for source in &sources {
        let diagnostics = lint(source, &ctx);
        assert!(diagnostics.iter().any(Diagnostic::is_error), "no error for {:.40}", source);
        assert!(diagnostics.iter().all(|d| d.rule_id != "internal"), "{diagnostics:?}");
    }
}
