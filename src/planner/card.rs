//! The profile card: what the engine has registered, rendered for a planner model.
//!
//! The card lists every agent profile (description, model, estimated cost, toolsets), every
//! toolset with its tools (description and argument schema), every host function and every
//! child workflow (description and what it accepts, where the host described them). Only
//! registered names appear; lint refuses any other name, so the card and the linter agree on
//! what a script may use. The text is byte-stable for the same registrations: every list is
//! sorted and schemas are printed in canonical JSON (RFC 8785), so the card can enter the
//! planning run's id.

use std::fmt::Write as _;

use serde_json::Value;

use crate::engine::{Described, Engine};

/// Renders the profile card of `engine`'s registrations. Dialect-neutral: it names what may be
/// used, and the dialect's own API card says how to call it.
///
/// ```
/// use std::sync::Arc;
/// use cairn::{AgentProfile, Engine, MemoryStore};
///
/// let store = Arc::new(MemoryStore::new());
/// let engine = Engine::builder(store)
///     .profile("researcher", AgentProfile { description: "Finds primary sources.".into(), ..Default::default() })
///     .build()
///     .unwrap();
/// let card = cairn::profile_card(&engine);
/// assert!(card.contains("- researcher: Finds primary sources."));
/// assert_eq!(card, cairn::profile_card(&engine)); // byte-stable
/// ```
pub fn profile_card(engine: &Engine) -> String {
    let inner = engine.inner();
    let mut card = String::from(
        "# Registered names\n\nA script may use only the names below; lint rejects any other profile, toolset, \
         host function or child workflow.\n",
    );
    let default_model = inner.default_model.to_string();

    card.push_str("\n## Agent profiles (the `profile` option of agent)\n");
    let mut profiles: Vec<_> = inner.profiles.iter().collect();
    profiles.sort_by(|a, b| a.0.cmp(b.0));
    if profiles.is_empty() {
        card.push_str("(none registered: leave `profile` out)\n");
    }
    for (name, profile) in profiles {
        let _ = write!(card, "- {name}: {}", one_line(&profile.description, "(no description)"));
        let model =
            profile.model.as_ref().map_or_else(|| format!("{default_model} (default)"), |m| m.to_string());
        let _ = write!(card, " | model: {model}");
        if let Some(cost) = profile.est_cost {
            let _ = write!(card, " | est. cost per call: {cost}");
        }
        if !profile.tools.is_empty() {
            let mut tools = profile.tools.clone();
            tools.sort();
            let _ = write!(card, " | toolsets: {}", tools.join(", "));
        }
        card.push('\n');
    }

    card.push_str("\n## Toolsets (the `tools` option of agent)\n");
    let mut toolsets: Vec<_> = inner.toolsets.iter().collect();
    toolsets.sort_by(|a, b| a.0.cmp(b.0));
    if toolsets.is_empty() {
        card.push_str("(none registered: leave `tools` out)\n");
    }
    for (name, toolset) in toolsets {
        let _ = writeln!(card, "- {name}:");
        let (mut tools, unlisted) = toolset.listed();
        tools.sort_by(|a, b| a.name().cmp(b.name()));
        for source in unlisted {
            let _ = writeln!(card, "  - (the tools of {source}, not listed: it was not reached)");
        }
        for tool in tools {
            let _ = writeln!(
                card,
                "  - {}: {} | accepts: {}",
                tool.name(),
                one_line(tool.description(), "(no description)"),
                canonical(tool.parameters())
            );
        }
    }

    let mut host_functions: Vec<_> = inner.host_functions.keys().collect();
    host_functions.sort();
    card.push_str("\n## Host functions (the name given to the host-call global)\n");
    described_list(&mut card, &host_functions, &inner.host_docs);

    let mut workflows: Vec<_> = inner.workflows.keys().collect();
    workflows.sort();
    card.push_str("\n## Child workflows (the name given to workflow)\n");
    described_list(&mut card, &workflows, &inner.workflow_docs);
    card
}

fn described_list(card: &mut String, names: &[&String], docs: &std::collections::HashMap<String, Described>) {
    if names.is_empty() {
        card.push_str("(none registered)\n");
    }
    for name in names {
        let doc = docs.get(name.as_str());
        let description = doc.map_or("(no description)", |d| d.description.as_str());
        let _ = write!(card, "- {name}: {}", one_line(description, "(no description)"));
        if let Some(accepts) = doc.and_then(|d| d.accepts.as_ref()) {
            let _ = write!(card, " | accepts: {}", canonical(accepts));
        }
        card.push('\n');
    }
}

/// Text on one line: newlines folded to spaces, so a description cannot forge card structure.
fn one_line<'a>(text: &'a str, empty: &'a str) -> std::borrow::Cow<'a, str> {
    let text = text.trim();
    if text.is_empty() {
        return empty.into();
    }
    if text.contains(['\n', '\r']) {
        text.split(['\n', '\r']).map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ").into()
    } else {
        text.into()
    }
}

/// A schema in canonical JSON (sorted keys), so the card is byte-stable.
fn canonical(value: &Value) -> String {
    crate::journal::canonical_json(value).unwrap_or_else(|_| value.to_string())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use crate::engine::AgentProfile;
    use crate::{Engine, MemoryStore, Workflow};

    fn engine(reverse: bool) -> Engine {
        let store = Arc::new(MemoryStore::new());
        let mut builder = Engine::builder(store);
        let mut names = vec!["writer", "researcher", "critic"];
        if reverse {
            names.reverse();
        }
        for name in names {
            builder = builder.profile(
                name,
                AgentProfile {
                    description: format!("the {name}\nsecond line"),
                    est_cost: Some(crate::Money::from_usd(0.05).unwrap()),
                    ..Default::default()
                },
            );
        }
        builder
            .host_function("fetch_issue", |v| async move { Ok(v) })
            .describe_host_function(
                "fetch_issue",
                "Fetches one issue.",
                Some(json!({"type": "object", "required": ["number"], "properties": {"number": {"type": "integer"}}})),
            )
            .host_function("undocumented", |v| async move { Ok(v) })
            .workflow(Workflow::new("summarize", |_, v| async move { Ok(v) }))
            .describe_workflow("summarize", "Summarizes a text.", None)
            .build()
            .unwrap()
    }

    #[test]
    fn the_card_lists_every_registration_sorted_and_is_byte_stable() {
        let card = super::profile_card(&engine(false));
        assert_eq!(card, super::profile_card(&engine(true)), "registration order must not matter");
        let critic = card.find("- critic:").unwrap();
        let researcher = card.find("- researcher:").unwrap();
        assert!(critic < researcher, "{card}");
        assert!(
            card.contains(
                "- critic: the critic second line | model: echo:default (default) | est. cost per call: $0.05"
            ),
            "{card}"
        );
        assert!(
            card.contains(
                r#"- fetch_issue: Fetches one issue. | accepts: {"properties":{"number":{"type":"integer"}},"required":["number"],"type":"object"}"#
            ),
            "{card}"
        );
        assert!(card.contains("- undocumented: (no description)"), "{card}");
        assert!(card.contains("- summarize: Summarizes a text."), "{card}");
        assert!(card.contains("## Toolsets (the `tools` option of agent)\n(none registered"), "{card}");
    }
}
