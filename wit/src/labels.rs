//! The label keys on every object shardgate generates. The guest puts them
//! on the objects it wants; the host finds a cluster's objects, and a node's
//! indices, by them.

/// The cluster an object belongs to (its name).
pub const CLUSTER: &str = "valkey.io/cluster";
/// A shard's index, on its Service and on every object of its nodes.
pub const SHARD: &str = "valkey.io/shard-index";
/// A node's index within its shard, on every object of the node.
pub const NODE: &str = "valkey.io/node-index";
/// `app.kubernetes.io/managed-by`: the tool that manages an object.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The value of [`MANAGED_BY`] on objects shardgate manages.
pub const MANAGER: &str = "shardgate";
/// Selects every object shardgate manages.
pub const MANAGED_SELECTOR: &str = "app.kubernetes.io/managed-by=shardgate";
