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
use crate::service::{AllowedHosts, ConnectionLimits, ServiceOptions};

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
    /// A Host name answered besides the listen address (repeatable; `host` for any port or
    /// `host:port`): the name a reverse proxy forwards. Also `[server] allowed_hosts`.
    #[arg(long = "allowed-host", value_name = "NAME")]
    allowed_hosts: Vec<String>,
    /// Connections open at once; past it a new connection is closed at once.
    #[arg(long, default_value_t = 512)]
    max_connections: usize,
    /// How long a request's headers may take to arrive, in ms (an idle kept-alive
    /// connection is closed after it too).
    #[arg(long, default_value_t = 10_000)]
    header_timeout_ms: u64,
    /// How long a request's body may take to arrive, in ms (answered 408 after).
    #[arg(long, default_value_t = 30_000)]
    body_timeout_ms: u64,
    /// On SIGTERM, how long requests, event streams and runs in flight have before the
    /// server exits anyway, in ms (a run cut off is resumed from its journal by the next worker).
    #[arg(long, default_value_t = 10_000)]
    grace_ms: u64,
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
    if args.max_connections == 0 || args.header_timeout_ms == 0 || args.body_timeout_ms == 0 {
        return fail(
            Exit::Usage,
            "--max-connections, --header-timeout-ms and --body-timeout-ms must be positive",
        );
    }
    let setup = match setup::setup(globals, None) {
        Ok(setup) => setup,
        Err(e) => return fail(setup::exit_of(&e), e),
    };
    let tokens = match setup.config.server.tokens(TOKEN_ENV, |name| std::env::var(name).ok()) {
        Ok(tokens) => tokens,
        Err(e) => return fail(Exit::Usage, e),
    };
    if tokens.is_empty() && !addr.ip().is_loopback() {
        return fail(
            Exit::Usage,
            format!(
                "refusing to listen on {addr} without a token: set {TOKEN_ENV} (clients send it as \
                 `Authorization: Bearer <token>`) or configure [server.tokens.NAME], or listen on a \
                 loopback address"
            ),
        );
    }
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
    let mut hosts = args.allowed_hosts.clone();
    hosts.extend(setup.config.server.allowed_hosts.iter().cloned());
    let options = ServiceOptions {
        tokens,
        allowed_hosts: AllowedHosts::for_listen(bound, &hosts),
        max_body_bytes: args.max_body_bytes,
        max_budget,
        body_timeout: Duration::from_millis(args.body_timeout_ms),
        shutdown: shutdown.clone(),
        ..ServiceOptions::default()
    };
    let limits = ConnectionLimits {
        max_connections: args.max_connections,
        header_timeout: Duration::from_millis(args.header_timeout_ms),
        grace: Duration::from_millis(args.grace_ms),
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
            errln!("cairn serve: {why}; closing event streams, finishing the runs in flight");
        }
        stop.cancel();
        interrupts.next().await;
        std::process::exit(Exit::Cancelled as i32);
    });
    crate::service::serve(listener, app, limits, shutdown.clone()).await;
    shutdown.cancel();
    if let Some(drained) = drained {
        // The runs in flight get the same grace; one cut off is resumed from its journal by
        // the next worker once its claim lapses.
        if tokio::time::timeout(limits.grace, drained).await.is_err() {
            tracing::warn!("runs still in flight after the shutdown grace period: left to the next worker");
        }
    }
    Exit::Ok
}
