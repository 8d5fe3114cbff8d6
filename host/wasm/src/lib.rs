//! Runs reconcile modules: sandboxed WebAssembly components that export the
//! `shardgate:reconcile` world.
//!
//! - [`Engine`] compiles and links modules (optimising or baseline tier).
//! - [`Module`] is one compiled module; every call gets a fresh, isolated
//!   Store with a memory cap and a deadline ([`isolation`]), linked against
//!   a WASI whose calls never wait ([`wasi`]).
//! - [`guard`] gives up on a call stuck past its deadline in host code, and
//!   [`budget`] bounds how many calls (and so how much guest memory) run at
//!   once.
//! - [`Reconciler`] is the interface every host calls.
//! - [`precompiled`] keeps compiled modules on disk across restarts.
//! - [`swap`] checks new module versions off the call path and swaps them
//!   in, rolling back one that keeps failing.
//!
//! Nothing here knows Kubernetes: hosts report what the swap manager does
//! through [`swap::Observer`].

pub mod budget;
pub mod engine;
pub mod guard;
pub mod isolation;
pub mod module;
pub mod precompiled;
pub mod reconciler;
pub mod swap;
pub mod wasi;

pub use budget::CallBudget;
pub use engine::{Engine, RECONCILER_INTERFACE};
pub use isolation::Limits;
pub use module::{CallError, Module, Tier};
pub use precompiled::{Loaded, Precompiled, sha256_hex};
#[cfg(any(test, feature = "native"))]
pub use reconciler::Native;
pub use reconciler::Reconciler;

/// The guest component built from `guest/` and embedded at build time.
pub static EMBEDDED_GUEST: &[u8] = include_bytes!(env!("SHARDGATE_GUEST_WASM"));
