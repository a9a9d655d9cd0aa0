use super::*;

#[test]
fn the_wire_shape_is_calls_and_usd_or_unbounded_with_a_reason() {
    let bounded = CostBound::Bounded { max_agent_calls: 3, worst_case: Money::from_nano_usd(1_500_000_000) };
    assert_eq!(
        serde_json::to_value(&bounded).unwrap(),
        serde_json::json!({"max_agent_calls": 3, "worst_case_usd": 1.5})
    );
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
