//! The signals that interrupt a live run.

/// Ctrl-C (SIGINT) and SIGTERM (what `timeout`, systemd, Docker and Kubernetes send). The
/// first stops the run; a second ends the process.
pub(super) struct Interrupts {
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

impl std::fmt::Debug for Interrupts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Interrupts")
    }
}

impl Interrupts {
    /// Starts listening (on the current tokio runtime).
    pub(super) fn listen() -> Interrupts {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Interrupts {
                int: signal(SignalKind::interrupt()).ok(),
                term: signal(SignalKind::terminate()).ok(),
            }
        }
        #[cfg(not(unix))]
        Interrupts {}
    }

    /// Waits for the next interrupt and names it.
    pub(super) async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) {
                match signal {
                    Some(signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                _ = recv(&mut self.int) => "interrupted",
                _ = recv(&mut self.term) => "terminated",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "interrupted"
        }
    }
}
