//! The `cairn` binary: a thin shell over `cairn::cli`.

fn main() -> std::process::ExitCode {
    cairn::cli::main()
}
