//! `cairn init`: a commented `cairn.toml` (the echo model, one real provider commented out, a
//! budget) and a sample script, written into a directory. An existing file is never
//! overwritten: it is named and left as it is.

use std::path::{Path, PathBuf};

use super::exit::Exit;

/// The files `init` writes, by name.
const FILES: &[(&str, &str)] =
    &[("cairn.toml", include_str!("init/cairn.toml")), ("hello.rhai", include_str!("init/hello.rhai"))];

#[derive(Debug, clap::Args)]
pub(super) struct InitArgs {
    /// The directory to write into (created when missing).
    #[arg(default_value = ".")]
    dir: PathBuf,
}

/// Writes the files `FILES` names into `args.dir`, keeping any that exist.
pub(super) fn init(args: &InitArgs) -> Exit {
    if let Err(e) = std::fs::create_dir_all(&args.dir) {
        errln!("error: cannot create {}: {e}", shown(&args.dir));
        return Exit::Usage;
    }
    let mut wrote = 0;
    for (name, text) in FILES {
        let path = args.dir.join(name);
        // `create_new` fails when the file exists, so nothing is ever overwritten, even by a
        // file that appeared since a check.
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut file) => {
                use std::io::Write as _;
                if let Err(e) = file.write_all(text.as_bytes()) {
                    errln!("error: cannot write {}: {e}", shown(&path));
                    return Exit::Error;
                }
                out!("wrote {}", shown(&path));
                wrote += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                out!("kept {} (it exists; nothing was overwritten)", shown(&path));
            }
            Err(e) => {
                errln!("error: cannot write {}: {e}", shown(&path));
                return Exit::Error;
            }
        }
    }
    if wrote > 0 {
        let run = if args.dir == Path::new(".") {
            "cairn run hello.rhai".to_owned()
        } else {
            format!("cd {} && cairn run hello.rhai", shown(&args.dir))
        };
        out!("next: {run}   (offline with the echo model; edit cairn.toml for a real one)");
    }
    Exit::Ok
}

fn shown(path: &Path) -> String {
    crate::text::for_terminal_line(&path.display().to_string()).into_owned()
}
