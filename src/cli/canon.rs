//! `cairn canon`: canonical JSON and content key of stdin, for debugging "why did my call
//! re-key?".

use std::io::{Read, Write};

use super::exit::{Exit, fail};
use crate::journal::{canonical_json, content_key_of_canonical};

/// Reads one JSON document from `input`, writes its canonical form and content key.
pub(super) fn run(input: &mut dyn Read, output: &mut dyn Write) -> Exit {
    let mut text = String::new();
    if let Err(err) = input.read_to_string(&mut text) {
        return fail(Exit::Usage, format!("cannot read stdin: {err}"));
    }
    let value: serde_json::Value = match serde_json::from_str(&text) {
        Ok(value) => value,
        Err(err) => return fail(Exit::Usage, format!("stdin is not valid JSON: {err}")),
    };
    let canonical = match canonical_json(&value) {
        Ok(canonical) => canonical,
        Err(err) => return fail(Exit::Usage, err),
    };
    let key = content_key_of_canonical(&canonical);
    match writeln!(output, "{canonical}\nkey: {key}") {
        Ok(()) => Exit::Ok,
        Err(err) => fail(Exit::Error, format!("cannot write stdout: {err}")),
    }
}
