//! The Lua card: its option lists are the schemas' (the same blocks as the Rhai card, which a
//! test regenerates from the schemas), it names every global, and its examples pass the check.

use crate::engine::ScriptDialect;
use crate::script::{GLOBALS, LintContext};

use super::LuaDialect;

/// Each `<!-- options: NAME -->` ... `<!-- end options -->` block, by name.
fn option_blocks(card: &str) -> Vec<(String, String)> {
    const OPEN: &str = "<!-- options: ";
    const CLOSE: &str = "<!-- end options -->";
    let mut blocks = Vec::new();
    let mut rest = card;
    while let Some(start) = rest.find(OPEN) {
        let end = rest[start..].find(CLOSE).expect("end marker") + start + CLOSE.len();
        let block = &rest[start..end];
        let name = block[OPEN.len()..].split(' ').next().unwrap_or_default().to_owned();
        blocks.push((name, block.to_owned()));
        rest = &rest[end..];
    }
    blocks
}

#[test]
fn the_lua_card_lists_every_global_and_the_schemas_options() {
    let card = LuaDialect::new().card();
    for global in GLOBALS {
        assert!(card.contains(&format!("### {}(", global.name)), "the Lua card lacks ### {}(", global.name);
    }
    let lua = option_blocks(card);
    let rhai = option_blocks(crate::script::api_card());
    assert!(lua.len() >= 8, "{}", lua.len());
    assert_eq!(lua, rhai, "dialect/card.lua.md option lists differ from dialect/card.md's (the schemas')");
}

#[test]
fn the_lua_card_examples_pass_the_check() {
    let mut ctx = LintContext::empty();
    ctx.profiles = ["researcher", "writer"].map(String::from).into();
    let dialect = LuaDialect::new();
    let mut examples = 0;
    for block in dialect.card().split("```lua\n").skip(1) {
        let source = block.split("```").next().unwrap_or_default();
        let diagnostics = dialect.check(source, &ctx);
        assert!(diagnostics.iter().all(|d| !d.is_error()), "card example:\n{source}\n{diagnostics:#?}");
        examples += 1;
    }
    assert_eq!(examples, 2);
}

/// The card's `<!-- libraries -->` block, as checked in.
fn libraries_block(card: &str) -> &str {
    const OPEN: &str = "<!-- libraries -->\n";
    let start = card.find(OPEN).expect("the card has a libraries block") + OPEN.len();
    let end = card[start..].find("<!-- end libraries -->").expect("an end marker") + start;
    &card[start..end]
}

/// The names the block lists: as available (the base functions and values, and each library's
/// members qualified by it) and as refused (after `Not available`).
fn listed_names(block: &str) -> (Vec<String>, Vec<String>) {
    let (available, refused) = block.split_once("Not available").expect("a refused list");
    let spans =
        |text: &str| -> Vec<String> { text.split('`').skip(1).step_by(2).map(str::to_owned).collect() };
    let mut names = Vec::new();
    // One entry per line start: `Base functions: ...` or `` `lib` ...: ``, continued on the
    // lines after it.
    let joined = available.replace('\n', " ");
    for part in joined.split(". ").map(str::trim).filter(|p| !p.is_empty()) {
        let part = part.trim_end_matches('.');
        if let Some(rest) = part.strip_prefix("Base functions: ") {
            names.extend(spans(rest).into_iter().filter(|n| !n.contains(':')));
        } else if let Some((head, members)) = part.split_once(": ") {
            let library = spans(head).into_iter().next().expect("a library name");
            names.extend(spans(members).into_iter().map(|m| format!("{library}.{m}")));
        }
    }
    (names, spans(refused).into_iter().filter(|n| !n.contains(['(', ' '])).collect())
}

/// Runs `source` through an engine whose Lua dialect skips lint: what the runtime itself has.
fn runtime_value(source: &str) -> serde_json::Value {
    let store = std::sync::Arc::new(crate::store::MemoryStore::new());
    let engine = crate::Engine::builder(store)
        .dialect(std::sync::Arc::new(LuaDialect::new().without_lint()))
        .build()
        .expect("an engine");
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    let outcome = runtime.block_on(async {
        let script = crate::Script::new("lua", "names", source);
        let handle =
            engine.run_script(&script, serde_json::json!({}), crate::RunOptions::default()).expect("starts");
        handle.result().await.expect("settles")
    });
    assert_eq!(outcome.status, crate::RunStatus::Ok, "{:?}", outcome.error);
    outcome.value.unwrap_or_default()
}

/// The Lua card's list of what a script may use is made from the lists lint checks against
/// (regenerated with `UPDATE_EXPECT=1`), and it tells the truth both ways: everything it lists
/// as available passes lint and exists at run time, everything it lists as refused is refused
/// by lint, and every global the runtime has is on one list or is a cairn global (so nothing
/// the runtime offers, like `coroutine`, is listed as available while lint refuses it).
#[test]
fn the_lua_cards_libraries_are_what_lint_and_the_runtime_accept() {
    let card = LuaDialect::new().card();
    let generated = super::lint::card_libraries_block();
    if libraries_block(card) != generated {
        if std::env::var_os("UPDATE_EXPECT").is_some() {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("dialect/card.lua.md");
            let start = card.find("<!-- libraries -->\n").expect("a block") + "<!-- libraries -->\n".len();
            let end = start + libraries_block(card).len();
            std::fs::write(path, format!("{}{generated}{}", &card[..start], &card[end..]))
                .expect("writable card");
        } else {
            panic!(
                "dialect/card.lua.md's libraries block differs from lint's lists; run with UPDATE_EXPECT=1"
            );
        }
    }
    let (available, refused) = listed_names(&generated);
    assert!(available.contains(&"string.format".to_owned()) && refused.contains(&"coroutine".to_owned()));
    let ctx = LintContext::empty();
    let dialect = LuaDialect::new();
    for name in &available {
        let source = format!("local x = {name}\nreturn 1");
        let errors: Vec<_> = dialect.check(&source, &ctx).into_iter().filter(|d| d.is_error()).collect();
        assert!(errors.is_empty(), "the card lists {name} as available, lint refuses it: {errors:?}");
    }
    for name in &refused {
        let source = format!("local x = {name}\nreturn 1");
        assert!(
            dialect.check(&source, &ctx).iter().any(|d| d.is_error()),
            "the card lists {name} as refused, lint accepts it"
        );
    }
    // What the runtime has: each available name's type, and every global.
    let probes: Vec<String> = available.iter().map(|name| format!("[\"{name}\"] = type({name})")).collect();
    let source = format!(
        "local names = {{}}\nfor k in pairs(_G) do names[#names + 1] = k end\n\
         return {{ types = {{ {} }}, globals = names }}",
        probes.join(", ")
    );
    let value = runtime_value(&source);
    for name in &available {
        let kind = value["types"][name.as_str()].as_str().unwrap_or("nil");
        assert_ne!(kind, "nil", "the card lists {name} as available, the runtime lacks it");
    }
    let cairn: Vec<&str> = crate::script::GLOBALS.iter().map(|g| g.name).collect();
    for global in value["globals"].as_array().expect("globals") {
        let global = global.as_str().unwrap_or_default();
        let known = available.iter().any(|n| n == global || n.starts_with(&format!("{global}.")))
            || refused.iter().any(|n| n == global)
            || cairn.contains(&global)
            || ["args", "budget", "host_call", "sleep", "orchestrate"].contains(&global);
        assert!(known, "the runtime has the global {global}, which the card does not list");
    }
}
