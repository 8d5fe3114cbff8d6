//! The sandbox's Gateway API implementation, run by the proxy
//! ([`crate::proxy`]) on each of its ticks for its namespace, as a
//! gateway controller and its data plane would:
//!
//! - **Addresses.** Every Gateway gets an address of `gateway_network` (a
//!   loopback /24), in name order on first sight: the sandbox's first
//!   Gateway is 127.0.6.1. The proxy writes `status.addresses: [{type:
//!   IPAddress, value}]` and `status.listeners` (each listener's `name`,
//!   `supportedKinds`, `attachedRoutes` and no conditions), and only when
//!   they differ from what is there: a steady Gateway is never written. A
//!   deleted Gateway's address goes back to the pool.
//! - **Attachment** ([`gateway_api::attaches`]): a TCPRoute attaches to a
//!   TCP listener, a TLSRoute to a TLS listener, when one of its
//!   `parentRefs` names the Gateway and, if set, the listener's
//!   `sectionName` and `port`.
//! - **Listeners.** Each listener with at least one attached route listens
//!   on `gatewayIP:port`. One without routes is not bound: a client gets
//!   connection refused, as from a gateway with nothing routed. A listener
//!   that loses its last route, changes, or whose Gateway is deleted is
//!   closed with its connections.
//! - **Connections** are routed when they are accepted, from the objects
//!   as they are then. A TCP listener takes its one attached TCPRoute (two
//!   or more: refused, with an error naming them). A TLS listener
//!   (`tls.mode: Passthrough`) peeks at the client's ClientHello without
//!   consuming it ([`crate::sni`]) and takes the attached TLSRoute whose
//!   `spec.hostnames` match its server name ([`gateway_api::route_for_sni`]);
//!   the bytes are then relayed untouched, so the TLS is the pod's. The
//!   route's first backendRef, a Service and a port number, leads to a pod
//!   as a Service port does for the kube-proxy ([`crate::proxy::resolve_port`]):
//!   the port's `targetPort`, on the one Ready pod the selector matches.
//!   Every refusal is recorded ([`crate::proxy::Proxy::errors`]) and closes
//!   the connection.
//!
//! **Not modelled:** GatewayClasses (any `gatewayClassName` is served, and
//! none is required to exist), Gateway and route conditions (`Accepted`,
//! `Programmed`, `ResolvedRefs`) and route status, `spec.addresses`
//! requests, listener `hostname`s, TLS termination (`tls.mode: Terminate`
//! is reported and not served), HTTP, UDP and GRPC routes, routes and
//! backends in other namespaces (ReferenceGrants; `allowedRoutes` with
//! `from: Selector`), weights and more than one backendRef or rule (the
//! first backendRef of the first rule is the route's), two listeners of
//! one Gateway on the same port (the first by name is served).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};

use kube_emulator::Emulator;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tracing::info;

use crate::gateway_api::{
    self, GATEWAY_VERSION, GROUP, Gateway, Listener, ROUTE_VERSION, Route, RouteKind,
};
use crate::ip_pool::IpPool;
use crate::listeners::{ListenKey, Listeners, accept_loop};
use crate::proxy::{PortRef, Shared};
use crate::sni;

/// The field manager of the status the proxy writes.
const MANAGER: &str = "sandbox-gateway";

/// One Gateway listener the proxy serves.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GatewayListener {
    /// The Gateway's name.
    pub gateway: String,
    /// The listener's name.
    pub listener: String,
    /// The routes it takes: TCPRoutes (protocol TCP) or TLSRoutes (TLS).
    pub kind: RouteKind,
    /// The Gateway's address and the listener's port.
    pub addr: SocketAddr,
}

impl ListenKey for GatewayListener {
    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn describe(&self) -> String {
        format!("gateway {} listener {:?}", self.gateway, self.listener)
    }
}

/// The gateway's state inside the proxy.
pub(crate) struct Gateways {
    state: Mutex<State>,
    listeners: Listeners<GatewayListener>,
}

struct State {
    /// Gateway name to its address.
    addresses: BTreeMap<String, Ipv4Addr>,
    pool: IpPool,
    /// What the last tick found wrong (each recorded when first seen).
    problems: BTreeSet<String>,
}

impl Gateways {
    pub(crate) fn new(network: Ipv4Addr) -> Self {
        Gateways {
            state: Mutex::new(State {
                addresses: BTreeMap::new(),
                pool: IpPool::new(network),
                problems: BTreeSet::new(),
            }),
            listeners: Listeners::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn listeners(&self) -> Vec<GatewayListener> {
        self.listeners.keys()
    }

    pub(crate) fn addresses(&self) -> BTreeMap<String, Ipv4Addr> {
        self.state().addresses.clone()
    }

    pub(crate) async fn close_all(&self) {
        self.listeners.close_all().await;
    }

    pub(crate) fn abort_all(&self) {
        self.listeners.abort_all();
    }

    /// Frees the addresses of Gateways that are gone and gives one to
    /// each new Gateway (in name order); returns every Gateway's.
    fn assign(
        &self,
        gateways: &[Gateway],
        problems: &mut BTreeSet<String>,
    ) -> BTreeMap<String, Ipv4Addr> {
        let mut st = self.state();
        let names: BTreeSet<&str> = gateways.iter().map(|g| g.name.as_str()).collect();
        let gone: Vec<String> = st
            .addresses
            .keys()
            .filter(|n| !names.contains(n.as_str()))
            .cloned()
            .collect();
        for name in gone {
            if let Some(ip) = st.addresses.remove(&name) {
                st.pool.release(ip);
                info!(gateway = %name, %ip, "gateway address released");
            }
        }
        for name in names {
            if st.addresses.contains_key(name) {
                continue;
            }
            match st.pool.allocate() {
                Some(ip) => {
                    info!(gateway = name, %ip, "gateway address assigned");
                    st.addresses.insert(name.to_string(), ip);
                }
                None => {
                    problems.insert(format!("gateway {name}: no free gateway address"));
                }
            }
        }
        st.addresses.clone()
    }

    /// Records the problems not seen on the previous tick; forgets those
    /// gone.
    fn report(&self, proxy: &Shared, problems: BTreeSet<String>) {
        let new: Vec<String> = {
            let mut st = self.state();
            let new = problems.difference(&st.problems).cloned().collect();
            st.problems = problems;
            new
        };
        for p in new {
            proxy.record(p);
        }
    }
}

/// The `apiVersion/Kind` of Gateways, for the emulator's lookups.
fn gateway_type() -> String {
    format!("{GROUP}/{GATEWAY_VERSION}/Gateway")
}

/// The `apiVersion/Kind` of a route kind.
fn route_type(kind: RouteKind) -> String {
    format!("{GROUP}/{ROUTE_VERSION}/{}", kind.kind())
}

/// The namespace's Gateways (in name order); those whose spec does not
/// parse are left out, as problems.
fn gateways(emu: &Emulator, ns: &str, problems: &mut BTreeSet<String>) -> Vec<Gateway> {
    emu.list(&gateway_type(), Some(ns))
        .iter()
        .filter_map(|o| {
            Gateway::from_object(o)
                .map_err(|e| {
                    let name = o["metadata"]["name"].as_str().unwrap_or_default();
                    problems.insert(format!("gateway {name}: spec: {e}"));
                })
                .ok()
        })
        .collect()
}

/// The namespace's TCPRoutes and TLSRoutes; those whose spec does not
/// parse are left out, as problems.
fn routes(emu: &Emulator, ns: &str, problems: &mut BTreeSet<String>) -> Vec<Route> {
    RouteKind::ALL
        .into_iter()
        .flat_map(|kind| emu.list(&route_type(kind), Some(ns)))
        .filter_map(|o| {
            Route::from_object(&o)
                .map_err(|e| {
                    let name = o["metadata"]["name"].as_str().unwrap_or_default();
                    let kind = o["kind"].as_str().unwrap_or_default();
                    problems.insert(format!("{kind} {name}: spec: {e}"));
                })
                .ok()
        })
        .collect()
}

/// The route kinds `listener` supports, as `status.listeners[].supportedKinds`.
fn supported_kinds(listener: &Listener) -> Value {
    let kinds: Vec<Value> = listener
        .served()
        .ok()
        .filter(|kind| {
            let allowed = listener
                .allowed_routes
                .as_ref()
                .and_then(|a| a.kinds.as_ref());
            allowed.is_none_or(|kinds| {
                kinds.is_empty()
                    || kinds.iter().any(|k| {
                        k.group.as_deref().unwrap_or(GROUP) == GROUP && k.kind == kind.kind()
                    })
            })
        })
        .map(|kind| json!({"group": GROUP, "kind": kind.kind()}))
        .into_iter()
        .collect();
    Value::Array(kinds)
}

/// The status the Gateway should have: its address, and each listener's
/// attached routes.
fn desired_status(gateway: &Gateway, ip: Ipv4Addr, routes: &[Route]) -> (Value, Value) {
    let addresses = json!([{"type": "IPAddress", "value": ip.to_string()}]);
    let listeners = gateway
        .listeners
        .iter()
        .map(|l| {
            json!({
                "name": l.name,
                "supportedKinds": supported_kinds(l),
                "attachedRoutes": gateway_api::attached(routes, gateway, l).len(),
                "conditions": [],
            })
        })
        .collect();
    (addresses, Value::Array(listeners))
}

/// The listeners of `gateway` at `ip` to serve: those with an attached
/// route that the sandbox can serve, one per port.
fn wanted_listeners(
    gateway: &Gateway,
    ip: Ipv4Addr,
    routes: &[Route],
    problems: &mut BTreeSet<String>,
) -> Vec<GatewayListener> {
    let mut by_port: BTreeMap<u16, GatewayListener> = BTreeMap::new();
    let mut listeners: Vec<&Listener> = gateway.listeners.iter().collect();
    listeners.sort_by(|a, b| a.name.cmp(&b.name));
    for listener in listeners {
        if gateway_api::attached(routes, gateway, listener).is_empty() {
            continue;
        }
        let what = format!("gateway {} listener {:?}", gateway.name, listener.name);
        let kind = match listener.served() {
            Ok(kind) => kind,
            Err(why) => {
                problems.insert(format!("{what}: not served: {why}"));
                continue;
            }
        };
        if let Some(first) = by_port.get(&listener.port) {
            problems.insert(format!(
                "{what}: not served: port {} is listener {:?}'s (the sandbox serves one \
                 listener per port)",
                listener.port, first.listener
            ));
            continue;
        }
        by_port.insert(
            listener.port,
            GatewayListener {
                gateway: gateway.name.clone(),
                listener: listener.name.clone(),
                kind,
                addr: SocketAddr::from((ip, listener.port)),
            },
        );
    }
    by_port.into_values().collect()
}

/// One tick of the gateway: addresses and status, then listeners.
pub(crate) async fn sync(proxy: &Arc<Shared>) {
    let ns = proxy.options.namespace.as_str();
    let mut problems = BTreeSet::new();
    let gateways = gateways(&proxy.emu, ns, &mut problems);
    let routes = routes(&proxy.emu, ns, &mut problems);
    let addresses = proxy.gateway.assign(&gateways, &mut problems);
    let mut wanted = BTreeSet::new();
    for gateway in &gateways {
        let Some(&ip) = addresses.get(&gateway.name) else {
            continue;
        };
        let (status_addresses, status_listeners) = desired_status(gateway, ip, &routes);
        if gateway.status_addresses != status_addresses
            || gateway.status_listeners != status_listeners
        {
            let patch = json!({"status": {
                "addresses": status_addresses,
                "listeners": status_listeners,
            }});
            if let Err(e) =
                proxy
                    .emu
                    .patch_status(&gateway_type(), ns, &gateway.name, MANAGER, patch)
            {
                proxy.record(format!(
                    "gateway {}: writing its status: {e:#}",
                    gateway.name
                ));
            }
        }
        wanted.extend(wanted_listeners(gateway, ip, &routes, &mut problems));
    }
    proxy.gateway.report(proxy, problems);
    let shared = proxy.clone();
    let errors = proxy
        .gateway
        .listeners
        .sync(wanted, move |key, listener| {
            let shared = shared.clone();
            let what = key.describe();
            accept_loop(listener, what, move |stream| {
                connection(shared.clone(), key.clone(), stream)
            })
        })
        .await;
    for e in errors {
        proxy.record(e);
    }
}

/// Routes one accepted connection, or closes it.
async fn connection(proxy: Arc<Shared>, key: GatewayListener, stream: TcpStream) {
    let what = format!("{} ({})", key.describe(), key.addr);
    match target(&proxy, &key, &stream).await {
        Ok((route, addr)) => {
            proxy
                .relay(&format!("{what} {} {route}", key.kind.kind()), addr, stream)
                .await
        }
        Err(e) => proxy.record(format!("connection refused: {what}: {e}")),
    }
}

/// The route a new connection on `key` takes and its pod's address, from
/// the objects as they are now.
async fn target(
    proxy: &Shared,
    key: &GatewayListener,
    stream: &TcpStream,
) -> Result<(String, SocketAddr), String> {
    let ns = proxy.options.namespace.as_str();
    let gateway = proxy
        .emu
        .get(&gateway_type(), ns, &key.gateway)
        .ok_or_else(|| "the Gateway is gone".to_string())
        .and_then(|o| Gateway::from_object(&o).map_err(|e| format!("the Gateway's spec: {e}")))?;
    let listener = gateway
        .listeners
        .iter()
        .find(|l| l.name == key.listener)
        .ok_or("the listener is gone")?;
    let routes = routes(&proxy.emu, ns, &mut BTreeSet::new());
    let attached = gateway_api::attached(&routes, &gateway, listener);
    let route = match key.kind {
        RouteKind::Tcp => match attached.as_slice() {
            [route] => *route,
            [] => return Err("no TCPRoute is attached".into()),
            many => {
                return Err(format!(
                    "{} TCPRoutes are attached, expected one: [{}]",
                    many.len(),
                    gateway_api::names(many.iter().copied())
                ));
            }
        },
        RouteKind::Tls => {
            let server_name = sni::peek_server_name(stream).await?;
            gateway_api::route_for_sni(&attached, &server_name)?
        }
    };
    let what = format!("{} {}", key.kind.kind(), route.name);
    let backend = route
        .backend
        .as_ref()
        .ok_or_else(|| format!("{what}: no backendRef"))?;
    let (service, port) = backend
        .service_port(&route.namespace)
        .map_err(|e| format!("{what}: {e}"))?;
    let addr = proxy
        .endpoint(service, &PortRef::Number(port))
        .map_err(|e| format!("{what}: {e}"))?;
    Ok((route.name.clone(), addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gateway(listeners: Value) -> Gateway {
        Gateway::from_object(&json!({
            "metadata": {"name": "gw", "namespace": "ns"},
            "spec": {"gatewayClassName": "sandbox", "listeners": listeners},
        }))
        .unwrap()
    }

    fn tcp_route(name: &str, parent: Value) -> Route {
        Route::from_object(&json!({
            "kind": "TCPRoute",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"parentRefs": [parent], "rules": [{"backendRefs": [{"name": "s", "port": 6379}]}]},
        }))
        .unwrap()
    }

    #[test]
    fn listeners_with_routes_are_served_one_per_port() {
        let gw = gateway(json!([
            {"name": "a", "port": 7000, "protocol": "TCP"},
            {"name": "b", "port": 7001, "protocol": "TCP"},
            {"name": "c", "port": 7000, "protocol": "TCP"},
            {"name": "tls", "port": 7443, "protocol": "TLS"},
            {"name": "unrouted", "port": 7002, "protocol": "TCP"},
        ]));
        let routes = [
            tcp_route("ra", json!({"name": "gw", "sectionName": "a"})),
            tcp_route("rb", json!({"name": "gw", "port": 7001})),
            tcp_route("rc", json!({"name": "gw", "sectionName": "c"})),
            Route {
                kind: Some(RouteKind::Tls),
                name: "rt".into(),
                namespace: "ns".into(),
                parent_refs: vec![gateway_api::ParentRef {
                    name: "gw".into(),
                    section_name: Some("tls".into()),
                    ..Default::default()
                }],
                ..Route::default()
            },
        ];
        let ip = Ipv4Addr::new(127, 0, 6, 1);
        let mut problems = BTreeSet::new();
        let wanted = wanted_listeners(&gw, ip, &routes, &mut problems);
        let served: Vec<(&str, u16)> = wanted
            .iter()
            .map(|l| (l.listener.as_str(), l.addr.port()))
            .collect();
        assert_eq!(served, [("a", 7000), ("b", 7001)]);
        let problems: Vec<&String> = problems.iter().collect();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("listener \"c\"") && problems[0].contains("port 7000"));
        assert!(problems[1].contains("listener \"tls\"") && problems[1].contains("Terminate"));

        let (addresses, listeners) = desired_status(&gw, ip, &routes);
        assert_eq!(
            addresses,
            json!([{"type": "IPAddress", "value": "127.0.6.1"}])
        );
        let attached: Vec<(String, u64)> = listeners
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["name"].as_str().unwrap().to_string(),
                    l["attachedRoutes"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            attached,
            [
                ("a".to_string(), 1),
                ("b".to_string(), 1),
                ("c".to_string(), 1),
                ("tls".to_string(), 1),
                ("unrouted".to_string(), 0)
            ]
        );
        assert_eq!(
            listeners[0]["supportedKinds"],
            json!([{"group": GROUP, "kind": "TCPRoute"}])
        );
        // A TLS listener in Terminate mode supports no kind the sandbox serves.
        assert_eq!(listeners[3]["supportedKinds"], json!([]));
    }
}
