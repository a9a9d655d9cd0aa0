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

/// The `console` examples of README.md run against the binary and print what they show.
///
/// Each ```console block runs in a fresh directory holding a copy of `scripts/`, with the
/// `cairn` under test first on `PATH` and no provider key set. A `$ ` line is a command, run by
/// `sh -c` in the directory the previous command left (so `cd demo && ...` carries on), with
/// stderr merged into stdout; the lines after it are its output. `...` on a line of its own
/// stands for any lines, `[..]` inside a line for any text, and `[exit N]` says the command
/// exits N (any other command must exit 0). trycmd does the same for one directory per file;
/// these blocks need one per block and a shell for `cd`, so the few lines below do it.
#[test]
fn the_readme_console_examples_run_as_shown() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let blocks = console_blocks(&readme);
    assert!(blocks.len() >= 2, "README.md has {} console blocks", blocks.len());
    #[allow(deprecated)]
    let bin = assert_cmd::cargo::cargo_bin("cairn");
    let path = format!("{}:{}", bin.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    for block in blocks {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(std::path::Path::new(&format!("{root}/scripts")), &dir.path().join("scripts"));
        let mut cwd = dir.path().to_path_buf();
        for (command, expected) in block {
            let state = dir.path().join(".cwd");
            let script = format!("{command} 2>&1; s=$?; pwd > '{}'; exit $s", state.display());
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(&script)
                .current_dir(&cwd)
                .env("PATH", &path)
                .env_remove("ANTHROPIC_API_KEY")
                .env_remove("OPENAI_API_KEY")
                .env_remove("OPENAI_BASE_URL")
                .output()
                .unwrap();
            cwd = std::fs::read_to_string(&state).map(|p| p.trim().into()).unwrap_or(cwd);
            let actual = String::from_utf8_lossy(&out.stdout).into_owned();
            let want_exit = expected
                .iter()
                .find_map(|l| l.strip_prefix("[exit ").and_then(|r| r.strip_suffix(']')))
                .map_or(0, |n| n.parse::<i32>().unwrap());
            let shown: Vec<&str> =
                expected.iter().map(String::as_str).filter(|l| !l.starts_with("[exit ")).collect();
            assert_eq!(out.status.code(), Some(want_exit), "$ {command}\n{actual}");
            assert!(
                lines_match(&shown, &actual.lines().collect::<Vec<_>>()),
                "$ {command}\nexpected:\n{}\nactual:\n{actual}",
                shown.join("\n")
            );
        }
    }
}

/// The console blocks of a markdown text: per block, each command with its expected lines.
fn console_blocks(markdown: &str) -> Vec<Vec<(String, Vec<String>)>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<(String, Vec<String>)>> = None;
    for line in markdown.lines() {
        match current.as_mut() {
            None if line.trim_end() == "```console" => current = Some(Vec::new()),
            None => {}
            Some(_) if line.trim_end() == "```" => blocks.extend(current.take()),
            Some(block) => match line.strip_prefix("$ ") {
                Some(command) => block.push((command.to_owned(), Vec::new())),
                None => {
                    if let Some((_, expected)) = block.last_mut() {
                        expected.push(line.to_owned());
                    }
                }
            },
        }
    }
    blocks
}

/// Whether `actual` matches `expected`: `...` is any lines, `[..]` any text within a line.
fn lines_match(expected: &[&str], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((&"...", rest)) => (0..=actual.len()).any(|skip| lines_match(rest, &actual[skip..])),
        Some((first, rest)) => actual
            .split_first()
            .is_some_and(|(line, more)| line_matches(first, line) && lines_match(rest, more)),
    }
}

fn line_matches(pattern: &str, line: &str) -> bool {
    let mut parts = pattern.split("[..]");
    let Some(head) = parts.next() else { return pattern == line };
    let Some(mut rest) = line.strip_prefix(head) else { return false };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn the_line_matcher_follows_its_rules() {
    assert!(lines_match(&["a", "...", "z"], &["a", "b", "c", "z"]));
    assert!(lines_match(&["a", "...", "z"], &["a", "z"]));
    assert!(!lines_match(&["a", "z"], &["a", "b", "z"]));
    assert!(line_matches("run [..] ok", "run 01ABC ok"));
    assert!(line_matches("cost [..]", "cost bound: x"));
    assert!(!line_matches("run [..] ok", "run 01ABC failed"));
    assert!(line_matches("exact", "exact") && !line_matches("exact", "exactly"));
}
