//! The run listing at scale (#31): `cairn runs` and `GET /v1/runs` over 10,000 runs, paged
//! with `--limit`/`--after` (`limit`/`after`) and filtered by status and tag, keep one order
//! across pages and neither repeat nor skip a run while new runs are created between pages.

use std::path::Path;

use assert_cmd::Command;
use cairn::store::{SqliteOptions, SqliteStore};
use cairn::{JournalStore, RunMeta};
use serde_json::{Value, json};

use crate::support::serve::start_on;

const RUNS: i64 = 10_000;
const BASE_MS: i64 = 1_700_000_000_000;

/// Run `n`: one of four statuses, every third tagged `nightly`, created in threes (ties on the
/// creation time are ordered by run id).
fn meta(n: i64, created_at_ms: i64) -> RunMeta {
    let status = ["ok", "error", "ok", "suspended"][(n % 4) as usize];
    let tags = if n % 3 == 0 { vec!["nightly"] } else { Vec::new() };
    serde_json::from_value(json!({
        "run_id": format!("run-{n:05}"),
        "status": status,
        "tags": tags,
        "created_at_ms": created_at_ms,
        "updated_at_ms": created_at_ms,
        "hash_version": 1,
    }))
    .unwrap()
}

/// What a filter `(status, tag)` lists of `metas`, newest first.
fn expected(metas: &[RunMeta], status: Option<&str>, tag: Option<&str>) -> Vec<String> {
    let mut kept: Vec<&RunMeta> = metas
        .iter()
        .filter(|m| status.is_none_or(|s| m.status.as_str() == s))
        .filter(|m| tag.is_none_or(|t| m.tags.iter().any(|have| have == t)))
        .collect();
    kept.sort_by(|a, b| (b.created_at_ms, &b.run_id).cmp(&(a.created_at_ms, &a.run_id)));
    kept.iter().map(|m| m.run_id.to_string()).collect()
}

/// Creates runs newer than every listed one, as a live system does while someone pages.
struct Creator {
    store: SqliteStore,
    /// Every run in the store.
    all: Vec<RunMeta>,
}

impl Creator {
    fn create(&mut self, count: usize) {
        for _ in 0..count {
            let n = self.all.len() as i64;
            let meta = meta(n, BASE_MS + n);
            self.store.put_meta(&meta, None).unwrap();
            self.all.push(meta);
        }
    }
}

fn cairn_runs(dir: &Path, args: &[&str]) -> Vec<String> {
    let out = Command::cargo_bin("cairn")
        .unwrap()
        .current_dir(dir)
        .args(["--store", "sqlite:c.db", "runs", "--json"])
        .args(args)
        .assert()
        .success();
    let runs: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    runs.as_array().unwrap().iter().map(|run| run["run_id"].as_str().unwrap().to_owned()).collect()
}

const FILTERS: [(Option<&str>, Option<&str>); 4] =
    [(None, None), (Some("ok"), None), (None, Some("nightly")), (Some("error"), Some("nightly"))];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_runs_page_in_one_order_with_no_repeat_or_gap_while_runs_are_created() {
    let dir = tempfile::tempdir().unwrap();
    let mut creator = {
        let store = SqliteStore::open(&dir.path().join("c.db"), SqliteOptions::new()).unwrap();
        let all: Vec<RunMeta> = (0..RUNS).map(|n| meta(n, BASE_MS + n / 3)).collect();
        for meta in &all {
            store.put_meta(meta, None).unwrap();
        }
        Creator { store, all }
    };

    // The whole listing, which the binary reads from the store in pages of its own.
    assert_eq!(cairn_runs(dir.path(), &[]), expected(&creator.all, None, None), "cairn runs");

    // `cairn runs --limit 1000 --after LAST`, with new runs created before every page: the
    // pages list the runs there were when the first was read, each once, in order.
    for (status, tag) in FILTERS {
        let mut paged: Vec<String> = Vec::new();
        creator.create(3);
        let there = creator.all.clone();
        loop {
            let mut args: Vec<&str> = vec!["--limit", "1000"];
            args.extend(status.iter().flat_map(|s| ["--status", *s]));
            args.extend(tag.iter().flat_map(|t| ["--tag", *t]));
            if let Some(last) = paged.last() {
                args.extend(["--after", last.as_str()]);
            }
            let page = cairn_runs(dir.path(), &args);
            assert!(page.len() <= 1000, "{} runs on a page", page.len());
            if page.is_empty() {
                break;
            }
            paged.extend(page);
            creator.create(3);
        }
        let want = expected(&there, status, tag);
        assert_eq!(paged.len(), want.len(), "cairn runs {status:?} {tag:?}: a repeat or a gap");
        assert_eq!(paged, want, "cairn runs {status:?} {tag:?} paged by 1,000");
    }

    // `GET /v1/runs?limit=1000&after=NEXT` on a real `cairn serve` over the same store.
    let server = start_on(dir, "sqlite:c.db".to_owned(), None, &["--workers", "0"]).await;
    for (status, tag) in FILTERS {
        let mut query = String::from("limit=1000");
        if let Some(status) = status {
            query.push_str(&format!("&status={status}"));
        }
        if let Some(tag) = tag {
            query.push_str(&format!("&tag={tag}"));
        }
        let mut paged: Vec<String> = Vec::new();
        let mut after = String::new();
        creator.create(3);
        let there = creator.all.clone();
        loop {
            let (code, page) = server.get(&format!("/v1/runs?{query}&after={after}")).await;
            assert_eq!(code, 200, "{page}");
            let runs = page["runs"].as_array().unwrap();
            assert!(runs.len() <= 1000, "{} runs on a page", runs.len());
            paged.extend(runs.iter().map(|run| run["run_id"].as_str().unwrap().to_owned()));
            match page["next"].as_str() {
                Some(next) => after = next.to_owned(),
                None => break,
            }
            creator.create(3);
        }
        let want = expected(&there, status, tag);
        assert_eq!(paged.len(), want.len(), "GET /v1/runs {status:?} {tag:?}: a repeat or a gap");
        assert_eq!(paged, want, "GET /v1/runs {status:?} {tag:?} paged by 1,000");
    }
}
