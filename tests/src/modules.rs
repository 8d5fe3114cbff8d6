//! Reconcile modules for the tests and benches that load, swap and reject
//! them: variants of the embedded guest (the same code under other digests)
//! and the test-only `misbehave` component.

use shardgate_wasm::EMBEDDED_GUEST;

/// The `misbehave` component (`tests/modules/misbehave`, built by
/// `tests/build.rs`): exports the reconcile world; for clusters named
/// `trap`, `loop` and `alloc` it traps, loops forever or allocates without
/// bound; for `sleep`, `poll`, `stdin` and `exit` it sleeps an hour, polls
/// an hour-long timer, reads standard input to its end or calls `exit(3)`
/// (status 1 under WASI 0.2). It refuses every other name (and `stdin`,
/// once its read returns, saying how many bytes it read) with a violation
/// of `metadata.name`.
pub static MISBEHAVE: &[u8] = include_bytes!(env!("MISBEHAVE_WASM"));

/// The embedded guest with a custom section appended: the same logic under
/// another digest (a component tolerates trailing custom sections). Each
/// `tag` gives other bytes.
pub fn variant(tag: &str) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"shardgate-variant";
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name);
    body.extend_from_slice(tag.as_bytes());
    let mut out = EMBEDDED_GUEST.to_vec();
    out.push(0);
    leb(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}
