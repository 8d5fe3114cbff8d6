//! The sandbox's Kubernetes nodes: `sandbox-node-<i>`, each with its own
//! loopback addresses, registered in the API emulator as `v1 Node`s the way
//! a kubelet registers its node.
//!
//! Node `i` (0-based) has the labels `kubernetes.io/hostname=<name>`,
//! `kubernetes.io/os=linux` and `topology.kubernetes.io/zone=sandbox-zone-<i>`
//! (one zone per node), the addresses InternalIP `127.0.3.<i+1>`,
//! ExternalIP `127.0.4.<i+1>` and Hostname `<name>`, and a `Ready: True`
//! condition. All nodes are this machine: a node is only a name, labels
//! for the scheduler and two addresses the proxy listens on.

use std::net::Ipv4Addr;

use anyhow::Context as _;
use kube_emulator::Emulator;
use serde_json::{Value, json};

/// The label every node carries with its own name.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// The label naming a node's zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The network of the nodes' InternalIPs (node `i` is `.i+1`).
pub const INTERNAL_NETWORK: Ipv4Addr = Ipv4Addr::new(127, 0, 3, 0);
/// The network of the nodes' ExternalIPs (node `i` is `.i+1`).
pub const EXTERNAL_NETWORK: Ipv4Addr = Ipv4Addr::new(127, 0, 4, 0);
/// At most this many nodes (one /24 octet each, .1 to .250).
pub const MAX_NODES: u32 = 250;

/// One sandbox node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxNode {
    pub name: String,
    pub zone: String,
    /// Pods on the node report it as `hostIP`; NodePorts listen on it.
    pub internal_ip: Ipv4Addr,
    /// NodePorts listen on it too.
    pub external_ip: Ipv4Addr,
}

impl SandboxNode {
    /// Node `i` (0-based) on the default networks.
    pub fn new(i: u32) -> Self {
        let last = u8::try_from(i + 1).unwrap_or(u8::MAX);
        let on = |net: Ipv4Addr| {
            let [a, b, c, _] = net.octets();
            Ipv4Addr::new(a, b, c, last)
        };
        SandboxNode {
            name: format!("sandbox-node-{i}"),
            zone: format!("sandbox-zone-{i}"),
            internal_ip: on(INTERNAL_NETWORK),
            external_ip: on(EXTERNAL_NETWORK),
        }
    }

    /// The `v1 Node` object, status included.
    pub fn object(&self) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "labels": {
                HOSTNAME_LABEL: self.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": std::env::consts::ARCH,
                ZONE_LABEL: self.zone,
            }},
            "spec": {},
            "status": self.status(),
        })
    }

    fn status(&self) -> Value {
        json!({
            "addresses": [
                {"type": "InternalIP", "address": self.internal_ip.to_string()},
                {"type": "ExternalIP", "address": self.external_ip.to_string()},
                {"type": "Hostname", "address": self.name},
            ],
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "the sandbox's process kubelet is posting ready status",
                "lastHeartbeatTime": null, "lastTransitionTime": null,
            }],
            "nodeInfo": {
                "kubeletVersion": "v1.33.0-sandbox",
                "containerRuntimeVersion": "process://valkey-server",
                "operatingSystem": "linux",
                "architecture": std::env::consts::ARCH,
                "osImage": "shardgate sandbox",
                "kernelVersion": "",
                "kubeProxyVersion": "",
                "machineID": "", "systemUUID": "", "bootID": "",
            },
        })
    }
}

/// Nodes `0..count`.
pub fn sandbox_nodes(count: u32) -> Vec<SandboxNode> {
    (0..count).map(SandboxNode::new).collect()
}

/// Creates each node's `Node` object in `emu` if missing, with its status
/// (as each kubelet registers its node at start).
pub fn register(emu: &Emulator, nodes: &[SandboxNode]) -> anyhow::Result<()> {
    for node in nodes {
        if emu.get("nodes", "", &node.name).is_none() {
            emu.create(node.object())
                .with_context(|| format!("creating Node {}", node.name))?;
        }
        emu.patch_status(
            "nodes",
            "",
            &node.name,
            "kubelet",
            json!({"status": node.status()}),
        )
        .with_context(|| format!("setting the status of Node {}", node.name))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_have_their_own_addresses_and_zones() {
        let nodes = sandbox_nodes(3);
        assert_eq!(nodes[0].name, "sandbox-node-0");
        assert_eq!(nodes[2].zone, "sandbox-zone-2");
        assert_eq!(nodes[0].internal_ip, Ipv4Addr::new(127, 0, 3, 1));
        assert_eq!(nodes[2].external_ip, Ipv4Addr::new(127, 0, 4, 3));
        let o = nodes[1].object();
        assert_eq!(o["metadata"]["labels"][HOSTNAME_LABEL], "sandbox-node-1");
        assert_eq!(o["metadata"]["labels"][ZONE_LABEL], "sandbox-zone-1");
        assert_eq!(o["status"]["addresses"][0]["address"], "127.0.3.2");
        assert_eq!(o["status"]["conditions"][0]["status"], "True");
    }
}
