//! What the operator asks of the API server: every resource it reads or
//! writes, with the verbs and why. This table is the source of the RBAC the
//! manifests grant: `deploy/operator/rbac-rules.json` is [`rules_json`]
//! (a test keeps it current, `shardgate rbac` prints it), and
//! `.ci/validate_manifests.py` (R1) checks `deploy/operator` and every
//! Helm render against that file, verb by verb.
//!
//! `tests/tests/deploy.rs` runs the operator against the API emulator and
//! checks both ways that the table is what the code does: every request
//! the operator makes is granted here, and every verb granted here is one
//! the operator was seen to use (or is marked [`Use::Admission`]).

use serde::Serialize;

/// Where a grant applies, which decides the kind of role that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Scope {
    /// Namespaced objects in the namespaces the operator watches: a
    /// ClusterRole when it watches all of them, a Role in the watched
    /// namespace with `--namespace`.
    Watched,
    /// A cluster-scoped kind: always a ClusterRole.
    Cluster,
    /// The operator's own namespace only (a Role there).
    OwnNamespace,
}

/// How a verb is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Use {
    /// The operator sends requests with these verbs.
    Request,
    /// No request uses it: admission asks for it on the operator's behalf.
    Admission,
}

/// One grant: the verbs on some resources of one API group.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Grant {
    /// `""` for the core group.
    pub api_group: &'static str,
    /// Plurals, with `/subresource` where it is one.
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
    pub scope: Scope,
    #[serde(rename = "use")]
    pub used: Use,
    /// Limits the grant to the named object (the Lease) where RBAC can:
    /// every verb but `create`, `list` and `watch`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<&'static str>,
    pub why: &'static str,
}

const fn grant(
    api_group: &'static str,
    resources: &'static [&'static str],
    verbs: &'static [&'static str],
    scope: Scope,
    why: &'static str,
) -> Grant {
    Grant {
        api_group,
        resources,
        verbs,
        scope,
        used: Use::Request,
        resource_name: None,
        why,
    }
}

/// The objects the operator renders: watched into its caches (list, watch),
/// read by name before the first apply of a name to refuse taking over
/// someone else's object (get), server-side applied (patch, and create for
/// a new object) and pruned (delete).
const OWNED: &[&str] = &["get", "list", "watch", "create", "patch", "delete"];

/// Every grant the operator needs.
pub const GRANTS: &[Grant] = &[
    grant(
        "shardgate.io",
        &["valkeyclusters"],
        &["list", "watch"],
        Scope::Watched,
        "the custom resource: watched, never written but for its status",
    ),
    grant(
        "shardgate.io",
        &["valkeyclusters/status"],
        &["patch"],
        Scope::Watched,
        "status, server-side applied (and a merge patch that removes emptied fields)",
    ),
    Grant {
        used: Use::Admission,
        ..grant(
            "shardgate.io",
            &["valkeyclusters/finalizers"],
            &["update"],
            Scope::Watched,
            "every owner reference sets blockOwnerDeletion; clusters enforcing \
             OwnerReferencesPermissionEnforcement (OpenShift) refuse creating the \
             owned objects without it",
        )
    },
    grant(
        "",
        &["services", "configmaps"],
        OWNED,
        Scope::Watched,
        "shard Services, per-node headless Services and ConfigMaps (and the \
         --module-configmap ConfigMap, watched by name)",
    ),
    grant(
        "apps",
        &["statefulsets"],
        OWNED,
        Scope::Watched,
        "one StatefulSet per node",
    ),
    grant(
        "policy",
        &["poddisruptionbudgets"],
        OWNED,
        Scope::Watched,
        "one PodDisruptionBudget per cluster (spec.podDisruptionBudget)",
    ),
    grant(
        "",
        &["pods"],
        &["list", "watch", "delete"],
        Scope::Watched,
        "readiness and host IPs; deleted one at a time for controlled restarts",
    ),
    grant(
        "",
        &["nodes"],
        &["list", "watch"],
        Scope::Cluster,
        "nodeAddressType: ExternalIP announces each pod's node's ExternalIP; read-only",
    ),
    grant(
        "",
        &["secrets"],
        &["get", "create", "patch"],
        Scope::Watched,
        "generated passwords, the ACL, users' password Secrets and the TLS Secret, \
         each by name; never listed or watched",
    ),
    grant(
        "events.k8s.io",
        &["events"],
        &["create", "patch"],
        Scope::Watched,
        "Events (a repeat raises the Event's count)",
    ),
    grant(
        "gateway.networking.k8s.io",
        &["gateways"],
        &["list", "watch"],
        Scope::Watched,
        "externalAccess.gateway: the listeners and addresses of the Gateways \
         clusters name; never written",
    ),
    grant(
        "gateway.networking.k8s.io",
        &["tcproutes", "tlsroutes"],
        OWNED,
        Scope::Watched,
        "one TCPRoute (TLSRoute for a TLS cluster) per node behind a gateway",
    ),
    grant(
        "coordination.k8s.io",
        &["leases"],
        &["create"],
        Scope::OwnNamespace,
        "leader election: the Lease is created once (create cannot be limited by name)",
    ),
    Grant {
        resource_name: Some("<lease>"),
        ..grant(
            "coordination.k8s.io",
            &["leases"],
            &["get", "patch"],
            Scope::OwnNamespace,
            "leader election: the Lease is read and renewed by name (--lease-name)",
        )
    },
];

/// Whether [`GRANTS`] lets the operator send `verb` (as RBAC names it) on
/// `resource` of `api_group`.
pub fn granted(api_group: &str, resource: &str, verb: &str) -> bool {
    GRANTS.iter().any(|g| {
        g.api_group == api_group && g.resources.contains(&resource) && g.verbs.contains(&verb)
    })
}

/// [`GRANTS`] as pretty JSON, with a trailing newline: the content of
/// `deploy/operator/rbac-rules.json`.
pub fn rules_json() -> String {
    let doc = serde_json::json!({
        "comment": "The API access shardgate's operator needs, generated from \
                    host/operator/src/rbac.rs by `shardgate rbac`; \
                    .ci/validate_manifests.py (R1) checks the RBAC manifests against it. \
                    resourceName <lease> stands for the Lease's name (--lease-name).",
        "grants": GRANTS,
    });
    let mut text = serde_json::to_string_pretty(&doc).expect("grants serialize");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMITTED: &str = "deploy/operator/rbac-rules.json";

    #[test]
    fn the_committed_rules_are_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(COMMITTED);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == rules_json(),
            "{COMMITTED} is stale: run `cargo run -p shardgate -- rbac > {COMMITTED}`"
        );
    }

    /// docs/security.md's RBAC table lists exactly [`GRANTS`]: one row per
    /// grant, with its group, resources and verbs.
    #[test]
    fn the_security_docs_table_lists_every_grant() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/security.md");
        let text = std::fs::read_to_string(&path).unwrap();
        let header = "| API group | Resources | Verbs | Why |";
        let at = text
            .find(header)
            .expect("docs/security.md has the RBAC table");
        // Backquoted names in a cell, e.g. "`services`, `configmaps`".
        let names = |cell: &str| -> Vec<String> {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        };
        let mut rows: Vec<(String, Vec<String>, Vec<String>)> = text[at..]
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
                assert!(cells.len() == 4, "a row of four cells: {l}");
                let group = if cells[0] == "core" {
                    String::new()
                } else {
                    names(cells[0]).concat()
                };
                let mut verbs: Vec<String> =
                    cells[2].split_whitespace().map(str::to_string).collect();
                let mut resources = names(cells[1]);
                verbs.sort();
                resources.sort();
                (group, resources, verbs)
            })
            .collect();
        let mut want: Vec<(String, Vec<String>, Vec<String>)> = GRANTS
            .iter()
            .map(|g| {
                let strings = |s: &[&str]| -> Vec<String> {
                    let mut v: Vec<String> = s.iter().map(|x| x.to_string()).collect();
                    v.sort();
                    v
                };
                (
                    g.api_group.to_string(),
                    strings(g.resources),
                    strings(g.verbs),
                )
            })
            .collect();
        rows.sort();
        want.sort();
        assert_eq!(
            rows, want,
            "docs/security.md's RBAC table differs from rbac::GRANTS"
        );
    }

    #[test]
    fn grants_are_well_formed() {
        const VERBS: &[&str] = &[
            "get", "list", "watch", "create", "update", "patch", "delete",
        ];
        let mut seen = std::collections::BTreeSet::new();
        for g in GRANTS {
            assert!(!g.resources.is_empty() && !g.verbs.is_empty(), "{g:?}");
            assert!(!g.why.is_empty(), "{g:?} says why");
            for v in g.verbs {
                assert!(VERBS.contains(v), "{g:?}: verb {v}");
                if g.resource_name.is_some() {
                    assert!(
                        !["create", "list", "watch"].contains(v),
                        "{g:?}: RBAC cannot limit {v} by name"
                    );
                }
                for r in g.resources {
                    assert!(!r.contains('*') && !g.api_group.contains('*'), "{g:?}");
                    assert!(
                        seen.insert((g.api_group, *r, *v)),
                        "{g:?}: {r} {v} granted twice"
                    );
                }
            }
        }
        assert!(granted("", "nodes", "watch"));
        assert!(!granted("", "nodes", "get"), "nodes are never read by name");
        assert!(!granted("", "secrets", "list"), "secrets are never listed");
    }
}
