//! What each kind of call is keyed on: the identity inputs of the journal's identity rules,
//! as structs hashed straight into content keys.
//!
//! Each struct declares its fields in byte order and holds only strings, nulls and nested
//! such structs, plus the caller's JSON values (step deps, call args), so its serde output
//! is its RFC 8785 form whenever those values' is ([`journal::content_key_of`] checks). A
//! call's key then costs one serialization into the hash and no intermediate `Value`. The
//! tests hold every struct equal to the JSON object it stands for.

use serde::Serialize;
use serde_json::Value;

use crate::error::Error;
use crate::journal::{self, ContentKey};

/// An agent call: `{agent_type, model: {effort, spec}, schema_hash, toolset_hash}` and the
/// prompt, or the caller's key in its place.
#[derive(Debug, Serialize)]
pub(crate) struct AgentIdentity<'a> {
    pub(crate) agent_type: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) key: Option<&'a str>,
    pub(crate) kind: &'static str,
    pub(crate) model: ModelIdentity<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) prompt: Option<&'a str>,
    pub(crate) schema_hash: Option<&'a str>,
    pub(crate) toolset_hash: Option<&'a str>,
}

/// The model part of an agent's identity: the requested model, not whoever served it.
#[derive(Debug, Serialize)]
pub(crate) struct ModelIdentity<'a> {
    pub(crate) effort: Option<&'a str>,
    pub(crate) spec: &'a str,
}

impl<'a> AgentIdentity<'a> {
    /// An agent identity keyed on `key` when given, else on `prompt`.
    pub(crate) fn new(prompt: &'a str, key: Option<&'a str>, model: ModelIdentity<'a>) -> Self {
        AgentIdentity {
            agent_type: None,
            key,
            kind: "agent",
            model,
            prompt: if key.is_some() { None } else { Some(prompt) },
            schema_hash: None,
            toolset_hash: None,
        }
    }

    pub(crate) fn key(&self) -> Result<ContentKey, Error> {
        key_of(self, [])
    }
}

/// A step: its label, or the caller's key in its place, and its deps.
#[derive(Debug, Serialize)]
pub(crate) struct StepIdentity<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    body: Option<&'a str>,
    deps: &'a [Value],
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<&'a str>,
}

impl<'a> StepIdentity<'a> {
    pub(crate) fn new(
        label: &'a str,
        key: Option<&'a str>,
        deps: &'a [Value],
        body: Option<&'a str>,
    ) -> Self {
        StepIdentity { body, deps, key, kind: "step", label: if key.is_some() { None } else { Some(label) } }
    }

    pub(crate) fn key(&self) -> Result<ContentKey, Error> {
        key_of(self, self.deps)
    }
}

/// A host-function call (`kind: "call"`) or a child workflow (`kind: "child"`): its name and
/// its arguments, or the caller's key in their place.
#[derive(Debug, Serialize)]
pub(crate) struct CallIdentity<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
    kind: &'static str,
    name: &'a str,
}

impl<'a> CallIdentity<'a> {
    pub(crate) fn new(kind: &'static str, name: &'a str, key: Option<&'a str>, args: &'a Value) -> Self {
        CallIdentity { args: if key.is_some() { None } else { Some(args) }, key, kind, name }
    }

    pub(crate) fn key(&self) -> Result<ContentKey, Error> {
        key_of(self, self.args)
    }
}

/// An external wait: its key.
#[derive(Debug, Serialize)]
pub(crate) struct ExternalIdentity<'a> {
    pub(crate) key: &'a str,
    pub(crate) kind: &'static str,
}

impl ExternalIdentity<'_> {
    pub(crate) fn key(&self) -> Result<ContentKey, Error> {
        key_of(self, [])
    }
}

/// The key of an identity built as a JSON value (the journaled `now`/`random`/`uuid` facts).
pub(crate) fn value_key(identity: &Value) -> Result<ContentKey, Error> {
    key_of(identity, [identity])
}

fn key_of<'v, T: Serialize>(
    identity: &T,
    embedded: impl IntoIterator<Item = &'v Value>,
) -> Result<ContentKey, Error> {
    journal::content_key_of(identity, embedded).map_err(|e| Error::validation(e.to_string()))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// The JSON object each struct stands for, keyed through the `Value` path.
    fn by_value(identity: &Value) -> ContentKey {
        journal::content_key(identity).unwrap()
    }

    /// Text that exercises escaping and ordering: quotes, controls, non-ASCII, astral.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof!["[a-z ]{0,12}", any::<String>(), Just("\"\\\u{0}\u{1f}\u{7f}é😀\u{2028}".to_owned()),]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            text().prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map(text(), inner, 0..4)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn agent_identity_keys_as_its_json(
            prompt in text(),
            key in proptest::option::of(text()),
            agent_type in proptest::option::of(text()),
            effort in proptest::option::of(text()),
            spec in text(),
            schema_hash in proptest::option::of("[0-9a-f]{64}"),
            toolset_hash in proptest::option::of("[0-9a-f]{64}"),
        ) {
            let mut identity = AgentIdentity::new(
                &prompt,
                key.as_deref(),
                ModelIdentity { effort: effort.as_deref(), spec: &spec },
            );
            identity.agent_type = agent_type.as_deref();
            identity.schema_hash = schema_hash.as_deref();
            identity.toolset_hash = toolset_hash.as_deref();
            let mut value = json!({
                "kind": "agent",
                "agent_type": agent_type,
                "model": { "spec": spec, "effort": effort },
                "schema_hash": schema_hash,
                "toolset_hash": toolset_hash,
            });
            match &key {
                Some(key) => value["key"] = json!(key),
                None => value["prompt"] = json!(prompt),
            }
            prop_assert_eq!(identity.key().unwrap(), by_value(&value));
        }

        #[test]
        fn step_identity_keys_as_its_json(
            label in text(),
            key in proptest::option::of(text()),
            deps in prop::collection::vec(json_value(), 0..3),
            body in proptest::option::of("[0-9a-f]{64}"),
        ) {
            let mut value = json!({ "kind": "step", "deps": deps });
            match &key {
                Some(key) => value["key"] = json!(key),
                None => value["label"] = json!(label),
            }
            if let Some(body) = &body {
                value["body"] = json!(body);
            }
            let identity = StepIdentity::new(&label, key.as_deref(), &deps, body.as_deref());
            prop_assert_eq!(identity.key().unwrap(), by_value(&value));
        }

        #[test]
        fn call_and_child_identities_key_as_their_json(
            kind in prop_oneof![Just("call"), Just("child")],
            name in text(),
            key in proptest::option::of(text()),
            args in json_value(),
        ) {
            let mut value = json!({ "kind": kind, "name": name });
            match &key {
                Some(key) => value["key"] = json!(key),
                None => value["args"] = args.clone(),
            }
            let identity = CallIdentity::new(kind, &name, key.as_deref(), &args);
            prop_assert_eq!(identity.key().unwrap(), by_value(&value));
        }

        #[test]
        fn external_identity_keys_as_its_json(key in text()) {
            let value = json!({ "kind": "external", "key": key });
            prop_assert_eq!(ExternalIdentity { key: &key, kind: "external" }.key().unwrap(), by_value(&value));
        }
    }
}
