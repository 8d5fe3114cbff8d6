//! Values (node ports, ClusterIPs) held by owners (`ns/name` of a Service),
//! indexed both ways so that re-syncing one owner costs only its own values,
//! not every allocation in the cluster.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug)]
pub(crate) struct Holdings<T: Ord + Copy> {
    owner_of: BTreeMap<T, String>,
    held_by: BTreeMap<String, BTreeSet<T>>,
}

impl<T: Ord + Copy> Default for Holdings<T> {
    fn default() -> Self {
        Self {
            owner_of: BTreeMap::new(),
            held_by: BTreeMap::new(),
        }
    }
}

impl<T: Ord + Copy> Holdings<T> {
    pub fn owner(&self, value: T) -> Option<&str> {
        self.owner_of.get(&value).map(String::as_str)
    }

    /// Makes `values` exactly the set `owner` holds.
    pub fn sync(&mut self, owner: &str, values: &[T]) {
        if let Some(old) = self.held_by.remove(owner) {
            for v in old {
                if self.owner_of.get(&v).is_some_and(|o| o == owner) {
                    self.owner_of.remove(&v);
                }
            }
        }
        if values.is_empty() {
            return;
        }
        let mut held = BTreeSet::new();
        for v in values {
            if let Some(previous) = self.owner_of.insert(*v, owner.to_string())
                && previous != owner
                && let Some(theirs) = self.held_by.get_mut(&previous)
            {
                theirs.remove(v);
            }
            held.insert(*v);
        }
        self.held_by.insert(owner.to_string(), held);
    }

    pub fn len(&self) -> usize {
        self.owner_of.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sync_replaces_only_that_owners_values() {
        let mut h = Holdings::default();
        h.sync("ns/a", &[1, 2]);
        h.sync("ns/b", &[3]);
        h.sync("ns/a", &[2, 4]);
        assert_eq!(h.owner(1), None);
        assert_eq!(h.owner(2), Some("ns/a"));
        assert_eq!(h.owner(3), Some("ns/b"));
        assert_eq!(h.owner(4), Some("ns/a"));
        assert_eq!(h.len(), 3);
        h.sync("ns/a", &[]);
        assert_eq!(h.len(), 1);
        // A value taken over by another owner leaves the first owner's set,
        // so the first owner's next sync cannot free it.
        h.sync("ns/c", &[3]);
        h.sync("ns/b", &[]);
        assert_eq!(h.owner(3), Some("ns/c"));
    }
}
