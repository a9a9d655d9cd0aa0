//! One run at scale, through the binary: the run listing and the journal read in pages.

use std::path::Path;

use assert_cmd::Command;
use cairn::store::{DEFAULT_SQLITE_PATH, SqliteOptions, SqliteStore};
use cairn::{JournalStore, RunMeta, RunStatus};
use serde_json::Value;

fn cairn_in(dir: &Path) -> Command {
    let mut cmd = Command::cargo_bin("cairn").unwrap();
    cmd.current_dir(dir).env_remove("CAIRN_LOG").env("NO_COLOR", "1");
    cmd
}

fn meta(n: i64) -> RunMeta {
    let text = serde_json::json!({
        "run_id": format!("run-{n:02}"),
        "status": if n % 4 == 0 { "error" } else { "ok" },
        "tags": if n % 3 == 0 { vec!["nightly"] } else { Vec::new() },
        // Ties on the creation time: the run id orders them.
        "created_at_ms": 1_700_000_000_000_i64 + n / 3,
        "updated_at_ms": 1_700_000_000_000_i64 + n / 3,
        "hash_version": 1,
    });
    serde_json::from_value(text).unwrap()
}

fn listed(dir: &Path, args: &[&str]) -> Vec<String> {
    let out = cairn_in(dir).args(["runs", "--json"]).args(args).assert().success();
    let runs: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    runs.as_array().unwrap().iter().map(|run| run["run_id"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn cairn_runs_pages_with_limit_and_after_and_filters_by_status_and_tag() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DEFAULT_SQLITE_PATH);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    {
        let store = SqliteStore::open(&path, SqliteOptions::new()).unwrap();
        for n in 0..23 {
            store.put_meta(&meta(n), None).unwrap();
        }
    }
    for filter in
        [&[][..], &["--status", "ok"], &["--tag", "nightly"], &["--status", "error", "--tag", "nightly"]]
    {
        let whole = listed(dir.path(), filter);
        let expected: Vec<String> = {
            let mut metas: Vec<RunMeta> = (0..23).map(meta).collect();
            metas.retain(|m| {
                (!filter.contains(&"ok") || m.status == RunStatus::Ok)
                    && (!filter.contains(&"error") || m.status == RunStatus::Error)
                    && (!filter.contains(&"nightly") || m.tags.contains(&"nightly".to_owned()))
            });
            metas.sort_by(|a, b| (b.created_at_ms, &b.run_id).cmp(&(a.created_at_ms, &a.run_id)));
            metas.into_iter().map(|m| m.run_id.to_string()).collect()
        };
        assert_eq!(whole, expected, "cairn runs {filter:?}");
        let mut paged: Vec<String> = Vec::new();
        loop {
            let mut args: Vec<&str> = filter.to_vec();
            args.extend(["--limit", "4"]);
            if let Some(last) = paged.last() {
                args.extend(["--after", last.as_str()]);
            }
            let page = listed(dir.path(), &args);
            assert!(page.len() <= 4, "{page:?}");
            if page.is_empty() {
                break;
            }
            paged.extend(page);
        }
        assert_eq!(paged, whole, "cairn runs {filter:?} paged by 4");
    }
    let unknown = cairn_in(dir.path()).args(["runs", "--after", "no-such-run"]).assert().code(2);
    let stderr = String::from_utf8_lossy(&unknown.get_output().stderr).into_owned();
    assert!(stderr.contains("unknown run no-such-run"), "{stderr}");
}

/// Runs through the binary on `store` (a `--store` URL), then checks the store's append
/// counters against a fold of every journal: `/metrics` reads the counters instead of folding,
/// so they must say what the fold says. A resume replays: nothing is paid or counted twice.
fn counters_match_a_fold(dir: &Path, store: &str, open: &dyn Fn() -> Box<dyn JournalStore>) {
    std::fs::write(dir.join("calls.rhai"), "let n = 0; for i in 0..7 { agent(`q ${i}`); n += 1; } n")
        .unwrap();
    std::fs::write(dir.join("fan.rhai"), "parallel([|| agent(\"a\"), || agent(\"b\"), || 1]).len()").unwrap();
    for (script, id) in [("calls.rhai", "calls"), ("fan.rhai", "fan"), ("calls.rhai", "calls-2")] {
        cairn_in(dir).args(["--store", store, "run", script, "--run-id", id, "-q"]).assert().success();
    }
    cairn_in(dir).args(["--store", store, "resume", "calls", "-q"]).assert().success();
    let store = open();
    let counters = store.counters().unwrap().expect("a fresh store counts");
    let (mut calls, mut spend) = (0, cairn::Money::ZERO);
    for meta in store.list_runs(&cairn::RunFilter::default()).unwrap() {
        let raw = store.load(&meta.run_id).unwrap();
        let entries = cairn::journal::decode_all(&raw).unwrap();
        let cost = cairn::CostReport::fold(entries.iter());
        calls += cost.total.entries;
        spend += cost.total.cost;
    }
    assert_eq!(calls, 16, "the runs made 7 + 2 + 7 calls");
    assert_eq!((counters.appended.calls, counters.appended.spend), (calls, spend));
    assert_eq!(counters.runs_in(RunStatus::Ok), 3, "{counters:?}");
}

#[test]
fn the_counters_match_a_fold_of_every_journal() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    counters_match_a_fold(dir.path(), "sqlite:c.db", &|| {
        Box::new(SqliteStore::open(&db, SqliteOptions::new()).unwrap())
    });
    let dir = tempfile::tempdir().unwrap();
    let journals = dir.path().join("j");
    counters_match_a_fold(dir.path(), "jsonl:j", &|| {
        Box::new(cairn::store::JsonlStore::open(&journals, cairn::store::Durability::Normal).unwrap())
    });
    if let Some(url) = crate::postgres::fresh_url("counters") {
        let dir = tempfile::tempdir().unwrap();
        let open = || -> Box<dyn JournalStore> {
            Box::new(cairn::PostgresStore::open(&url, cairn::PostgresOptions::new()).unwrap())
        };
        counters_match_a_fold(dir.path(), &url, &open);
    }
}
