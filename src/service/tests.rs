//! The service's routes over a store that refuses to load a whole journal: what a route reads
//! per request is bounded by its page, never by the journal.

use std::sync::Arc;

use serde_json::Value;

use crate::journal::{self, Entry, Kind, ScopePath, Seq, Status};
use crate::store::{
    self, JournalStore, Lease, MemoryStore, RawEntry, RunFilter, RunId, RunMeta, RunStatus, TranscriptStore,
};

/// A memory store whose `load` and `load_since` fail: only `load_page` reads a journal.
#[derive(Debug)]
struct PagesOnly(MemoryStore);

impl JournalStore for PagesOnly {
    fn append_tallied(
        &self,
        run: &RunId,
        entries: &[RawEntry],
        lease: Option<&Lease>,
        tally: store::Tally,
    ) -> store::Result<()> {
        self.0.append_tallied(run, entries, lease, tally)
    }
    fn load(&self, _run: &RunId) -> store::Result<Vec<RawEntry>> {
        Err(store::Error::Config("a whole journal was loaded".into()))
    }
    fn load_since(&self, _run: &RunId, _after: u64) -> store::Result<Vec<RawEntry>> {
        Err(store::Error::Config("the rest of a journal was loaded".into()))
    }
    fn load_page(&self, run: &RunId, after: u64, limit: usize) -> store::Result<Vec<RawEntry>> {
        self.0.load_page(run, after, limit)
    }
    fn put_meta(&self, meta: &RunMeta, lease: Option<&Lease>) -> store::Result<()> {
        self.0.put_meta(meta, lease)
    }
    fn get_meta(&self, run: &RunId) -> store::Result<Option<RunMeta>> {
        self.0.get_meta(run)
    }
    fn list_runs(&self, filter: &RunFilter) -> store::Result<Vec<RunMeta>> {
        self.0.list_runs(filter)
    }
    fn delete(&self, run: &RunId, lease: Option<&Lease>) -> store::Result<()> {
        JournalStore::delete(&self.0, run, lease)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_routes_read_the_journal_page_by_page() {
    // Longer than a page of the event stream's backlog.
    const JOURNAL: u64 = 1_200;
    let inner = MemoryStore::new();
    let run = RunId::parse("paged").unwrap();
    let key = journal::content_key(&serde_json::json!("x")).unwrap();
    let raw: Vec<RawEntry> = (1..=JOURNAL)
        .map(|seq| {
            let mut entry = Entry::new(Seq(seq), Kind::Rand, Status::Ok, ScopePath::root(), key, seq as u32);
            entry.set_value(Some(&Value::from(seq)));
            journal::encode(&entry).unwrap()
        })
        .collect();
    inner.append(&run, &raw, None).unwrap();
    inner.put_meta(&crate::store::conformance::fixtures::meta("paged", RunStatus::Ok, 1), None).unwrap();
    let transcripts: Arc<dyn TranscriptStore> = Arc::new(MemoryStore::new());
    let engine = crate::Engine::builder_with_stores(Arc::new(PagesOnly(inner)), transcripts).build().unwrap();
    let app = super::router(engine, super::ServiceOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let mut seqs = Vec::new();
    let mut after = 0;
    loop {
        let page: Value = reqwest::get(format!("{base}/v1/runs/paged/journal?after={after}&limit=500"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let entries = page["entries"].as_array().unwrap_or_else(|| panic!("{page}"));
        assert!(entries.len() <= 500, "{page}");
        seqs.extend(entries.iter().map(|e| e["seq"].as_u64().unwrap()));
        match page["next_after"].as_u64() {
            Some(next) => after = next,
            None => break,
        }
    }
    assert_eq!(seqs, (1..=JOURNAL).collect::<Vec<u64>>());
    // The run's record: its digest, read page by page.
    let shown: Value = reqwest::get(format!("{base}/v1/runs/paged")).await.unwrap().json().await.unwrap();
    assert_eq!(shown["entries"], JOURNAL, "{shown}");
    // The event stream's backlog, page by page, then the outcome of the settled run.
    let text = reqwest::get(format!("{base}/v1/runs/paged/events")).await.unwrap().text().await.unwrap();
    let entries: Vec<Value> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .filter(|data| data.get("seq").is_some())
        .collect();
    assert_eq!(
        entries.iter().map(|e| e["seq"].as_u64().unwrap()).collect::<Vec<u64>>(),
        (1..=JOURNAL).collect::<Vec<u64>>()
    );
    assert!(entries.iter().all(|e| e["replayed"] == true), "a backlog entry was not marked replayed");
    assert!(
        text.contains("event: outcome") || text.contains("event:outcome"),
        "{}",
        &text[text.len().saturating_sub(300)..]
    );
}
