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
