use super::*;

#[test]
fn the_wire_shape_is_calls_and_usd_or_unbounded_with_a_reason() {
    let bounded = CostBound::Bounded { max_agent_calls: 3, worst_case: Money::from_nano_usd(1_500_000_000) };
    assert_eq!(
        serde_json::to_value(&bounded).unwrap(),
        serde_json::json!({"max_agent_calls": 3, "worst_case_nano_usd": 1_500_000_000_i64, "worst_case_usd": 1.5})
    );
    // A bound written before the exact amount was added still reads.
    let older: CostBound =
        serde_json::from_value(serde_json::json!({"max_agent_calls": 3, "worst_case_usd": 1.5})).unwrap();
    assert_eq!(older, bounded);
    let unbounded = CostBound::Unbounded { reason: "a `while` loop".into() };
    assert_eq!(serde_json::to_value(&unbounded).unwrap(), serde_json::json!({"unbounded": "a `while` loop"}));
    for bound in [bounded, unbounded] {
        let back: CostBound = serde_json::from_value(serde_json::to_value(&bound).unwrap()).unwrap();
        assert_eq!(back, bound);
    }
}

#[test]
fn exceeds_is_true_for_unbounded_and_above_the_ceiling() {
    let one = Money::from_usd(1.0).unwrap();
    let bounded = CostBound::Bounded { max_agent_calls: 1, worst_case: one };
    assert!(!bounded.exceeds(one));
    assert!(bounded.exceeds(Money::from_usd(0.99).unwrap()));
    assert!(CostBound::Unbounded { reason: "x".into() }.exceeds(Money::MAX));
}

mod pricing {
    use std::sync::Arc;

    use serde_json::json;

    use super::super::*;
    use crate::engine::{AgentProfile, Engine, EngineBuilder};
    use crate::model::{InvocationRole, ModelRef, Price, PriceTable};
    use crate::store::MemoryStore;

    fn usd(x: f64) -> Money {
        Money::from_usd(x).unwrap()
    }

    /// $1/M input, $10/M output: 1,000 and 10,000 nano-USD a token.
    fn table() -> PriceTable {
        let mut prices = PriceTable::shipped();
        prices.set("test:m", Price::flat(usd(1.0), usd(10.0)));
        prices.set("test:p", Price::flat(usd(2.0), usd(20.0)));
        prices.set("test:dear", Price::flat(usd(10.0), usd(100.0)));
        prices
    }

    fn builder(prices: PriceTable) -> EngineBuilder {
        let store = Arc::new(MemoryStore::new());
        Engine::builder(store).prices(prices)
    }

    fn bound(engine: &Engine, source: &str) -> CostBound {
        let rhai = engine.dialect("rhai").unwrap();
        cost_bound(engine, rhai.as_ref(), source, &json!({}), None)
    }

    fn worst(engine: &Engine, source: &str) -> (u64, i64) {
        match bound(engine, source) {
            CostBound::Bounded { max_agent_calls, worst_case } => (max_agent_calls, worst_case.nano_usd()),
            CostBound::Unbounded { reason } => panic!("unbounded: {reason}"),
        }
    }

    fn why(engine: &Engine, source: &str) -> String {
        match bound(engine, source) {
            CostBound::Unbounded { reason } => reason,
            bounded => panic!("expected unbounded, got {bounded:?}"),
        }
    }

    #[test]
    fn a_literal_prompt_is_its_estimate_plus_the_output_cap_per_call() {
        let engine = builder(table()).build().unwrap();
        let prompt = "x".repeat(4000);
        // 1000 input tokens at $1/M + 8192 output tokens at $10/M, three times.
        let src = format!(r#"for i in 0..3 {{ agent("{prompt}", #{{model: "test:m"}}) }}"#);
        assert_eq!(worst(&engine, &src), (3, 3 * (1_000_000 + 81_920_000)));
        let src = format!(r#"agent("{prompt}", #{{model: "test:m", max_output_tokens: 100}})"#);
        assert_eq!(worst(&engine, &src), (1, 1_000_000 + 1_000_000));
    }

    #[test]
    fn a_computed_prompt_is_priced_at_the_context_bound() {
        let engine = builder(table()).build().unwrap();
        // The inner call is echo's (free); the outer reads 5000 input tokens at most.
        let src =
            r#"agent(agent("q"), #{model: "test:m", max_output_tokens: 100, max_context_tokens: 5000})"#;
        assert_eq!(worst(&engine, src), (2, 5_000_000 + 1_000_000));
        let src = r#"agent(agent("q"), #{model: "test:m", max_output_tokens: 100})"#;
        assert_eq!(worst(&engine, src), (2, 200_000_000 + 1_000_000));
    }

    #[test]
    fn a_schema_adds_two_re_prompts_that_grow_the_input() {
        let engine = builder(table()).build().unwrap();
        let prompt = "a".repeat(400);
        let src = format!(
            r#"agent("{prompt}", #{{model: "test:m", max_output_tokens: 100, schema: #{{type: "object"}}}})"#
        );
        // First turn: (400 + 43 quarters for the schema's 17 characters of JSON, counted by its
        // pieces) / 4 = 111 tokens + 32 for the schema instruction; each re-prompt adds the
        // reply twice (200), the schema (11) and 256.
        let inputs = [143u64, 143 + 467, 143 + 2 * 467];
        let expected: u64 = inputs.iter().map(|i| i * 1000 + 1_000_000).sum();
        assert_eq!(worst(&engine, &src), (1, expected as i64));
    }

    #[test]
    fn tools_take_max_turns_with_later_turns_at_the_context_bound() {
        let dir = tempfile::tempdir().unwrap();
        let toolset = crate::agent::fs_read_toolset(dir.path()).unwrap();
        let mut request = crate::provider::ChatRequest::new("m", vec![crate::provider::Message::user("hi")]);
        request.tools = crate::agent::cost::tool_specs(toolset.tools());
        let first = crate::provider::estimate_request_tokens(&request);
        let engine = builder(table()).toolset(toolset).build().unwrap();
        let src = r#"agent("hi", #{model: "test:m", tools: ["fs-read"], max_turns: 3, max_output_tokens: 100, max_context_tokens: 1000})"#;
        let later = first.max(1000);
        let expected = (first * 1000 + 1_000_000) + 2 * (later * 1000 + 1_000_000);
        assert_eq!(worst(&engine, src), (1, expected as i64));
        // Without max_turns: the engine default of 32 turns.
        let src = r#"agent("hi", #{model: "test:m", tools: ["fs-read"], max_output_tokens: 100, max_context_tokens: 1000})"#;
        let expected = (first * 1000 + 1_000_000) + 31 * (later * 1000 + 1_000_000);
        assert_eq!(worst(&engine, src), (1, expected as i64));
    }

    #[test]
    fn the_model_comes_from_the_option_the_profile_or_the_role_route() {
        let profile = AgentProfile {
            model: Some(ModelRef::parse("test:p").unwrap()),
            max_output_tokens: Some(10),
            ..AgentProfile::default()
        };
        let engine = builder(table())
            .profile("writer", profile)
            .role_model(InvocationRole::Synthesize, ModelRef::parse("test:m").unwrap())
            .role_model(InvocationRole::Loop, ModelRef::parse("test:dear").unwrap())
            .build()
            .unwrap();
        // "hi" is one token. The profile's model and cap: $2/M in, $20/M out.
        assert_eq!(worst(&engine, r#"agent("hi", #{profile: "writer"})"#), (1, 2_000 + 10 * 20_000));
        // The option beats the profile.
        assert_eq!(
            worst(&engine, r#"agent("hi", #{profile: "writer", model: "test:m"})"#),
            (1, 1_000 + 10 * 10_000)
        );
        // The role's route, and the loop role's by default.
        assert_eq!(
            worst(&engine, r#"agent("hi", #{role: "synthesize", max_output_tokens: 10})"#),
            (1, 1_000 + 10 * 10_000)
        );
        assert_eq!(worst(&engine, r#"agent("hi", #{max_output_tokens: 10})"#), (1, 10_000 + 10 * 100_000));
    }

    #[test]
    fn a_call_that_may_fail_over_is_priced_at_its_dearest_model_and_est_cost_raises_it() {
        let engine = builder(table())
            .fallbacks(ModelRef::parse("test:m").unwrap(), vec![ModelRef::parse("test:dear").unwrap()])
            .build()
            .unwrap();
        assert_eq!(
            worst(&engine, r#"agent("hi", #{model: "test:m", max_output_tokens: 10})"#),
            (1, 10_000 + 10 * 100_000)
        );
        assert_eq!(
            worst(&engine, r#"agent("hi", #{model: "test:p", est_cost: 5.0})"#).1,
            usd(5.0).nano_usd()
        );
    }

    #[test]
    fn unpriced_models_are_unbounded_unless_allowed_then_the_flat_reserve() {
        let engine = builder(table()).build().unwrap();
        let reason = why(&engine, r#"agent("hi", #{model: "test:nope"})"#);
        assert!(reason.contains("test:nope") && reason.contains("no price"), "{reason}");
        let engine = builder(table().allow_unpriced(true)).build().unwrap();
        assert_eq!(worst(&engine, r#"agent("hi", #{model: "test:nope"}); agent("x")"#), (2, 500_000_000));
    }

    #[test]
    fn computed_options_that_decide_the_price_are_unbounded() {
        let engine = builder(table()).build().unwrap();
        let reason = why(&engine, r#"let m = agent("which model?"); agent("hi", #{model: m})"#);
        assert!(reason.contains("the model of the agent call at line 1"), "{reason}");
        let reason = why(&engine, r#"let o = agent("opts?"); agent("hi", o)"#);
        assert!(reason.contains("computed"), "{reason}");
        let reason = why(&engine, "let i = 0;\nwhile i < 2 { agent(\"a\"); i += 1; }");
        assert!(reason.contains("`while` loop") && reason.ends_with("(line 2, column 1)"), "{reason}");
        let reason = why(&engine, r#"agent("hi", #{profile: "ghost"})"#);
        assert!(reason.contains("ghost"), "{reason}");
    }

    #[test]
    fn the_echo_model_is_free_and_exceeds_compares_with_the_ceiling() {
        let engine = builder(table()).build().unwrap();
        let bound = bound(&engine, r#"parallel([|| agent("a"), || agent("b")])"#);
        assert_eq!(bound, CostBound::Bounded { max_agent_calls: 2, worst_case: Money::ZERO });
        assert!(!bound.exceeds(Money::ZERO));
        let dear = super::super::cost_bound(
            &engine,
            engine.dialect("rhai").unwrap().as_ref(),
            r#"for x in args.xs { agent(x, #{model: "test:m", max_output_tokens: 100}) }"#,
            &json!({"xs": ["a", "b", "c"]}),
            Some(usd(0.001)),
        );
        assert_eq!(
            dear,
            CostBound::Bounded { max_agent_calls: 3, worst_case: Money::from_nano_usd(3 * 1_001_000) }
        );
        assert!(dear.exceeds(usd(0.001)));
        assert!(!dear.exceeds(usd(0.01)));
    }
}
