//! The sample workflows in `scripts/`: each runs offline through the real `cairn` binary with
//! the echo model and ends as it says; one is SIGKILLed mid-run and resumed to the same value
//! without re-paying its completed calls.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cairn::{JournalStore, RunId, SqliteOptions, SqliteStore};
use serde_json::Value;

fn cairn_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_cairn"))
}

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts")
}

fn cairn(dir: &Path) -> Command {
    let mut cmd = Command::new(cairn_bin());
    cmd.current_dir(dir)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .stdin(Stdio::null());
    cmd
}

#[test]
fn every_sample_runs_offline_and_ends_as_documented() {
    let expectations: [(&str, &[&str], i32); 7] = [
        ("digest", &[], 0),
        ("code_review", &[], 0),
        ("adversarial_panel", &[], 0),
        ("phase_chain", &[], 0),
        ("deploy_approval", &[], 4),
        ("loop_until_dry", &[], 0),
        // A slower echo keeps all twenty branches in flight at once even on a loaded machine,
        // so admission sees every reservation together: exactly five fit under $0.25.
        ("exhausted_fanout", &["--budget", "0.25", "--config", "slow-echo.toml"], 3),
    ];
    let count = std::fs::read_dir(scripts())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "rhai"))
        .count();
    assert_eq!(count, expectations.len(), "every sample has an expectation");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("slow-echo.toml"),
        "[providers.echo]\nkind = \"echo\"\nlatency_ms = 400\n",
    )
    .unwrap();
    for (name, extra, code) in expectations {
        let file = scripts().join(format!("{name}.rhai"));
        let out =
            cairn(dir.path()).arg("run").arg(&file).args(["-q", "--json"]).args(extra).output().unwrap();
        assert_eq!(out.status.code(), Some(code), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
        match name {
            "exhausted_fanout" => {
                assert_eq!(outcome["status"], "exhausted");
                assert_eq!(outcome["dropped"].as_array().unwrap().len(), 15, "{outcome}");
                let values = outcome["value"].as_array().unwrap();
                assert_eq!(values.iter().filter(|v| !v.is_null()).count(), 5);
            }
            "deploy_approval" => {
                assert_eq!(outcome["pending"][0]["key"], "deploy-approval");
                let run_id = outcome["run_id"].as_str().unwrap();
                let resolved = cairn(dir.path())
                    .args(["resolve", run_id, "deploy-approval", r#"{"approved": true}"#])
                    .output()
                    .unwrap();
                assert!(resolved.status.success());
                let resumed = cairn(dir.path()).args(["resume", run_id, "-q", "--json"]).output().unwrap();
                assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
                let resumed: Value = serde_json::from_slice(&resumed.stdout).unwrap();
                assert_eq!(resumed["value"]["deployed"], true);
            }
            _ => assert_eq!(outcome["status"], "ok", "{name}: {outcome}"),
        }
    }
}

fn agent_oks(db: &Path, run: &RunId) -> usize {
    let Ok(store) = SqliteStore::open(db, SqliteOptions::new()) else { return 0 };
    store
        .load(run)
        .map(|entries| {
            entries
                .iter()
                .filter(|e| e.json().contains(r#""kind":"agent""#) && e.json().contains(r#""status":"ok""#))
                .count()
        })
        .unwrap_or(0)
}

/// Runs `sample` with a slow echo, SIGKILLs it once `kill_after` agent calls are journaled ok,
/// resumes it, and checks the resumed run against an uninterrupted one: same status and value,
/// every completed call replayed, nothing completed paid twice.
fn kill_and_resume(sample: &str, kill_after: usize, total_calls: usize, status: &str) {
    let dir = tempfile::tempdir().unwrap();
    // A slower echo, so the kill lands between calls.
    std::fs::write(dir.path().join("cairn.toml"), "[providers.echo]\nkind = \"echo\"\nlatency_ms = 150\n")
        .unwrap();
    let file = scripts().join(format!("{sample}.rhai"));
    let db = dir.path().join(".cairn/cairn.db");
    let run = RunId::parse("killed").unwrap();
    let mut child = cairn(dir.path())
        .arg("run")
        .arg(&file)
        .args(["--run-id", "killed", "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while agent_oks(&db, &run) < kill_after {
        assert!(started.elapsed() < Duration::from_secs(20), "{sample}: the run made no progress");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    let exit = child.wait().unwrap();
    assert!(!exit.success(), "{sample}: the run finished before it was killed");
    let paid_before = agent_oks(&db, &run);
    let resumed = cairn(dir.path()).args(["resume", "killed", "-q", "--json"]).output().unwrap();
    let resumed: Value = serde_json::from_slice(&resumed.stdout).unwrap();
    assert_eq!(resumed["status"], status, "{sample}: {resumed}");
    assert!(resumed["preview"]["hits"].as_u64().unwrap() >= paid_before as u64, "{sample}: {resumed}");
    // The same value as an uninterrupted run of the same script.
    let fresh = cairn(dir.path()).arg("run").arg(&file).args(["-q", "--json"]).output().unwrap();
    let fresh: Value = serde_json::from_slice(&fresh.stdout).unwrap();
    assert_eq!(resumed["value"], fresh["value"], "{sample}");
    // Nothing completed was paid twice: the killed-and-resumed run holds exactly one ok
    // entry per agent call of the script.
    assert_eq!(agent_oks(&db, &run), total_calls, "{sample}");
}

/// Every sample but `exhausted_fanout`, whose point is to be refused work: resuming it admits
/// more branches against the same ceiling, so its value legitimately differs from one run.
#[test]
fn every_sample_killed_mid_run_resumes_to_the_same_value() {
    let samples: [(&str, usize, usize, &str); 6] = [
        ("digest", 2, 4, "ok"),
        ("code_review", 2, 4, "ok"),
        ("adversarial_panel", 2, 5, "ok"),
        ("phase_chain", 3, 5, "ok"),
        ("loop_until_dry", 2, 5, "ok"),
        ("deploy_approval", 1, 1, "suspended"),
    ];
    std::thread::scope(|scope| {
        for (sample, kill_after, total, status) in samples {
            scope.spawn(move || kill_and_resume(sample, kill_after, total, status));
        }
    });
}
