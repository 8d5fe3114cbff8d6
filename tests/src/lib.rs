//! Shared helpers for shardgate's cross-crate tests: proptest strategies for
//! the guest's input, and a model of what applying a desired state produces.

pub mod apply;
pub mod strategies;
