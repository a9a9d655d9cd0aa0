//! Finish validation: deterministic host validators over the finish result, and the bounded
//! repair loop (a rejection goes back to the model as the `finish` tool's error; every verdict
//! is journaled, so a resume replays it without running a validator again).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::roster::{ChildStatus, State};
use crate::error::Error;

/// A child as a validator sees it.
#[derive(Debug, Clone)]
pub struct ChildView {
    /// Its handle (`c0`, ...).
    pub handle: String,
    /// Its profile.
    pub profile: String,
    /// How it stands when `finish` validates.
    pub status: ChildStatus,
    /// Its output as text (empty unless `ok`).
    pub output: String,
}

/// A host validator over the finish result: the problems it finds (empty: none). Must be
/// deterministic: a resume replays its journaled verdict and never calls it again.
pub trait FinishValidator: Send + Sync + std::fmt::Debug {
    /// Its name, prefixed to its problems.
    fn name(&self) -> &str;
    /// The problems with `result` given the roster.
    fn check(&self, result: &Value, children: &[ChildView]) -> Vec<String>;
}

/// A pattern the result must match at least `min` times.
#[derive(Debug, Clone)]
pub struct PatternRule {
    /// The regex.
    pub pattern: regex::Regex,
    /// The fewest matches.
    pub min: u32,
}

/// The finish validators.
#[derive(Debug, Clone)]
pub struct FinishValidation {
    /// Sections the result must have: a Markdown heading (`## Name`) in the text, or a
    /// top-level key of an object result (case-insensitive).
    pub required_sections: Vec<String>,
    /// Patterns the result text must match, each at least its `min` times.
    pub patterns: Vec<PatternRule>,
    /// Evidence: the result must cite (`[c3]`) at least this many distinct children that
    /// settled `ok`, and cite no child that did not.
    pub min_cited_children: Option<u32>,
    /// Custom validators.
    pub custom: Vec<Arc<dyn FinishValidator>>,
    /// Rejections the model may repair before the finish fails; default 1.
    pub max_repairs: u32,
}

impl Default for FinishValidation {
    fn default() -> FinishValidation {
        FinishValidation {
            required_sections: Vec::new(),
            patterns: Vec::new(),
            min_cited_children: None,
            custom: Vec::new(),
            max_repairs: 1,
        }
    }
}

/// The JSON form.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ValidationWire {
    #[serde(default)]
    required_sections: Vec<String>,
    #[serde(default)]
    patterns: Vec<PatternWire>,
    min_cited_children: Option<u32>,
    max_repairs: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PatternWire {
    pattern: String,
    #[serde(default = "one")]
    min: u32,
}

fn one() -> u32 {
    1
}

impl ValidationWire {
    pub(crate) fn into_validation(self) -> Result<FinishValidation, Error> {
        let mut patterns = Vec::new();
        for rule in self.patterns {
            let pattern = regex::RegexBuilder::new(&rule.pattern)
                .size_limit(1 << 20)
                .build()
                .map_err(|e| Error::validation(format!("validation pattern {:?}: {e}", rule.pattern)))?;
            patterns.push(PatternRule { pattern, min: rule.min });
        }
        Ok(FinishValidation {
            required_sections: self.required_sections,
            patterns,
            min_cited_children: self.min_cited_children,
            custom: Vec::new(),
            max_repairs: self.max_repairs.unwrap_or(1),
        })
    }
}

/// The roster as validators see it.
pub(crate) fn views(state: &State) -> Vec<ChildView> {
    state
        .roster
        .iter()
        .map(|c| ChildView {
            handle: c.handle.clone(),
            profile: c.profile.clone(),
            status: c.effective_status(),
            output: if c.effective_status() == ChildStatus::Ok { c.output_text() } else { String::new() },
        })
        .collect()
}

/// The result as text: a string as is, anything else as pretty JSON.
pub(crate) fn result_text(result: &Value) -> String {
    match result {
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    }
}

/// Handles cited as `[cN]` in `text`, in order of first citation.
pub(crate) fn citations(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("[c") {
        let after = &rest[open + 2..];
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        if !digits.is_empty() && after[digits.len()..].starts_with(']') {
            let handle = format!("c{digits}");
            if !found.contains(&handle) {
                found.push(handle);
            }
        }
        rest = &rest[open + 2..];
    }
    found
}

/// Every problem the validators find, in a fixed order.
pub(crate) fn check(validation: &FinishValidation, result: &Value, children: &[ChildView]) -> Vec<String> {
    let text = result_text(result);
    let mut problems = Vec::new();
    for section in &validation.required_sections {
        let wanted = section.trim().to_lowercase();
        let as_key = result.as_object().is_some_and(|map| map.keys().any(|k| k.to_lowercase() == wanted));
        let as_heading = text.lines().any(|line| {
            let line = line.trim_start();
            line.starts_with('#') && line.trim_start_matches('#').trim().to_lowercase() == wanted
        });
        if !as_key && !as_heading {
            problems.push(format!("the result has no section {section:?}"));
        }
    }
    for rule in &validation.patterns {
        let found = rule.pattern.find_iter(&text).count() as u32;
        if found < rule.min {
            problems.push(format!(
                "the result matches /{}/ {found} time(s), at least {} are required",
                rule.pattern.as_str(),
                rule.min
            ));
        }
    }
    if let Some(min) = validation.min_cited_children {
        let cited = citations(&text);
        let mut good = 0;
        for handle in &cited {
            match children.iter().find(|c| &c.handle == handle) {
                Some(child) if child.status == ChildStatus::Ok => good += 1,
                Some(child) => problems
                    .push(format!("the result cites {handle}, which settled {}", child.status.as_str())),
                None => problems.push(format!("the result cites {handle}, which is not a child")),
            }
        }
        if good < min {
            problems.push(format!(
                "the result cites {good} successful child output(s) as evidence ([c0], [c1], ...), at least {min} are required"
            ));
        }
    }
    for validator in &validation.custom {
        for problem in validator.check(result, children) {
            problems.push(format!("{}: {problem}", validator.name()));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn child(handle: &str, status: ChildStatus, output: &str) -> ChildView {
        ChildView { handle: handle.into(), profile: "p".into(), status, output: output.into() }
    }

    #[test]
    fn sections_patterns_and_citations_are_checked() {
        let validation = FinishValidation {
            required_sections: vec!["Findings".into(), "Risks".into()],
            patterns: vec![PatternRule { pattern: regex::Regex::new(r"CVE-\d+").unwrap(), min: 2 }],
            min_cited_children: Some(2),
            ..FinishValidation::default()
        };
        let children = [child("c0", ChildStatus::Ok, "a"), child("c1", ChildStatus::Error, "")];
        let text = json!("## Findings\nCVE-1 per [c0] and [c1]");
        let problems = check(&validation, &text, &children);
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems[0].contains("Risks"));
        assert!(problems[1].contains("1 time(s)"));
        assert!(problems[2].contains("c1, which settled error"));
        let good = json!({"findings": "CVE-1, CVE-2 [c0] [c2]", "risks": ""});
        let children = [child("c0", ChildStatus::Ok, "a"), child("c2", ChildStatus::Ok, "b")];
        assert!(check(&validation, &good, &children).is_empty());
    }

    #[test]
    fn citations_are_found_in_order_once() {
        assert_eq!(citations("x [c2] y [c10] [c2] [cx] [c]"), vec!["c2", "c10"]);
    }
}
