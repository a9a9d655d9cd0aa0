//! Cargo features: an embedder that turns the defaults off (`default-features = false`) gets the
//! engine with Rhai and SQLite, and links none of the crates the CLI, the service, PostgreSQL,
//! Lua or the fault simulator need. CI builds and tests that library (`.ci/run`); this test holds
//! the dependency graph, read by `cargo tree` from the lock file with no network.

use std::collections::BTreeSet;

/// The crates a build of this package links (normal edges: no build or dev dependencies).
fn linked(args: &[&str]) -> BTreeSet<String> {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["tree", "--offline", "--locked", "-e", "normal", "--prefix", "none", "--format", "{p}"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo tree {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn without_default_features_the_library_links_no_cli_service_postgres_or_lua_crate() {
    let full = linked(&[]);
    let lean = linked(&["--no-default-features"]);
    let optional = [
        "clap",
        "clap_complete",
        "indicatif",
        "tracing-subscriber",
        "axum",
        "tokio-postgres",
        "deadpool-postgres",
        "mlua",
        "full_moon",
    ];
    for name in optional {
        assert!(full.contains(name), "the default build should link {name}");
        assert!(!lean.contains(name), "--no-default-features still links {name}");
    }
    for name in ["rhai", "rusqlite", "reqwest", "tokio"] {
        assert!(lean.contains(name), "--no-default-features lost {name}");
    }
    // Each feature brings back exactly its own crates.
    for (feature, crates) in [
        ("lua", &["mlua", "full_moon"][..]),
        ("postgres", &["tokio-postgres", "deadpool-postgres"]),
        ("serve", &["axum"]),
        ("sim", &["axum"]),
    ] {
        let with = linked(&["--no-default-features", "--features", feature]);
        for name in crates {
            assert!(with.contains(*name), "feature {feature} should link {name}");
        }
        assert!(!with.contains("clap"), "feature {feature} should not link clap");
    }
}

/// The crate's metadata is what crates.io and docs.rs show: a readme that exists, both license
/// files the `license` expression names, a `rust-version` at least the edition's, keywords and
/// categories in crates.io's form, and a changelog. `repository` is either a real `https` URL or
/// absent with the comment saying why (none is invented).
#[test]
fn the_crate_declares_its_metadata_and_ships_its_licenses() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let manifest: toml::Table = toml::from_str(&text).unwrap();
    let package = manifest["package"].as_table().unwrap();
    let string = |key: &str| package.get(key).and_then(|v| v.as_str()).unwrap_or_default().to_owned();

    let readme = string("readme");
    assert!(root.join(&readme).is_file(), "readme = {readme:?} is not a file");
    assert_eq!(string("license"), "MIT OR Apache-2.0");
    for (file, title) in [("LICENSE-MIT", "MIT License"), ("LICENSE-APACHE", "Apache License")] {
        let license = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        assert!(license.contains(title), "{file} is not the {title}");
    }
    assert!(!string("description").is_empty(), "no description");

    let version: Vec<u32> = string("rust-version").split('.').map(|n| n.parse().unwrap()).collect();
    assert!(version.len() >= 2, "rust-version {version:?}");
    // Edition 2024 needs Rust 1.85; the code uses let chains (1.88).
    assert_eq!(string("edition"), "2024");
    assert!((version[0], version[1]) >= (1, 88), "rust-version {version:?} is older than the code needs");

    let words = |key: &str| -> Vec<String> {
        package[key].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
    };
    let keywords = words("keywords");
    assert!((1..=5).contains(&keywords.len()), "crates.io takes at most 5 keywords: {keywords:?}");
    for word in &keywords {
        let valid = word.len() <= 20
            && word.starts_with(|c: char| c.is_ascii_alphanumeric())
            && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '+');
        assert!(valid, "keyword {word:?} is not one crates.io accepts");
    }
    // crates.io's category slugs for what cairn is (a subset of its fixed list).
    let known = [
        "api-bindings",
        "asynchronous",
        "command-line-utilities",
        "database",
        "development-tools",
        "science",
        "text-processing",
        "web-programming",
    ];
    let categories = words("categories");
    assert!((1..=5).contains(&categories.len()), "{categories:?}");
    for category in &categories {
        assert!(known.contains(&category.as_str()), "category {category:?} is not a crates.io slug");
    }

    match package.get("repository").and_then(|v| v.as_str()) {
        Some(url) => assert!(url.starts_with("https://"), "repository {url:?}"),
        None => assert!(
            text.contains("# No `repository`"),
            "Cargo.toml has no repository and no comment saying why"
        ),
    }
    let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).unwrap_or_default();
    assert!(changelog.contains("## [Unreleased]"), "CHANGELOG.md has no Unreleased section");
}

/// CI (`.ci/run`) builds what the docs promise an embedder and a reader: the library without
/// default features (checked and its unit tests run), the API docs with warnings as errors,
/// and the mdBook guide.
#[test]
fn ci_builds_the_lean_library_the_api_docs_and_the_guide() {
    let ci = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/run")).unwrap();
    let commands: Vec<&str> = ci
        .lines()
        .map(str::trim)
        .filter(|line| !line.starts_with('#') && !line.starts_with("echo"))
        .collect();
    for wanted in [
        "cargo test --no-default-features --lib",
        "cargo clippy --no-default-features --all-targets",
        "RUSTDOCFLAGS=\"-D warnings\" cargo doc --no-deps",
        "mdbook build docs",
    ] {
        assert!(commands.iter().any(|line| line.contains(wanted)), ".ci/run does not run `{wanted}`");
    }
}
