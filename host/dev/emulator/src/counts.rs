//! Counters of API writes (and of no-op writes) per verb and resource.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::verb::Verb;

/// `(verb, resource)` → count; resource is the plural, with `/status` for the
/// status subresource (e.g. `("apply", "valkeyclusters/status")`).
pub type WriteCounts = BTreeMap<(String, String), u64>;

#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub writes: WriteCounts,
    pub noops: WriteCounts,
}

impl Counts {
    pub fn record(&mut self, verb: Verb, resource: &str, changed: bool) {
        let map = if changed {
            &mut self.writes
        } else {
            &mut self.noops
        };
        *map.entry((verb.as_str().to_string(), resource.to_string()))
            .or_default() += 1;
    }

    pub fn total(&self) -> u64 {
        self.writes.values().sum()
    }

    pub fn to_json(&self) -> Value {
        let rows = |m: &WriteCounts| -> Vec<Value> {
            m.iter()
                .map(|((v, r), n)| json!({"verb": v, "resource": r, "count": n}))
                .collect()
        };
        json!({
            "total": self.total(),
            "writes": rows(&self.writes),
            "noops": rows(&self.noops),
        })
    }
}
