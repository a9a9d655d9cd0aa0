//! Claim consistency (minimal): after an accepted finish, the claims in the result that cite
//! a child's output (`... [c3]`) are paired with that child's excerpt (a pure fold: at most 40
//! pairs, 400 characters each side), and one structured-output judge call under role
//! `synthesize` rules on each pair. The judge call is journaled like any agent call (a resume
//! replays it at zero cost) and the findings are one decision entry.

use serde_json::{Value, json};

use super::orch::Orch;
use super::roster::{ChildStatus, truncate};
use super::validate::{citations, result_text};
use super::verdict::{ClaimFinding, ClaimVerdict, Verdict};
use crate::engine::{AgentOptions, OnError};
use crate::error::Error;
use crate::model::InvocationRole;

/// Most pairs one pass judges.
pub(crate) const MAX_PAIRS: usize = 40;
/// Characters of a claim and of an excerpt.
pub(crate) const EXCERPT_CHARS: usize = 400;

/// A claim paired with an excerpt.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pair {
    pub(crate) handle: String,
    pub(crate) claim: String,
    pub(crate) excerpt: String,
}

/// The pure fold: each sentence (or line) of `text` that cites a child with an output, paired
/// with that child's excerpt, in order, at most [`MAX_PAIRS`].
pub(crate) fn pairs(text: &str, outputs: &[(String, String)]) -> Vec<Pair> {
    let mut found = Vec::new();
    for sentence in text.split(['\n', '.', '!', '?']).map(str::trim).filter(|s| !s.is_empty()) {
        for handle in citations(sentence) {
            let Some((_, output)) = outputs.iter().find(|(h, _)| *h == handle) else { continue };
            if found.len() == MAX_PAIRS {
                return found;
            }
            found.push(Pair {
                handle,
                claim: truncate(sentence, EXCERPT_CHARS),
                excerpt: truncate(output.trim(), EXCERPT_CHARS),
            });
        }
    }
    found
}

fn judge_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "rulings": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "pair": { "type": "integer", "minimum": 0 },
                        "verdict": { "type": "string", "enum": ["supported", "contradicted", "unsupported"] }
                    },
                    "required": ["pair", "verdict"]
                }
            }
        },
        "required": ["rulings"]
    })
}

/// Runs the pass over an accepted result: the findings, journaled.
pub(crate) async fn pass(orch: &Orch, result: &Value) -> Result<Vec<ClaimFinding>, Error> {
    let outputs: Vec<(String, String)> = orch
        .lock()
        .roster
        .iter()
        .filter(|c| c.effective_status() == ChildStatus::Ok)
        .map(|c| (c.handle.clone(), c.output_text()))
        .collect();
    let pairs = pairs(&result_text(result), &outputs);
    let mut findings = Vec::new();
    if !pairs.is_empty() {
        let mut prompt = String::from(
            "For each numbered pair, rule whether the source excerpt supports the claim, contradicts it, \
             or says nothing about it (unsupported). Answer with one ruling per pair.\n",
        );
        for (i, pair) in pairs.iter().enumerate() {
            prompt.push_str(&format!(
                "\nPair {i}:\nClaim: {}\nSource [{}]: {}\n",
                pair.claim, pair.handle, pair.excerpt
            ));
        }
        let opts = AgentOptions {
            label: Some("claim-judge".into()),
            key: Some("orchestrate:claims".into()),
            role: Some(InvocationRole::Synthesize),
            schema: Some(judge_schema()),
            on_error: Some(OnError::Throw),
            ..AgentOptions::default()
        };
        let ruled = orch.ctx.agent(&prompt, opts).await?;
        for (i, pair) in pairs.into_iter().enumerate() {
            let verdict = ruled["rulings"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["pair"].as_u64() == Some(i as u64))
                .and_then(|r| serde_json::from_value(r["verdict"].clone()).ok())
                .unwrap_or(ClaimVerdict::Unsupported);
            findings.push(ClaimFinding {
                handle: pair.handle,
                claim: pair.claim,
                excerpt: pair.excerpt,
                verdict,
            });
        }
    }
    let contradicted = findings.iter().filter(|f| f.verdict == ClaimVerdict::Contradicted).count();
    orch.decide("claims", 0, |_| Verdict::Claims { findings: findings.clone() })?;
    if contradicted > 0 {
        orch.roster_line(&format!("claim consistency: {contradicted} contradicted claim(s)"));
    }
    Ok(findings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cited_sentences_pair_with_their_childs_excerpt() {
        let outputs =
            vec![("c0".to_owned(), "Paris is the capital.".to_owned()), ("c1".to_owned(), "x".repeat(900))];
        let found = pairs("Paris is the capital [c0]. Lyon is big [c9]. Both [c0] [c1]\nno cite", &outputs);
        assert_eq!(found.len(), 3);
        assert_eq!(found[0].handle, "c0");
        assert_eq!(found[0].claim, "Paris is the capital [c0]");
        assert_eq!(found[2].excerpt.chars().count(), EXCERPT_CHARS);
        let many = "[c0]. ".repeat(100);
        assert_eq!(pairs(&many, &outputs).len(), MAX_PAIRS);
    }
}
