//! The multi-process soak: two OS processes storm one SQLite file with competing leases,
//! and a referee rebuilds the serial history fencing promises from their logs and diffs it
//! against the final journal and meta.
//!
//! The writers are this test binary re-executed on [`soak_writer`], which does nothing
//! unless `CAIRN_SOAK_WRITER` names the database. Each writer takes the run's lease when it
//! is free (short ttl, real clock), appends batches with it at the tail read from a fresh
//! load, writes the run's meta once per tenure, and now and then releases, stalls past its
//! ttl and carries on with the dead lease, or probes every fenced surface with a superseded
//! lease. It logs every acknowledged write and every refusal; the referee checks that no
//! stale write was accepted, that the journal is exactly the acknowledged appends in seq
//! order with epochs never going back, and that both writers made progress. Each writer
//! storms for a fixed time and then until it has seen enough activity, so a slow machine
//! storms longer instead of asserting on thin coverage.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{LineWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cairn::store::{Error, PostgresOptions, PostgresStore, SqliteOptions, SqliteStore};
use cairn::{LeasableStore, Lease, RawEntry, RunId, RunMeta, RunStatus};

const DB_ENV: &str = "CAIRN_SOAK_WRITER";
const LOG_ENV: &str = "CAIRN_SOAK_LOG";
const ID_ENV: &str = "CAIRN_SOAK_ID";
const RUN: &str = "soak";
const SIDE_RUN: &str = "soak-side";
const TTL: Duration = Duration::from_millis(200);
/// How long each writer storms at least.
const STORM: Duration = Duration::from_millis(1_500);
/// How long a writer keeps storming while it lacks activity.
const STORM_CAP: Duration = Duration::from_secs(15);
/// How long the referee waits for the writers.
const REFEREE_TIMEOUT: Duration = Duration::from_secs(60);
const MIN_ACKS: u64 = 5;
const MIN_TENURES: u64 = 2;
const MIN_STALE_REJECTIONS: u64 = 1;

/// A tiny deterministic-per-seed generator; the soak needs variety, not quality.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One writer's storm, logging to its own file.
struct Writer {
    id: String,
    store: Box<dyn LeasableStore>,
    log: LineWriter<File>,
    rng: XorShift,
    run: RunId,
    side: RunId,
    /// Leases this writer held and lost or gave up: the ammunition of stale probes.
    superseded: Vec<Lease>,
    counter: u64,
    acks: u64,
    tenures: u64,
    stale_rejections: u64,
}

impl Writer {
    fn log(&mut self, line: &str) {
        writeln!(self.log, "{line}").unwrap();
    }

    fn violation(&mut self, what: &str) {
        let line = format!("violation {what}");
        self.log(&line);
    }

    /// Records a fenced write that was made with a lease that may not be current.
    fn expect_stale<T: std::fmt::Debug>(&mut self, surface: &str, result: cairn::store::Result<T>) {
        match result {
            Err(Error::LeaseHeld { .. }) => {
                self.stale_rejections += 1;
                self.log(&format!("stale {surface}"));
            }
            other => self.violation(&format!("{surface} with a superseded lease returned {other:?}")),
        }
    }

    fn tail(&self) -> u64 {
        self.store.load(&self.run).unwrap().last().map_or(0, RawEntry::seq)
    }

    fn batch(&mut self, first: u64, epoch: u64) -> Vec<RawEntry> {
        let size = 1 + self.rng.below(3);
        (first..first + size)
            .map(|seq| {
                self.counter += 1;
                let json =
                    format!(r#"{{"seq":{seq},"writer":"{}","epoch":{epoch},"n":{}}}"#, self.id, self.counter);
                RawEntry::new(seq, json).unwrap()
            })
            .collect()
    }

    /// Appends at the fresh tail with `lease`; returns whether the lease still holds.
    fn append(&mut self, lease: &Lease) -> bool {
        let batch = self.batch(self.tail() + 1, lease.epoch);
        match self.store.append(&self.run, &batch, Some(lease)) {
            Ok(()) => {
                for entry in &batch {
                    let n = self.counter - (batch.last().unwrap().seq() - entry.seq());
                    self.log(&format!("ack {} {} {n}", entry.seq(), lease.epoch));
                }
                self.acks += batch.len() as u64;
                true
            }
            Err(Error::LeaseHeld { .. }) => {
                self.stale_rejections += 1;
                self.log("stale append-lost");
                false
            }
            Err(err) => {
                self.violation(&format!("append with the held lease failed: {err:?}"));
                false
            }
        }
    }

    /// Tries every fenced surface with a lease this writer no longer holds.
    fn probe(&mut self) {
        if self.superseded.is_empty() {
            return;
        }
        let pick = self.rng.below(self.superseded.len() as u64) as usize;
        let stale = self.superseded[pick].clone();
        let batch = self.batch(self.tail() + 1, stale.epoch);
        let result = self.store.append(&self.run, &batch, Some(&stale));
        self.expect_stale("append", result);
        let result = self.store.put_meta(&meta(&self.run, &self.id, stale.epoch), Some(&stale));
        self.expect_stale("put_meta", result);
        let result = self.store.delete(&self.run, Some(&stale));
        self.expect_stale("delete", result);
        let result = self.store.renew(&stale, TTL);
        self.expect_stale("renew", result);
        let result = self.store.release(&stale);
        self.expect_stale("release", result);
    }

    fn storm(&mut self) {
        let start = Instant::now();
        let mut current: Option<Lease> = None;
        loop {
            let elapsed = start.elapsed();
            let active = self.acks >= MIN_ACKS
                && self.tenures >= MIN_TENURES
                && self.stale_rejections >= MIN_STALE_REJECTIONS;
            if (elapsed >= STORM && active) || elapsed >= STORM_CAP {
                break;
            }
            let Some(lease) = current.take() else {
                match self.store.acquire(&self.run, &self.id, TTL) {
                    Ok(lease) => {
                        self.tenures += 1;
                        self.log(&format!("acquire {}", lease.epoch));
                        match self.store.put_meta(&meta(&self.run, &self.id, lease.epoch), Some(&lease)) {
                            Ok(()) => self.log(&format!("meta {}", lease.epoch)),
                            Err(Error::LeaseHeld { .. }) => self.log("stale meta-lost"),
                            Err(err) => {
                                self.violation(&format!("put_meta with the held lease failed: {err:?}"))
                            }
                        }
                        current = Some(lease);
                    }
                    Err(Error::LeaseHeld { .. }) => {
                        if self.rng.below(4) == 0 {
                            self.probe();
                        }
                        std::thread::sleep(Duration::from_millis(1 + self.rng.below(4)));
                    }
                    Err(err) => panic!("acquire failed: {err:?}"),
                }
                continue;
            };
            match self.rng.below(100) {
                0..72 => {
                    if self.append(&lease) {
                        current = Some(lease);
                    } else {
                        self.superseded.push(lease);
                    }
                }
                72..80 => match self.store.renew(&lease, TTL) {
                    Ok(()) => current = Some(lease),
                    Err(Error::LeaseHeld { .. }) => self.superseded.push(lease),
                    Err(err) => panic!("renew failed: {err:?}"),
                },
                80..88 => {
                    match self.store.release(&lease) {
                        Ok(()) | Err(Error::LeaseHeld { .. }) => {}
                        Err(err) => panic!("release failed: {err:?}"),
                    }
                    self.superseded.push(lease);
                    std::thread::sleep(Duration::from_millis(2 + self.rng.below(6)));
                }
                88..90 => {
                    // A stall past the ttl (a GC pause, a swapped-out process): carry on
                    // with the lease as if nothing happened; the store must refuse it.
                    std::thread::sleep(TTL + Duration::from_millis(30));
                    current = Some(lease);
                }
                90..95 => {
                    // A live lease guards only its own run.
                    let batch = self.batch(1, lease.epoch);
                    let result = self.store.append(&self.side, &batch, Some(&lease));
                    self.expect_stale("append-other-run", result);
                    current = Some(lease);
                }
                _ => {
                    self.probe();
                    current = Some(lease);
                }
            }
        }
        if let Some(lease) = current {
            let _ = self.store.release(&lease);
        }
        let summary =
            format!("done acks={} tenures={} stale={}", self.acks, self.tenures, self.stale_rejections);
        self.log(&summary);
    }
}

fn meta(run: &RunId, writer: &str, epoch: u64) -> RunMeta {
    let mut extra = serde_json::Map::new();
    extra.insert("writer".into(), writer.into());
    extra.insert("epoch".into(), epoch.into());
    RunMeta {
        run_id: run.clone(),
        status: RunStatus::Running,
        name: Some("soak".into()),
        tags: Vec::new(),
        created_at_ms: 1,
        updated_at_ms: 1,
        hash_version: 1,
        budget_ceiling: None,
        dialect: None,
        source_ref: None,
        source_hash: None,
        args_hash: None,
        segments: 1,
        extra,
    }
}

/// The writer side: does nothing unless the referee spawned this process.
#[test]
fn soak_writer() {
    let Ok(db) = std::env::var(DB_ENV) else { return };
    let log_path = std::env::var(LOG_ENV).unwrap();
    let id = std::env::var(ID_ENV).unwrap();
    let seed = u64::from(std::process::id())
        ^ SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
        | 1;
    // Opened bare, at the same moment as the other writer, over a fresh file (or schema):
    // concurrent boot is part of what is under test.
    let store = open_store(&db);
    let mut writer = Writer {
        id,
        store,
        log: LineWriter::new(File::create(log_path).unwrap()),
        rng: XorShift(seed),
        run: RunId::parse(RUN).unwrap(),
        side: RunId::parse(SIDE_RUN).unwrap(),
        superseded: Vec::new(),
        counter: 0,
        acks: 0,
        tenures: 0,
        stale_rejections: 0,
    };
    writer.storm();
}

/// What one writer's log says.
#[derive(Default, Debug)]
struct Log {
    /// seq -> (epoch, n)
    acks: BTreeMap<u64, (u64, u64)>,
    acquired: Vec<u64>,
    metas: Vec<u64>,
    stale: u64,
    violations: Vec<String>,
    done: bool,
}

fn read_log(path: &Path) -> Log {
    let mut log = Log::default();
    for line in fs::read_to_string(path).unwrap().lines() {
        let words: Vec<&str> = line.split(' ').collect();
        let number = |i: usize| -> u64 { words[i].parse().unwrap() };
        match words[0] {
            "ack" => {
                let previous = log.acks.insert(number(1), (number(2), number(3)));
                assert!(previous.is_none(), "{path:?}: seq {} acknowledged twice", number(1));
            }
            "acquire" => log.acquired.push(number(1)),
            "meta" => log.metas.push(number(1)),
            "stale" => log.stale += 1,
            "violation" => log.violations.push(line.to_owned()),
            "done" => log.done = true,
            other => panic!("{path:?}: unknown log line kind {other:?}"),
        }
    }
    log
}

/// The store at a soak location: a PostgreSQL URL, else a SQLite file.
fn open_store(location: &str) -> Box<dyn LeasableStore> {
    if location.starts_with("postgres") {
        Box::new(PostgresStore::open(location, PostgresOptions::new()).unwrap())
    } else {
        let options = SqliteOptions { busy_timeout: Duration::from_secs(20), ..SqliteOptions::new() };
        Box::new(SqliteStore::open(Path::new(location), options).unwrap())
    }
}

fn spawn_writer(db: &str, dir: &Path, id: &str) -> (Child, PathBuf, PathBuf) {
    let log = dir.join(format!("{id}.log"));
    let output = dir.join(format!("{id}.out"));
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["store::soak::soak_writer", "--exact", "--nocapture", "--test-threads=1"])
        .env(DB_ENV, db)
        .env(LOG_ENV, &log)
        .env(ID_ENV, id)
        .stdin(Stdio::null())
        .stdout(File::create(&output).unwrap())
        .stderr(Stdio::from(File::create(dir.join(format!("{id}.err"))).unwrap()))
        .spawn()
        .unwrap();
    (child, log, dir.join(format!("{id}.err")))
}

fn wait(mut child: Child, id: &str, stderr: &Path, deadline: Instant) {
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let errors = fs::read_to_string(stderr).unwrap_or_default();
            assert!(status.success(), "soak writer {id} failed ({status}):\n{errors}");
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("soak writer {id} did not finish within {REFEREE_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sqlite_multi_process_soak() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("soak.db");
    referee(db.to_str().unwrap(), dir.path());
}

/// The same soak on PostgreSQL: two processes, one fresh schema, competing leases.
#[test]
fn postgres_multi_process_soak() {
    let Some(url) = crate::postgres::fresh_url("soak") else { return };
    let dir = tempfile::tempdir().unwrap();
    referee(&url, dir.path());
}

/// Spawns two writers on the store at `db`, and checks what they logged against the store.
fn referee(db: &str, dir: &Path) {
    let ids = ["w1", "w2"];
    let writers: Vec<_> = ids.iter().map(|id| spawn_writer(db, dir, id)).collect();
    let deadline = Instant::now() + REFEREE_TIMEOUT;
    let mut logs = HashMap::new();
    for ((child, log, stderr), id) in writers.into_iter().zip(ids) {
        wait(child, id, &stderr, deadline);
        logs.insert(id, read_log(&log));
    }

    for (id, log) in &logs {
        println!(
            "soak writer {id}: {} acknowledged entries, {} tenures, {} metas, {} stale writes refused",
            log.acks.len(),
            log.acquired.len(),
            log.metas.len(),
            log.stale
        );
    }
    // No writer saw the store accept a stale write or fail a current one.
    for (id, log) in &logs {
        assert!(log.done, "writer {id} did not finish its storm");
        assert!(log.violations.is_empty(), "writer {id} saw violations: {:#?}", log.violations);
        assert!(log.acks.len() as u64 >= MIN_ACKS, "writer {id} made too little progress: {log:?}");
    }
    let stale: u64 = logs.values().map(|log| log.stale).sum();
    assert!(stale >= MIN_STALE_REJECTIONS, "no stale write was even attempted");

    // Epochs are fencing tokens: each was granted once, to one writer.
    let mut owners: HashMap<u64, &str> = HashMap::new();
    for (id, log) in &logs {
        for epoch in &log.acquired {
            let previous = owners.insert(*epoch, id);
            assert!(previous.is_none(), "epoch {epoch} was granted twice");
        }
    }
    assert!(owners.len() >= 2, "no takeover happened");

    // The serial history the acknowledgements promise: every acknowledged append in seq
    // order, each from the writer holding that epoch, epochs never going back.
    let mut history: BTreeMap<u64, (&str, u64, u64)> = BTreeMap::new();
    for (id, log) in &logs {
        for (seq, (epoch, n)) in &log.acks {
            assert_eq!(
                owners.get(epoch),
                Some(id),
                "writer {id} acknowledged seq {seq} under an epoch it never held"
            );
            let previous = history.insert(*seq, (id, *epoch, *n));
            assert!(previous.is_none(), "seq {seq} was acknowledged to two writers");
        }
    }
    let epochs: Vec<u64> = history.values().map(|(_, epoch, _)| *epoch).collect();
    assert!(
        epochs.windows(2).all(|pair| pair[0] <= pair[1]),
        "an older epoch was accepted after a newer one"
    );

    let store = open_store(db);
    let journal = store.load(&RunId::parse(RUN).unwrap()).unwrap();
    assert!(
        journal.windows(2).all(|pair| pair[0].seq() < pair[1].seq()),
        "journal seqs do not strictly increase"
    );
    let actual: Vec<(u64, String, u64, u64)> = journal
        .iter()
        .map(|entry| {
            let value: serde_json::Value = serde_json::from_str(entry.json()).unwrap();
            assert_eq!(value["seq"], entry.seq(), "an entry's text disagrees with its seq");
            let writer = value["writer"].as_str().unwrap().to_owned();
            (entry.seq(), writer, value["epoch"].as_u64().unwrap(), value["n"].as_u64().unwrap())
        })
        .collect();
    let expected: Vec<(u64, String, u64, u64)> =
        history.iter().map(|(seq, (id, epoch, n))| (*seq, (*id).to_owned(), *epoch, *n)).collect();
    if actual != expected {
        let visible_unacked: Vec<_> = actual.iter().filter(|row| !expected.contains(row)).collect();
        let lost: Vec<_> = expected.iter().filter(|row| !actual.contains(row)).collect();
        panic!(
            "the journal is not the acknowledged serial history:\n  visible but never acknowledged: {visible_unacked:?}\n  acknowledged but lost: {lost:?}"
        );
    }
    assert!(store.load(&RunId::parse(SIDE_RUN).unwrap()).unwrap().is_empty(), "a lease wrote to another run");

    // The meta is the last acknowledged meta write: the one of the highest epoch.
    let last_meta = logs.values().flat_map(|log| log.metas.iter().copied()).max();
    let meta = store.get_meta(&RunId::parse(RUN).unwrap()).unwrap();
    let meta_epoch =
        meta.as_ref().and_then(|meta| meta.extra.get("epoch")).and_then(serde_json::Value::as_u64);
    assert_eq!(meta_epoch, last_meta, "the final meta is not the last acknowledged one");
}
