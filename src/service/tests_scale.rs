//! `/metrics` and `GET /v1/runs` over a store that refuses unbounded reads: a scrape reads the
//! store's counters (no run listed, no journal loaded), and a page of the run list reads at
//! most one run more than it shows, however many runs the store holds and wherever the page is.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::store::{
    self, JournalStore, Lease, MemoryStore, RawEntry, RunFilter, RunId, RunMeta, StoreCounters, Tally,
    TranscriptStore,
};

/// The most runs one listing may read.
const MOST_READ: usize = 101;

/// A memory store that refuses to load a journal or list more than [`MOST_READ`] runs.
#[derive(Debug)]
struct Bounded(MemoryStore);

impl JournalStore for Bounded {
    fn append(&self, run: &RunId, entries: &[RawEntry], lease: Option<&Lease>) -> store::Result<()> {
        self.0.append(run, entries, lease)
    }
    fn append_tallied(
        &self,
        run: &RunId,
        entries: &[RawEntry],
        lease: Option<&Lease>,
        tally: Tally,
    ) -> store::Result<()> {
        self.0.append_tallied(run, entries, lease, tally)
    }
    fn load(&self, _run: &RunId) -> store::Result<Vec<RawEntry>> {
        Err(store::Error::Config("a whole journal was loaded".into()))
    }
    fn load_since(&self, _run: &RunId, _after: u64) -> store::Result<Vec<RawEntry>> {
        Err(store::Error::Config("the rest of a journal was loaded".into()))
    }
    fn load_page(&self, _run: &RunId, _after: u64, _limit: usize) -> store::Result<Vec<RawEntry>> {
        Err(store::Error::Config("a journal page was loaded".into()))
    }
    fn put_meta(&self, meta: &RunMeta, lease: Option<&Lease>) -> store::Result<()> {
        self.0.put_meta(meta, lease)
    }
    fn get_meta(&self, run: &RunId) -> store::Result<Option<RunMeta>> {
        self.0.get_meta(run)
    }
    fn list_runs(&self, filter: &RunFilter) -> store::Result<Vec<RunMeta>> {
        match filter.limit {
            Some(limit) if limit <= MOST_READ => self.0.list_runs(filter),
            _ => Err(store::Error::Config(format!("runs listed without a limit of {MOST_READ}: {filter:?}"))),
        }
    }
    fn counters(&self) -> store::Result<Option<StoreCounters>> {
        self.0.counters()
    }
    fn delete(&self, run: &RunId, lease: Option<&Lease>) -> store::Result<()> {
        JournalStore::delete(&self.0, run, lease)
    }
}

/// 2,000 runs (every status but `queued` in turn, every third tagged) over a bounded store, and
/// the service's base URL.
async fn service() -> (String, Vec<RunMeta>) {
    let inner = MemoryStore::new();
    let statuses = ["ok", "error", "suspended", "cancelled", "exhausted", "running"];
    let metas: Vec<RunMeta> = (0..2_000)
        .map(|n: usize| {
            serde_json::from_value(json!({
                "run_id": format!("run-{n:04}"),
                "status": statuses[n % statuses.len()],
                "tags": if n.is_multiple_of(3) { vec!["nightly"] } else { Vec::new() },
                "created_at_ms": 1_700_000_000_000_i64 + (n / 4) as i64,
                "updated_at_ms": 1_700_000_000_000_i64,
                "hash_version": 1,
            }))
            .unwrap_or_else(|e| panic!("a meta: {e}"))
        })
        .collect();
    for meta in &metas {
        inner.put_meta(meta, None).unwrap();
    }
    let transcripts: Arc<dyn TranscriptStore> = Arc::new(MemoryStore::new());
    let engine = crate::Engine::builder_with_stores(Arc::new(Bounded(inner)), transcripts).build().unwrap();
    let app = super::router(engine, super::ServiceOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, metas)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_reads_the_counters_and_lists_no_run() {
    let (base, _) = service().await;
    let response = reqwest::get(format!("{base}/metrics")).await.unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let count = |status: &str| -> u64 {
        let line = format!("cairn_runs{{status=\"{status}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(line.as_str())?.parse().ok()).unwrap_or(u64::MAX)
    };
    for (status, runs) in [
        ("ok", 334),
        ("error", 334),
        ("suspended", 333),
        ("cancelled", 333),
        ("exhausted", 333),
        ("running", 333),
    ] {
        assert_eq!(count(status), runs, "{status}: {text}");
    }
    assert_eq!(count("queued"), 0, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_runs_reads_one_run_more_than_it_shows_wherever_it_starts() {
    let (base, metas) = service().await;
    for (query, keep) in [
        ("limit=100", None),
        ("limit=100&tag=nightly", Some("nightly")),
        ("limit=100&status=ok&tag=nightly", Some("ok")),
    ] {
        let mut want: Vec<&RunMeta> = metas
            .iter()
            .filter(|m| match keep {
                Some("nightly") => m.tags.iter().any(|t| t == "nightly"),
                Some(_) => m.tags.iter().any(|t| t == "nightly") && m.status.as_str() == "ok",
                None => true,
            })
            .collect();
        want.sort_by(|a, b| (b.created_at_ms, &b.run_id).cmp(&(a.created_at_ms, &a.run_id)));
        let want: Vec<String> = want.iter().map(|m| m.run_id.to_string()).collect();
        let mut listed: Vec<String> = Vec::new();
        let mut after = String::new();
        loop {
            let response = reqwest::get(format!("{base}/v1/runs?{query}&after={after}")).await.unwrap();
            let page: Value = response.json().await.unwrap();
            let runs = page["runs"].as_array().unwrap_or_else(|| panic!("{query}: {page}"));
            assert!(runs.len() <= 100, "{page}");
            listed.extend(runs.iter().filter_map(|r| r["run_id"].as_str()).map(str::to_owned));
            match page["next"].as_str() {
                Some(next) => after = next.to_owned(),
                None => break,
            }
        }
        assert_eq!(listed, want, "{query}");
    }
}
