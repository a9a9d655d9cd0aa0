//! The blob checks: exact bytes, replacement, store-once, missing refs, the sorted per-run
//! listing and refusal of refs that could escape their run.

use super::fixtures::{Outcome, ensure, ok, refused, run_id};
use crate::store::{Error, TranscriptStore};

pub(super) fn blob_round_trip(store: &dyn TranscriptStore) -> Outcome {
    let binary: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    let blobs: [(&str, &[u8]); 4] = [
        ("blobs/transcript.json", br#"{"turns":[1,2]}"#),
        ("blobs/empty", b""),
        ("blobs/binary/odd name %2F ü", b"\0\xff\xfe"),
        ("blobs/checkpoints/agent-1/turn-3", &binary),
    ];
    for (blob_ref, bytes) in blobs {
        ok(&format!("put {blob_ref}"), store.put(blob_ref, bytes))?;
        let got = ok(&format!("get {blob_ref}"), store.get(blob_ref))?;
        ensure!(
            got.as_deref() == Some(bytes),
            "blob {blob_ref} came back altered ({:?} bytes)",
            got.map(|b| b.len())
        );
    }
    ok("put replacing", store.put("blobs/transcript.json", b"v2"))?;
    let got = ok("get", store.get("blobs/transcript.json"))?;
    ensure!(got.as_deref() == Some(&b"v2"[..]), "a replaced blob came back as {got:?}");
    ok("delete", store.delete("blobs/transcript.json"))?;
    ensure!(ok("get", store.get("blobs/transcript.json"))?.is_none(), "a deleted blob is still there");
    ensure!(
        ok("get", store.get("blobs/empty"))?.as_deref() == Some(&b""[..]),
        "deleting one blob removed another"
    );
    Ok(())
}

pub(super) fn put_new_stores_once(store: &dyn TranscriptStore) -> Outcome {
    ensure!(ok("first put_new", store.put_new("claims/w", b"first"))?, "a first put_new stored nothing");
    ensure!(!ok("second put_new", store.put_new("claims/w", b"second"))?, "a second put_new won too");
    let got = ok("get", store.get("claims/w"))?;
    ensure!(got.as_deref() == Some(&b"first"[..]), "a losing put_new replaced the blob: {got:?}");
    ok("put", store.put("claims/v", b"there"))?;
    ensure!(!ok("put_new over put", store.put_new("claims/v", b"late"))?, "put_new replaced a put blob");
    // Racing writers: exactly one wins.
    let wins = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for i in 0..8u8 {
            let wins = &wins;
            scope.spawn(move || {
                if store.put_new("claims/raced", &[i]).unwrap_or(false) {
                    wins.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            });
        }
    });
    let wins = wins.into_inner();
    ensure!(wins == 1, "{wins} racing put_new calls won");
    Ok(())
}

pub(super) fn missing_blobs(store: &dyn TranscriptStore) -> Outcome {
    ensure!(
        ok("get of a missing blob", store.get("nobody/nothing"))?.is_none(),
        "a missing blob is not None"
    );
    ok("delete of a missing blob", store.delete("nobody/nothing"))?;
    ensure!(
        ok("list of an unknown run", store.list(&run_id("nobody")))?.is_empty(),
        "an unknown run lists blobs"
    );
    Ok(())
}

pub(super) fn list_sorted_and_scoped(store: &dyn TranscriptStore) -> Outcome {
    // Byte order puts '-' < '.' < '/' < 'a'; a naive prefix match on "a" also finds "ab".
    let refs = ["a/x/1", "a/x.1", "a/x-1", "a/w", "a/é", "a/Z", "ab/x", "a.b/y", "b/a/x"];
    for blob_ref in refs {
        ok(&format!("put {blob_ref}"), store.put(blob_ref, blob_ref.as_bytes()))?;
    }
    let listed = ok("list a", store.list(&run_id("a")))?;
    let expected = ["a/Z", "a/w", "a/x-1", "a/x.1", "a/x/1", "a/é"];
    ensure!(listed == expected, "list(a) returned {listed:?}, expected {expected:?}");
    ensure!(ok("list ab", store.list(&run_id("ab")))? == ["ab/x"], "list(ab) is not just ab's blobs");
    ensure!(ok("list a.b", store.list(&run_id("a.b")))? == ["a.b/y"], "list(a.b) is not just a.b's blobs");
    ok("delete", store.delete("a/x.1"))?;
    let listed = ok("list a", store.list(&run_id("a")))?;
    ensure!(listed == ["a/Z", "a/w", "a/x-1", "a/x/1", "a/é"], "list after delete returned {listed:?}");
    Ok(())
}

pub(super) fn unsafe_refs_refused(store: &dyn TranscriptStore) -> Outcome {
    let config = |err: &Error| matches!(err, Error::Config(_));
    for bad in [
        "",
        "no-slash",
        "run/",
        "/etc/passwd",
        "run/../../x",
        "run/a//b",
        "run/./x",
        "../run/x",
        "bad id/x",
        "run/nul\0",
    ] {
        refused(&format!("put {bad:?}"), store.put(bad, b"x"), "Config", config)?;
        refused(&format!("get {bad:?}"), store.get(bad), "Config", config)?;
        refused(&format!("delete {bad:?}"), store.delete(bad), "Config", config)?;
    }
    Ok(())
}
