//! Tests of the fs-read toolset over a real temporary tree, with links that leave the root.

use std::io::Cursor;
use std::os::unix::fs::symlink;

use std::fs::File;
use std::path::PathBuf;
use std::time::Duration;

use super::read::{BINARY_SNIFF, LIST_CAP, read_window};
use super::search::Limits;
use super::*;
use crate::agent::toolset_hash;
use crate::error::ErrorCode;

/// A marker only the files outside the root contain: it must never reach any output.
const SECRET: &str = "TOPSECRET";

/// A temp dir holding `root/` (the workspace), `outside/` and `root2/` (a sibling whose
/// name starts with the root's, to catch textual prefix checks).
struct Fixture {
    dir: tempfile::TempDir,
    tools: Toolset,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path();
        let root = base.join("root");
        let write = |rel: &str, bytes: &[u8]| {
            let path = base.join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, bytes).unwrap();
        };
        write("root/a.txt", b"alpha\nbeta\ngamma\ndelta\nepsilon\n");
        write("root/notes.md", b"needle one\nnothing\nneedle two\n");
        write("root/src/main.rs", b"fn main() {\n    // needle three\n}\n");
        write("root/src/lib/deep.rs", b"needle four\n");
        write("root/bin.dat", b"needle\0\x01\x02");
        write("root/.git/config", b"needle hidden\n");
        write("root/big.txt", "needle\n".repeat(160 * 1024).as_bytes());
        fs::create_dir(root.join("empty")).unwrap();
        write("outside/secret.txt", format!("{SECRET} needle outside\n").as_bytes());
        write("outside/dir/inner.txt", format!("{SECRET} needle in outside dir\n").as_bytes());
        write("root2/file.txt", format!("{SECRET} needle sibling\n").as_bytes());
        symlink("../outside/secret.txt", root.join("link_out_file")).unwrap();
        symlink(base.join("outside/dir"), root.join("link_out_dir")).unwrap();
        symlink("../root2/file.txt", root.join("link_sibling")).unwrap();
        symlink("src", root.join("link_in_dir")).unwrap();
        symlink("a.txt", root.join("link_in_file")).unwrap();
        let tools = fs_read_toolset(&root).unwrap();
        Fixture { dir, tools }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    async fn call(&self, tool: &str, args: Value) -> Result<String, Error> {
        let tool = self.tools.tools().iter().find(|t| t.name() == tool).unwrap().clone();
        let echoed = args.to_string();
        let result = tool.call(args).await;
        // Whatever happened, nothing from outside the root may show, nor where the root is
        // (unless the model sent that path itself and is only hearing it back).
        let text = match &result {
            Ok(text) => text.clone(),
            Err(e) => e.message.clone(),
        };
        assert!(!text.contains(SECRET), "outside content leaked: {text}");
        let location = self.dir.path().to_string_lossy();
        assert!(echoed.contains(&*location) || !text.contains(&*location), "absolute path leaked: {text}");
        result
    }

    async fn code(&self, tool: &str, args: Value) -> ErrorCode {
        match self.call(tool, args.clone()).await {
            Ok(text) => panic!("{tool} {args} succeeded: {text}"),
            Err(e) => e.code,
        }
    }
}

#[tokio::test]
async fn reads_files_and_line_windows() {
    let fx = Fixture::new();
    let all = "alpha\nbeta\ngamma\ndelta\nepsilon\n";
    assert_eq!(fx.call("read_file", json!({"path": "a.txt"})).await.unwrap(), all);
    assert_eq!(fx.call("read_file", json!({"path": "./src/../a.txt"})).await.unwrap(), all);
    assert_eq!(fx.call("read_file", json!({"path": "link_in_file"})).await.unwrap(), all);
    assert_eq!(
        fx.call("read_file", json!({"path": "link_in_dir/lib/deep.rs"})).await.unwrap(),
        "needle four\n"
    );
    assert_eq!(
        fx.call("read_file", json!({"path": "a.txt", "offset": 1, "limit": 2})).await.unwrap(),
        "beta\ngamma\n[truncated: showed lines 2-3 (limit 2); more follow — continue with offset=3]"
    );
    assert_eq!(
        fx.call("read_file", json!({"path": "a.txt", "offset": 3, "limit": 2})).await.unwrap(),
        "delta\nepsilon\n"
    );
    assert_eq!(
        fx.call("read_file", json!({"path": "a.txt", "offset": 9})).await.unwrap(),
        "[offset 9 is past the end: the file has 5 lines]"
    );
    assert_eq!(
        fx.call("read_file", json!({"path": "a.txt", "offset": u64::MAX})).await.unwrap(),
        format!("[offset {} is past the end: the file has 5 lines]", u64::MAX)
    );
}

#[tokio::test]
async fn read_refuses_binary_directories_and_missing_files() {
    let fx = Fixture::new();
    let e = fx.call("read_file", json!({"path": "bin.dat"})).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::ToolFailed);
    assert!(e.message.contains("binary"), "{}", e.message);
    let e = fx.call("read_file", json!({"path": "src"})).await.unwrap_err();
    assert_eq!((e.code, e.message.contains("list_dir")), (ErrorCode::ToolFailed, true));
    let e = fx.call("read_file", json!({"path": "nope.txt"})).await.unwrap_err();
    assert_eq!((e.code, e.message.as_str()), (ErrorCode::ToolFailed, "\"nope.txt\" does not exist"));
}

#[test]
fn read_windows_respect_the_byte_cap() {
    let text = b"0123\n4567\n89ab\ncdef\n";
    let window = |offset, limit, cap| {
        read_window(Cursor::new(&text[..]), offset, limit, cap).unwrap().unwrap().render(offset, limit)
    };
    // The cap falls mid-line: the output ends on the last whole line and says where to go on.
    assert_eq!(
        window(1, 10, 12),
        "4567\n89ab\n[truncated: showed lines 2-3 (the 256 KiB output cap); more follow — continue with offset=3]"
    );
    assert_eq!(window(3, 10, 12), "cdef\n");
    // A single line longer than the cap is shown in part, cut on a char boundary.
    let long = "ééééé\nnext\n".as_bytes();
    let out = read_window(Cursor::new(long), 0, 10, 5).unwrap().unwrap().render(0, 10);
    assert_eq!(
        out,
        "éé\n[truncated: line 1 is longer than the 256 KiB output cap and only its start is shown; \
         the next line is at offset=1]"
    );
    assert_eq!(
        read_window(Cursor::new(&b""[..]), 0, 10, 5).unwrap().unwrap().render(0, 10),
        "[the file is empty]"
    );
    // NUL past the sniffed head is still caught in the lines that are read.
    let mut late = "x\n".repeat(BINARY_SNIFF).into_bytes();
    late.push(0);
    assert!(read_window(Cursor::new(late), 0, u64::MAX, usize::MAX).unwrap().is_none());
}

#[tokio::test]
async fn lists_sorted_with_directories_and_links_marked() {
    let fx = Fixture::new();
    let expected = [
        ".git/",
        "a.txt",
        "big.txt",
        "bin.dat",
        "empty/",
        "link_in_dir/",
        "link_in_file",
        "link_out_dir  [symbolic link leading outside the workspace root; refused]",
        "link_out_file  [symbolic link leading outside the workspace root; refused]",
        "link_sibling  [symbolic link leading outside the workspace root; refused]",
        "notes.md",
        "src/",
    ]
    .join("\n");
    assert_eq!(fx.call("list_dir", json!({})).await.unwrap(), expected);
    assert_eq!(fx.call("list_dir", Value::Null).await.unwrap(), expected);
    assert_eq!(fx.call("list_dir", json!({"path": "link_in_dir"})).await.unwrap(), "lib/\nmain.rs");
    assert_eq!(fx.call("list_dir", json!({"path": "empty"})).await.unwrap(), "[the directory is empty]");
    let e = fx.call("list_dir", json!({"path": "a.txt"})).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::ToolFailed);
}

#[tokio::test]
async fn listing_is_capped() {
    let fx = Fixture::new();
    let many = fx.root().join("many");
    fs::create_dir(&many).unwrap();
    for i in 0..LIST_CAP + 5 {
        fs::write(many.join(format!("f{i:04}")), b"").unwrap();
    }
    let out = fx.call("list_dir", json!({"path": "many"})).await.unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), LIST_CAP + 1);
    assert_eq!((lines[0], lines[LIST_CAP - 1]), ("f0000", "f0999"));
    assert_eq!(lines[LIST_CAP], "[truncated: showed the first 1000 of 1005 entries, by name]");
}

#[tokio::test]
async fn searches_in_path_order_with_line_numbers() {
    let fx = Fixture::new();
    let hits = [
        "notes.md:1: needle one",
        "notes.md:3: needle two",
        "src/lib/deep.rs:1: needle four",
        "src/main.rs:2:     // needle three",
    ];
    let out = fx.call("search_text", json!({"pattern": "needle"})).await.unwrap();
    // Hidden dirs, the binary file, the big file and every link are skipped.
    let skipped = "[skipped: 1 binary, 1 over 1 MiB, 5 symbolic links, not followed]";
    assert_eq!(out, format!("{}\n{skipped}", hits.join("\n")));

    let out = fx.call("search_text", json!({"pattern": "needle", "max_results": 2})).await.unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..2], hits[..2]);
    assert!(lines[2].starts_with("[stopped at max_results=2; more matches exist"), "{out}");

    // A path narrows the search; a link that stays inside is searched under the real path.
    let src = format!("{}\n{}", hits[2], hits[3]);
    assert_eq!(fx.call("search_text", json!({"pattern": "needle", "path": "src"})).await.unwrap(), src);
    assert_eq!(
        fx.call("search_text", json!({"pattern": "needle", "path": "link_in_dir"})).await.unwrap(),
        src
    );
    assert_eq!(
        fx.call("search_text", json!({"pattern": r"t\w+o$", "path": "notes.md"})).await.unwrap(),
        "notes.md:3: needle two"
    );
    assert_eq!(
        fx.call("search_text", json!({"pattern": "zzz", "path": "src"})).await.unwrap(),
        "no matches in 2 files"
    );
}

#[tokio::test]
async fn every_escape_is_denied() {
    let fx = Fixture::new();
    let outside = fx.dir.path().join("outside/secret.txt").to_string_lossy().into_owned();
    let escapes = [
        ("read_file", json!({"path": "/etc/passwd"})),
        ("read_file", json!({"path": outside})),
        ("read_file", json!({"path": "../outside/secret.txt"})),
        ("read_file", json!({"path": "a/../../outside/secret.txt"})),
        ("read_file", json!({"path": "src/../../outside/secret.txt"})),
        ("read_file", json!({"path": "link_out_file"})),
        ("read_file", json!({"path": "link_out_dir/inner.txt"})),
        ("read_file", json!({"path": "link_sibling"})),
        // Not found behind an outside link is still denied: no probing names out there.
        ("read_file", json!({"path": "link_out_dir/missing.txt"})),
        ("read_file", json!({"path": "link_out_dir/../secret.txt"})),
        ("read_file", json!({"path": "link_out_dir/../root/a.txt"})),
        ("list_dir", json!({"path": ".."})),
        ("list_dir", json!({"path": "/"})),
        ("list_dir", json!({"path": "link_out_dir"})),
        ("list_dir", json!({"path": "link_out_dir/.."})),
        ("search_text", json!({"pattern": "needle", "path": "link_out_dir"})),
        ("search_text", json!({"pattern": "needle", "path": "link_out_file"})),
        ("search_text", json!({"pattern": "needle", "path": "../outside"})),
        ("search_text", json!({"pattern": "needle", "path": "/tmp"})),
    ];
    for (tool, args) in escapes {
        let e = fx.call(tool, args.clone()).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::ToolDenied, "{tool} {args}: {}", e.message);
        assert!(
            ["absolute", "`..`", "symbolic link"].iter().any(|why| e.message.contains(why)),
            "the refusal should say why: {}",
            e.message
        );
    }
    // A search over everything never reaches the outside files either.
    let out = fx.call("search_text", json!({"pattern": SECRET})).await.unwrap();
    assert!(out.starts_with("no matches in "), "{out}");
}

#[tokio::test]
async fn bad_arguments_are_validation_errors() {
    let fx = Fixture::new();
    let bad = [
        ("search_text", json!({"pattern": "("})),
        ("search_text", json!({"pattern": ""})),
        ("search_text", json!({})),
        ("search_text", json!({"pattern": "x", "max_results": 0})),
        ("search_text", json!({"pattern": "x", "max_results": 501})),
        ("read_file", json!({})),
        ("read_file", json!({"path": 7})),
        ("read_file", json!({"path": "a.txt", "offset": -1})),
        ("read_file", json!({"path": "a.txt", "limit": 0})),
        ("read_file", json!({"path": "a.txt", "limit": 2001})),
        ("read_file", json!({"path": "a.txt", "limit": 1.5})),
        ("read_file", json!({"path": "a.txt", "mode": "w"})),
        ("list_dir", json!(["."])),
    ];
    for (tool, args) in bad {
        assert_eq!(fx.code(tool, args.clone()).await, ErrorCode::Validation, "{tool} {args}");
    }
    // An integral float is an integer to JSON Schema, so it is one here too.
    assert_eq!(
        fx.call("read_file", json!({"path": "a.txt", "limit": 1.0})).await.unwrap().lines().next(),
        Some("alpha")
    );
}

#[test]
fn the_root_must_be_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    fs::write(&file, b"x").unwrap();
    assert_eq!(fs_read_toolset(&file).unwrap_err().code, ErrorCode::Config);
    assert_eq!(fs_read_toolset(&dir.path().join("missing")).unwrap_err().code, ErrorCode::Config);
}

#[test]
fn contracts_are_valid_schemas_with_a_stable_hash() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let tools = fs_read_toolset(a.path()).unwrap();
    assert_eq!(tools.name(), "fs-read");
    let names: Vec<&str> = tools.tools().iter().map(|t| t.name()).collect();
    assert_eq!(names, ["read_file", "list_dir", "search_text"]);
    for tool in tools.tools() {
        assert!(jsonschema::meta::is_valid(tool.parameters()), "{}", tool.name());
        let validator = jsonschema::validator_for(tool.parameters()).unwrap();
        assert!(!validator.is_valid(&json!({"unexpected": 1})), "{}", tool.name());
        assert_eq!(tool.version(), "1");
    }
    let schema = |i: usize| jsonschema::validator_for(tools.tools()[i].parameters()).unwrap();
    assert!(schema(0).is_valid(&json!({"path": "a", "offset": 0, "limit": 2000})));
    assert!(!schema(0).is_valid(&json!({"path": "a", "limit": 2001})));
    assert!(schema(1).is_valid(&json!({})));
    assert!(schema(2).is_valid(&json!({"pattern": "x", "path": "src", "max_results": 500})));
    assert!(!schema(2).is_valid(&json!({"pattern": "x", "max_results": 0})));
    // The hash covers the contract only, so the root does not change it; it is pinned so a
    // contract change is a deliberate one (bump the version with it).
    let hash = toolset_hash(tools.tools()).unwrap();
    assert_eq!(toolset_hash(fs_read_toolset(b.path()).unwrap().tools()).unwrap(), hash);
    assert_eq!(hash, "87ebf7cde4ae82b25d19fc016f5e8f6a7026d91f7ca4b901a21539153674e82b");
}

#[cfg(target_os = "linux")]
#[test]
fn an_opened_file_outside_the_root_is_refused() {
    // Stands in for a link swapped in after the path was resolved: the check that runs on
    // the open file sees where it really is.
    let fx = Fixture::new();
    let path = fs::canonicalize(fx.root()).unwrap();
    let dir = cap_std::fs::Dir::open_ambient_dir(&path, cap_std::ambient_authority()).unwrap();
    let root = Root { path, dir };
    let outside = File::open(fx.dir.path().join("outside/secret.txt")).unwrap();
    assert_eq!(root.verify_opened("x", &outside).unwrap_err().code, ErrorCode::ToolDenied);
    let inside = File::open(fx.root().join("a.txt")).unwrap();
    root.verify_opened("a.txt", &inside).unwrap();
}

async fn search_with(bounds: SearchBounds, root: &Path, args: Value) -> String {
    let tools = fs_read_toolset_bounded(root, bounds).unwrap();
    let tool = tools.tools().iter().find(|t| t.name() == "search_text").unwrap().clone();
    tool.call(args).await.unwrap()
}

#[tokio::test]
async fn a_search_stops_early_at_its_scan_budget_and_says_so() {
    let fx = Fixture::new();
    let bounds = SearchBounds { max_scan_bytes: 64, ..SearchBounds::default() };
    let text = search_with(bounds, &fx.root(), json!({"pattern": "needle"})).await;
    assert!(text.contains("[stopped early after scanning"), "{text}");
    let unbounded = search_with(SearchBounds::default(), &fx.root(), json!({"pattern": "needle"})).await;
    assert!(!unbounded.contains("stopped early"), "{unbounded}");
}

#[tokio::test]
async fn a_search_stops_early_at_its_deadline_and_says_so() {
    let fx = Fixture::new();
    let bounds = SearchBounds { timeout: Duration::ZERO, ..SearchBounds::default() };
    let text = search_with(bounds, &fx.root(), json!({"pattern": "needle"})).await;
    assert!(text.contains("[stopped early at the 0 s time limit"), "{text}");
}

#[test]
fn a_pathological_pattern_is_refused_by_the_size_limits() {
    let args = json!({"pattern": "(?:a{1,1000}){1,1000}"});
    let Err(error) = Request::parse(Kind::SearchText, &args) else { panic!("compiled") };
    assert_eq!(error.code, ErrorCode::Validation, "{error}");
}

#[tokio::test]
async fn an_abandoned_search_stops_its_blocking_work() {
    // A tree large enough that a full scan takes a while; the call is dropped at once.
    let dir = tempfile::tempdir().unwrap();
    for i in 0..200 {
        fs::write(dir.path().join(format!("f{i:03}.txt")), "x".repeat(100_000)).unwrap();
    }
    let abandoned = Arc::new(AtomicBool::new(true));
    let limits = Limits {
        deadline: Instant::now() + Duration::from_secs(600),
        bounds: SearchBounds::default(),
        abandoned,
    };
    let path = fs::canonicalize(dir.path()).unwrap();
    let root =
        Root { dir: cap_std::fs::Dir::open_ambient_dir(&path, cap_std::ambient_authority()).unwrap(), path };
    let pattern = Regex::new("y").unwrap();
    let error = search_text(&root, &pattern, ".", 10, &limits).unwrap_err();
    assert_eq!(error.code, ErrorCode::Cancelled);
}
