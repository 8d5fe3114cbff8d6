//! Shared helpers for shardgate's cross-crate tests: proptest strategies for
//! the guest's input, a model of what applying a desired state produces, and
//! the data-path checks against a real Valkey cluster.

pub mod apply;
pub mod strategies;
pub mod valkey;
