//! The Gateway API kinds the sandbox serves, read as the sandbox's gateway
//! needs them, and which routes attach to which listener.
//!
//! - [`register`] (or [`resources`]) serves `gateway.networking.k8s.io`
//!   `v1 Gateway`, `v1alpha2 TCPRoute` and `v1alpha2 TLSRoute` on an
//!   emulator, each namespaced with a `/status` subresource and the
//!   printer columns of the upstream CRDs, as installing those CRDs would.
//!   Tests register the same kinds on their own emulators with it.
//! - [`Gateway`] and [`Route`] are the fields the sandbox reads of those
//!   objects (everything else is ignored).
//! - [`attaches`] is the attachment rule, a pure function; [`route_for_sni`]
//!   picks a TLS listener's route by the client's server name.

use kube_emulator::{CustomResource, EmulatorBuilder, PrinterColumn};
use serde::Deserialize;
use serde_json::Value;

/// The Gateway API's group.
pub const GROUP: &str = "gateway.networking.k8s.io";
/// The version of `Gateway` the sandbox serves.
pub const GATEWAY_VERSION: &str = "v1";
/// The version of `TCPRoute` and `TLSRoute` the sandbox serves.
pub const ROUTE_VERSION: &str = "v1alpha2";

/// The Gateway API kinds, as CRDs would serve them: `Gateway` (`v1`,
/// `gateways`, short name `gtw`, columns Class, Address, Programmed, Age),
/// `TCPRoute` and `TLSRoute` (`v1alpha2`, `tcproutes` / `tlsroutes`,
/// column Age). Each is namespaced with a `/status` subresource.
pub fn resources() -> Vec<CustomResource> {
    let age = || PrinterColumn::new("Age", "date", ".metadata.creationTimestamp");
    let mut gateway = CustomResource::namespaced(GROUP, GATEWAY_VERSION, "Gateway", "gateways")
        .printer_column(PrinterColumn::new(
            "Class",
            "string",
            ".spec.gatewayClassName",
        ))
        .printer_column(PrinterColumn::new(
            "Address",
            "string",
            ".status.addresses[*].value",
        ))
        .printer_column(PrinterColumn::new(
            "Programmed",
            "string",
            ".status.conditions[?(@.type==\"Programmed\")].status",
        ))
        .printer_column(age());
    gateway.short_names = vec!["gtw".into()];
    let route = |kind: RouteKind| {
        CustomResource::namespaced(GROUP, ROUTE_VERSION, kind.kind(), kind.plural())
            .printer_column(age())
    };
    vec![gateway, route(RouteKind::Tcp), route(RouteKind::Tls)]
}

/// Serves the Gateway API kinds ([`resources`]) on the emulator `builder`
/// builds.
pub fn register(builder: EmulatorBuilder) -> EmulatorBuilder {
    resources()
        .into_iter()
        .fold(builder, EmulatorBuilder::custom_resource)
}

/// A route kind the sandbox's gateway serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteKind {
    /// `TCPRoute`, for `TCP` listeners.
    Tcp,
    /// `TLSRoute`, for `TLS` listeners (passthrough).
    Tls,
}

impl RouteKind {
    /// Both kinds.
    pub const ALL: [RouteKind; 2] = [RouteKind::Tcp, RouteKind::Tls];

    /// `TCPRoute` or `TLSRoute`.
    pub fn kind(self) -> &'static str {
        match self {
            RouteKind::Tcp => "TCPRoute",
            RouteKind::Tls => "TLSRoute",
        }
    }

    /// `tcproutes` or `tlsroutes`.
    pub fn plural(self) -> &'static str {
        match self {
            RouteKind::Tcp => "tcproutes",
            RouteKind::Tls => "tlsroutes",
        }
    }

    /// The kind a listener of `protocol` takes: `TCP` → TCPRoute, `TLS` →
    /// TLSRoute, others (HTTP, HTTPS, UDP) none the sandbox serves.
    pub fn for_protocol(protocol: &str) -> Option<RouteKind> {
        match protocol {
            "TCP" => Some(RouteKind::Tcp),
            "TLS" => Some(RouteKind::Tls),
            _ => None,
        }
    }
}

/// What the sandbox reads of a `Gateway`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gateway {
    pub name: String,
    pub namespace: String,
    pub listeners: Vec<Listener>,
    /// `status.addresses`, as they are now.
    pub status_addresses: Value,
    /// `status.listeners`, as they are now.
    pub status_listeners: Value,
}

/// One of a Gateway's `spec.listeners`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Listener {
    pub name: String,
    pub port: u16,
    /// `TCP`, `TLS`, `HTTP`, ...
    pub protocol: String,
    pub tls: Option<ListenerTls>,
    pub allowed_routes: Option<AllowedRoutes>,
}

/// A listener's `tls`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListenerTls {
    /// `Passthrough` or `Terminate` (the API's default when unset).
    pub mode: Option<String>,
}

/// A listener's `allowedRoutes`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AllowedRoutes {
    pub namespaces: Option<RouteNamespaces>,
    pub kinds: Option<Vec<RouteGroupKind>>,
}

/// `allowedRoutes.namespaces`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteNamespaces {
    /// `Same` (the default), `All` or `Selector`.
    pub from: Option<String>,
}

/// `allowedRoutes.kinds[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteGroupKind {
    /// Defaults to the Gateway API's group.
    pub group: Option<String>,
    pub kind: String,
}

impl Listener {
    /// Whether the sandbox can serve this listener, or why not: `TCP`, or
    /// `TLS` with `tls.mode: Passthrough` (the sandbox terminates no TLS).
    pub fn served(&self) -> Result<RouteKind, String> {
        match RouteKind::for_protocol(&self.protocol) {
            Some(RouteKind::Tls) => {
                let mode = self
                    .tls
                    .as_ref()
                    .and_then(|t| t.mode.as_deref())
                    .unwrap_or("Terminate");
                if mode == "Passthrough" {
                    Ok(RouteKind::Tls)
                } else {
                    Err(format!(
                        "protocol TLS with tls.mode {mode}: the sandbox serves TLS listeners \
                         in Passthrough mode only"
                    ))
                }
            }
            Some(kind) => Ok(kind),
            None => Err(format!(
                "protocol {:?}: the sandbox serves TCP and TLS listeners only",
                self.protocol
            )),
        }
    }
}

/// What the sandbox reads of a `TCPRoute` or `TLSRoute`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Route {
    pub kind: Option<RouteKind>,
    pub name: String,
    pub namespace: String,
    pub parent_refs: Vec<ParentRef>,
    /// `spec.hostnames` (TLSRoute).
    pub hostnames: Vec<String>,
    /// The first `backendRefs` entry of the first rule: where the route
    /// leads (the sandbox neither splits by weight nor tries others).
    pub backend: Option<BackendRef>,
}

/// One of a route's `spec.parentRefs`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ParentRef {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub namespace: Option<String>,
    pub name: String,
    pub section_name: Option<String>,
    pub port: Option<u16>,
}

/// A rule's `backendRefs[]` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BackendRef {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub namespace: Option<String>,
    pub name: String,
    pub port: Option<u16>,
}

impl BackendRef {
    /// The Service and port number it names, or why it names none the
    /// sandbox resolves: another kind, another namespace (that would need
    /// a ReferenceGrant) or no port.
    pub fn service_port(&self, route_namespace: &str) -> Result<(&str, u16), String> {
        let group = self.group.as_deref().unwrap_or("");
        let kind = self.kind.as_deref().unwrap_or("Service");
        if !group.is_empty() || kind != "Service" {
            return Err(format!(
                "backendRef {:?} is a {kind} of group {group:?}: only core Services are resolved",
                self.name
            ));
        }
        if self
            .namespace
            .as_deref()
            .is_some_and(|ns| ns != route_namespace)
        {
            return Err(format!(
                "backendRef {:?} is in another namespace: ReferenceGrants are not modelled",
                self.name
            ));
        }
        let port = self
            .port
            .ok_or_else(|| format!("backendRef {:?} has no port", self.name))?;
        Ok((&self.name, port))
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct GatewaySpec {
    listeners: Vec<Listener>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RouteSpec {
    parent_refs: Vec<ParentRef>,
    hostnames: Vec<String>,
    rules: Vec<RouteRule>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RouteRule {
    backend_refs: Vec<BackendRef>,
}

fn meta(object: &Value, field: &str) -> String {
    object["metadata"][field]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn parse<T: serde::de::DeserializeOwned + Default>(value: &Value) -> Result<T, String> {
    if value.is_null() {
        return Ok(T::default());
    }
    serde_json::from_value(value.clone()).map_err(|e| e.to_string())
}

impl Gateway {
    /// Reads a `Gateway` object; an error says what in its spec does not
    /// parse.
    pub fn from_object(object: &Value) -> Result<Gateway, String> {
        let spec: GatewaySpec = parse(&object["spec"])?;
        Ok(Gateway {
            name: meta(object, "name"),
            namespace: meta(object, "namespace"),
            listeners: spec.listeners,
            status_addresses: object["status"]["addresses"].clone(),
            status_listeners: object["status"]["listeners"].clone(),
        })
    }
}

impl Route {
    /// Reads a route object; `kind` comes from its `kind` field.
    pub fn from_object(object: &Value) -> Result<Route, String> {
        let spec: RouteSpec = parse(&object["spec"])?;
        let kind = RouteKind::ALL
            .into_iter()
            .find(|k| object["kind"].as_str() == Some(k.kind()));
        Ok(Route {
            kind,
            name: meta(object, "name"),
            namespace: meta(object, "namespace"),
            parent_refs: spec.parent_refs,
            hostnames: spec.hostnames,
            backend: spec
                .rules
                .into_iter()
                .next()
                .and_then(|r| r.backend_refs.into_iter().next()),
        })
    }
}

/// Whether `route` attaches to `listener` of `gateway`, as the Gateway API
/// defines it (for the parts the sandbox models):
///
/// - one of its `parentRefs` names the Gateway: group unset or
///   `gateway.networking.k8s.io`, kind unset or `Gateway`, namespace unset
///   (the route's) or the Gateway's, and the Gateway's name;
/// - that parentRef's `sectionName` is unset or the listener's name, and
///   its `port` unset or the listener's port;
/// - the route's kind is the one the listener's protocol takes (TCP →
///   TCPRoute, TLS → TLSRoute) and, if the listener lists
///   `allowedRoutes.kinds`, one of them;
/// - the route's namespace is allowed: `allowedRoutes.namespaces.from`
///   `Same` (the default) needs the Gateway's namespace, `All` any;
///   `Selector` is not modelled and allows none.
pub fn attaches(route: &Route, gateway: &Gateway, listener: &Listener) -> bool {
    let Some(kind) = route.kind else {
        return false;
    };
    if RouteKind::for_protocol(&listener.protocol) != Some(kind) {
        return false;
    }
    let allowed = listener.allowed_routes.clone().unwrap_or_default();
    if let Some(kinds) = allowed.kinds.as_ref().filter(|k| !k.is_empty()) {
        let listed = kinds
            .iter()
            .any(|k| k.group.as_deref().unwrap_or(GROUP) == GROUP && k.kind == kind.kind());
        if !listed {
            return false;
        }
    }
    let from = allowed
        .namespaces
        .and_then(|n| n.from)
        .unwrap_or_else(|| "Same".into());
    let namespace_allowed = match from.as_str() {
        "All" => true,
        "Same" => route.namespace == gateway.namespace,
        _ => false,
    };
    namespace_allowed
        && route.parent_refs.iter().any(|p| {
            p.group.as_deref().unwrap_or(GROUP) == GROUP
                && p.kind.as_deref().unwrap_or("Gateway") == "Gateway"
                && p.namespace.as_deref().unwrap_or(&route.namespace) == gateway.namespace
                && p.name == gateway.name
                && p.section_name.as_ref().is_none_or(|s| *s == listener.name)
                && p.port.is_none_or(|port| port == listener.port)
        })
}

/// The routes of `routes` that attach to `listener` of `gateway`, in the
/// order given.
pub fn attached<'a>(routes: &'a [Route], gateway: &Gateway, listener: &Listener) -> Vec<&'a Route> {
    routes
        .iter()
        .filter(|r| attaches(r, gateway, listener))
        .collect()
}

/// Whether `hostname` (a route's, possibly `*.suffix`) matches the server
/// name `sni`: equal (ignoring case), or a wildcard whose suffix `sni` ends
/// with after at least one label (`*.example.com` matches `a.example.com`
/// and `a.b.example.com`, not `example.com`).
pub fn hostname_matches(hostname: &str, sni: &str) -> bool {
    let (hostname, sni) = (hostname.to_ascii_lowercase(), sni.to_ascii_lowercase());
    match hostname.strip_prefix("*.") {
        Some(suffix) => sni
            .strip_suffix(suffix)
            .and_then(|head| head.strip_suffix('.'))
            .is_some_and(|head| !head.is_empty()),
        None => hostname == sni,
    }
}

/// Which of a TLS listener's attached routes a connection with server
/// name `sni` takes: the one with a hostname equal to it; else the one
/// with the longest wildcard hostname matching it; else the one without
/// hostnames (which matches any name). None, or two equally good: an
/// error saying so.
pub fn route_for_sni<'a>(routes: &[&'a Route], sni: &str) -> Result<&'a Route, String> {
    // Rank: 2 + suffix length for exact, 1 + suffix length for a wildcard,
    // 0 for no hostnames at all.
    let rank = |r: &Route| -> Option<usize> {
        if r.hostnames.is_empty() {
            return Some(0);
        }
        r.hostnames
            .iter()
            .filter(|h| hostname_matches(h, sni))
            .map(|h| {
                if h.starts_with("*.") {
                    1 + h.len()
                } else {
                    // An exact name beats every wildcard.
                    1 + usize::from(u16::MAX) + h.len()
                }
            })
            .max()
    };
    let ranked: Vec<(usize, &'a Route)> = routes
        .iter()
        .filter_map(|r| rank(r).map(|k| (k, *r)))
        .collect();
    let Some(best) = ranked.iter().map(|(k, _)| *k).max() else {
        return Err(format!(
            "no TLSRoute of [{}] has a hostname matching {sni:?}",
            names(routes.iter().copied())
        ));
    };
    match ranked
        .iter()
        .filter(|(k, _)| *k == best)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [(_, route)] => Ok(route),
        many => Err(format!(
            "server name {sni:?} matches {} TLSRoutes equally: [{}]",
            many.len(),
            names(many.iter().map(|(_, r)| *r))
        )),
    }
}

/// `a, b, c` of the routes' names.
pub fn names<'a>(routes: impl Iterator<Item = &'a Route>) -> String {
    routes
        .map(|r| r.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gateway() -> Gateway {
        Gateway::from_object(&json!({
            "metadata": {"name": "gw", "namespace": "ns"},
            "spec": {"gatewayClassName": "sandbox", "listeners": [
                {"name": "tcp-7000", "port": 7000, "protocol": "TCP"},
                {"name": "tls", "port": 7443, "protocol": "TLS", "tls": {"mode": "Passthrough"}},
                {"name": "tcp-only-tls-kinds", "port": 7001, "protocol": "TCP",
                 "allowedRoutes": {"kinds": [{"kind": "TLSRoute"}]}},
                {"name": "tcp-all", "port": 7002, "protocol": "TCP",
                 "allowedRoutes": {"namespaces": {"from": "All"}}},
                {"name": "tcp-selector", "port": 7003, "protocol": "TCP",
                 "allowedRoutes": {"namespaces": {"from": "Selector"}}},
            ]},
        }))
        .unwrap()
    }

    fn route(kind: &str, namespace: &str, parent: Value) -> Route {
        Route::from_object(&json!({
            "apiVersion": "gateway.networking.k8s.io/v1alpha2", "kind": kind,
            "metadata": {"name": "r", "namespace": namespace},
            "spec": {"parentRefs": [parent],
                     "rules": [{"backendRefs": [{"name": "svc", "port": 6379}]}]},
        }))
        .unwrap()
    }

    #[test]
    fn the_attachment_rule() {
        let gw = gateway();
        let listener = |name: &str| gw.listeners.iter().find(|l| l.name == name).unwrap();
        // (route kind, route namespace, parentRef, listener, attaches)
        let table = [
            ("TCPRoute", "ns", json!({"name": "gw"}), "tcp-7000", true),
            ("TCPRoute", "ns", json!({"name": "gw"}), "tls", false),
            ("TLSRoute", "ns", json!({"name": "gw"}), "tls", true),
            ("TLSRoute", "ns", json!({"name": "gw"}), "tcp-7000", false),
            (
                "TCPRoute",
                "ns",
                json!({"name": "other"}),
                "tcp-7000",
                false,
            ),
            // group, kind and namespace: explicit and equal, or different.
            (
                "TCPRoute",
                "ns",
                json!({"group": GROUP, "kind": "Gateway", "namespace": "ns", "name": "gw"}),
                "tcp-7000",
                true,
            ),
            (
                "TCPRoute",
                "ns",
                json!({"group": "example.com", "name": "gw"}),
                "tcp-7000",
                false,
            ),
            (
                "TCPRoute",
                "ns",
                json!({"kind": "Service", "name": "gw"}),
                "tcp-7000",
                false,
            ),
            (
                "TCPRoute",
                "ns",
                json!({"namespace": "elsewhere", "name": "gw"}),
                "tcp-7000",
                false,
            ),
            // sectionName and port.
            (
                "TCPRoute",
                "ns",
                json!({"name": "gw", "sectionName": "tcp-7000"}),
                "tcp-7000",
                true,
            ),
            (
                "TCPRoute",
                "ns",
                json!({"name": "gw", "sectionName": "tcp-all"}),
                "tcp-7000",
                false,
            ),
            (
                "TCPRoute",
                "ns",
                json!({"name": "gw", "port": 7000}),
                "tcp-7000",
                true,
            ),
            (
                "TCPRoute",
                "ns",
                json!({"name": "gw", "port": 7002}),
                "tcp-7000",
                false,
            ),
            (
                "TCPRoute",
                "ns",
                json!({"name": "gw", "sectionName": "tcp-7000", "port": 7000}),
                "tcp-7000",
                true,
            ),
            (
                "TCPRoute",
                "ns",
                json!({"name": "gw", "sectionName": "tcp-7000", "port": 7002}),
                "tcp-7000",
                false,
            ),
            // allowedRoutes.kinds and namespaces.
            (
                "TCPRoute",
                "ns",
                json!({"name": "gw"}),
                "tcp-only-tls-kinds",
                false,
            ),
            (
                "TCPRoute",
                "other",
                json!({"namespace": "ns", "name": "gw"}),
                "tcp-7000",
                false,
            ),
            (
                "TCPRoute",
                "other",
                json!({"namespace": "ns", "name": "gw"}),
                "tcp-all",
                true,
            ),
            (
                "TCPRoute",
                "ns",
                json!({"name": "gw"}),
                "tcp-selector",
                false,
            ),
            // Not a route kind the gateway serves.
            ("UDPRoute", "ns", json!({"name": "gw"}), "tcp-7000", false),
        ];
        for (i, (kind, ns, parent, name, want)) in table.into_iter().enumerate() {
            let r = route(kind, ns, parent.clone());
            assert_eq!(
                attaches(&r, &gw, listener(name)),
                want,
                "row {i}: {kind} in {ns} with parentRef {parent} on listener {name}"
            );
        }
        // Any one of several parentRefs is enough.
        let mut r = route("TCPRoute", "ns", json!({"name": "other"}));
        r.parent_refs.push(ParentRef {
            name: "gw".into(),
            port: Some(7000),
            ..ParentRef::default()
        });
        assert!(attaches(&r, &gw, listener("tcp-7000")));
        // Its port leaves out tcp-all (7002); a route without one does not.
        let plain = route("TCPRoute", "ns", json!({"name": "gw"}));
        let both = [r, plain.clone()];
        assert_eq!(attached(&both, &gw, listener("tcp-all")), [&plain]);
        assert_eq!(attached(&both, &gw, listener("tcp-7000")).len(), 2);
    }

    #[test]
    fn served_listeners() {
        let gw = gateway();
        assert_eq!(gw.listeners[0].served(), Ok(RouteKind::Tcp));
        assert_eq!(gw.listeners[1].served(), Ok(RouteKind::Tls));
        let terminate = Listener {
            protocol: "TLS".into(),
            ..Listener::default()
        };
        assert!(terminate.served().unwrap_err().contains("Terminate"));
        let http = Listener {
            protocol: "HTTP".into(),
            ..Listener::default()
        };
        assert!(http.served().unwrap_err().contains("\"HTTP\""));
    }

    #[test]
    fn backend_refs_name_a_service_port() {
        let r = route("TCPRoute", "ns", json!({"name": "gw"}));
        assert_eq!(
            r.backend.as_ref().unwrap().service_port("ns"),
            Ok(("svc", 6379))
        );
        let other = |b: Value| {
            serde_json::from_value::<BackendRef>(b)
                .unwrap()
                .service_port("ns")
                .unwrap_err()
        };
        assert!(
            other(json!({"name": "s", "port": 1, "namespace": "x"})).contains("ReferenceGrant")
        );
        assert!(other(json!({"name": "s", "port": 1, "kind": "Pod"})).contains("Pod"));
        assert!(other(json!({"name": "s"})).contains("no port"));
        assert_eq!(
            serde_json::from_value::<BackendRef>(
                json!({"group": "", "kind": "Service", "name": "s", "port": 7, "weight": 1})
            )
            .unwrap()
            .service_port("ns"),
            Ok(("s", 7))
        );
    }

    #[test]
    fn server_names_pick_the_most_specific_route() {
        let tls = |name: &str, hostnames: &[&str]| Route {
            kind: Some(RouteKind::Tls),
            name: name.into(),
            hostnames: hostnames.iter().map(|h| h.to_string()).collect(),
            ..Route::default()
        };
        let a = tls("a", &["vc-0-0.valkey.test"]);
        let b = tls("b", &["vc-0-1.valkey.test", "other.test"]);
        let wild = tls("wild", &["*.valkey.test"]);
        let any = tls("any", &[]);
        let routes = [&a, &b, &wild, &any];
        let pick = |sni: &str| route_for_sni(&routes, sni).map(|r| r.name.clone());
        assert_eq!(pick("vc-0-0.valkey.test"), Ok("a".into()));
        assert_eq!(pick("VC-0-1.Valkey.Test"), Ok("b".into()));
        assert_eq!(pick("other.test"), Ok("b".into()));
        assert_eq!(pick("x.y.valkey.test"), Ok("wild".into()));
        assert_eq!(pick("valkey.test"), Ok("any".into()));
        assert!(
            route_for_sni(&[&a, &b], "nope.test")
                .unwrap_err()
                .contains("no TLSRoute of [a, b]")
        );
        let a2 = tls("a2", &["vc-0-0.valkey.test"]);
        let err = route_for_sni(&[&a, &a2], "vc-0-0.valkey.test").unwrap_err();
        assert!(
            err.contains("2 TLSRoutes") && err.contains("a, a2"),
            "{err}"
        );
        assert!(!hostname_matches("*.valkey.test", ".valkey.test"));
    }

    #[test]
    fn the_kinds_served() {
        let kinds: Vec<(String, String, String, bool)> = resources()
            .into_iter()
            .map(|r| (r.version, r.kind, r.plural, r.status_subresource))
            .collect();
        assert_eq!(
            kinds,
            [
                ("v1".into(), "Gateway".into(), "gateways".into(), true),
                (
                    "v1alpha2".into(),
                    "TCPRoute".into(),
                    "tcproutes".into(),
                    true
                ),
                (
                    "v1alpha2".into(),
                    "TLSRoute".into(),
                    "tlsroutes".into(),
                    true
                ),
            ]
        );
    }
}
