//! The label keys on every object shardgate generates. The guest puts them
//! on the objects it wants; the host finds a cluster's objects, and a node's
//! indices, by them.

/// The cluster an object belongs to (its name).
pub const CLUSTER: &str = "shardgate.io/cluster";
/// A shard's index, on its Service and on every object of its nodes.
pub const SHARD: &str = "shardgate.io/shard";
/// A node's index within its shard, on every object of the node.
pub const NODE: &str = "shardgate.io/node";
/// `app.kubernetes.io/component`: what part of the cluster an object is
/// ([`COMPONENT_NODE`] or [`COMPONENT_ENDPOINT`]); the host sets it.
pub const COMPONENT: &str = "app.kubernetes.io/component";
/// [`COMPONENT`] of a node's objects and Pod.
pub const COMPONENT_NODE: &str = "node";
/// [`COMPONENT`] of a shard's external-access Service.
pub const COMPONENT_ENDPOINT: &str = "external-endpoint";
/// `app.kubernetes.io/managed-by`: the tool that manages an object.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The value of [`MANAGED_BY`] on objects shardgate manages.
pub const MANAGER: &str = "shardgate";
/// Selects every object shardgate manages.
pub const MANAGED_SELECTOR: &str = "app.kubernetes.io/managed-by=shardgate";
