//! The crate root is the API boundary: its public modules are the deliberate ones, and every
//! hidden item is one of the seams the binary, the benches and the integration tests use.

use syn::{Item, Visibility};

/// Modules an embedder reaches by path; every other module is private to the crate and what
/// embedders use of it is re-exported at the root.
const PUBLIC_MODULES: &[&str] = &["journal", "provider", "service", "store", "testing"];

/// The `#[doc(hidden)]` public items: the binary's entry and the internals the integration
/// tests and benches reach. Not API; adding one is a decision.
const HIDDEN: &[&str] = &["__cli_main", "__internal", "ReadmeDoctests"];

fn is_hidden(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("doc")
            && attr.meta.require_list().is_ok_and(|list| list.tokens.to_string() == "hidden")
    })
}

#[test]
fn the_crate_root_exposes_only_its_api_modules_and_named_seams() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs")).unwrap();
    let root = syn::parse_file(&text).unwrap();
    let mut modules = Vec::new();
    let mut hidden = Vec::new();
    for item in &root.items {
        let (vis, attrs, name) = match item {
            Item::Mod(m) => (&m.vis, &m.attrs, m.ident.to_string()),
            Item::Fn(f) => (&f.vis, &f.attrs, f.sig.ident.to_string()),
            Item::Struct(s) => (&s.vis, &s.attrs, s.ident.to_string()),
            _ => continue,
        };
        if !matches!(vis, Visibility::Public(_)) {
            continue;
        }
        if is_hidden(attrs) || name.starts_with("__") || name == "ReadmeDoctests" {
            hidden.push(name);
        } else if matches!(item, Item::Mod(_)) {
            modules.push(name);
        }
    }
    modules.sort();
    assert_eq!(modules, PUBLIC_MODULES, "the crate root's public modules");
    for name in &hidden {
        assert!(
            HIDDEN.contains(&name.as_str()),
            "{name} is a hidden public item not in tidy/api.rs's HIDDEN"
        );
    }
}
