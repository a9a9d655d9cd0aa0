//! `[server]` in `cairn.toml`: what `cairn serve` reads beyond its flags.
//!
//! ```toml
//! [server]
//! allowed_hosts = ["cairn.example.com"]   # Host names answered besides the listen address
//!
//! [server.tokens.scraper]                 # a token named "scraper"
//! env = "CAIRN_METRICS_TOKEN"             # the environment variable holding its secret
//! scopes = ["metrics"]                    # read, write, metrics
//! ```
//!
//! Secrets never sit in the file: each token names the environment variable that holds it.
//! `CAIRN_SERVER_TOKEN`, when set, is one more token with every scope.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::service::{ApiToken, Scope};

/// `[server]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerConfig {
    /// `Host` names answered besides the listen address (`host` for any port, or `host:port`).
    #[serde(default)]
    pub(crate) allowed_hosts: Vec<String>,
    /// Named tokens (`[server.tokens.NAME]`).
    #[serde(default)]
    pub(crate) tokens: BTreeMap<String, TokenConfig>,
}

/// `[server.tokens.NAME]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TokenConfig {
    /// The environment variable holding the token's secret.
    env: String,
    /// What it may do.
    scopes: Vec<Scope>,
}

impl ServerConfig {
    /// The tokens the server accepts: each configured one, its secret read with `env` (a
    /// variable that is unset or empty is an error: a token meant to guard the server must
    /// not silently vanish), and `all_scopes` (the `CAIRN_SERVER_TOKEN` variable's name) when set.
    pub(crate) fn tokens(
        &self,
        all_scopes: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Vec<ApiToken>, String> {
        let mut tokens = Vec::new();
        if let Some(secret) = env(all_scopes).filter(|s| !s.is_empty()) {
            tokens.push(ApiToken { name: all_scopes.to_owned(), secret, scopes: Scope::ALL.to_vec() });
        }
        for (name, token) in &self.tokens {
            if token.scopes.is_empty() {
                return Err(format!("[server.tokens.{name}]: scopes is empty (read, write, metrics)"));
            }
            let Some(secret) = env(&token.env).filter(|s| !s.is_empty()) else {
                return Err(format!(
                    "[server.tokens.{name}]: the environment variable {} is unset or empty",
                    token.env
                ));
            };
            if tokens.iter().any(|t: &ApiToken| t.secret == secret) {
                return Err(format!("[server.tokens.{name}]: its secret is the same as another token's"));
            }
            tokens.push(ApiToken { name: name.clone(), secret, scopes: token.scopes.clone() });
        }
        Ok(tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_come_from_their_variables_with_their_scopes() {
        let config: ServerConfig = toml::from_str(
            "[tokens.scraper]\nenv = \"M\"\nscopes = [\"metrics\"]\n[tokens.ci]\nenv = \"W\"\nscopes = [\"read\", \"write\"]",
        )
        .unwrap();
        let env = |name: &str| match name {
            "M" => Some("m-secret".to_owned()),
            "W" => Some("w-secret".to_owned()),
            "ALL" => Some("all-secret".to_owned()),
            _ => None,
        };
        let tokens = config.tokens("ALL", env).unwrap();
        let named: Vec<_> = tokens.iter().map(|t| (t.name.as_str(), t.scopes.len())).collect();
        assert_eq!(named, [("ALL", 3), ("ci", 2), ("scraper", 1)]);
        assert!(config.tokens("ALL", |_| None).unwrap_err().contains("is unset"));
        assert!(toml::from_str::<ServerConfig>("[tokens.x]\nenv = \"M\"\nscopes = [\"admin\"]").is_err());
    }
}
