//! Addresses handed out from a loopback /24 (`a.b.c.1` to `a.b.c.254`).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// The hosts of one /24; the last octet of the network address is ignored.
#[derive(Clone, Debug)]
pub(crate) struct IpPool {
    prefix: [u8; 3],
    used: BTreeSet<u8>,
    /// The last host handed out by [`IpPool::allocate`].
    last: u8,
}

const FIRST: u8 = 1;
const LAST: u8 = 254;

impl IpPool {
    pub(crate) fn new(network: Ipv4Addr) -> IpPool {
        let [a, b, c, _] = network.octets();
        IpPool {
            prefix: [a, b, c],
            used: BTreeSet::new(),
            last: 0,
        }
    }

    fn address(&self, host: u8) -> Ipv4Addr {
        let [a, b, c] = self.prefix;
        Ipv4Addr::new(a, b, c, host)
    }

    /// The next free host after the last one handed out, wrapping around:
    /// the first allocation is `.1`, then `.2`, ... so a released address is
    /// reused only once the others have been used.
    pub(crate) fn allocate(&mut self) -> Option<Ipv4Addr> {
        let mut after = (self.last.saturating_add(1)..=LAST).chain(FIRST..=self.last);
        let host = after.find(|h| (FIRST..=LAST).contains(h) && !self.used.contains(h))?;
        self.last = host;
        self.used.insert(host);
        Some(self.address(host))
    }

    /// `.host` if it is a valid host and free.
    pub(crate) fn claim(&mut self, host: u8) -> Option<Ipv4Addr> {
        // `.0` may be claimed (the sandbox's shard 0 load balancer is
        // 127.0.2.0; the whole of 127/8 is loopback), never allocated.
        ((0..=LAST).contains(&host) && self.used.insert(host)).then(|| self.address(host))
    }

    /// The highest free host.
    pub(crate) fn allocate_from_top(&mut self) -> Option<Ipv4Addr> {
        let host = (FIRST..=LAST).rev().find(|h| !self.used.contains(h))?;
        self.used.insert(host);
        Some(self.address(host))
    }

    /// Returns `ip` to the pool (ignored if it is not one of the pool's).
    pub(crate) fn release(&mut self, ip: Ipv4Addr) {
        let [a, b, c, host] = ip.octets();
        if [a, b, c] == self.prefix {
            self.used.remove(&host);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_skips_used_and_wraps() {
        let mut pool = IpPool::new(Ipv4Addr::new(127, 0, 1, 0));
        assert_eq!(pool.allocate(), Some(Ipv4Addr::new(127, 0, 1, 1)));
        assert_eq!(pool.allocate(), Some(Ipv4Addr::new(127, 0, 1, 2)));
        pool.release(Ipv4Addr::new(127, 0, 1, 1));
        // A released address is not the next one handed out.
        assert_eq!(pool.allocate(), Some(Ipv4Addr::new(127, 0, 1, 3)));
        for _ in 4..=254 {
            assert!(pool.allocate().is_some());
        }
        // Wrapped: only .1 was free.
        assert_eq!(pool.allocate(), Some(Ipv4Addr::new(127, 0, 1, 1)));
        assert_eq!(pool.allocate(), None);
    }

    #[test]
    fn claims_and_top_allocation() {
        let mut pool = IpPool::new(Ipv4Addr::new(127, 0, 2, 0));
        assert_eq!(pool.claim(1), Some(Ipv4Addr::new(127, 0, 2, 1)));
        assert_eq!(pool.claim(1), None);
        assert_eq!(pool.claim(0), Some(Ipv4Addr::new(127, 0, 2, 0)));
        assert_eq!(pool.claim(255), None);
        assert_eq!(
            pool.allocate_from_top(),
            Some(Ipv4Addr::new(127, 0, 2, 254))
        );
        assert_eq!(
            pool.allocate_from_top(),
            Some(Ipv4Addr::new(127, 0, 2, 253))
        );
        pool.release(Ipv4Addr::new(127, 0, 2, 254));
        assert_eq!(pool.claim(254), Some(Ipv4Addr::new(127, 0, 2, 254)));
    }
}
