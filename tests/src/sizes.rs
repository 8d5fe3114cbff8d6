//! Clusters of a given size as the guest sees them, for the size-limits
//! bench and the test that the largest allowed cluster fits the module's
//! limits: a formed cluster's whole input, and the size of the status the
//! operator would write for it.

use std::io::Write;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use shardgate_contract::model::*;
use shardgate_k8s::status::{self, Outcome, Progress};

use crate::fuzz;

/// A formed `shards` x `nodes` cluster, everything in place.
pub fn formed(shards: u32, nodes: u32) -> Input {
    let facts = fuzz::formed(shards, nodes);
    let mut pods = fuzz::pods_of(&facts);
    // Every node's Kubernetes node has an external IP: each endpoint in the
    // status carries a host, as in a real NodePort cluster.
    for p in &mut pods {
        p.node_external_ip = Some(IpAddress::V4(0xcb00_7100 + p.shard * 16 + p.node));
    }
    let services = (0..shards)
        .map(|shard| ObservedService {
            shard,
            node: None,
            ports: (0..nodes)
                .map(|node| ObservedPort {
                    node,
                    node_port: 30000 + (shard * nodes + node) % 2768,
                })
                .collect(),
            ingress: Vec::new(),
        })
        .collect();
    Input {
        cluster: Cluster {
            name: "size".into(),
            namespace: "default".into(),
            shards: shards as i32,
            replicas: nodes as i32 - 1,
            external_access: Some(ExternalAccess {
                enabled: true,
                hostname_prefix: "shard".into(),
                ..ExternalAccess::default()
            }),
            disruption_budget: true,
            ..Cluster::default()
        },
        credentials: Credentials {
            default_user: Some("0".repeat(64)),
            operator: "1".repeat(64),
            replication: "2".repeat(64),
        },
        observed: Observed {
            services,
            pods,
            gateway: None,
            valkey: Some(facts),
        },
        other_clusters: Vec::new(),
        pinned_elsewhere: Vec::new(),
    }
}

/// Counts the bytes written to it.
#[derive(Default)]
struct Count(u64);

impl Write for Count {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub fn json_bytes<T: serde::Serialize>(v: &T) -> u64 {
    let mut c = Count::default();
    serde_json::to_writer(&mut c, v).unwrap();
    c.0
}

/// The serialized size of the status the operator would write after this
/// reconcile (`status::compute`, as the operator and `shardgate render` call
/// it), every pod ready.
pub fn status_bytes(input: &Input, desired: &Desired) -> u64 {
    let pods = input.observed.pods.iter().map(|p| {
        let at = NodeRef {
            shard: p.shard,
            node: p.node,
        };
        (at, p.ready)
    });
    let shards = input.cluster.shards.max(0) as u32;
    let progress = Progress {
        changed: 0,
        ready_nodes: status::ready_nodes(pods.clone(), &desired.nodes),
        wanted_nodes: desired.nodes.len(),
        shards: shards as usize,
        ready_shards: status::ready_shards(pods, &desired.nodes, shards),
        formation: Some((&desired.topology).into()),
        ..Progress::default()
    };
    let outcome = Outcome::Reconciled {
        guest: &desired.status,
        progress,
    };
    let now = Time("2026-01-01T00:00:00Z".parse().unwrap());
    json_bytes(&status::compute(&outcome, None, Some(1), &now))
}
