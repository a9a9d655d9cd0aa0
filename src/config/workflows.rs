//! `[workflows]` in `cairn.toml` and the `workflows/` folder beside it: script child
//! workflows, registered on the engine under their names (a table key, or a file's stem),
//! each described for the planner's card by its leading comment and the arguments it declares
//! (its `@args` line) or reads.
//! A table entry replaces a folder file of the same name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::engine::{EngineBuilder, Script, valid_workflow_name};
use crate::error::Error;

/// The folder beside the config whose scripts register under their stems.
pub(crate) const FOLDER: &str = "workflows";

/// The dialect of a child script, by its extension.
fn dialect_of(path: &Path) -> Option<&'static str> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("rhai") => Some("rhai"),
        Some("lua") => Some("lua"),
        _ => None,
    }
}

/// Checks one `[workflows]` entry: a valid name and a `.rhai` or `.lua` path.
pub(crate) fn check_entry(name: &str, path: &Path) -> Result<(), String> {
    if !valid_workflow_name(name) {
        return Err(format!("workflows.{name}: a workflow name is 1 to 64 letters, digits, '_', '-' or '.'"));
    }
    if dialect_of(path).is_none() {
        return Err(format!(
            "workflows.{name} = {:?}: a child workflow is a .rhai or .lua file",
            path.display()
        ));
    }
    Ok(())
}

/// Every child script: the folder's files by stem, then the table's entries over them.
fn children(
    table: &BTreeMap<String, PathBuf>,
    dir: Option<&Path>,
) -> Result<BTreeMap<String, PathBuf>, Error> {
    let mut found: BTreeMap<String, PathBuf> = BTreeMap::new();
    if let Some(folder) = dir.map(|dir| dir.join(FOLDER))
        && folder.is_dir()
    {
        let listing = std::fs::read_dir(&folder)
            .map_err(|e| Error::config(format!("cannot read {}: {e}", folder.display())))?;
        let mut paths: Vec<PathBuf> = listing.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        paths.sort();
        for path in paths {
            if !path.is_file() || dialect_of(&path).is_none() {
                continue;
            }
            let Some(stem) = path.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else { continue };
            if !valid_workflow_name(&stem) {
                return Err(Error::config(format!(
                    "{}: a workflow name is 1 to 64 letters, digits, '_', '-' or '.'",
                    path.display()
                )));
            }
            if table.contains_key(&stem) {
                continue;
            }
            if let Some(other) = found.get(&stem) {
                return Err(Error::config(format!(
                    "{} and {} both register workflow {stem:?}; rename one, or name one in [workflows]",
                    other.display(),
                    path.display()
                )));
            }
            found.insert(stem, path);
        }
    }
    for (name, path) in table {
        found.insert(name.clone(), path.clone());
    }
    Ok(found)
}

/// Registers every child script on `builder`, with its description for the planner's card.
///
/// # Errors
/// `config` for a file that cannot be read, a malformed `@args` declaration, or a name two
/// folder files share.
pub(crate) fn register(
    table: &BTreeMap<String, PathBuf>,
    dir: Option<&Path>,
    mut builder: EngineBuilder,
) -> Result<EngineBuilder, Error> {
    for (name, path) in children(table, dir)? {
        let Some(dialect) = dialect_of(&path) else { continue };
        let source = std::fs::read_to_string(&path)
            .map_err(|e| Error::config(format!("workflows.{name}: cannot read {}: {e}", path.display())))?;
        let summary = crate::script::child_args::summary(&source);
        let accepts = crate::script::child_args::accepts_schema(&source)
            .map_err(|e| Error::config(format!("workflows.{name} ({}): {e}", path.display())))?;
        builder = builder.script_workflow(Script::new(dialect, &name, &source)).describe_workflow(
            &name,
            &summary,
            Some(accepts),
        );
    }
    Ok(builder)
}
