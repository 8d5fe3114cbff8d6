//! NodePort allocation (30000-32767), owned by Service.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;

pub(crate) const NODE_PORT_RANGE: RangeInclusive<i64> = 30000..=32767;

/// Which Service (`ns/name`) holds each allocated node port.
#[derive(Debug, Default)]
pub(crate) struct NodePorts {
    used: BTreeMap<i64, String>,
}

impl NodePorts {
    pub fn owner(&self, port: i64) -> Option<&str> {
        self.used.get(&port).map(String::as_str)
    }

    /// Makes `ports` exactly the set held by `owner`.
    pub fn sync(&mut self, owner: &str, ports: &[i64]) {
        self.used.retain(|_, o| o != owner);
        for p in ports {
            self.used.insert(*p, owner.to_string());
        }
    }

    /// A random free port that is neither allocated nor in `taken`.
    pub fn pick(&self, taken: &BTreeSet<i64>) -> Option<i64> {
        let free = |p: i64| !taken.contains(&p) && self.owner(p).is_none();
        for _ in 0..64 {
            let p = fastrand::i64(NODE_PORT_RANGE);
            if free(p) {
                return Some(p);
            }
        }
        NODE_PORT_RANGE.clone().find(|p| free(*p))
    }

    pub fn allocated(&self) -> usize {
        self.used.len()
    }
}
