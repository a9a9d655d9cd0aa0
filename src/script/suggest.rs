//! "Did you mean" suggestions: the closest known name by edit distance.
//!
//! A suggestion is what turns a diagnostic into a one-step repair for the planner, so it is only
//! offered when it is likely right: a distance of at most a third of the name's length (at
//! least 1), with ties going to the alphabetically first candidate so output is stable.

/// The candidate closest to `name`, if one is close enough to be the likely intent.
pub(crate) fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let name_len = name.chars().count();
    let limit = (name_len / 3).max(1);
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in candidates {
        if candidate == name {
            continue;
        }
        let distance = if candidate.eq_ignore_ascii_case(name) { 0 } else { edit_distance(name, candidate) };
        if distance > limit || distance >= name_len {
            continue;
        }
        let better = match best {
            None => true,
            Some((best_distance, best_name)) => {
                distance < best_distance || (distance == best_distance && candidate < best_name)
            }
        };
        if better {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// Formats the ` (did you mean 'x'?)` suffix, or nothing.
pub(crate) fn suffix<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    match did_you_mean(name, candidates) {
        Some(candidate) => format!(" (did you mean '{candidate}'?)"),
        None => String::new(),
    }
}

/// Optimal string alignment distance: insertions, deletions, substitutions and adjacent
/// transpositions each cost one, the common typos.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rolling rows: two back (for transpositions), one back, and the current one.
    let mut two_back = vec![0; b.len() + 1];
    let mut one_back: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut value = (one_back[j] + 1).min(current[j - 1] + 1).min(one_back[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                value = value.min(two_back[j - 2] + 1);
            }
            current[j] = value;
        }
        std::mem::swap(&mut two_back, &mut one_back);
        std::mem::swap(&mut one_back, &mut current);
    }
    one_back[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("reseacher", "researcher"), 1);
        assert_eq!(edit_distance("max_turn", "max_turns"), 1);
        assert_eq!(edit_distance("agnet", "agent"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn suggestions() {
        let names = ["researcher", "writer", "critic"];
        assert_eq!(did_you_mean("reseacher", names), Some("researcher"));
        assert_eq!(did_you_mean("Writer", names), Some("writer"));
        assert_eq!(did_you_mean("banana", names), None);
        assert_eq!(did_you_mean("x", ["y"]), None, "a one-letter name never suggests a different letter");
        assert_eq!(suffix("critc", names), " (did you mean 'critic'?)");
    }
}
