//! Which permission chain a call runs under, and permission rules as written in `cairn.toml`
//! (`[permissions]` and `[profiles.NAME.permissions]`).

use std::time::Duration;

use serde::Deserialize;

use super::{Permission, Permissions};
use crate::error::Error;

/// The chain for one call: the profile's rules when it declares any, else the engine's; the
/// engine's host hook stays in the chain either way.
pub(crate) fn permissions_for_call(engine: &Permissions, profile: Option<&Permissions>) -> Permissions {
    match profile {
        Some(rules) => Permissions { hook: engine.hook.clone(), ..rules.clone() },
        None => engine.clone(),
    }
}

/// A `[permissions]` table:
///
/// ```toml
/// [permissions]
/// default = "allow"        # allow | ask | deny: what happens when no rule matches
/// deny = ["search_text"]   # tool-name globs (`*` matches any run of characters)
/// ask = ["read_*"]         # these suspend the run until `cairn resolve RUN approve:...`
/// ask_timeout_ms = 3600000 # an unanswered ask counts as denied after this long
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PermissionsConfig {
    #[serde(default)]
    default: Option<String>,
    #[serde(default)]
    deny: Vec<String>,
    #[serde(default)]
    ask: Vec<String>,
    #[serde(default)]
    ask_timeout_ms: Option<u64>,
}

impl PermissionsConfig {
    /// The chain these rules declare; `at` names the table in errors.
    pub(crate) fn build(&self, at: &str) -> Result<Permissions, Error> {
        let default = match self.default.as_deref() {
            None | Some("allow") => Permission::Allow,
            Some("ask") => Permission::Ask,
            Some("deny") => Permission::Deny("no permission rule allows it (the default is deny)".to_owned()),
            Some(other) => {
                return Err(Error::config(format!("{at}.default: {other:?} is not allow, ask or deny")));
            }
        };
        for pattern in self.deny.iter().chain(&self.ask) {
            if pattern.is_empty() {
                return Err(Error::config(format!("{at}: an empty tool-name pattern")));
            }
        }
        if self.ask_timeout_ms == Some(0) {
            return Err(Error::config(format!("{at}.ask_timeout_ms: must be at least 1")));
        }
        Ok(Permissions {
            deny: self.deny.clone(),
            ask: self.ask.clone(),
            hook: None,
            default,
            ask_timeout: self.ask_timeout_ms.map(Duration::from_millis),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Permissions, Error> {
        toml::from_str::<PermissionsConfig>(text)
            .map_err(|e| Error::config(e.to_string()))
            .and_then(|c| c.build("permissions"))
    }

    #[test]
    fn rules_parse_into_the_chain() {
        let p =
            parse("default = \"deny\"\ndeny = [\"rm_*\"]\nask = [\"read_*\"]\nask_timeout_ms = 5").unwrap();
        assert!(matches!(p.decide("rm_x", &serde_json::Value::Null), Permission::Deny(_)));
        assert_eq!(p.decide("read_file", &serde_json::Value::Null), Permission::Ask);
        assert!(matches!(p.decide("other", &serde_json::Value::Null), Permission::Deny(_)));
        assert_eq!(p.ask_timeout, Some(Duration::from_millis(5)));
        assert_eq!(parse("").unwrap().decide("x", &serde_json::Value::Null), Permission::Allow);
        for bad in ["default = \"maybe\"", "deny = [\"\"]", "ask_timeout_ms = 0", "asks = []"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_profile_replaces_the_rules_and_keeps_the_hook() {
        let mut engine = Permissions::allow_all();
        engine.hook = Some(std::sync::Arc::new(|tool, _| (tool == "x").then_some(Permission::Ask)));
        let profile = Permissions { deny: vec!["y".into()], ..Permissions::allow_all() };
        let chain = permissions_for_call(&engine, Some(&profile));
        assert!(matches!(chain.decide("y", &serde_json::Value::Null), Permission::Deny(_)));
        assert_eq!(chain.decide("x", &serde_json::Value::Null), Permission::Ask);
    }
}
