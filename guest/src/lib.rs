//! shardgate's reconcile logic.
//!
//! A pure function from a ValkeyCluster and what is observed in Kubernetes to
//! everything shardgate should apply: the per-shard Services, each node's
//! workload settings, announce settings and config, and the status. It performs
//! no I/O and reads no clock or random source, and its output order is fixed,
//! so the same input always gives the same bytes.
//!
//! The crate builds natively (the host's reference implementation, unit tests
//! and benchmarks) and for `wasm32-wasip2`, where [`component`] exports it as
//! the `shardgate:reconcile` WIT world.

pub mod acl;
pub mod announce;
pub mod endpoints;
pub mod gateway;
pub mod layout;
pub mod placement;
pub mod server;
pub mod services;
pub mod settings;
pub mod status;
pub mod syntax;
pub mod topology;
pub mod validate;

// The bindings wit-bindgen generates export functions by symbol name and
// lift and lower through raw pointers: the only unsafe code of the guest.
#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)]
mod component;

use announce::Announce;
use endpoints::{External, Index};
use layout::Layout;
use server::Servers;
use shardgate_contract::model::{
    Cluster, Desired, Error, Input, Node, Pair, Severity, Status, Violation, Workload,
};
use shardgate_contract::{labels, names};

/// A PodDisruptionBudget lets one node of the cluster be down at a time.
pub const MAX_UNAVAILABLE: u32 = 1;

/// Computes the desired state of one cluster. Fails, listing every error, if
/// the spec is invalid; warnings are returned in [`Desired::warnings`].
pub fn reconcile(input: &Input) -> Result<Desired, Error> {
    let cluster = &input.cluster;
    let mut violations = validate::validate(cluster, &input.other_clusters);
    if validate::has_errors(&violations) {
        violations.retain(|v| v.severity == Severity::Error);
        return Err(Error { violations });
    }
    let shards = cluster.shards as u32;
    let nodes = cluster.replicas as u32 + 1;
    let clashes = validate::pin_clashes(input);
    if !clashes.is_empty() {
        return Err(Error {
            violations: clashes,
        });
    }
    let tls = cluster.tls.is_some();
    let facts = input.observed.valkey.as_deref();
    let shape = topology::Shape {
        shards,
        nodes,
        persistent: cluster.persistence.is_some(),
    };
    let topology = topology::plan(shape, &input.observed.pods, facts);
    // The spec's nodes, then the departing ones that must stay until they
    // have handed over or drained and are forgotten.
    let layout = Layout::new(shards, nodes, &topology.departing);
    let image = cluster.image.as_deref().unwrap_or(names::DEFAULT_IMAGE);
    let servers = Servers::new(facts, server::Server::from_image(image));
    let index = Index::new(&input.observed, layout.shard_span(), layout.node_span());
    let ea = cluster.external_access.as_ref().filter(|ea| ea.enabled);
    let config = settings::normalized(&cluster.config);
    let (live_settings, restart_settings) = settings::split(&config);

    if let Some(ea) = ea
        && ea.node_ports.is_some()
        && index.has_any(ea.topology.other())
    {
        return Err(Error {
            violations: vec![Violation {
                severity: Severity::Error,
                field: "spec.externalAccess.topology".to_string(),
                message: "cannot change while nodePorts are pinned: the new Services would \
                          need the ports the old ones hold. Remove nodePorts, change the \
                          topology, then pin again"
                    .to_string(),
            }],
        });
    }

    let through =
        ea.and_then(|ea| gateway::Through::of(ea, input.observed.gateway.as_ref(), tls, nodes));
    let externals: Vec<External> = match ea {
        Some(ea) => layout
            .iter()
            .map(|(s, n)| endpoints::external(ea, through.as_ref(), &index, servers.of(s, n), s, n))
            .collect(),
        None => Vec::new(),
    };

    let mut node_list = Vec::with_capacity(layout.len());
    for (k, (shard, node)) in layout.iter().enumerate() {
        let node_name = names::node_name(&cluster.name, shard, node);
        let server = servers.of(shard, node);
        let announce = match externals.get(k) {
            Some(ext) => Announce::external(node_name.clone(), ext, tls),
            None => Announce::none(tls),
        };
        node_list.push(Node {
            shard,
            node,
            name: names::node_object(&cluster.name, shard, node),
            config: announce::config(&node_name, &announce, server, &config),
            announce: announce.settings(server),
            port_name: names::port_name(node),
            node_name,
        });
    }

    let mut desired_status = Status::default();
    let mut services = Vec::new();
    let mut routes = Vec::new();
    if let (Some(ea), Some(through)) = (ea, &through) {
        routes = gateway::routes(&cluster.name, ea, through, &layout);
        desired_status.gateway = Some(through.status(&layout));
    }
    if let Some(ea) = ea {
        // While some node is still reached through the other topology's
        // Service, those Services stay (a switch under way).
        let keep_old = externals.iter().any(|e| e.via != ea.topology);
        services = services::services(&cluster.name, ea, &index, &layout, nodes, keep_old);
        let at = status::Where {
            cluster: &cluster.name,
            namespace: &cluster.namespace,
        };
        desired_status.external_endpoints = Some(status::external_endpoints(
            at,
            ea.service_type,
            &externals,
            &layout,
        ));
        desired_status
            .conditions
            .push(status::external_access_ready(&externals, through.as_ref()));
        if externals.iter().any(|e| e.lb_hostname_fallback) {
            let what = if through.is_some() {
                "the Gateway has a hostname but no IP address"
            } else {
                "a load balancer has a hostname but no IP"
            };
            violations.push(Violation {
                severity: Severity::Warning,
                field: "spec.externalAccess.preferredEndpointType".to_string(),
                message: format!("{what}, so its nodes announce a hostname instead of an IP"),
            });
        }
    }

    Ok(Desired {
        labels: common_labels(&cluster.name),
        services,
        routes,
        workload: workload(cluster, restart_settings),
        acl: acl::render(cluster, &input.credentials, servers.oldest()),
        nodes: node_list,
        status: desired_status,
        warnings: violations,
        topology,
        live_settings,
        disruption_budget: cluster.disruption_budget.then_some(MAX_UNAVAILABLE),
    })
}

/// Every error and warning for a cluster spec, without observed state.
pub fn validate(cluster: &Cluster) -> Vec<Violation> {
    validate::validate(cluster, &[])
}

/// Every object name the cluster can generate (its shard and node Services
/// whether or not external access is on, and its node objects), for
/// collision checks.
pub fn generated_names(cluster: &Cluster) -> Vec<String> {
    let shards = cluster.shards.max(0) as u32;
    let nodes = cluster.replicas.max(0) as u32 + 1;
    let mut out = Vec::with_capacity((shards * (2 * nodes + 1)) as usize);
    for shard in 0..shards {
        out.push(names::shard_service(&cluster.name, shard));
        for node in 0..nodes {
            out.push(names::node_object(&cluster.name, shard, node));
            out.push(names::node_service(&cluster.name, shard, node));
        }
    }
    out
}

/// The labels every generated object carries, sorted by key.
pub fn common_labels(cluster: &str) -> Vec<Pair> {
    vec![
        ("app.kubernetes.io/instance".into(), cluster.into()),
        (labels::MANAGED_BY.into(), labels::MANAGER.into()),
        ("app.kubernetes.io/name".into(), "valkey".into()),
        (labels::CLUSTER.into(), cluster.into()),
    ]
}

fn workload(cluster: &Cluster, restart_settings: String) -> Workload {
    Workload {
        image: cluster
            .image
            .clone()
            .unwrap_or_else(|| names::DEFAULT_IMAGE.to_string()),
        command: [
            "valkey-server",
            "/etc/valkey/valkey.conf",
            "--cluster-announce-ip",
            "$(POD_IP)",
        ]
        .map(String::from)
        .to_vec(),
        resources: cluster.resources.clone().map(|mut r| {
            r.requests = sorted(&r.requests);
            r.limits = sorted(&r.limits);
            r
        }),
        tls_secret: cluster.tls.clone(),
        persistence: cluster.persistence.clone(),
        restart_settings,
        spreads: placement::spreads(&cluster.scheduling),
    }
}

fn sorted(pairs: &[Pair]) -> Vec<Pair> {
    let mut v = pairs.to_vec();
    v.sort();
    v.dedup_by(|a, b| a.0 == b.0);
    v
}
