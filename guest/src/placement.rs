//! `spec.scheduling`'s spread shorthands: which pods to keep apart, on which
//! axis, how strongly. The host renders each [`Spread`] onto every pod (see
//! the contract); here they are checked and listed.

use shardgate_contract::model::{Axis, Scheduling, Scope, Spread, SpreadSet, Strength};

/// Each axis with its field name and spread set.
fn axes(s: &Scheduling) -> [(Axis, &'static str, &SpreadSet); 2] {
    [(Axis::Node, "node", &s.node), (Axis::Zone, "zone", &s.zone)]
}

/// Each scope of a set with its field name and strength.
fn scopes(set: &SpreadSet) -> [(Scope, &'static str, Strength); 3] {
    [
        (Scope::Shard, "shard", set.shard),
        (Scope::Primaries, "primaries", set.primaries),
        (Scope::Pods, "pods", set.pods),
    ]
}

/// The spreads to render, node axis first, in scope order; disabled ones
/// left out.
pub fn spreads(s: &Scheduling) -> Vec<Spread> {
    axes(s)
        .into_iter()
        .flat_map(|(axis, _, set)| {
            scopes(set)
                .into_iter()
                .filter(|(_, _, strength)| *strength != Strength::Disabled)
                .map(move |(scope, _, strength)| Spread {
                    axis,
                    scope,
                    required: strength == Strength::Required,
                })
        })
        .collect()
}

/// Errors, each with its field: two spreads of the same strength on one
/// axis (as upstream refuses: the scheduler could not honour both as one
/// rule of that strength, and which one wins would be an accident).
pub fn check(s: &Scheduling) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (_, axis, set) in axes(s) {
        for strength in [Strength::Preferred, Strength::Required] {
            let same: Vec<&str> = scopes(set)
                .into_iter()
                .filter(|(_, _, st)| *st == strength)
                .map(|(_, name, _)| name)
                .collect();
            if same.len() > 1 {
                out.push((
                    format!("spec.scheduling.{axis}"),
                    format!(
                        "{} are all {strength:?}: keep one spread of each strength per axis \
                         (set the others to Disabled; node.shard is Preferred by default)",
                        same.join(" and ")
                    ),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use Strength::{Disabled as D, Preferred as P, Required as R};

    fn set(shard: Strength, primaries: Strength, pods: Strength) -> SpreadSet {
        SpreadSet {
            shard,
            primaries,
            pods,
        }
    }

    #[test]
    fn spreads_are_listed_node_axis_first_without_disabled_ones() {
        let s = Scheduling {
            node: set(P, D, R),
            zone: set(D, R, D),
        };
        let got: Vec<(Axis, Scope, bool)> = spreads(&s)
            .into_iter()
            .map(|s| (s.axis, s.scope, s.required))
            .collect();
        assert_eq!(
            got,
            [
                (Axis::Node, Scope::Shard, false),
                (Axis::Node, Scope::Pods, true),
                (Axis::Zone, Scope::Primaries, true),
            ]
        );
        assert!(spreads(&Scheduling::default()).is_empty());
    }

    #[test]
    fn two_spreads_of_one_strength_on_one_axis_are_refused() {
        // (node, zone) => fields refused
        let cases: [(SpreadSet, SpreadSet, Vec<&str>); 5] = [
            (set(P, D, D), set(D, D, D), vec![]),
            (set(P, R, D), set(P, R, D), vec![]),
            (set(P, D, P), set(D, D, D), vec!["spec.scheduling.node"]),
            (
                set(D, R, R),
                set(P, P, P),
                vec!["spec.scheduling.node", "spec.scheduling.zone"],
            ),
            (set(R, R, P), set(D, D, D), vec!["spec.scheduling.node"]),
        ];
        for (node, zone, want) in cases {
            let got: Vec<String> = check(&Scheduling { node, zone })
                .into_iter()
                .map(|(f, _)| f)
                .collect();
            assert_eq!(got, want, "{node:?} {zone:?}");
        }
        let (_, message) = &check(&Scheduling {
            node: set(P, D, P),
            zone: set(D, D, D),
        })[0];
        assert!(
            message.contains("shard and pods are all Preferred"),
            "{message}"
        );
    }
}
