//! ClusterIP allocation from the service CIDR 10.96.0.0/12.

use std::net::Ipv4Addr;

use crate::holdings::Holdings;

const BASE: u32 = u32::from_be_bytes([10, 96, 0, 0]);
const SIZE: u32 = 1 << 20;

pub(crate) fn in_range(ip: Ipv4Addr) -> bool {
    let n = u32::from(ip);
    n > BASE && n < BASE + SIZE - 1
}

/// Which Service holds each allocated ClusterIP. 10.96.0.1 is reserved (the
/// `kubernetes` Service of a real cluster).
#[derive(Debug, Default)]
pub(crate) struct ClusterIps {
    used: Holdings<Ipv4Addr>,
}

impl ClusterIps {
    pub fn owner(&self, ip: Ipv4Addr) -> Option<&str> {
        if u32::from(ip) == BASE + 1 {
            return Some("default/kubernetes");
        }
        self.used.owner(ip)
    }

    pub fn sync(&mut self, owner: &str, ip: Option<Ipv4Addr>) {
        self.used.sync(owner, ip.as_slice());
    }

    pub fn pick(&self) -> Ipv4Addr {
        loop {
            let ip = Ipv4Addr::from(BASE + fastrand::u32(2..SIZE - 1));
            if self.owner(ip).is_none() {
                return ip;
            }
        }
    }
}
