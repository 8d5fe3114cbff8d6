//! Which nodes get objects: every node of the spec, and the departing nodes
//! the topology still holds. One order for all of them (by shard, then by
//! node), so the node list, the Services and the endpoints line up.

use std::collections::BTreeMap;

use shardgate_contract::model::NodeRef;

/// The nodes to render, shard by shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    shards: Vec<(u32, Vec<u32>)>,
}

impl Layout {
    /// `shards` shards of `nodes` nodes each, plus `departing`.
    pub fn new(shards: u32, nodes: u32, departing: &[NodeRef]) -> Self {
        let mut map: BTreeMap<u32, Vec<u32>> =
            (0..shards).map(|s| (s, (0..nodes).collect())).collect();
        for d in departing {
            let list = map.entry(d.shard).or_default();
            if let Err(at) = list.binary_search(&d.node) {
                list.insert(at, d.node);
            }
        }
        Layout {
            shards: map.into_iter().collect(),
        }
    }

    /// Each shard with its nodes, in order.
    pub fn shards(&self) -> impl Iterator<Item = (u32, &[u32])> + '_ {
        self.shards.iter().map(|(s, n)| (*s, n.as_slice()))
    }

    /// Every (shard, node), in order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.shards
            .iter()
            .flat_map(|(s, nodes)| nodes.iter().map(move |n| (*s, *n)))
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|(_, n)| n.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One past the highest shard index.
    pub fn shard_span(&self) -> u32 {
        self.shards.last().map_or(0, |(s, _)| s + 1)
    }

    /// One past the highest node index of any shard.
    pub fn node_span(&self) -> u32 {
        self.shards
            .iter()
            .filter_map(|(_, n)| n.last())
            .max()
            .map_or(0, |n| n + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(shard: u32, node: u32) -> NodeRef {
        NodeRef { shard, node }
    }

    #[test]
    fn departing_nodes_join_their_shards_in_order() {
        // (shards, nodes, departing) => every (shard, node)
        type Case = (u32, u32, Vec<NodeRef>, Vec<(u32, u32)>);
        let cases: [Case; 4] = [
            (2, 1, vec![], vec![(0, 0), (1, 0)]),
            (1, 1, vec![at(0, 2)], vec![(0, 0), (0, 2)]),
            (1, 2, vec![at(2, 0), at(0, 1)], vec![(0, 0), (0, 1), (2, 0)]),
            (0, 1, vec![at(1, 1), at(1, 0)], vec![(1, 0), (1, 1)]),
        ];
        for (shards, nodes, departing, want) in cases {
            let l = Layout::new(shards, nodes, &departing);
            assert_eq!(l.iter().collect::<Vec<_>>(), want, "{departing:?}");
            assert_eq!(l.len(), want.len());
        }
        let l = Layout::new(2, 1, &[at(0, 2), at(3, 0)]);
        assert_eq!((l.shard_span(), l.node_span()), (4, 3));
        assert_eq!(
            l.shards().map(|(s, n)| (s, n.to_vec())).collect::<Vec<_>>(),
            vec![(0, vec![0, 2]), (1, vec![0]), (3, vec![0])]
        );
    }
}
