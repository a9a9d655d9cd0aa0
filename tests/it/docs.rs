//! The docs cannot drift from the code: the error-code reference has a section for every code.

/// `docs/reference/errors.md` has a `### code` section for every `ErrorCode`, and no other.
#[test]
fn every_error_code_is_documented() {
    let reference =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reference/errors.md")).unwrap();
    let documented: Vec<&str> = reference.lines().filter_map(|line| line.strip_prefix("### ")).collect();
    let codes: Vec<&str> = cairn::ErrorCode::ALL.iter().map(|code| code.as_str()).collect();
    let missing: Vec<&&str> = codes.iter().filter(|code| !documented.contains(code)).collect();
    let unknown: Vec<&&str> = documented.iter().filter(|name| !codes.contains(name)).collect();
    assert!(missing.is_empty(), "error codes without a section in docs/reference/errors.md: {missing:?}");
    assert!(unknown.is_empty(), "sections in docs/reference/errors.md naming no error code: {unknown:?}");
}
