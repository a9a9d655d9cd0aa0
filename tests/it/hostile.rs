//! The hostile-script corpus (`tests/hostile/*.rhai`): every script is rejected by lint or
//! ends its run with `sandbox_limit` in bounded time; the host never crashes, hangs or
//! overflows its stack.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::script::rhai::RhaiDialect;
use cairn::script::rhai::sandbox::SandboxLimits;
use cairn::{Engine, ErrorCode, MemoryStore, RunOptions, RunStatus, Script};
use serde_json::json;

/// How each corpus script must end.
enum Expect {
    /// Refused before running, by this lint rule.
    Rejected(&'static str),
    /// Ended by the sandbox.
    SandboxLimit,
}

const CORPUS: [(&str, Expect); 19] = [
    ("fork_bomb", Expect::SandboxLimit),
    ("parallel_memory_bomb", Expect::SandboxLimit),
    ("infinite_loop", Expect::SandboxLimit),
    ("loop_in_branch", Expect::SandboxLimit),
    ("string_bomb", Expect::SandboxLimit),
    ("array_bomb", Expect::SandboxLimit),
    ("nested_array_bomb", Expect::SandboxLimit),
    ("map_bomb", Expect::SandboxLimit),
    ("deep_recursion", Expect::SandboxLimit),
    ("catch_own_limit", Expect::SandboxLimit),
    ("recursion_in_branch", Expect::SandboxLimit),
    ("memory_many_strings", Expect::SandboxLimit),
    ("memory_copies_in_variables", Expect::SandboxLimit),
    ("memory_in_branches", Expect::SandboxLimit),
    ("memory_recursion_holding_strings", Expect::SandboxLimit),
    ("forbidden_eval", Expect::Rejected("forbidden")),
    ("forbidden_time", Expect::Rejected("forbidden")),
    ("forbidden_print", Expect::Rejected("forbidden")),
    ("forbidden_import", Expect::Rejected("forbidden")),
];

#[test]
fn every_hostile_script_is_rejected_or_stopped_in_bounded_time() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile");
    let files = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(files, CORPUS.len(), "every corpus file has an expectation");
    // A smaller operation budget keeps the loops short in debug builds; every other limit
    // is the standard one.
    let limits = SandboxLimits { max_operations: 2_000_000, ..SandboxLimits::STANDARD };
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::builder(store.clone(), store)
        .dialect(Arc::new(RhaiDialect::with_limits(limits)))
        .build()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for (name, expect) in CORPUS {
        let source = std::fs::read_to_string(dir.join(format!("{name}.rhai"))).unwrap();
        let started = Instant::now();
        let _guard = runtime.enter();
        let result = engine.run_script(&Script::rhai(name, &source), json!({}), RunOptions::default());
        match expect {
            Expect::Rejected(rule) => {
                let err = result.err().unwrap_or_else(|| panic!("{name} was not rejected"));
                assert_eq!(err.code, ErrorCode::Validation, "{name}");
                assert!(err.message.contains(rule), "{name}: {}", err.message);
            }
            Expect::SandboxLimit => {
                let handle = result.unwrap_or_else(|e| panic!("{name} was rejected: {e}"));
                let outcome = runtime
                    .block_on(async { tokio::time::timeout(Duration::from_secs(60), handle.result()).await })
                    .unwrap_or_else(|_| panic!("{name} hung"))
                    .unwrap();
                assert_eq!(outcome.status, RunStatus::Error, "{name}: {outcome:?}");
                assert_eq!(
                    outcome.error.as_ref().unwrap().code,
                    ErrorCode::SandboxLimit,
                    "{name}: {outcome:?}"
                );
            }
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{name} took {:?}", started.elapsed());
    }
}
