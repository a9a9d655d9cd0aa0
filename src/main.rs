//! The `cairn` binary: a thin shell over the library's command line.

/// Every allocation is counted, so a run's memory limit holds (see `cairn::CountingAlloc`).
#[global_allocator]
static ALLOCATOR: cairn::CountingAlloc = cairn::CountingAlloc;

fn main() -> std::process::ExitCode {
    cairn::__cli_main()
}
