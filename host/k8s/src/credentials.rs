//! Passwords: where each user's are, the Secrets the operator generates
//! for them, and the digests that are all the guest ever sees.
//!
//! The operator keeps two Secrets per cluster and creates each once:
//! - `<cluster>-users` (user-facing, upstream's name): the `default` user's
//!   password under key `default`, unless `spec.users` lists `default`;
//! - `shardgate-<cluster>-system`: the system users' passwords and the
//!   replicas' `masterauth` include file.
//!
//! A generated value is never overwritten. The aclfile Secret
//! (`shardgate-<cluster>-acl`) holds only digests.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use sha2::{Digest, Sha256};
use shardgate_contract::model::{self as m, Severity, Violation};
use shardgate_contract::{auth, labels, names};

use crate::convert::objects::owner_reference;
use crate::crd::ValkeyCluster;

/// The annotation on the ACL Secret holding its file's digest.
pub const ACL_DIGEST: &str = "shardgate.io/acl-digest";

/// One user's passwords: Secret `secret`, keys `keys` (defaults applied).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PasswordRef {
    /// The index in `spec.users`.
    pub user: usize,
    pub secret: String,
    pub keys: Vec<String>,
}

/// Where every enabled user with passwords keeps them, with upstream's
/// defaults: Secret `<cluster>-users`, key = the user's name.
pub fn password_refs(cluster: &m::Cluster) -> Vec<PasswordRef> {
    cluster
        .users
        .iter()
        .enumerate()
        .filter(|(_, u)| u.enabled && !u.nopass)
        .map(|(i, u)| {
            let ps = u.password_secret.as_ref();
            let secret = ps
                .map(|p| p.name.clone())
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| names::users_secret(&cluster.name));
            let keys = ps
                .map(|p| p.keys.clone())
                .filter(|k| !k.is_empty())
                .unwrap_or_else(|| vec![u.name.clone()]);
            PasswordRef {
                user: i,
                secret,
                keys,
            }
        })
        .collect()
}

/// Sets each enabled user's password digests from `secrets` (the data of
/// each Secret by name; absent if it does not exist). Every missing Secret,
/// key or empty password is an error naming the user's field; then no
/// digest is set.
pub fn fill_digests(
    cluster: &mut m::Cluster,
    secrets: &BTreeMap<String, Option<BTreeMap<String, ByteString>>>,
) -> Result<(), Vec<Violation>> {
    let mut errors = Vec::new();
    let mut digests = Vec::new();
    for r in password_refs(cluster) {
        let field = format!("spec.users[{}].passwordSecret", r.user);
        let Some(Some(data)) = secrets.get(&r.secret) else {
            errors.push(error(
                &field,
                format!("Secret {:?} does not exist", r.secret),
            ));
            continue;
        };
        let mut user_digests = Vec::with_capacity(r.keys.len());
        for key in &r.keys {
            match data.get(key) {
                Some(v) if !v.0.is_empty() => user_digests.push(digest(&v.0)),
                Some(_) => errors.push(error(
                    &field,
                    format!("key {key:?} of Secret {:?} is empty", r.secret),
                )),
                None => errors.push(error(
                    &field,
                    format!("Secret {:?} has no key {key:?}", r.secret),
                )),
            }
        }
        digests.push((r.user, user_digests));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    for (i, d) in digests {
        cluster.users[i].password_hashes = d;
    }
    Ok(())
}

fn error(field: &str, message: String) -> Violation {
    Violation {
        severity: Severity::Error,
        field: field.to_string(),
        message,
    }
}

/// The hex SHA-256 of a password, as Valkey's ACL writes it (`#<hex>`).
pub fn digest(password: &[u8]) -> String {
    hex(&Sha256::digest(password))
}

/// A new password: 32 random bytes from the operating system, in hex.
pub fn generate_password() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source works");
    hex(&bytes)
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Whether `vc` needs a generated `default` password: `spec.users` does not
/// list `default`.
pub fn generates_default(vc: &ValkeyCluster) -> bool {
    !vc.spec.users.iter().any(|u| u.name == auth::DEFAULT_USER)
}

/// The system Secret, with new passwords: created once, never updated.
pub fn new_system_secret(vc: &ValkeyCluster) -> Secret {
    let operator = generate_password();
    let replication = generate_password();
    let conf = format!("masterauth {replication}\n");
    secret(
        vc,
        names::system_secret(&vc.name_any()),
        [
            (auth::OPERATOR_KEY, operator),
            (auth::REPLICATION_KEY, replication),
            (auth::REPLICATION_CONF, conf),
        ],
    )
}

/// The users Secret with a new `default` password.
pub fn new_users_secret(vc: &ValkeyCluster) -> Secret {
    secret(
        vc,
        names::users_secret(&vc.name_any()),
        [(auth::DEFAULT_USER, generate_password())],
    )
}

/// The system users' passwords, read back from the system Secret.
#[derive(Clone, PartialEq, Eq)]
pub struct SystemPasswords {
    pub operator: String,
    pub replication: String,
}

impl std::fmt::Debug for SystemPasswords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SystemPasswords(<redacted>)")
    }
}

/// The system users' passwords in `secret`, or what is missing.
pub fn system_passwords(secret: &Secret) -> Result<SystemPasswords, String> {
    let value = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("Secret {} has no key {key:?}", secret.name_any()))
    };
    Ok(SystemPasswords {
        operator: value(auth::OPERATOR_KEY)?,
        replication: value(auth::REPLICATION_KEY)?,
    })
}

/// The ACL Secret holding `acl` (the guest's aclfile) with its revision
/// marker user appended, and that marker's name.
pub fn acl_secret(vc: &ValkeyCluster, acl: &str) -> (Secret, String) {
    let digest = digest(acl.as_bytes());
    let marker = auth::acl_marker(&digest);
    let file = format!("{acl}user {marker} off resetchannels -@all\n");
    let mut s = secret(
        vc,
        names::acl_secret(&vc.name_any()),
        [(auth::ACL_FILE, file)],
    );
    s.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(ACL_DIGEST.into(), digest);
    (s, marker)
}

/// Whether `live` already holds the ACL of `desired` (same digest).
pub fn acl_in_place(live: &Secret, desired: &Secret) -> bool {
    let d = |s: &Secret| s.annotations().get(ACL_DIGEST).cloned();
    d(live).is_some() && d(live) == d(desired) && live.data == desired.data
}

/// Whether `secret` is controlled by `vc` (its controller reference has
/// `vc`'s UID).
pub fn controlled_by(secret: &Secret, vc: &ValkeyCluster) -> bool {
    let Some(uid) = vc.uid() else { return false };
    secret
        .owner_references()
        .iter()
        .any(|r| r.controller == Some(true) && r.uid == uid)
}

fn secret<const N: usize>(vc: &ValkeyCluster, name: String, data: [(&str, String); N]) -> Secret {
    let cluster = vc.name_any();
    Secret {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: vc.namespace(),
            labels: Some(BTreeMap::from([
                (labels::CLUSTER.to_string(), cluster),
                (labels::MANAGED_BY.to_string(), labels::MANAGER.to_string()),
            ])),
            owner_references: owner_reference(vc).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
                .collect(),
        ),
        type_: Some("Opaque".into()),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(users: serde_json::Value) -> ValkeyCluster {
        serde_json::from_value(json!({
            "apiVersion": "shardgate.io/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
            "spec": {"users": users},
        }))
        .unwrap()
    }

    fn data(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, ByteString>> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        )
    }

    #[test]
    fn password_refs_apply_upstreams_defaults() {
        let vc = cluster(json!([
            {"name": "app"},
            {"name": "ro", "passwordSecret": {"name": "s", "keys": ["a", "b"]}},
            {"name": "open", "nopass": true},
            {"name": "off", "enabled": false},
            {"name": "named", "passwordSecret": {"keys": ["k"]}},
        ]));
        let refs = password_refs(&crate::convert::cluster(&vc));
        let got: Vec<(usize, &str, Vec<&str>)> = refs
            .iter()
            .map(|r| {
                (
                    r.user,
                    r.secret.as_str(),
                    r.keys.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (0, "c-users", vec!["app"]),
                (1, "s", vec!["a", "b"]),
                (4, "c-users", vec!["k"]),
            ]
        );
    }

    #[test]
    fn digests_are_filled_or_every_missing_password_is_named() {
        let vc = cluster(json!([
            {"name": "app"},
            {"name": "ro", "passwordSecret": {"name": "s", "keys": ["a", "b"]}},
        ]));
        let mut c = crate::convert::cluster(&vc);
        let secrets = BTreeMap::from([
            ("c-users".to_string(), data(&[("app", "pw")])),
            ("s".to_string(), data(&[("a", "one"), ("b", "two")])),
        ]);
        fill_digests(&mut c, &secrets).unwrap();
        assert_eq!(c.users[0].password_hashes, vec![digest(b"pw")]);
        assert_eq!(
            c.users[1].password_hashes,
            vec![digest(b"one"), digest(b"two")]
        );
        // SHA-256 of "pw", as `ACL GETUSER` would show it.
        assert_eq!(
            digest(b"pw"),
            "30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4"
        );

        let mut c = crate::convert::cluster(&vc);
        let missing = BTreeMap::from([
            ("c-users".to_string(), None),
            ("s".to_string(), data(&[("a", "")])),
        ]);
        let errors = fill_digests(&mut c, &missing).unwrap_err();
        let got: Vec<(&str, &str)> = errors
            .iter()
            .map(|v| (v.field.as_str(), v.message.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "spec.users[0].passwordSecret",
                    "Secret \"c-users\" does not exist"
                ),
                (
                    "spec.users[1].passwordSecret",
                    "key \"a\" of Secret \"s\" is empty"
                ),
                (
                    "spec.users[1].passwordSecret",
                    "Secret \"s\" has no key \"b\""
                ),
            ]
        );
        assert!(c.users.iter().all(|u| u.password_hashes.is_empty()));
    }

    #[test]
    fn generated_secrets_are_owned_and_never_alike() {
        let vc = cluster(json!([]));
        let a = new_system_secret(&vc);
        let b = new_system_secret(&vc);
        assert_eq!(a.name_any(), "shardgate-c-system");
        assert!(controlled_by(&a, &vc));
        let pa = system_passwords(&a).unwrap();
        assert_ne!(pa, system_passwords(&b).unwrap());
        assert_eq!(pa.operator.len(), 64);
        let conf = &a.data.as_ref().unwrap()[auth::REPLICATION_CONF].0;
        assert_eq!(
            String::from_utf8_lossy(conf),
            format!("masterauth {}\n", pa.replication)
        );
        let users = new_users_secret(&vc);
        assert_eq!(users.name_any(), "c-users");
        assert!(users.data.as_ref().unwrap().contains_key("default"));
        assert!(generates_default(&vc));
        assert!(!generates_default(&cluster(json!([{"name": "default"}]))));
    }

    #[test]
    fn the_acl_secret_carries_its_revision_marker() {
        let vc = cluster(json!([]));
        let (a, marker) = acl_secret(&vc, "user default on #x ~* &* +@all\n");
        let (b, same) = acl_secret(&vc, "user default on #x ~* &* +@all\n");
        let (c, other) = acl_secret(&vc, "user default on #y ~* &* +@all\n");
        assert_eq!(marker, same);
        assert_ne!(marker, other);
        assert!(
            marker.starts_with("_acl-") && marker.len() == 21,
            "{marker}"
        );
        let file = String::from_utf8(a.data.as_ref().unwrap()[auth::ACL_FILE].0.clone()).unwrap();
        assert!(file.ends_with(&format!("user {marker} off resetchannels -@all\n")));
        assert!(acl_in_place(&a, &b));
        assert!(!acl_in_place(&a, &c));
    }
}
