//! The `cairn` binary: a thin shell over `cairn::cli`.

fn main() -> std::process::ExitCode {
    // Before anything builds a Rhai engine: the hashing seed can be set only first.
    cairn::script::rhai::sandbox::stable_hashing();
    cairn::cli::main()
}
