//! What isolates one call: a Store's state, its memory cap and a WASI
//! context that grants nothing.

use std::convert::Infallible;
use std::time::Duration;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

/// What one guest call may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most linear memory the guest may grow to, in bytes.
    pub memory_bytes: usize,
    /// Wall time a call may run before it is interrupted.
    pub deadline: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 64 << 20,
            deadline: Duration::from_secs(1),
        }
    }
}

/// A Store's data: the WASI context and what the limiter saw.
pub struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    memory_cap: usize,
    /// Set when the guest asked to grow past its memory cap.
    pub cap_hit: bool,
    /// Linear memory the guest holds now, all its memories together.
    memory: usize,
    /// The most [`State::memory`] ever was in this Store.
    peak: usize,
}

impl State {
    /// A deny-all WASI context whose memory is capped at `limits.memory_bytes`.
    pub fn new(limits: &Limits) -> Self {
        State {
            wasi: deny_all(),
            table: ResourceTable::new(),
            memory_cap: limits.memory_bytes,
            cap_hit: false,
            memory: 0,
            peak: 0,
        }
    }

    /// The most linear memory the guest held at once in this Store, in
    /// bytes: its initial memory plus every growth the limiter allowed.
    pub fn peak_memory(&self) -> usize {
        self.peak
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Records and refuses growth past the cap. The refusal traps at once (as
/// `trap_on_grow_failure` does), and [`State::cap_hit`] tells why. Growth
/// it allows is added up for [`State::peak_memory`]: two additions and a
/// comparison per `memory.grow`, which a call does a few dozen times.
impl ResourceLimiter for State {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_cap {
            self.cap_hit = true;
            // An error here traps the guest at the failing `memory.grow`.
            return Err(wasmtime::Error::msg("memory cap exceeded"));
        }
        // Called for each memory's initial size too (current 0).
        self.memory = self.memory.saturating_add(desired.saturating_sub(current));
        self.peak = self.peak.max(self.memory);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// A WASI context with no arguments, environment, preopened directories,
/// standard streams or network, a clock frozen at zero and a random source
/// that yields zeros: the guest can observe nothing of the host.
fn deny_all() -> WasiCtx {
    WasiCtx::builder()
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }))
        .wall_clock(FrozenClock)
        .monotonic_clock(FrozenClock)
        .secure_random(ZeroRng)
        .insecure_random(ZeroRng)
        .insecure_random_seed(0)
        .build()
}

struct FrozenClock;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

struct ZeroRng;

impl rand_core::TryRng for ZeroRng {
    type Error = Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok(0)
    }
    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(0)
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        dst.fill(0);
        Ok(())
    }
}
