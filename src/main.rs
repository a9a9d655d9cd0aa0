//! The `cairn` binary: a thin shell over `cairn::cli`.

/// Every allocation is counted, so a run's memory limit holds (see `cairn::alloc`).
#[global_allocator]
static ALLOCATOR: cairn::CountingAlloc = cairn::CountingAlloc;

fn main() -> std::process::ExitCode {
    // Before anything builds a Rhai engine: the hashing seed can be set only first.
    cairn::script::rhai::sandbox::stable_hashing();
    cairn::cli::main()
}
