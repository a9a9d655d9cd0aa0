//! The pre-scan's tests: edits keep every line and column; hostile text stays bounded.

use super::*;

/// The character count of every line, which the edits must keep.
fn shape(text: &str) -> Vec<usize> {
    text.split('\n').map(|line| line.chars().count()).collect()
}

#[test]
fn edits_keep_every_line_and_column() {
    let sources = [
        "const r = await Promise.all(xs.map((t) => agent(t)));\nconsole.log(r.length);",
        "for (let i = 0;\n i < n; i++) { x === null }",
        "def f(a, b):\n    return a and not b or None\nlocal é = 'ab' .. \"c\" ~= nil then\nend",
        "let m = {a: 1}; let e = {}; let f = function (x) { x }; let g = lambda y: y; # note",
        "`${ {a: 1} } ${x.length}` typeof new Error(\"m\") f\"{x}\" x => x",
    ];
    for source in sources {
        let mut found = prescan(source);
        assert!(!found.diagnostics.is_empty(), "{source}");
        let rewritten = apply(source, &mut found.edits);
        assert_eq!(shape(&rewritten), shape(source), "{source}\n{rewritten}");
    }
}

#[test]
fn hostile_text_is_bounded_and_panic_free() {
    let nested = ["(", "{a: ", "`${", ")=>", "lambda ", "for (", "x.length "]
        .map(|piece| piece.repeat(20_000))
        .concat();
    for source in [nested.as_str(), "'", "`", "#", "--", "=>", "f\"", "for (", "function", "\u{0}\u{10ffff}"]
    {
        let mut found = prescan(source);
        let rewritten = apply(source, &mut found.edits);
        assert_eq!(shape(&rewritten), shape(source));
    }
}
