//! `cairn serve` and `cairn worker` through what an operator meets in the first week: a run
//! that fails says why everywhere, a worker without a run's provider neither loses the run nor
//! keeps it forever, and PostgreSQL restarts under load strand nothing.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::support::serve::{Killed, Server, free_port, start, start_on, worker};

async fn metrics(server: &Server) -> String {
    server.request(reqwest::Method::GET, "/metrics").send().await.unwrap().text().await.unwrap()
}

async fn wait_until(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_says_why_in_its_record_its_outcome_event_and_inspect() {
    let server = start(None, &[]).await;
    let (code, body) =
        server.submit(json!({ "source": "let a = agent(\"one\");\nthrow \"the data was bad\";" })).await;
    assert_eq!(code, 202, "{body}");
    let run = body["run_id"].as_str().unwrap().to_owned();
    let shown = server.wait_for(&run, "error").await;
    let error = &shown["error"];
    assert_eq!(error["code"], "script_error", "{shown}");
    assert!(error["message"].as_str().unwrap().contains("the data was bad"), "{shown}");
    assert!(error["where"].is_object(), "{shown}");
    let events = server.events(&run, None, None).await;
    let outcome = events.last().unwrap();
    assert_eq!(outcome.0, "outcome");
    assert_eq!(&outcome.2["error"], error, "{events:?}");
    // The journal's settlement holds it: `cairn inspect` reads it from there.
    let out = Command::new(assert_cmd::cargo::cargo_bin("cairn"))
        .current_dir(server.dir.path())
        .args(["--store", &server.store, "inspect", &run])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("error     script_error: ") && text.contains("the data was bad"), "{text}");
    let out = Command::new(assert_cmd::cargo::cargo_bin("cairn"))
        .current_dir(server.dir.path())
        .args(["--store", &server.store, "inspect", &run, "--json"])
        .output()
        .unwrap();
    let inspected: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(&inspected["error"], error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_without_the_runs_provider_leaves_it_for_one_that_has_it_and_a_bounded_number_of_tries() {
    // The server's config routes to provider `m` (a scripted model); it drives nothing itself.
    let model = super::scripted_server::ScriptedServer::start(vec![super::scripted_server::text("hi", 3, 2)]);
    let dir = super::scripted_server::project(&model.url, "", "");
    let store = format!("sqlite:{}", dir.path().join("c.db").display());
    let server = start_on(dir, store.clone(), None, &["--workers", "0"]).await;
    let (code, body) = server.submit(json!({ "source": "agent(\"hello\")" })).await;
    assert_eq!(code, 202, "{body}");
    let run = body["run_id"].as_str().unwrap().to_owned();
    // A worker whose config lacks `mine`: it cannot drive the run, and leaves it queued,
    // its attempts counted in /metrics.
    let elsewhere = tempfile::tempdir().unwrap();
    let drifted = worker(elsewhere.path(), &store, &["--max-attempts", "1000"]);
    let attempts = format!("cairn_queue_run_attempts{{run_id=\"{run}\"}}");
    wait_until("the retried run in /metrics", Duration::from_secs(60), async || {
        metrics(&server).await.lines().any(|l| l.starts_with(&attempts))
    })
    .await;
    assert_eq!(server.get(&format!("/v1/runs/{run}")).await.1["status"], "queued");
    drop(drifted);
    // A worker configured like the server drives it.
    let _configured = worker(server.dir.path(), &store, &[]);
    let done = {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, shown) = server.get(&format!("/v1/runs/{run}")).await;
            if shown["status"] == "ok" {
                break shown;
            }
            assert!(Instant::now() < deadline, "the configured worker never drove it: {shown}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    assert_eq!(done["status"], "ok");
    drop(_configured);
    // With no worker able to drive it, a run is settled error after its attempts, with why.
    let (_, body) = server.submit(json!({ "source": "agent(\"again\")" })).await;
    let stuck = body["run_id"].as_str().unwrap().to_owned();
    let _drifted = worker(elsewhere.path(), &store, &["--max-attempts", "2"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let shown = loop {
        let (_, shown) = server.get(&format!("/v1/runs/{stuck}")).await;
        if shown["status"] == "error" {
            break shown;
        }
        assert!(Instant::now() < deadline, "never settled: {shown}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let message = shown["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no worker could drive the run in 2 attempts"), "{shown}");
    assert!(message.contains("m:tiny"), "the reason names the model: {shown}");
    assert!(!metrics(&server).await.contains(&format!("run_id=\"{stuck}\"")), "it left the queue");
}

/// A PostgreSQL of the test's own on `port` in `dir`, restartable; stopped on drop.
struct OwnPostgres {
    dir: std::path::PathBuf,
    port: u16,
    url: String,
}

fn postgres_script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/postgres")
}

impl OwnPostgres {
    fn start() -> Option<OwnPostgres> {
        // Where PostgreSQL is available (CI always; a developer with the test server set).
        std::env::var("CAIRN_TEST_POSTGRES_URL").ok()?;
        let dir = tempfile::Builder::new().prefix("cairn-pg-outage").tempdir().unwrap().keep();
        let port = free_port();
        let out = Command::new(postgres_script())
            .args(["start", dir.to_str().unwrap(), &port.to_string()])
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(out.status.success(), "could not start a PostgreSQL");
        let url = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        Some(OwnPostgres { dir, port, url })
    }

    fn restart(&self) {
        let dir = self.dir.to_str().unwrap();
        let stop =
            Command::new(postgres_script()).args(["stop", dir]).stderr(Stdio::null()).status().unwrap();
        assert!(stop.success());
        let start = Command::new(postgres_script())
            .args(["start", dir, &self.port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .status()
            .unwrap();
        assert!(start.success(), "PostgreSQL did not come back");
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = Command::new(postgres_script()).args(["stop", self.dir.to_str().unwrap()]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarts_under_load_strand_no_run() {
    let Some(pg) = OwnPostgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Calls that take a while, so restarts land mid-run, mid-append and mid-settle.
    std::fs::write(
        dir.path().join("cairn.toml"),
        "[routing]\ndefault = \"echo:slow\"\n\n[providers.echo]\nkind = \"echo\"\nlatency_ms = 40\n",
    )
    .unwrap();
    let server = start_on(dir, pg.url.clone(), None, &["--workers", "0"]).await;
    // Two worker processes; claims and run leases lapse in 5 s (this test is about lapses).
    let workers: Vec<Killed> = (0..2)
        .map(|_| {
            let child = Command::new(assert_cmd::cargo::cargo_bin("cairn"))
                .current_dir(server.dir.path())
                .args([
                    "--store",
                    &pg.url,
                    "worker",
                    "--quiet",
                    "--concurrency",
                    "6",
                    "--claim-ttl-ms",
                    "5000",
                ])
                .env("CAIRN_LEASE_TTL_MS", "5000")
                .env_remove("ANTHROPIC_API_KEY")
                .env_remove("OPENAI_API_KEY")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            Killed(child)
        })
        .collect();
    let source =
        "let a = agent(\"one\");\nlet b = agent(\"two \" + a);\nlet c = agent(\"three \" + b);\n[a, b, c]";
    let mut runs = Vec::new();
    for _ in 0..48 {
        let (code, body) = server.submit(json!({ "source": source })).await;
        assert_eq!(code, 202, "{body}");
        runs.push(body["run_id"].as_str().unwrap().to_owned());
    }
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let pg = &pg;
        tokio::task::block_in_place(|| pg.restart());
    }
    // Every run ends ok, each call paid once: none is left running without a driver.
    let deadline = Instant::now() + Duration::from_secs(240);
    for run in &runs {
        loop {
            let shown = match server.request(reqwest::Method::GET, &format!("/v1/runs/{run}")).send().await {
                Ok(r) => r.json::<Value>().await.unwrap_or(Value::Null),
                Err(_) => Value::Null,
            };
            if shown["status"] == "ok" {
                break;
            }
            assert!(Instant::now() < deadline, "run {run} was stranded: {shown}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let (_, journal) = server.get(&format!("/v1/runs/{run}/journal")).await;
        let paid = journal["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "agent" && e["status"] == "ok")
            .count();
        assert_eq!(paid, 3, "run {run}: {journal}");
    }
    drop(workers);
}
