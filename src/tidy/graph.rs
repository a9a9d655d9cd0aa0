//! The import graph of `src/`: which file's code names an item of which other file, read
//! from the syntax trees (`syn`) of every non-test file.
//!
//! An edge `a.rs → b.rs` means code in `a.rs` names something `b.rs` defines: through a
//! `use` (any path: `crate::`, `super::`, `self::`, a child module), or a path in a type,
//! an expression or a pattern. Re-exports are transparent: `pub use run::RunState` in
//! `engine/mod.rs` adds no edge of its own, and `super::RunState` in a sibling resolves to
//! `run.rs`, where the struct lives. A `mod x;` declaration is no edge either. Test-only
//! code (`#[cfg(test)]` items and the files they declare) is left out: tests may reach
//! anything.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// A module path from the crate root (`["engine", "ctx"]`).
type ModulePath = Vec<String>;

/// The import graph: file → files it names, with one path text per edge as evidence.
#[derive(Debug, Default)]
pub(super) struct Graph {
    pub(super) edges: BTreeMap<String, BTreeMap<String, String>>,
}

/// One source file as a module of the crate.
struct SourceFile {
    /// Relative to the crate root, `/`-separated (`src/engine/ctx.rs`).
    name: String,
    module: ModulePath,
    syntax: syn::File,
}

/// Every name a module brings into scope with `use`, and what it stands for.
#[derive(Default)]
struct Scopes {
    /// Module (inline modules included) → file that holds it.
    files: HashMap<ModulePath, String>,
    /// Module → imported name → the absolute path it stands for.
    aliases: HashMap<ModulePath, HashMap<String, ModulePath>>,
}

/// Reads the crate under `root` (its `src/`) and builds the graph.
///
/// # Errors
/// A file that cannot be read or parsed, named with the parser's message.
pub(super) fn build(root: &Path) -> Result<Graph, String> {
    let files = read_crate(root)?;
    let mut scopes = Scopes::default();
    for file in &files {
        let mut collector =
            Collector { file: file.name.clone(), stack: vec![file.module.clone()], scopes: &mut scopes };
        collector.scopes.files.insert(file.module.clone(), file.name.clone());
        collector.items(&file.syntax.items);
    }
    let mut graph = Graph::default();
    for file in &files {
        let mut walker =
            Walker { file: &file.name, stack: vec![file.module.clone()], scopes: &scopes, graph: &mut graph };
        for item in &file.syntax.items {
            walker.item(item);
        }
    }
    Ok(graph)
}

/// Every non-test `.rs` file of the library under `root/src`, parsed (the binary's
/// `main.rs` is another crate).
fn read_crate(root: &Path) -> Result<Vec<SourceFile>, String> {
    let src = root.join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths)?;
    paths.sort();
    let mut parsed = Vec::new();
    for path in paths {
        let relative = path.strip_prefix(root).map_err(|e| e.to_string())?;
        let name = relative.to_string_lossy().replace('\\', "/");
        if name == "src/main.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{name}: {e}"))?;
        let syntax = syn::parse_file(&text).map_err(|e| format!("{name}: {e}"))?;
        parsed.push(SourceFile { module: module_of(&name), name, syntax });
    }
    // Files declared by `#[cfg(test)] mod x;` (and everything under them) are test-only.
    let mut test_modules: BTreeSet<ModulePath> = BTreeSet::new();
    for file in &parsed {
        for item in &file.syntax.items {
            if let syn::Item::Mod(module) = item
                && module.content.is_none()
                && is_test_only(&module.attrs)
            {
                let mut path = file.module.clone();
                path.push(module.ident.to_string());
                test_modules.insert(path);
            }
        }
    }
    parsed.retain(|file| !test_modules.iter().any(|test| file.module.starts_with(test)));
    Ok(parsed)
}

/// Every `.rs` file under `dir`, test files included.
pub(super) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// `src/lib.rs` → `[]`, `src/engine/mod.rs` → `[engine]`, `src/engine/ctx.rs` → `[engine, ctx]`.
fn module_of(name: &str) -> ModulePath {
    let inner = name.trim_start_matches("src/").trim_end_matches(".rs");
    let mut parts: ModulePath = inner.split('/').map(str::to_owned).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// `#[cfg(test)]`: the item exists only in the test build.
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && matches!(&attr.meta, syn::Meta::List(list) if list.tokens.to_string() == "test")
    })
}

fn has_attrs_test_only(item: &syn::Item) -> bool {
    let attrs = match item {
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        _ => return false,
    };
    is_test_only(attrs)
}

/// One leaf of a `use` tree: the path it imports and the name it binds (none for a glob).
fn use_leaves(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            use_leaves(&path.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(name) => {
            let ident = name.ident.to_string();
            if ident == "self" {
                out.push((prefix.clone(), prefix.last().cloned()));
            } else {
                let mut path = prefix.clone();
                path.push(ident.clone());
                out.push((path, Some(ident)));
            }
        }
        syn::UseTree::Rename(rename) => {
            let mut path = prefix.clone();
            let ident = rename.ident.to_string();
            if ident != "self" {
                path.push(ident);
            }
            out.push((path, Some(rename.rename.to_string())));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), None)),
        syn::UseTree::Group(group) => {
            for tree in &group.items {
                use_leaves(tree, prefix, out);
            }
        }
    }
}

impl Scopes {
    /// The absolute path a path written in module `scope` stands for, or `None` for a path
    /// outside the crate (std, a dependency) or a name local to the file.
    fn absolute(&self, scope: &ModulePath, segments: &[String]) -> Option<ModulePath> {
        let (first, rest) = segments.split_first()?;
        let mut base = match first.as_str() {
            "crate" => Vec::new(),
            "self" => scope.clone(),
            "super" => {
                let mut base = scope.clone();
                base.pop();
                let mut rest = rest;
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop();
                    rest = &rest[1..];
                }
                base.extend(rest.iter().cloned());
                return Some(base);
            }
            name => {
                if let Some(target) = self.aliases.get(scope).and_then(|a| a.get(name)) {
                    target.clone()
                } else {
                    let mut child = scope.clone();
                    child.push(name.to_owned());
                    if !self.files.contains_key(&child) {
                        return None;
                    }
                    child
                }
            }
        };
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The file that defines what `path` names, following re-exports.
    fn file_of(&self, path: &[String]) -> Option<&str> {
        let mut path = path.to_vec();
        for _ in 0..16 {
            let module_len = (0..=path.len()).rev().find(|&n| self.files.contains_key(&path[..n]))?;
            let module = path[..module_len].to_vec();
            let Some(name) = path.get(module_len) else {
                return self.files.get(&module).map(String::as_str);
            };
            match self.aliases.get(&module).and_then(|a| a.get(name)) {
                Some(target) => {
                    let mut next = target.clone();
                    next.extend(path[module_len + 1..].iter().cloned());
                    if next == path {
                        return self.files.get(&module).map(String::as_str);
                    }
                    path = next;
                }
                None => return self.files.get(&module).map(String::as_str),
            }
        }
        None
    }
}

/// First pass: every module's file and imported names.
struct Collector<'s> {
    file: String,
    stack: Vec<ModulePath>,
    scopes: &'s mut Scopes,
}

impl Collector<'_> {
    fn scope(&self) -> ModulePath {
        self.stack.last().cloned().unwrap_or_default()
    }

    fn items(&mut self, items: &[syn::Item]) {
        for item in items {
            if has_attrs_test_only(item) {
                continue;
            }
            match item {
                syn::Item::Use(item_use) => {
                    let mut leaves = Vec::new();
                    use_leaves(&item_use.tree, &mut Vec::new(), &mut leaves);
                    let scope = self.scope();
                    for (path, name) in leaves {
                        let Some(name) = name else { continue };
                        // Resolved lazily: the alias keeps the written path made absolute.
                        let absolute = match path.first().map(String::as_str) {
                            Some("crate" | "self" | "super") => self.scopes.absolute(&scope, &path),
                            _ => {
                                let mut child = scope.clone();
                                child.extend(path.iter().cloned());
                                Some(child)
                            }
                        };
                        if let Some(absolute) = absolute {
                            self.scopes.aliases.entry(scope.clone()).or_default().insert(name, absolute);
                        }
                    }
                }
                syn::Item::Mod(module) => {
                    let mut path = self.scope();
                    path.push(module.ident.to_string());
                    if let Some((_, content)) = &module.content {
                        self.scopes.files.insert(path.clone(), self.file.clone());
                        self.stack.push(path);
                        self.items(content);
                        self.stack.pop();
                    }
                }
                _ => {}
            }
        }
    }
}

/// Second pass: every path in the code, resolved to the file it names.
struct Walker<'a> {
    file: &'a str,
    stack: Vec<ModulePath>,
    scopes: &'a Scopes,
    graph: &'a mut Graph,
}

impl Walker<'_> {
    fn scope(&self) -> ModulePath {
        self.stack.last().cloned().unwrap_or_default()
    }

    fn edge(&mut self, scope: &ModulePath, segments: &[String]) {
        // A relative `use` path whose first segment is neither an alias nor a child module
        // is an external crate's.
        let Some(absolute) = self.scopes.absolute(scope, segments) else { return };
        let Some(target) = self.scopes.file_of(&absolute) else { return };
        if target != self.file {
            self.graph
                .edges
                .entry(self.file.to_owned())
                .or_default()
                .entry(target.to_owned())
                .or_insert_with(|| segments.join("::"));
        }
    }

    fn item(&mut self, item: &syn::Item) {
        if has_attrs_test_only(item) {
            return;
        }
        match item {
            syn::Item::Use(item_use) => {
                // A re-export is an alias, not a use: whoever names it is pointed past it.
                if !matches!(item_use.vis, syn::Visibility::Inherited) {
                    return;
                }
                let mut leaves = Vec::new();
                use_leaves(&item_use.tree, &mut Vec::new(), &mut leaves);
                let scope = self.scope();
                for (path, _) in leaves {
                    let path = match path.first().map(String::as_str) {
                        Some("crate" | "self" | "super") => path,
                        // `use child::X` in 2018 paths: relative to this module.
                        _ => {
                            let mut child = vec!["self".to_owned()];
                            child.extend(path);
                            child
                        }
                    };
                    self.edge(&scope, &path);
                }
            }
            syn::Item::Mod(module) => {
                if let Some((_, content)) = &module.content {
                    let mut path = self.scope();
                    path.push(module.ident.to_string());
                    self.stack.push(path);
                    for item in content {
                        self.item(item);
                    }
                    self.stack.pop();
                }
            }
            other => self.visit_item(other),
        }
    }
}

impl<'ast> Visit<'ast> for Walker<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        match item {
            syn::Item::Use(_) | syn::Item::Mod(_) => self.item(item),
            _ if has_attrs_test_only(item) => {}
            _ => syn::visit::visit_item(self, item),
        }
    }

    fn visit_impl_item_fn(&mut self, function: &'ast syn::ImplItemFn) {
        if !is_test_only(&function.attrs) {
            syn::visit::visit_impl_item_fn(self, function);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        let scope = self.scope();
        // A lone name that is not imported is local (a variable, a generic), even when a child
        // module shares it: a module alone is never a type or a value.
        let imported = self.scopes.aliases.get(&scope).is_some_and(|a| a.contains_key(&segments[0]));
        if segments.len() > 1 || imported || path.leading_colon.is_some() {
            self.edge(&scope, &segments);
        }
        syn::visit::visit_path(self, path);
    }

    // `pub(super)`, `pub(in crate::x)`: who may see an item, not what it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}
}

/// The graph's strongly connected components of more than one file, each sorted, in order.
pub(super) fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Tarjan's algorithm, iterative over a small graph (a few hundred files).
    struct State<'g> {
        edges: &'g BTreeMap<String, BTreeSet<String>>,
        index: HashMap<&'g str, usize>,
        low: HashMap<&'g str, usize>,
        on_stack: BTreeSet<&'g str>,
        stack: Vec<&'g str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn connect<'g>(state: &mut State<'g>, node: &'g str) {
        state.index.insert(node, state.next);
        state.low.insert(node, state.next);
        state.next += 1;
        state.stack.push(node);
        state.on_stack.insert(node);
        if let Some(targets) = state.edges.get(node) {
            for target in targets {
                let target = target.as_str();
                if !state.index.contains_key(target) {
                    connect(state, target);
                    let low = state.low[node].min(state.low[target]);
                    state.low.insert(node, low);
                } else if state.on_stack.contains(target) {
                    let low = state.low[node].min(state.index[target]);
                    state.low.insert(node, low);
                }
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(top) = state.stack.pop() {
                state.on_stack.remove(top);
                component.push(top.to_owned());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                state.out.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: HashMap::new(),
        low: HashMap::new(),
        on_stack: BTreeSet::new(),
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for node in edges.keys() {
        if !state.index.contains_key(node.as_str()) {
            connect(&mut state, node);
        }
    }
    state.out.sort();
    state.out
}

/// A shortest circle through `start` inside `members`, as the files in order.
pub(super) fn shortest_circle(
    edges: &BTreeMap<String, BTreeSet<String>>,
    members: &[String],
    start: &str,
) -> Vec<String> {
    let inside: BTreeSet<&str> = members.iter().map(String::as_str).collect();
    let mut previous: HashMap<&str, &str> = HashMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for target in edges.get(node).into_iter().flatten() {
            let target = target.as_str();
            if !inside.contains(target) {
                continue;
            }
            if target == start {
                let mut circle = vec![node.to_owned()];
                let mut at = node;
                while let Some(&before) = previous.get(at) {
                    circle.push(before.to_owned());
                    at = before;
                }
                circle.reverse();
                return circle;
            }
            if target != start && !previous.contains_key(target) {
                previous.insert(target, node);
                queue.push_back(target);
            }
        }
    }
    vec![start.to_owned()]
}
