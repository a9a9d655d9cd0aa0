//! `cairn completions SHELL`: the shell completion script, from the same clap definition the
//! parser uses, so it cannot drift from the flags.

use super::exit::Exit;

#[derive(Debug, clap::Args)]
pub(super) struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    shell: clap_complete::Shell,
}

/// Prints the completion script of `command` (the whole CLI) for `args.shell` on stdout.
pub(super) fn completions(args: &CompletionsArgs, mut command: clap::Command) -> Exit {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "cairn", &mut script);
    use std::io::Write as _;
    let _ = std::io::stdout().lock().write_all(&script);
    Exit::Ok
}
