//! A node's StatefulSet: one replica, updated only when its Pod is deleted
//! (`OnDelete`: the guest's plan decides when a node restarts), running the
//! guest's workload with the node's config, data and TLS volumes.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
    StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, KeyToPath, ObjectFieldSelector, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile,
    SecretVolumeSource, SecurityContext, TCPSocketAction, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use shardgate_contract::model::{self as m, Pair};

use super::placement;
use crate::crd::SchedulingSpec;
use shardgate_contract::{auth, names, paths};

/// The server container's name.
pub const SERVER_CONTAINER: &str = "server";
/// The server container's cluster bus port name.
pub const BUS_PORT_NAME: &str = "cluster-bus";
/// The mode of Secret files in a node's pod: read by the server's group.
const SECRET_FILE_MODE: i32 = 0o440;
/// The uid and gid of the `valkey` user in the official image.
const VALKEY_UID: i64 = 999;

/// Node `node`'s StatefulSet, its pods labelled `pod_labels` and selected
/// by `selector`; `cluster` names the cluster's Secrets; `scheduling` is
/// `spec.scheduling` as written.
pub fn stateful_set(
    cluster: &str,
    metadata: ObjectMeta,
    pod_labels: BTreeMap<String, String>,
    selector: BTreeMap<String, String>,
    node: &m::Node,
    w: &m::Workload,
    scheduling: Option<&SchedulingSpec>,
) -> StatefulSet {
    let placed = placement::place(cluster, node, &w.spreads, scheduling);
    let (volumes, mounts) = volumes(cluster, node, w);
    let annotations = (!w.restart_settings.is_empty()).then(|| {
        BTreeMap::from([(
            RESTART_SETTINGS_ANNOTATION.to_string(),
            digest(&w.restart_settings),
        )])
    });
    StatefulSet {
        metadata,
        spec: StatefulSetSpec {
            replicas: Some(1),
            service_name: Some(node.name.clone()),
            selector: LabelSelector {
                match_labels: Some(selector),
                ..LabelSelector::default()
            },
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".into()),
                ..StatefulSetUpdateStrategy::default()
            }),
            pod_management_policy: Some("Parallel".into()),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations,
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![server(node, w, mounts)],
                    volumes: Some(volumes),
                    security_context: Some(pod_security()),
                    affinity: placed.affinity,
                    topology_spread_constraints: placed.topology_spread_constraints,
                    tolerations: placed.tolerations,
                    node_selector: placed.node_selector,
                    priority_class_name: placed.priority_class_name,
                    ..PodSpec::default()
                }),
            },
            volume_claim_templates: w.persistence.as_ref().map(|p| vec![claim(p)]),
            persistent_volume_claim_retention_policy: w.persistence.as_ref().map(|p| {
                let policy = match p.reclaim_policy {
                    m::ReclaimPolicy::Retain => "Retain",
                    m::ReclaimPolicy::Delete => "Delete",
                };
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: Some(policy.into()),
                    when_scaled: Some(policy.into()),
                }
            }),
            ..StatefulSetSpec::default()
        },
        status: None,
    }
}

/// The pod template annotation whose value is a digest of the settings
/// that take effect only at start: a change rolls the pods.
pub const RESTART_SETTINGS_ANNOTATION: &str = "shardgate.io/restart-settings";

/// The first 16 hex digits of the SHA-256 of `text`.
fn digest(text: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(text.as_bytes())[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The node's data volume claim: `data`, read-write by one node, of the
/// asked size and class. Its PVC is `data-<pod>`.
fn claim(p: &m::Persistence) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(DATA_VOLUME.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(p.size.clone()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            storage_class_name: p.storage_class_name.clone(),
            volume_mode: Some("Filesystem".into()),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

/// The data volume's name (and the claim template's).
pub const DATA_VOLUME: &str = "data";

/// The server container: the guest's image and command, the node's client
/// and bus ports, a TCP readiness probe, no privileges.
fn server(node: &m::Node, w: &m::Workload, mounts: Vec<VolumeMount>) -> Container {
    let port = |name: &str, port: u32| ContainerPort {
        name: Some(name.into()),
        container_port: port as i32,
        protocol: Some("TCP".into()),
        ..ContainerPort::default()
    };
    Container {
        name: SERVER_CONTAINER.into(),
        image: Some(w.image.clone()),
        command: Some(w.command.clone()),
        env: Some(vec![
            field_env("POD_IP", "status.podIP"),
            field_env("HOST_IP", "status.hostIP"),
        ]),
        ports: Some(vec![
            port(&node.port_name, names::CLIENT_PORT),
            port(BUS_PORT_NAME, names::BUS_PORT),
        ]),
        resources: w.resources.as_ref().map(|r| ResourceRequirements {
            requests: quantity_map(&r.requests),
            limits: quantity_map(&r.limits),
            ..ResourceRequirements::default()
        }),
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(names::CLIENT_PORT as i32),
                ..TCPSocketAction::default()
            }),
            period_seconds: Some(5),
            ..Probe::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Capabilities::default()
            }),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(mounts),
        ..Container::default()
    }
}

/// An environment variable from the downward API.
fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            // The API server defaults `apiVersion` inside this atomic
            // struct; set, it stays what shardgate applied (see
            // `crate::owned_fields`).
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".into()),
                field_path: path.into(),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// The node's volumes and where the server mounts them: its ConfigMap
/// (`valkey.conf`), its data, the ACL Secret (the aclfile), from the system
/// Secret only the replicas' `masterauth` include, and the TLS Secret when
/// there is one. Secret files are readable by the server's group only.
fn volumes(cluster: &str, node: &m::Node, w: &m::Workload) -> (Vec<Volume>, Vec<VolumeMount>) {
    let mount = |name: &str, path: &str, read_only: bool| VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    };
    let mut mounts = vec![
        mount("config", paths::CONFIG_DIR, true),
        mount(DATA_VOLUME, paths::DATA_DIR, false),
    ];
    let mut volumes = vec![Volume {
        name: "config".into(),
        config_map: Some(ConfigMapVolumeSource {
            name: node.name.clone(),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }];
    // With persistence the data volume is the claim template's.
    if w.persistence.is_none() {
        volumes.push(Volume {
            name: DATA_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
    }
    let secret = |name: &str, secret: String, items: Option<Vec<KeyToPath>>| Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret),
            items,
            default_mode: Some(SECRET_FILE_MODE),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    };
    mounts.push(mount("acl", paths::ACL_DIR, true));
    volumes.push(secret("acl", names::acl_secret(cluster), None));
    mounts.push(mount("system", paths::SYSTEM_DIR, true));
    volumes.push(secret(
        "system",
        names::system_secret(cluster),
        Some(vec![KeyToPath {
            key: auth::REPLICATION_CONF.into(),
            path: auth::REPLICATION_CONF.into(),
            ..KeyToPath::default()
        }]),
    ));
    if let Some(secret) = &w.tls_secret {
        mounts.push(mount("tls", paths::TLS_DIR, true));
        volumes.push(Volume {
            name: "tls".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.clone()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    (volumes, mounts)
}

/// The pod runs as the image's `valkey` user, never root, with the runtime's
/// default seccomp profile.
fn pod_security() -> PodSecurityContext {
    PodSecurityContext {
        run_as_user: Some(VALKEY_UID),
        run_as_group: Some(VALKEY_UID),
        fs_group: Some(VALKEY_UID),
        run_as_non_root: Some(true),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..SeccompProfile::default()
        }),
        ..PodSecurityContext::default()
    }
}

fn quantity_map(pairs: &[Pair]) -> Option<BTreeMap<String, Quantity>> {
    (!pairs.is_empty()).then(|| {
        pairs
            .iter()
            .map(|(k, v)| (k.clone(), Quantity(v.clone())))
            .collect()
    })
}
