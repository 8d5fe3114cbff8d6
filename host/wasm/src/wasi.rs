//! The WASI a reconcile module is linked against: wasmtime-wasi's preview 2
//! host (a std guest imports it) over the deny-all context of
//! [`crate::isolation`], with every function that could wait replaced.
//!
//! Host code runs outside the epoch deadline: a host function that blocks
//! cannot be interrupted. With the deny-all context only pollables wait
//! (a monotonic-clock subscription: `std::thread::sleep`, a polled timer),
//! and only `wasi:io/poll.poll` and `pollable.block` wait on them, so those
//! two return at once when something is ready and otherwise stop the
//! module with [`Denied`]. Standard input is closed (reads end at once),
//! standard output and error discard, and `exit` ends the call with
//! [`wasmtime_wasi::I32Exit`], which [`crate::Module`] reports as
//! [`crate::CallError::Exit`]. The host-side wall-clock guard
//! ([`crate::guard`]) covers whatever this misses.

use anyhow::anyhow;
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::WasiView;
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::p2::bindings::sync::io::poll::HostPollable;

use crate::isolation::State;

/// The `wasi:io/poll` instance wasmtime-wasi defines (guests importing any
/// 0.2.x version are linked to it); replaced functions go into it.
pub const POLL_INTERFACE: &str = "wasi:io/poll@0.2.12";

/// A host call the sandbox refused; it ends the call as a trap does.
#[derive(Debug, thiserror::Error)]
#[error("a reconcile module may not wait: {0}")]
pub struct Denied(pub &'static str);

/// Links WASI preview 2 into `linker`, with `poll` and `pollable.block`
/// that never wait.
pub fn link(linker: &mut Linker<State>) -> anyhow::Result<()> {
    wasmtime_wasi::p2::add_to_linker_sync(linker).map_err(|e| anyhow!("{e:#}"))?;
    linker.allow_shadowing(true);
    let mut poll = linker
        .instance(POLL_INTERFACE)
        .map_err(|e| anyhow!("{e:#}"))?;
    poll.func_wrap(
        "poll",
        |mut store: StoreContextMut<'_, State>, (pollables,): (Vec<Resource<DynPollable>>,)| {
            let mut ready = Vec::new();
            for (i, p) in pollables.into_iter().enumerate() {
                if is_ready(&mut store, p)? {
                    ready.push(u32::try_from(i)?);
                }
            }
            match poll_outcome(ready) {
                Ok(ready) => Ok((ready,)),
                Err(denied) => Err(denied.into()),
            }
        },
    )
    .map_err(|e| anyhow!("{e:#}"))?;
    poll.func_wrap(
        "[method]pollable.block",
        |mut store: StoreContextMut<'_, State>, (p,): (Resource<DynPollable>,)| {
            if is_ready(&mut store, p)? {
                Ok(())
            } else {
                Err(
                    Denied("pollable.block on a pollable that is not ready (a sleep or a timer)")
                        .into(),
                )
            }
        },
    )
    .map_err(|e| anyhow!("{e:#}"))?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Whether `p` is ready now, without waiting (wasmtime-wasi's own
/// `pollable.ready`). Asked twice: a zero-length sleep is a pollable that
/// yields once and is ready the next time it is asked.
fn is_ready(
    store: &mut StoreContextMut<'_, State>,
    p: Resource<DynPollable>,
) -> wasmtime::Result<bool> {
    let table = store.data_mut().ctx().table;
    for _ in 0..2 {
        if HostPollable::ready(&mut *table, Resource::new_borrow(p.rep()))? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// What `poll` answers given the indices that are ready now: them, or
/// [`Denied`] when none is (the real `poll` would wait).
fn poll_outcome(ready: Vec<u32>) -> Result<Vec<u32>, Denied> {
    if ready.is_empty() {
        Err(Denied(
            "wasi:io/poll.poll on pollables none of which is ready (a sleep or a timer)",
        ))
    } else {
        Ok(ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_answers_what_is_ready_or_refuses_to_wait() {
        // (ready indexes, answered at once with them: Some; refused: None)
        let cases: [(Vec<u32>, Option<Vec<u32>>); 3] = [
            (vec![0], Some(vec![0])),
            (vec![1, 3], Some(vec![1, 3])),
            (vec![], None),
        ];
        for (ready, want) in cases {
            let got = poll_outcome(ready.clone()).ok();
            assert_eq!(got, want, "{ready:?}");
        }
        let denied = poll_outcome(Vec::new()).unwrap_err().to_string();
        assert!(
            denied.starts_with("a reconcile module may not wait"),
            "{denied}"
        );
    }
}
