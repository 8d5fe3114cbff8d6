//! NodePort allocation, owned by Service. The range is the API server's
//! `--service-node-port-range` (default 30000-32767).

use std::collections::BTreeSet;
use std::ops::RangeInclusive;

use crate::holdings::Holdings;

pub(crate) const NODE_PORT_RANGE: RangeInclusive<i64> = 30000..=32767;

/// Which Service (`ns/name`) holds each allocated node port.
#[derive(Debug)]
pub(crate) struct NodePorts {
    range: RangeInclusive<i64>,
    used: Holdings<i64>,
}

impl Default for NodePorts {
    fn default() -> Self {
        Self::new(NODE_PORT_RANGE)
    }
}

impl NodePorts {
    pub fn new(range: RangeInclusive<i64>) -> Self {
        Self {
            range,
            used: Holdings::default(),
        }
    }

    pub fn range(&self) -> &RangeInclusive<i64> {
        &self.range
    }

    pub fn owner(&self, port: i64) -> Option<&str> {
        self.used.owner(port)
    }

    /// Makes `ports` exactly the set held by `owner`.
    pub fn sync(&mut self, owner: &str, ports: &[i64]) {
        self.used.sync(owner, ports);
    }

    /// A random free port that is neither allocated nor in `taken`.
    pub fn pick(&self, taken: &BTreeSet<i64>) -> Option<i64> {
        let free = |p: i64| !taken.contains(&p) && self.owner(p).is_none();
        for _ in 0..64 {
            let p = fastrand::i64(self.range.clone());
            if free(p) {
                return Some(p);
            }
        }
        self.range.clone().find(|p| free(*p))
    }

    pub fn allocated(&self) -> usize {
        self.used.len()
    }
}
