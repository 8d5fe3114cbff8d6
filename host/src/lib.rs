//! shardgate: makes a Valkey cluster reachable from outside Kubernetes.
//!
//! The reconcile logic is the `shardgate-guest` crate, run as a sandboxed
//! WebAssembly component ([`runtime`]). This crate is the thin native shell
//! around it: the CRD ([`crd`]), the conversion between Kubernetes objects and
//! the guest's records ([`convert`]), and the command line.

pub mod check;
pub mod convert;
pub mod crd;
pub mod modules;
pub mod operator;
pub mod reconciler;
pub mod render;
pub mod runtime;
pub mod sandbox;
pub mod valkey;
pub mod webhook;
