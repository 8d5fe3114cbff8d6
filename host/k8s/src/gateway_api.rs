//! The Gateway API (`gateway.networking.k8s.io`): which of its kinds the
//! API server serves, the routes shardgate applies for a cluster with
//! `spec.externalAccess.gateway`, and what is read of the user's Gateways.
//!
//! kube 5 has no types for these kinds (the `gateway-api` crate follows an
//! older kube), and the route kinds are served at different versions from
//! one installation to the next (TCPRoute `v1alpha2`; TLSRoute `v1alpha2`,
//! `v1alpha3` or `v1`), so they are dynamic objects at the versions found
//! by discovery when the operator starts.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kube::api::{ApiResource, DynamicObject, ObjectMeta};
use kube::runtime::watcher;
use serde_json::{Value, json};
use shardgate_contract::model::{self as m, RouteKind};
use tokio::sync::watch;

use crate::convert::parse_ip;

/// The Gateway API's group.
pub const GROUP: &str = "gateway.networking.k8s.io";

/// The Gateway API kinds the API server serves, each at its most stable
/// served version. Cloning is cheap enough: read once at start.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GatewayApi {
    pub gateways: Option<ApiResource>,
    pub tcp_routes: Option<ApiResource>,
    pub tls_routes: Option<ApiResource>,
}

impl GatewayApi {
    /// Asks the API server which Gateway API kinds it serves. A group it
    /// does not serve at all is no error: none of the kinds is served.
    pub async fn discover(client: &kube::Client) -> kube::Result<Self> {
        let group = match kube::discovery::group(client, GROUP).await {
            Ok(group) => group,
            Err(kube::Error::Discovery(_)) => return Ok(GatewayApi::default()),
            Err(e) => return Err(e),
        };
        Ok(Self::from_resources(
            group.resources_by_stability().into_iter().map(|(r, _)| r),
        ))
    }

    /// The kinds among `resources` (one per kind, each at the version to use).
    pub fn from_resources(resources: impl IntoIterator<Item = ApiResource>) -> Self {
        let mut api = GatewayApi::default();
        for r in resources {
            if r.group != GROUP {
                continue;
            }
            match r.kind.as_str() {
                "Gateway" => api.gateways = Some(r),
                "TCPRoute" => api.tcp_routes = Some(r),
                "TLSRoute" => api.tls_routes = Some(r),
                _ => {}
            }
        }
        api
    }

    /// What `shardgate render` assumes without an API server: Gateway
    /// `v1`, TCPRoute and TLSRoute `v1alpha2`.
    pub fn assumed() -> Self {
        let resource = |version: &str, kind: &str, plural: &str| ApiResource {
            group: GROUP.into(),
            version: version.into(),
            api_version: format!("{GROUP}/{version}"),
            kind: kind.into(),
            plural: plural.into(),
        };
        GatewayApi {
            gateways: Some(resource("v1", "Gateway", "gateways")),
            tcp_routes: Some(resource("v1alpha2", "TCPRoute", "tcproutes")),
            tls_routes: Some(resource("v1alpha2", "TLSRoute", "tlsroutes")),
        }
    }

    /// The resource of routes of `kind`, if served.
    pub fn route(&self, kind: RouteKind) -> Option<&ApiResource> {
        match kind {
            RouteKind::Tcp => self.tcp_routes.as_ref(),
            RouteKind::Tls => self.tls_routes.as_ref(),
        }
    }

    /// A cluster whose routes are of `kind` can be served: Gateways can be
    /// read and such routes written.
    pub fn serves(&self, kind: RouteKind) -> bool {
        self.gateways.is_some() && self.route(kind).is_some()
    }
}

/// The route `r` as the object to apply, with `meta` (name, namespace,
/// labels, owner) and the kind and version of `resource`.
pub fn route_object(r: &m::Route, meta: ObjectMeta, resource: &ApiResource) -> DynamicObject {
    let mut parent = json!({
        "group": GROUP,
        "kind": "Gateway",
        "name": r.gateway,
        "port": r.port,
    });
    if let Some(section) = &r.section_name {
        parent["sectionName"] = section.as_str().into();
    }
    let mut spec = json!({
        "parentRefs": [parent],
        "rules": [{"backendRefs": [{
            "group": "",
            "kind": "Service",
            "name": r.service,
            "port": r.service_port,
            "weight": 1,
        }]}],
    });
    if !r.hostnames.is_empty() {
        spec["hostnames"] = r.hostnames.clone().into();
    }
    let mut object = DynamicObject::new(&r.name, resource).data(json!({ "spec": spec }));
    object.metadata = meta;
    object
}

/// What the guest reads of a Gateway: its listeners (name, port,
/// protocol) and the addresses in its status. Whatever is malformed is
/// left out (a listener without a port cannot be routed to).
pub fn observed_gateway(gateway: &Value) -> m::ObservedGateway {
    let listeners = gateway["spec"]["listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| {
            Some(m::Listener {
                name: l["name"].as_str()?.to_string(),
                port: u32::try_from(l["port"].as_u64()?).ok()?,
                protocol: match l["protocol"].as_str()? {
                    "TCP" => m::ListenerProtocol::Tcp,
                    // A TLS listener passes TLS through to the route's
                    // backend only in Passthrough mode (the default mode is
                    // Terminate, which TLSRoutes cannot use).
                    "TLS" if l["tls"]["mode"].as_str() == Some("Passthrough") => {
                        m::ListenerProtocol::Tls
                    }
                    _ => m::ListenerProtocol::Other,
                },
            })
        })
        .collect();
    let addresses = gateway["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| {
            let value = a["value"].as_str()?;
            // `type` defaults to IPAddress.
            match a["type"].as_str().unwrap_or("IPAddress") {
                "IPAddress" => parse_ip(value).map(m::Ingress::Ip),
                "Hostname" => Some(m::Ingress::Hostname(value.to_string())),
                _ => None,
            }
        })
        .collect();
    m::ObservedGateway {
        listeners,
        addresses,
    }
}

/// What is known of every Gateway the operator watches: only what the
/// guest reads ([`observed_gateway`]), by namespace and name. Clones share
/// it.
#[derive(Clone)]
pub struct Gateways {
    inner: Arc<RwLock<Inner>>,
    ready: Arc<watch::Sender<bool>>,
}

type Key = (Box<str>, Box<str>);

#[derive(Default)]
struct Inner {
    live: HashMap<Key, m::ObservedGateway>,
    /// A re-list in progress; replaces `live` when done.
    relist: Option<HashMap<Key, m::ObservedGateway>>,
}

impl Default for Gateways {
    fn default() -> Self {
        Gateways {
            inner: Arc::default(),
            ready: Arc::new(watch::Sender::new(false)),
        }
    }
}

impl Gateways {
    /// No Gateways, and none to wait for: the API server does not serve
    /// the kind.
    pub fn unserved() -> Self {
        let gateways = Gateways::default();
        gateways.ready.send_replace(true);
        gateways
    }

    /// The Gateway `name` in `namespace`, if it exists.
    pub fn get(&self, namespace: &str, name: &str) -> Option<m::ObservedGateway> {
        let inner = self.inner.read().unwrap();
        inner.live.get(&(namespace.into(), name.into())).cloned()
    }

    /// Whether the first list is in.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Resolves once the first list is in.
    pub async fn wait_until_ready(&self) {
        let _ = self.ready.subscribe().wait_for(|r| *r).await;
    }

    /// Takes in one watch event. Returns the namespace and name of each
    /// Gateway whose listeners or addresses changed (it appeared, went or
    /// changed what the guest reads), for the clusters that name it to
    /// look again; other changes are not news.
    pub fn apply(&self, event: watcher::Event<DynamicObject>) -> Vec<(String, String)> {
        let key = |o: &DynamicObject| -> Key {
            (
                o.metadata.namespace.as_deref().unwrap_or_default().into(),
                o.metadata.name.as_deref().unwrap_or_default().into(),
            )
        };
        let seen =
            |o: &DynamicObject| observed_gateway(&serde_json::to_value(o).unwrap_or_default());
        let mut inner = self.inner.write().unwrap();
        let news = |k: &Key| vec![(k.0.to_string(), k.1.to_string())];
        match event {
            watcher::Event::Init => {
                inner.relist = Some(HashMap::new());
                Vec::new()
            }
            watcher::Event::InitApply(o) => {
                let (k, v) = (key(&o), seen(&o));
                inner.relist.get_or_insert_with(HashMap::new).insert(k, v);
                Vec::new()
            }
            watcher::Event::InitDone => {
                let relist = inner.relist.take().unwrap_or_default();
                let mut changed: Vec<(String, String)> = relist
                    .iter()
                    .filter(|(k, v)| inner.live.get(*k) != Some(*v))
                    .chain(inner.live.iter().filter(|(k, _)| !relist.contains_key(*k)))
                    .map(|(k, _)| (k.0.to_string(), k.1.to_string()))
                    .collect();
                changed.sort();
                changed.dedup();
                inner.live = relist;
                drop(inner);
                self.ready.send_replace(true);
                changed
            }
            watcher::Event::Apply(o) => {
                let (k, v) = (key(&o), seen(&o));
                match inner.live.insert(k.clone(), v.clone()) {
                    Some(before) if before == v => Vec::new(),
                    _ => news(&k),
                }
            }
            watcher::Event::Delete(o) => {
                let k = key(&o);
                match inner.live.remove(&k) {
                    Some(_) => news(&k),
                    None => Vec::new(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use m::{Ingress, IpAddress, Listener, ListenerProtocol};

    fn resource(version: &str, kind: &str, plural: &str) -> ApiResource {
        ApiResource {
            group: GROUP.into(),
            version: version.into(),
            api_version: format!("{GROUP}/{version}"),
            kind: kind.into(),
            plural: plural.into(),
        }
    }

    #[test]
    fn discovery_finds_each_kind_at_the_version_served() {
        let api = GatewayApi::from_resources([
            resource("v1", "Gateway", "gateways"),
            resource("v1", "HTTPRoute", "httproutes"),
            resource("v1alpha3", "TLSRoute", "tlsroutes"),
        ]);
        assert_eq!(api.gateways.as_ref().unwrap().version, "v1");
        assert_eq!(api.tls_routes.as_ref().unwrap().version, "v1alpha3");
        assert!(api.tcp_routes.is_none());
        // (what is served, route kind) => servable
        assert!(api.serves(RouteKind::Tls));
        assert!(!api.serves(RouteKind::Tcp), "no TCPRoute");
        let routes_only =
            GatewayApi::from_resources([resource("v1alpha2", "TCPRoute", "tcproutes")]);
        assert!(!routes_only.serves(RouteKind::Tcp), "no Gateway to read");
        assert!(!GatewayApi::default().serves(RouteKind::Tcp));
        let other_group = ApiResource {
            group: "example.com".into(),
            ..resource("v1", "Gateway", "gateways")
        };
        assert!(GatewayApi::from_resources([other_group]).gateways.is_none());
    }

    #[test]
    fn a_route_attaches_by_port_and_forwards_to_its_service_port() {
        let r = m::Route {
            shard: 1,
            node: 0,
            name: "shardgate-c-1-0".into(),
            kind: RouteKind::Tls,
            gateway: "gw".into(),
            section_name: None,
            port: 7002,
            hostnames: vec!["shard-1-0.example.com".into()],
            service: "shardgate-c-shard-1".into(),
            service_port: 6379,
        };
        let api = GatewayApi::assumed();
        let meta = ObjectMeta {
            name: Some(r.name.clone()),
            namespace: Some("ns".into()),
            ..ObjectMeta::default()
        };
        let o = route_object(&r, meta, api.route(RouteKind::Tls).unwrap());
        let v = serde_json::to_value(&o).unwrap();
        assert_eq!(v["apiVersion"], "gateway.networking.k8s.io/v1alpha2");
        assert_eq!(v["kind"], "TLSRoute");
        assert_eq!(v["metadata"]["name"], "shardgate-c-1-0");
        assert_eq!(
            v["spec"],
            json!({
                "hostnames": ["shard-1-0.example.com"],
                "parentRefs": [{"group": GROUP, "kind": "Gateway", "name": "gw", "port": 7002}],
                "rules": [{"backendRefs": [{"group": "", "kind": "Service",
                    "name": "shardgate-c-shard-1", "port": 6379, "weight": 1}]}],
            })
        );
        let with_section = m::Route {
            section_name: Some("valkey".into()),
            hostnames: vec![],
            ..r
        };
        let v = serde_json::to_value(route_object(
            &with_section,
            ObjectMeta::default(),
            api.route(RouteKind::Tcp).unwrap(),
        ))
        .unwrap();
        assert_eq!(v["kind"], "TCPRoute");
        assert_eq!(v["spec"]["parentRefs"][0]["sectionName"], "valkey");
        assert!(v["spec"].get("hostnames").is_none());
    }

    #[test]
    fn a_gateway_is_read_for_its_listeners_and_addresses() {
        let gw = json!({
            "spec": {"listeners": [
                {"name": "a", "port": 7000, "protocol": "TCP"},
                {"name": "b", "port": 7001, "protocol": "TLS", "tls": {"mode": "Passthrough"}},
                {"name": "c", "port": 7002, "protocol": "TLS"},
                {"name": "d", "port": 443, "protocol": "HTTPS"},
                {"name": "no-port", "protocol": "TCP"},
                {"name": "e", "port": 70000, "protocol": "TCP"},
            ]},
            "status": {"addresses": [
                {"type": "IPAddress", "value": "203.0.113.9"},
                {"value": "198.51.100.1"},
                {"type": "Hostname", "value": "gw.example.com"},
                {"type": "NamedAddress", "value": "x"},
                {"type": "IPAddress", "value": "not an ip"},
            ]},
        });
        let g = observed_gateway(&gw);
        let l = |name: &str, port, protocol| Listener {
            name: name.into(),
            port,
            protocol,
        };
        assert_eq!(
            g.listeners,
            [
                l("a", 7000, ListenerProtocol::Tcp),
                l("b", 7001, ListenerProtocol::Tls),
                l("c", 7002, ListenerProtocol::Other),
                l("d", 443, ListenerProtocol::Other),
                l("e", 70000, ListenerProtocol::Tcp),
            ]
        );
        assert_eq!(
            g.addresses,
            [
                Ingress::Ip(IpAddress::V4(0xcb00_7109)),
                Ingress::Ip(IpAddress::V4(0xc633_6401)),
                Ingress::Hostname("gw.example.com".into()),
            ]
        );
        assert_eq!(observed_gateway(&json!({})), m::ObservedGateway::default());
    }

    fn gateway(name: &str, port: u32, address: Option<&str>) -> DynamicObject {
        let mut v = json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"listeners": [{"name": "l", "port": port, "protocol": "TCP"}]},
        });
        if let Some(a) = address {
            v["status"] = json!({"addresses": [{"value": a}]});
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_changes_to_what_the_guest_reads_are_news() {
        use watcher::Event;
        let gateways = Gateways::default();
        assert!(!gateways.is_ready());
        let at = |name: &str| vec![("ns".to_string(), name.to_string())];
        assert!(gateways.apply(Event::Init).is_empty());
        assert!(
            gateways
                .apply(Event::InitApply(gateway("a", 7000, None)))
                .is_empty()
        );
        assert_eq!(gateways.apply(Event::InitDone), at("a"), "new after a list");
        assert!(gateways.is_ready());
        assert_eq!(gateways.get("ns", "a").unwrap().listeners[0].port, 7000);
        // The same listeners and addresses (another field changed): no news.
        assert!(
            gateways
                .apply(Event::Apply(gateway("a", 7000, None)))
                .is_empty()
        );
        assert_eq!(
            gateways.apply(Event::Apply(gateway("a", 7000, Some("10.0.0.1")))),
            at("a")
        );
        assert_eq!(
            gateways.apply(Event::Apply(gateway("b", 7001, None))),
            at("b")
        );
        // A re-list that lost `b` and kept `a` as it was.
        gateways.apply(Event::Init);
        gateways.apply(Event::InitApply(gateway("a", 7000, Some("10.0.0.1"))));
        assert_eq!(gateways.apply(Event::InitDone), at("b"));
        assert!(gateways.get("ns", "b").is_none());
        assert_eq!(
            gateways.apply(Event::Delete(gateway("a", 7000, None))),
            at("a")
        );
        assert!(
            gateways
                .apply(Event::Delete(gateway("a", 7000, None)))
                .is_empty()
        );
        assert!(Gateways::unserved().is_ready());
    }
}
