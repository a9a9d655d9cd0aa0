//! `cairn serve`: the HTTP service (`crate::service`) over the store's run queue, with
//! in-process workers driving the submitted runs.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::exit::{Exit, fail};
use super::interrupts::Interrupts;
use super::setup::{self, Globals};
use crate::engine::{Worker, WorkerOptions};
use crate::service::ServiceOptions;

/// The environment variable holding the bearer token clients must send.
const TOKEN_ENV: &str = "CAIRN_SERVER_TOKEN";

#[derive(Debug, Args)]
pub(super) struct ServeArgs {
    /// The address to listen on, as HOST:PORT. A non-loopback address requires
    /// CAIRN_SERVER_TOKEN to be set.
    #[arg(long, default_value = "127.0.0.1:7420")]
    listen: String,
    /// How many runs the in-process workers drive at once (0: none; `cairn worker`
    /// processes on the same store drive them).
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// The largest budget a submitted run may ask for, in USD; a run that asks none gets it.
    #[arg(long)]
    max_budget: Option<f64>,
    /// The largest request body accepted, in bytes.
    #[arg(long, default_value_t = 1024 * 1024)]
    max_body_bytes: usize,
    /// No lines on stderr but errors.
    #[arg(long, short)]
    quiet: bool,
}

/// `cairn serve`.
pub(super) async fn serve(globals: &Globals, args: &ServeArgs) -> Exit {
    let addr: SocketAddr = match args.listen.parse() {
        Ok(addr) => addr,
        Err(_) => return fail(Exit::Usage, format!("--listen {:?} is not a HOST:PORT address", args.listen)),
    };
    let token = std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty());
    if token.is_none() && !addr.ip().is_loopback() {
        return fail(
            Exit::Usage,
            format!(
                "refusing to listen on {addr} without a token: set {TOKEN_ENV} (clients send it as \
                 `Authorization: Bearer <token>`), or listen on a loopback address"
            ),
        );
    }
    let max_budget = match args.max_budget {
        None => None,
        Some(usd) if usd.is_finite() && usd > 0.0 => match crate::money::Money::from_usd(usd) {
            Ok(money) => Some(money),
            Err(e) => return fail(Exit::Usage, format!("--max-budget: {e}")),
        },
        Some(_) => return fail(Exit::Usage, "--max-budget must be a positive number of USD"),
    };
    if args.max_body_bytes == 0 {
        return fail(Exit::Usage, "--max-body-bytes must be positive");
    }
    let setup = match setup::setup(globals, None) {
        Ok(setup) => setup,
        Err(e) => return fail(setup::exit_of(&e), e),
    };
    if setup.engine.journal_store().queue().is_none() {
        return fail(
            Exit::Usage,
            "cairn serve needs a store with a run queue: use a sqlite: or postgres:// store",
        );
    }
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(e) => return fail(Exit::Error, format!("cannot listen on {addr}: {e}")),
    };
    let bound = listener.local_addr().map_or(addr, |a| a);
    let shutdown = CancellationToken::new();
    let mut drained = None;
    if args.workers > 0 {
        let options = WorkerOptions {
            concurrency: args.workers,
            poll: Duration::from_millis(20),
            ..WorkerOptions::default()
        };
        match Worker::new(setup.engine.clone(), options) {
            Ok(worker) => {
                let stop = shutdown.clone();
                drained = Some(tokio::spawn(async move { worker.run_until(stop).await }));
            }
            Err(e) => return fail(setup::exit_of(&e), e),
        }
    }
    let options = ServiceOptions {
        token,
        max_body_bytes: args.max_body_bytes,
        max_budget,
        ..ServiceOptions::default()
    };
    let app = crate::service::router(setup.engine.clone(), options);
    if !args.quiet {
        errln!("cairn serve: listening on http://{bound} with {} in-process workers", args.workers);
    }
    let mut interrupts = Interrupts::listen();
    let stop = shutdown.clone();
    let quiet = args.quiet;
    tokio::spawn(async move {
        let why = interrupts.next().await;
        if !quiet {
            errln!("cairn serve: {why}; finishing the runs in flight");
        }
        stop.cancel();
        interrupts.next().await;
        std::process::exit(Exit::Cancelled as i32);
    });
    let stopped = shutdown.clone();
    let served =
        axum::serve(listener, app).with_graceful_shutdown(async move { stopped.cancelled().await }).await;
    shutdown.cancel();
    if let Some(drained) = drained {
        let _ = drained.await;
    }
    match served {
        Ok(()) => Exit::Ok,
        Err(e) => fail(Exit::Error, format!("the server failed: {e}")),
    }
}
