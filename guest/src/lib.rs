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
pub mod services;
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
use shardgate_contract::model::{
    Cluster, Desired, Error, Input, Node, Pair, Severity, Status, Violation, Workload,
};
use shardgate_contract::{labels, names};

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
    let tls = cluster.tls.is_some();
    let topology = topology::plan(
        shards,
        nodes,
        &input.observed.pods,
        input.observed.valkey.as_deref(),
    );
    // The spec's shards, then the departing shards that must stay until
    // their slots have moved and their nodes are forgotten.
    let shard_list: Vec<u32> = (0..shards)
        .chain(topology.draining.iter().copied())
        .collect();
    let span = shard_list.last().map_or(0, |s| s + 1);
    let index = Index::new(&input.observed, span, nodes);
    let ea = cluster.external_access.as_ref().filter(|ea| ea.enabled);

    let externals: Vec<External> = match ea {
        Some(ea) => shard_list
            .iter()
            .flat_map(|&s| (0..nodes).map(move |n| (s, n)))
            .map(|(s, n)| endpoints::external(ea, &index, s, n))
            .collect(),
        None => Vec::new(),
    };

    let mut node_list = Vec::with_capacity(shard_list.len() * nodes as usize);
    for (k, &shard) in shard_list.iter().enumerate() {
        for node in 0..nodes {
            let node_name = names::node_name(&cluster.name, shard, node);
            let announce = match externals.get(k * nodes as usize + node as usize) {
                Some(ext) => Announce::external(node_name.clone(), ext, tls),
                None => Announce::none(tls),
            };
            node_list.push(Node {
                shard,
                node,
                name: names::node_object(&cluster.name, shard, node),
                config: announce::config(&node_name, &announce),
                announce: announce.settings(),
                port_name: names::port_name(node),
                node_name,
            });
        }
    }

    let mut desired_status = Status::default();
    let mut services = Vec::new();
    let mut service_annotations = Vec::new();
    if let Some(ea) = ea {
        services = services::shard_services(&cluster.name, ea, &index, &shard_list, nodes);
        service_annotations = sorted(&ea.service_annotations);
        desired_status.external_endpoints = Some(status::external_endpoints(
            ea.service_type,
            &externals,
            &shard_list,
            nodes,
        ));
        desired_status
            .conditions
            .push(status::external_access_ready(&externals));
        if externals.iter().any(|e| e.lb_hostname_fallback) {
            violations.push(Violation {
                severity: Severity::Warning,
                field: "spec.externalAccess.preferredEndpointType".to_string(),
                message: "a load balancer has a hostname but no IP, so its nodes announce a \
                          hostname instead of an IP"
                    .to_string(),
            });
        }
    }

    Ok(Desired {
        labels: common_labels(&cluster.name),
        service_annotations,
        services,
        workload: workload(cluster),
        acl: acl::render(cluster, &input.credentials),
        nodes: node_list,
        status: desired_status,
        warnings: violations,
        topology,
    })
}

/// Every error and warning for a cluster spec, without observed state.
pub fn validate(cluster: &Cluster) -> Vec<Violation> {
    validate::validate(cluster, &[])
}

/// Every object name the cluster can generate (its shard Services whether or
/// not external access is on, and its node objects), for collision checks.
pub fn generated_names(cluster: &Cluster) -> Vec<String> {
    let shards = cluster.shards.max(0) as u32;
    let nodes = cluster.replicas.max(0) as u32 + 1;
    let mut out = Vec::with_capacity((shards * (nodes + 1)) as usize);
    for shard in 0..shards {
        out.push(names::shard_service(&cluster.name, shard));
        for node in 0..nodes {
            out.push(names::node_object(&cluster.name, shard, node));
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

fn workload(cluster: &Cluster) -> Workload {
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
    }
}

fn sorted(pairs: &[Pair]) -> Vec<Pair> {
    let mut v = pairs.to_vec();
    v.sort();
    v.dedup_by(|a, b| a.0 == b.0);
    v
}
