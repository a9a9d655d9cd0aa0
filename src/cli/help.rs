//! The examples and exit codes each subcommand's `--help` ends with.

/// Exit codes of a command that drives a run to its settled status.
macro_rules! run_exits {
    () => {
        "Exit codes: 0 ok, 1 error (run_busy, rekey_refused, a failed run), 2 usage or config, \
         3 exhausted, 4 suspended (waiting for `cairn resolve`), 5 cancelled, 6 script rejected."
    };
}

pub(super) const RUN: &str = concat!(
    "Examples:\n",
    "  cairn run hello.rhai\n",
    "  cairn run scripts/digest.rhai --budget 0.50 --args '{\"topics\": [\"rust\"]}'\n",
    "  cairn run flow.lua --json            # the whole outcome as JSON on stdout\n\n",
    run_exits!()
);

pub(super) const RESUME: &str = concat!(
    "Examples:\n",
    "  cairn resume RUN                     # completed calls replay, the rest run live\n",
    "  cairn resume RUN --dry-run           # what would replay and what would run; writes nothing\n",
    "  cairn resume RUN --script edited.rhai\n",
    "  cairn resume RUN --accept-rekey      # pay again for completed calls whose identity changed\n\n",
    run_exits!()
);

pub(super) const ORCHESTRATE: &str = concat!(
    "Example:\n",
    "  cairn orchestrate \"Survey three caching libraries and recommend one\" --profiles researcher,writer --budget 1\n\n",
    run_exits!()
);

pub(super) const PLAN: &str = concat!(
    "Examples:\n",
    "  cairn plan \"Compare SQLite and LMDB for a write-heavy cache\" --planning-budget 0.50\n",
    "  cairn plan \"...\" --run --budget 2    # run the accepted script\n\n",
    "Exit codes: 0 accepted (or the run settled ok), 6 no acceptable draft (script_rejected), \
     2 usage or a planner that is the offline echo model (refused before anything is paid); with --run, as \
     `cairn run`."
);

pub(super) const RUNS: &str = "Examples:\n  cairn runs\n  cairn runs --json\n\nExit codes: 0 ok, 1 the store \
                                 cannot be read, 2 usage.";

pub(super) const INSPECT: &str = "Examples:\n  cairn inspect RUN\n  cairn inspect RUN --json | jq .cost\n\n\
                                    Exit codes: 0 ok, 1 the store cannot be read, 2 an unknown run or usage.";

pub(super) const LINT: &str = "Examples:\n  cairn lint flow.rhai\n  cairn lint flow.lua --json      # \
                                 diagnostics as JSON\n  cairn lint flow.rhai --bound --args '{\"items\": [1, 2]}'   \
                                 # most agent calls, worst-case cost\n\nExit codes: 0 no error (warnings may be \
                                 shown), 6 errors, 2 usage.";

pub(super) const REPLAY: &str = "Example:\n  cairn replay RUN                     # a CI gate: nothing may run live\n\n\
                                   Exit codes: 0 the run replays to the same outcome, 7 a live call, an orphaned \
                                   entry or a different outcome (the first is named), 1 error, 2 usage.";

pub(super) const RESOLVE: &str = "Examples:\n  cairn resolve RUN deploy-approval '{\"approved\": true}'\n  \
                                    cairn resume RUN                     # then finish the run\n\n\
                                    Exit codes: 0 resolved (or queued for the run's live driver), 1 error or a key \
                                    already resolved, 2 usage, a value that is not JSON or a key the run does not \
                                    wait on (the error lists the keys it waits on).";

pub(super) const CARD: &str = "Examples:\n  cairn card                           # the Rhai dialect\n  cairn card \
                                 --dialect lua\n  cairn card --profiles                # what cairn.toml registers\n\n\
                                 Exit codes: 0 ok, 2 usage or config.";

pub(super) const WORKER: &str = "Example:\n  cairn --store postgres://cairn@127.0.0.1/cairn worker --concurrency 4\n\n\
                                   SIGTERM drains: in-flight runs finish, nothing new is claimed.\n\
                                   Exit codes: 0 stopped cleanly, 1 error, 2 usage or config.";

pub(super) const ENQUEUE: &str = "Example:\n  cairn --store postgres://cairn@127.0.0.1/cairn enqueue flow.rhai --args \
                                    '{\"n\": 3}'\n\nPrints the run id. Exit codes: 0 queued, 6 script rejected, 1 \
                                    error, 2 usage.";

pub(super) const CANCEL: &str = "Examples:\n  cairn cancel RUN\n  cairn cancel RUN --wait              # until \
                                   the run has settled\n\nExit codes: 0 cancelled (or requested), 1 the run has \
                                   settled, 2 an unknown run or usage.";

pub(super) const SERVE: &str = "Example:\n  CAIRN_SERVER_TOKEN=secret cairn serve --listen 127.0.0.1:7420 --max-budget \
                                  2\n\nSIGTERM stops accepting, lets in-flight runs settle, and exits.\n\
                                  Exit codes: 0 stopped cleanly, 1 error, 2 usage or config.";

pub(super) const CANON: &str = "Example:\n  echo '{\"b\":1,\"a\":2}' | cairn canon\n\nExit codes: 0 ok, 2 the input \
                                  is not JSON.";

pub(super) const INIT: &str = "Examples:\n  cairn init                           # cairn.toml and hello.rhai here\n  \
                                 cairn init my-project\n\nExit codes: 0 ok (existing files are kept and named), 1 a \
                                 file could not be written, 2 the directory could not be made.";

pub(super) const COMPLETIONS: &str = "Examples:\n  cairn completions bash > ~/.local/share/bash-completion/completions/cairn\n  \
                                        cairn completions zsh > ~/.zfunc/_cairn\n\nExit codes: 0 ok, 2 an unknown shell.";
