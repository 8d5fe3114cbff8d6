//! Stage 1b, credentials: the passwords every user needs, read from their
//! Secrets, and the Secrets the operator generates created once.
//!
//! Only Secrets the cluster owns or names are read, each with one GET; none
//! is listed or watched. The guest gets digests only ([`Credentials`] and
//! each user's `password_hashes`); the operator keeps its own system user's
//! password to log in to the nodes with.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;
use shardgate_contract::auth;
use shardgate_contract::model::{Credentials, Input, Severity, Violation};
use shardgate_contract::names;
use shardgate_k8s::crd::ValkeyCluster;
use shardgate_k8s::credentials as creds;
use shardgate_k8s::manager::FIELD_MANAGER;
use shardgate_valkey::Login;
use shardgate_valkey::tls::Material;

use super::Error;
use crate::context::Context;

/// How the operator reaches a cluster's nodes, or why the spec cannot be
/// served yet.
pub type Resolved = Result<Access, Vec<Violation>>;

/// How the operator reaches a cluster's nodes: logged in as its own system
/// user, over TLS when the cluster serves TLS.
#[derive(Clone, Debug)]
pub struct Access {
    pub login: Login,
    /// The cluster's TLS Secret, checked.
    pub tls: Option<Material>,
}

/// Fills `input`'s credentials and password digests, creating the
/// generated Secrets that are missing, and reads the TLS Secret; returns
/// how the operator reaches the nodes. A missing password or an unusable
/// TLS Secret refuses the spec (nothing is applied) with an error naming
/// the field.
pub async fn resolve(
    ctx: &Context,
    vc: &ValkeyCluster,
    input: &mut Input,
) -> Result<Resolved, Error> {
    let namespace = vc.namespace().ok_or(Error::Incomplete)?;
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let cluster = vc.name_any();

    let system = match ensure(ctx, &api, vc, creds::new_system_secret(vc)).await? {
        Ok(s) => s,
        Err(v) => return Ok(Err(vec![v])),
    };
    let system = match creds::system_passwords(&system) {
        Ok(p) => p,
        Err(message) => return Ok(Err(vec![violation("metadata.name", message)])),
    };

    let mut secrets: BTreeMap<String, Option<BTreeMap<String, ByteString>>> = BTreeMap::new();
    let mut default_user = None;
    if creds::generates_default(vc) {
        let users = match ensure(ctx, &api, vc, creds::new_users_secret(vc)).await? {
            Ok(s) => s,
            Err(v) => return Ok(Err(vec![v])),
        };
        let users = match default_password(ctx, &api, vc, users).await? {
            Ok(s) => s,
            Err(v) => return Ok(Err(vec![v])),
        };
        default_user = users
            .data
            .as_ref()
            .and_then(|d| d.get(auth::DEFAULT_USER))
            .map(|v| creds::digest(&v.0));
        secrets.insert(names::users_secret(&cluster), users.data);
    }
    for r in creds::password_refs(&input.cluster) {
        if let Entry::Vacant(slot) = secrets.entry(r.secret) {
            let data = api
                .get_opt(slot.key())
                .await?
                .map(|s| s.data.unwrap_or_default());
            slot.insert(data);
        }
    }
    if let Err(violations) = creds::fill_digests(&mut input.cluster, &secrets) {
        return Ok(Err(violations));
    }
    input.credentials = Credentials {
        default_user,
        operator: creds::digest(system.operator.as_bytes()),
        replication: creds::digest(system.replication.as_bytes()),
    };
    let tls = match tls(&api, vc).await? {
        Ok(tls) => tls,
        Err(v) => return Ok(Err(vec![v])),
    };
    Ok(Ok(Access {
        login: Login {
            username: auth::OPERATOR_USER.into(),
            password: system.operator,
        },
        tls,
    }))
}

/// The cluster's TLS Secret (`spec.tls.secretName`, the user's or
/// cert-manager's: read, never written), checked as Valkey would load it.
async fn tls(
    api: &Api<Secret>,
    vc: &ValkeyCluster,
) -> Result<Result<Option<Material>, Violation>, Error> {
    let Some(spec) = &vc.spec.tls else {
        return Ok(Ok(None));
    };
    let field = "spec.tls.secretName";
    let Some(secret) = api.get_opt(&spec.secret_name).await? else {
        return Ok(Err(violation(
            field,
            format!("Secret {} does not exist (yet)", spec.secret_name),
        )));
    };
    let data = secret.data.unwrap_or_default();
    let key = |k: &str| data.get(k).map(|v| v.0.as_slice());
    Ok(
        Material::from_secret(key("ca.crt"), key("tls.crt"), key("tls.key"))
            .map(Some)
            .map_err(|e| violation(field, format!("Secret {}: {e}", spec.secret_name))),
    )
}

/// The Secret named like `new`, created from `new` if missing. One that
/// exists and is controlled by another owner is refused (no takeover); the
/// user-facing users Secret may be the user's own.
async fn ensure(
    ctx: &Context,
    api: &Api<Secret>,
    vc: &ValkeyCluster,
    new: Secret,
) -> Result<Result<Secret, Violation>, Error> {
    let name = new.name_any();
    let existing = match api.get_opt(&name).await? {
        Some(s) => s,
        None => match api.create(&PostParams::default(), &new).await {
            Ok(s) => {
                ctx.metrics.write("create", "secrets");
                return Ok(Ok(s));
            }
            // Created by a racing reconcile: read what won.
            Err(kube::Error::Api(e)) if e.code == 409 => api.get(&name).await?,
            Err(e) => return Err(e.into()),
        },
    };
    let user_facing = name == names::users_secret(&vc.name_any());
    let foreign_controller = existing
        .owner_references()
        .iter()
        .any(|r| r.controller == Some(true))
        && !creds::controlled_by(&existing, vc);
    if foreign_controller || (!user_facing && !creds::controlled_by(&existing, vc)) {
        return Ok(Err(violation(
            "metadata.name",
            format!("Secret {name} exists and is not owned by this cluster: it is left alone"),
        )));
    }
    Ok(Ok(existing))
}

/// The users Secret with a `default` key: one the operator created gets a
/// generated password added if the key is missing (no value is ever
/// overwritten); one the user made must have it.
async fn default_password(
    ctx: &Context,
    api: &Api<Secret>,
    vc: &ValkeyCluster,
    users: Secret,
) -> Result<Result<Secret, Violation>, Error> {
    let has = users
        .data
        .as_ref()
        .and_then(|d| d.get(auth::DEFAULT_USER))
        .is_some_and(|v| !v.0.is_empty());
    if has {
        return Ok(Ok(users));
    }
    if !creds::controlled_by(&users, vc) {
        return Ok(Err(violation(
            "spec.users",
            format!(
                "Secret {} has no key {:?}: add the default user's password there, or list \
                 the default user in spec.users",
                users.name_any(),
                auth::DEFAULT_USER
            ),
        )));
    }
    let password = ByteString(creds::generate_password().into_bytes());
    // A merge patch adds the one key and leaves every other key as it is.
    let patch = json!({"data": {auth::DEFAULT_USER: password}});
    let patched = api
        .patch(
            &users.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    ctx.metrics.write("patch", "secrets");
    Ok(Ok(patched))
}

/// Puts the guest's aclfile in the cluster's ACL Secret unless it is there
/// already; returns the revision marker the nodes must show once loaded.
pub async fn deliver_acl(ctx: &Context, vc: &ValkeyCluster, acl: &str) -> Result<String, Error> {
    let namespace = vc.namespace().ok_or(Error::Incomplete)?;
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let (desired, marker) = creds::acl_secret(vc, acl);
    let name = desired.name_any();
    if let Some(live) = api.get_opt(&name).await? {
        if !creds::controlled_by(&live, vc) {
            return Err(Error::Conflict(format!("Secret {name}")));
        }
        if creds::acl_in_place(&live, &desired) {
            return Ok(marker);
        }
    }
    let mut body = serde_json::to_value(&desired).expect("a Secret serializes");
    body["apiVersion"] = Secret::api_version(&()).into();
    body["kind"] = Secret::kind(&()).into();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    ctx.metrics.write("apply", "secrets");
    Ok(marker)
}

fn violation(field: &str, message: String) -> Violation {
    Violation {
        severity: Severity::Error,
        field: field.into(),
        message,
    }
}
