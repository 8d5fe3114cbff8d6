//! Each Kubernetes node's ExternalIP, for NodePort `ip` mode with
//! `nodeAddressType: ExternalIP` (on clouds, a node's InternalIP, the Pod's
//! `hostIP`, is private). Kept from one watch of the cluster-scoped Nodes;
//! only the address is kept, never the Node (whose status carries its
//! image list and conditions).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Node;
use kube::runtime::watcher;
use shardgate_contract::model::IpAddress;
use tokio::sync::watch;

use crate::convert::parse_ip;

/// The ExternalIP of every node. Clones share it.
#[derive(Clone)]
pub struct NodeAddresses {
    inner: Arc<RwLock<Inner>>,
    ready: Arc<watch::Sender<bool>>,
}

#[derive(Default)]
struct Inner {
    live: HashMap<Box<str>, Option<IpAddress>>,
    /// A re-list in progress; replaces `live` when done.
    relist: Option<HashMap<Box<str>, Option<IpAddress>>>,
}

impl Default for NodeAddresses {
    fn default() -> Self {
        NodeAddresses {
            inner: Arc::default(),
            ready: Arc::new(watch::Sender::new(false)),
        }
    }
}

/// A node's first ExternalIP that is an IP address.
pub fn external_ip(node: &Node) -> Option<IpAddress> {
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .filter(|a| a.type_ == "ExternalIP")
        .find_map(|a| parse_ip(&a.address))
}

impl NodeAddresses {
    /// The ExternalIP of node `name`, if it is known and has one.
    pub fn external_ip(&self, name: &str) -> Option<IpAddress> {
        *self.inner.read().unwrap().live.get(name)?
    }

    /// Whether the first list is in.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Resolves once the first list is in.
    pub async fn wait_until_ready(&self) {
        let _ = self.ready.subscribe().wait_for(|r| *r).await;
    }

    /// Takes in one watch event. Returns whether a node already known got
    /// another ExternalIP, or lost one (then the clusters must look again;
    /// a node's other changes, its heartbeats above all, are not news).
    pub fn apply(&self, event: watcher::Event<Node>) -> bool {
        let mut inner = self.inner.write().unwrap();
        match event {
            watcher::Event::Init => {
                inner.relist = Some(HashMap::new());
                false
            }
            watcher::Event::InitApply(node) => {
                let ip = external_ip(&node);
                let name = node.metadata.name.unwrap_or_default().into_boxed_str();
                inner
                    .relist
                    .get_or_insert_with(HashMap::new)
                    .insert(name, ip);
                false
            }
            watcher::Event::InitDone => {
                let new = inner.relist.take().unwrap_or_default();
                let changed = new
                    .iter()
                    .any(|(name, ip)| inner.live.get(name).is_some_and(|old| old != ip));
                inner.live = new;
                drop(inner);
                self.ready.send_replace(true);
                changed
            }
            watcher::Event::Apply(node) => {
                let ip = external_ip(&node);
                let name = node.metadata.name.unwrap_or_default().into_boxed_str();
                inner.live.insert(name, ip).is_some_and(|old| old != ip)
            }
            watcher::Event::Delete(node) => {
                let name = node.metadata.name.unwrap_or_default();
                inner
                    .live
                    .remove(name.as_str())
                    .is_some_and(|old| old.is_some())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, addresses: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"addresses": addresses},
        }))
        .unwrap()
    }

    #[test]
    fn the_first_external_ip_is_taken_and_only_its_changes_are_news() {
        let a = node(
            "a",
            json!([{"type": "InternalIP", "address": "10.0.0.1"},
                   {"type": "ExternalIP", "address": "not-an-ip"},
                   {"type": "ExternalIP", "address": "203.0.113.7"}]),
        );
        assert_eq!(
            external_ip(&a),
            Some(IpAddress::V4(u32::from(std::net::Ipv4Addr::new(
                203, 0, 113, 7
            ))))
        );
        let b = node("b", json!([{"type": "InternalIP", "address": "10.0.0.2"}]));
        assert_eq!(external_ip(&b), None);

        let nodes = NodeAddresses::default();
        assert!(!nodes.is_ready());
        for e in [
            watcher::Event::Init,
            watcher::Event::InitApply(a.clone()),
            watcher::Event::InitApply(b.clone()),
        ] {
            assert!(!nodes.apply(e));
        }
        assert_eq!(nodes.external_ip("a"), None, "not before the list is done");
        assert!(!nodes.apply(watcher::Event::InitDone));
        assert!(nodes.is_ready());
        assert!(nodes.external_ip("a").is_some());
        assert_eq!(nodes.external_ip("b"), None);
        // A heartbeat (same address) is not news; a new address is.
        assert!(!nodes.apply(watcher::Event::Apply(a.clone())));
        let moved = node(
            "a",
            json!([{"type": "ExternalIP", "address": "203.0.113.8"}]),
        );
        assert!(nodes.apply(watcher::Event::Apply(moved)));
        // A new node is not news (no pod announces it yet); losing one with
        // an address is.
        assert!(!nodes.apply(watcher::Event::Apply(node("c", json!([])))));
        assert!(nodes.apply(watcher::Event::Delete(a)));
        assert!(!nodes.apply(watcher::Event::Delete(b)));
    }
}
