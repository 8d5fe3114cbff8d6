//! shardgate's reconcile contract, in Rust.
//!
//! [`model`] mirrors the types of `wit/reconcile.wit` one for one: the host
//! passes them to a reconcile module and the native build of the guest works
//! on them, so the wasm and native paths agree byte for byte. The other
//! modules hold what the two sides must agree on beyond those types: the
//! names the guest gives objects and the host finds them by ([`names`],
//! [`labels`]), the announce settings the host may set ([`announce`]), the
//! paths the guest's config refers to and the host mounts ([`paths`]), and
//! the status condition types ([`conditions`]), and the users and files of
//! authentication ([`auth`]).
//!
//! Nothing here performs I/O; the crate builds natively and for
//! `wasm32-wasip2`.

pub mod announce;
pub mod auth;
pub mod conditions;
pub mod labels;
pub mod model;
pub mod names;
pub mod paths;
pub mod ports;
