//! Change notifications across hosts: after a committed append or meta write, the store
//! announces the run with `NOTIFY` on a channel named after its schema; a store that is
//! followed (`cairn serve`) `LISTEN`s there and wakes its [`RunWatch`]'s followers, so a
//! server streams a run that a worker on another host drives as promptly as its own.
//!
//! One dedicated connection per store does both: a task sends the announcements (every run
//! changed since its last send, deduplicated, in one statement) and, once the store is
//! followed, `LISTEN`s; the connection's driver forwards the notifications it receives. A
//! lost connection is reopened with backoff; followers are woken then, since notifications
//! may have been missed meanwhile (they also keep a bounded poll as the fallback).

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt as _;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::store::{RunId, RunWatch};

/// What the notifier task is asked to do.
#[derive(Debug)]
pub(super) enum Signal {
    /// Announce that this run changed.
    Changed(RunId),
    /// Start listening (the store is followed).
    Listen,
}

/// The notification channel of a store schema (the name is at most 63 bytes, as PostgreSQL
/// requires; two schemas whose names share a long prefix only wake each other spuriously).
pub(super) fn channel_of(schema: &str) -> String {
    let mut name = format!("cairn.{schema}");
    name.truncate(63);
    name
}

/// The notifier: announces the runs it is told about, and, once asked, listens.
pub(super) async fn notifier(
    config: tokio_postgres::Config,
    channel: String,
    watch: RunWatch,
    mut signals: mpsc::UnboundedReceiver<Signal>,
) {
    let mut listening = false;
    let mut backoff = Duration::from_millis(50);
    let mut pending: BTreeSet<RunId> = BTreeSet::new();
    'connect: loop {
        let (client, mut connection) = match config.connect(NoTls).await {
            Ok(pair) => pair,
            Err(_) => {
                // Keep draining: announcements queued while down are sent after the reconnect.
                let deadline = tokio::time::sleep(backoff);
                tokio::pin!(deadline);
                loop {
                    tokio::select! {
                        () = &mut deadline => break,
                        signal = signals.recv() => match signal {
                            None => return,
                            Some(Signal::Listen) => listening = true,
                            Some(Signal::Changed(run)) => { pending.insert(run); }
                        },
                    }
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue 'connect;
            }
        };
        backoff = Duration::from_millis(50);
        let forward = watch.clone();
        let wanted = channel.clone();
        let driver = tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(note)) if note.channel() == wanted => {
                        match RunId::parse(note.payload()) {
                            Ok(run) => forward.notify(&run),
                            Err(_) => forward.notify_all(),
                        }
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        });
        let listen_sql = format!("LISTEN \"{channel}\"");
        let mut listened = false;
        let mut driver = driver;
        loop {
            if listening && !listened {
                if client.batch_execute(&listen_sql).await.is_err() {
                    break;
                }
                listened = true;
                // Notifications sent while no connection listened are lost: look again.
                watch.notify_all();
            }
            if pending.is_empty() {
                tokio::select! {
                    signal = signals.recv() => match signal {
                        None => {
                            driver.abort();
                            return;
                        }
                        Some(signal) => take(signal, &mut pending, &mut listening),
                    },
                    // The connection died while idle: reconnect (and listen again) now.
                    _ = &mut driver => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue 'connect;
                    }
                }
                while let Ok(signal) = signals.try_recv() {
                    take(signal, &mut pending, &mut listening);
                }
                continue;
            }
            let runs: Vec<String> = pending.iter().map(|run| run.as_str().to_owned()).collect();
            let sent = client
                .execute("SELECT pg_notify($1, run) FROM unnest($2::text[]) AS run", &[&channel, &runs])
                .await;
            match sent {
                Ok(_) => pending.clear(),
                Err(_) => break,
            }
        }
        driver.abort();
    }
}

fn take(signal: Signal, pending: &mut BTreeSet<RunId>, listening: &mut bool) {
    match signal {
        Signal::Changed(run) => {
            pending.insert(run);
        }
        Signal::Listen => *listening = true,
    }
}
