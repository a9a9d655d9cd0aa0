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

/// Every markdown file of the docs: README.md and each page under `docs/`.
fn doc_files() -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The `console` examples of README.md and of every page of the guide run against the binary
/// and print what they show.
///
/// Each ```console block runs in a fresh directory holding a copy of `scripts/`, with the
/// `cairn` under test first on `PATH` and no provider key set. A `$ ` line is a command, run by
/// `sh -c` in the directory the previous command left (so `cd demo && ...` carries on), with
/// stderr merged into stdout; the lines after it are its output. `...` on a line of its own
/// stands for any lines, `[..]` inside a line for any text, and `[exit N]` says the command
/// exits N (any other command must exit 0). trycmd does the same for one directory per file;
/// these blocks need one per block and a shell for `cd`, so the few lines below do it.
#[test]
fn every_console_example_in_the_readme_and_the_guide_runs_as_shown() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut blocks = Vec::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let found = console_blocks(&text);
        let name = file.strip_prefix(root).unwrap_or(&file).display().to_string();
        if name == "README.md" || name.ends_with("guide/tour.md") {
            assert!(!found.is_empty(), "{name} has no console block: its quickstart is not tested");
        }
        blocks.extend(found.into_iter().map(|block| (name.clone(), block)));
    }
    assert!(blocks.len() >= 3, "{} console blocks", blocks.len());
    #[allow(deprecated)]
    let bin = assert_cmd::cargo::cargo_bin("cairn");
    let path = format!("{}:{}", bin.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    for (file, block) in blocks {
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
            assert_eq!(out.status.code(), Some(want_exit), "{file}: $ {command}\n{actual}");
            assert!(
                lines_match(&shown, &actual.lines().collect::<Vec<_>>()),
                "{file}: $ {command}\nexpected:\n{}\nactual:\n{actual}",
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

/// The logical lines (backslash continuations joined) of every ```sh block of `markdown`.
fn sh_lines(markdown: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut inside = false;
    let mut pending = String::new();
    for line in markdown.lines() {
        match (inside, line.trim_end()) {
            (false, "```sh") => inside = true,
            (true, "```") => inside = false,
            (true, text) => match text.strip_suffix('\\') {
                Some(head) => pending.push_str(head),
                None => lines.push(std::mem::take(&mut pending) + text),
            },
            _ => {}
        }
    }
    lines
}

/// Words of a shell line, quotes kept together (`'{"a": 1}'` is one word); a comment ends it.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => quote = Some(c),
            (None, '#') if word.is_empty() => break,
            (None, c) if c.is_whitespace() => {
                words.extend((!word.is_empty()).then(|| std::mem::take(&mut word)))
            }
            (None, c) => word.push(c),
        }
    }
    words.extend((!word.is_empty()).then_some(word));
    words
}

/// Every `cairn` command in the ```sh blocks of README.md and the guide names a subcommand
/// the binary has, and every `--flag` it passes is one that subcommand's help (or the global
/// flags) lists; a script path under `scripts/` exists, and `cargo` lines name a real profile
/// and example. The blocks hold placeholders (`RUN`, `GOAL`), so they are checked, not run.
#[test]
fn every_cairn_command_in_a_shell_block_names_real_flags() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    #[allow(deprecated)]
    let bin = assert_cmd::cargo::cargo_bin("cairn");
    let help = |args: &[&str]| {
        let out = std::process::Command::new(&bin).args(args).arg("--help").output().unwrap();
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let global = help(&[]).unwrap();
    let cargo_toml = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let mut checked = 0;
    for file in doc_files() {
        let name = file.strip_prefix(root).unwrap_or(&file).display().to_string();
        for line in sh_lines(&std::fs::read_to_string(&file).unwrap()) {
            let words = shell_words(&line);
            let ends = ["|", "&", "&&", ";", ">", "2>&1"];
            let mut at = 0;
            while at < words.len() {
                let word = words[at].trim_start_matches("$(");
                let rest: Vec<&str> = words[at + 1..]
                    .iter()
                    .map(String::as_str)
                    .take_while(|w| !ends.contains(w) && !w.starts_with('>'))
                    .collect();
                match word {
                    "cairn" => check_cairn(&name, &line, &rest, &global, &help, root),
                    "cargo" => {
                        if let Some(i) = rest.iter().position(|w| *w == "--profile") {
                            let profile = rest.get(i + 1).copied().unwrap_or_default();
                            assert!(
                                cargo_toml.contains(&format!("[profile.{profile}]")),
                                "{name}: no profile {profile}: {line}"
                            );
                        }
                        if rest.first() == Some(&"run")
                            && let Some(i) = rest.iter().position(|w| *w == "--")
                        {
                            check_cairn(&name, &line, &rest[i + 1..], &global, &help, root);
                        }
                    }
                    _ => {
                        at += 1;
                        continue;
                    }
                }
                checked += 1;
                at += 1 + rest.len();
            }
        }
    }
    assert!(checked >= 30, "only {checked} commands checked");
}

fn check_cairn(
    file: &str,
    line: &str,
    words: &[&str],
    global: &str,
    help: &dyn Fn(&[&str]) -> Option<String>,
    root: &std::path::Path,
) {
    let words: Vec<&str> = words.iter().map(|w| w.trim_matches(|c| c == '[' || c == ']')).collect();
    // Global flags come before the subcommand.
    let mut at = 0;
    while words.get(at).is_some_and(|w| w.starts_with("--")) {
        let flag = words[at].split('=').next().unwrap_or_default();
        assert!(global.contains(flag), "{file}: cairn has no global flag {flag}: {line}");
        at += if words[at].contains('=') { 1 } else { 2 };
    }
    let Some(command) = words.get(at) else { return };
    let Some(text) = help(&[command]) else { panic!("{file}: cairn has no subcommand {command}: {line}") };
    for word in &words[at + 1..] {
        if let Some(flag) = word.strip_prefix("--").map(|f| f.split('=').next().unwrap_or_default()) {
            if flag.is_empty() {
                break;
            }
            assert!(
                text.contains(&format!("--{flag}")) || global.contains(&format!("--{flag}")),
                "{file}: cairn {command} has no flag --{flag}: {line}"
            );
        } else if word.starts_with("scripts/") {
            assert!(root.join(word).exists(), "{file}: {word} does not exist: {line}");
        }
    }
}

/// README.md keeps the shape a newcomer reads (#29): at most 200 lines; what cairn is, install
/// (`cargo install --path .` and the `dist` profile), a quickstart, one script, a real provider's
/// config, resume and approval, embedding in a short snippet, links, in that order; the depth
/// (guarantees with their tests, benchmark figures) lives in `docs/` and BENCHMARKS.md.
#[test]
fn the_readme_keeps_its_shape() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let lines: Vec<&str> = readme.lines().collect();
    assert!(lines.len() <= 200, "README.md has {} lines; move the depth into docs/", lines.len());
    let sections: Vec<&str> = lines.iter().filter_map(|l| l.strip_prefix("## ")).collect();
    let shape = [
        "Install",
        "Quickstart",
        "One script",
        "A real provider",
        "Resume and approval",
        "Embedding",
        "Learn more",
    ];
    let mut at = 0;
    for want in shape {
        match sections[at..].iter().position(|s| *s == want) {
            Some(i) => at += i + 1,
            None => panic!("README.md lacks a `## {want}` section after the ones before it: {sections:?}"),
        }
    }
    for text in ["cargo install --path .", "--profile dist", "api_key_env", "cairn resolve", "cairn resume"] {
        assert!(readme.contains(text), "README.md does not show {text}");
    }
    let rust: Vec<&str> =
        readme.split("```rust").skip(1).filter_map(|block| block.split("\n```").next()).collect();
    assert_eq!(rust.len(), 1, "one embedding snippet");
    assert!(rust[0].lines().count() <= 25, "the embedding snippet has {} lines", rust[0].lines().count());
    // Test names belong in docs/guarantees.md, not inline in the README.
    let test_paths = readme
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.contains("::") && w.matches('_').count() >= 3)
        .count();
    assert!(test_paths <= 2, "README.md names {test_paths} tests inline");
    for heading in ["Guarantees", "Benchmarks", "Performance"] {
        assert!(!sections.contains(&heading), "README.md has a `## {heading}` section; it belongs in docs/");
    }
}

/// Every relative link in README.md and the guide names a file that exists (mdBook does not
/// fail on a broken one).
#[test]
fn every_relative_link_in_the_docs_names_a_file() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let dir = file.parent().unwrap();
        for target in text.split("](").skip(1).filter_map(|rest| rest.split(')').next()) {
            let path = target.split('#').next().unwrap_or_default();
            if path.is_empty() || path.contains("://") || path.starts_with("mailto:") || path.contains(' ') {
                continue;
            }
            let name = file.strip_prefix(root).unwrap_or(&file).display().to_string();
            assert!(dir.join(path).exists(), "{name}: link to {target} names no file");
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} links checked");
}

/// The keys `cairn.toml` accepts, as its parser names them when it refuses an unknown one:
/// the top level's, then each table's, down the nesting (`budget.default_usd`,
/// `providers.*.kind`, `profiles.*.permissions.ask`; `*` is a name of the user's).
fn accepted_config_keys() -> Vec<String> {
    // The keys a table takes, from the error an unknown key in it gets.
    let keys_of = |toml_path: &str| -> Option<Vec<String>> {
        let text = match toml_path {
            "" => "no_such_key = 1\n".to_owned(),
            path => format!("[{path}]\nno_such_key = 1\n"),
        };
        let message = cairn::Config::from_toml(&text).err()?.to_string();
        if let Some(list) = message.split("unknown field `no_such_key`, expected ").nth(1) {
            let list = list.lines().next().unwrap_or_default();
            return Some(list.split('`').skip(1).step_by(2).map(str::to_owned).collect());
        }
        let list = message.split("unknown key \"no_such_key\" (use ").nth(1)?.split(')').next()?;
        Some(list.split(", ").map(str::to_owned).collect())
    };
    let mut keys = Vec::new();
    // (the table's path in TOML, the same path as documented)
    let mut tables = vec![(String::new(), String::new())];
    while let Some((toml_path, shown)) = tables.pop() {
        let join = |a: &str, b: &str| if a.is_empty() { b.to_owned() } else { format!("{a}.{b}") };
        for key in keys_of(&toml_path).unwrap_or_default() {
            let (toml_key, shown_key) = (join(&toml_path, &key), join(&shown, &key));
            keys.push(shown_key.clone());
            if toml_key.matches('.').count() >= 4 {
                continue;
            }
            if keys_of(&toml_key).is_some() {
                tables.push((toml_key, shown_key));
            } else if keys_of(&format!("{toml_key}.x")).is_some() {
                tables.push((format!("{toml_key}.x"), format!("{shown_key}.*")));
            }
        }
    }
    keys.sort();
    keys
}

/// `docs/reference/config.md` names every key `cairn.toml` accepts (`store`,
/// `budget.default_usd`, `providers.*.kind`, ...) and no key it refuses: the list is checked
/// against the parser, so a new key cannot go undocumented.
#[test]
fn the_config_reference_names_every_key_the_parser_accepts() {
    let reference =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reference/config.md")).unwrap();
    let documented: Vec<&str> = reference
        .lines()
        .filter_map(|line| line.strip_prefix("- `"))
        .filter_map(|rest| rest.split('`').next())
        .collect();
    let keys = accepted_config_keys();
    // The walk reached the nested tables, not only the top level.
    for nested in ["budget.default_usd", "providers.*.capabilities.tools", "profiles.*.permissions.ask"] {
        assert!(keys.iter().any(|k| k == nested), "the parser's keys lack {nested}: {keys:?}");
    }
    let missing: Vec<&String> = keys.iter().filter(|k| !documented.contains(&k.as_str())).collect();
    let unknown: Vec<&&str> = documented.iter().filter(|d| !keys.iter().any(|k| k == *d)).collect();
    assert!(
        missing.is_empty(),
        "keys cairn.toml accepts that docs/reference/config.md does not list: {missing:?}"
    );
    assert!(unknown.is_empty(), "keys docs/reference/config.md lists that cairn.toml refuses: {unknown:?}");
}

/// Every `cairn.toml` shown in README.md and the guide (each ```toml block but Cargo's own)
/// is one cairn accepts.
#[test]
fn every_config_example_in_the_docs_parses() {
    let mut checked = 0;
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for block in text.split("```toml\n").skip(1).filter_map(|b| b.split("\n```").next()) {
            if block.contains("[dependencies]") {
                continue;
            }
            if let Err(e) = cairn::Config::from_toml(block) {
                panic!("{}: a cairn.toml cairn refuses: {e}\n{block}", file.display());
            }
            checked += 1;
        }
    }
    assert!(checked >= 5, "only {checked} config examples");
}

/// `docs/reference/http.md` has a row for every route of the service's OpenAPI document
/// (`GET /v1/runs`), and no route the document lacks.
#[test]
fn the_http_reference_lists_every_route_of_the_openapi_document() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let openapi: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("src/service/openapi.json")).unwrap())
            .unwrap();
    let mut routes = Vec::new();
    for (path, item) in openapi["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                routes.push(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    assert!(routes.len() >= 10, "{routes:?}");
    let reference = std::fs::read_to_string(root.join("docs/reference/http.md")).unwrap();
    let documented: Vec<&str> = reference
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .collect();
    let missing: Vec<&String> = routes.iter().filter(|r| !documented.contains(&r.as_str())).collect();
    let unknown: Vec<&&str> = documented.iter().filter(|d| !routes.iter().any(|r| r == *d)).collect();
    assert!(missing.is_empty(), "routes docs/reference/http.md does not list: {missing:?}");
    assert!(unknown.is_empty(), "rows of docs/reference/http.md naming no route: {unknown:?}");
}

/// `docs/reference/cli.md` has a `### cairn NAME` section for every subcommand `cairn --help`
/// lists, and no other.
#[test]
fn the_cli_reference_has_a_section_for_every_subcommand() {
    #[allow(deprecated)]
    let bin = assert_cmd::cargo::cargo_bin("cairn");
    let out = std::process::Command::new(&bin).arg("--help").output().unwrap();
    let top = String::from_utf8_lossy(&out.stdout).into_owned();
    let commands = super::newcomer::subcommands(&top);
    assert!(commands.len() >= 16, "{top}");
    let reference =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reference/cli.md")).unwrap();
    let documented: Vec<&str> =
        reference.lines().filter_map(|line| line.strip_prefix("### cairn ")).collect();
    let missing: Vec<&String> = commands.iter().filter(|c| !documented.contains(&c.as_str())).collect();
    let unknown: Vec<&&str> = documented.iter().filter(|d| !commands.iter().any(|c| c == *d)).collect();
    assert!(missing.is_empty(), "subcommands docs/reference/cli.md lacks: {missing:?}");
    assert!(unknown.is_empty(), "sections of docs/reference/cli.md naming no subcommand: {unknown:?}");
    // Each section states the exit codes the subcommand's --help states.
    let words = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    for command in &commands {
        let out = std::process::Command::new(&bin).args([command.as_str(), "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        let exits = help.split("Exit codes:").nth(1).map(words).unwrap_or_default();
        let section = reference
            .split(&format!("### cairn {command}\n"))
            .nth(1)
            .and_then(|rest| rest.split("\n### ").next())
            .map(words)
            .unwrap_or_default();
        assert!(
            !exits.is_empty() && section.contains(&format!("Exit codes: {exits}")),
            "docs/reference/cli.md's `cairn {command}` does not state its exit codes as --help does: {exits}"
        );
    }
}

/// Every page with a ```rust block is compiled as a doctest: `src/lib.rs` includes it with
/// `#[doc = include_str!(...)]`, so a Rust snippet of the docs cannot drift from the API.
#[test]
fn every_page_with_rust_snippets_is_compiled_as_doctests() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    let mut pages = 0;
    for file in doc_files() {
        if !std::fs::read_to_string(&file).unwrap().contains("```rust") {
            continue;
        }
        let name = file.strip_prefix(root).unwrap().display().to_string();
        assert!(
            lib.contains(&format!("#[doc = include_str!(\"../{name}\")]")),
            "{name} has Rust snippets that no doctest compiles (include it in src/lib.rs)"
        );
        pages += 1;
    }
    assert!(pages >= 3, "{pages} pages with Rust snippets");
}
