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
