//! shardgate's Kubernetes side, with no controller in it: the
//! `ValkeyCluster` resource ([`crd`]), conversion between Kubernetes objects
//! and the reconcile contract ([`convert`]), server-side apply that skips
//! what is in place ([`apply`]) and pruning that deletes only what a cluster
//! owns ([`prune`]), the caches of owned objects ([`cache`]) and one
//! cluster's snapshot of them ([`snapshot`]), and the status, computed in
//! one pure function ([`status`]).

pub mod apply;
pub mod cache;
pub mod client;
pub mod convert;
pub mod crd;
pub mod credentials;
pub mod events;
pub mod gateway_api;
pub mod manager;
pub mod manifest;
pub mod node_addresses;
pub mod owned_fields;
pub mod prune;
pub mod snapshot;
pub mod status;

pub use client::client;
