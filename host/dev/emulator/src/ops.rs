//! The emulator's state and the verbs that read and write it: create,
//! replace, patch, apply, delete (with the shared write pipeline: identity,
//! status scoping, defaulting, generation, field ownership, no-op detection).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::cluster_ips::ClusterIps;
use crate::counts::Counts;
use crate::defaulting::{Ctx, default_and_validate, obj_mut, validate_name};
use crate::errors::{ApiError, ApiResult};
use crate::faults::Faults;
use crate::fieldset::{Walk, item_key};
use crate::managed_fields::{self as mf, Actor, Entry, Scope, view};
use crate::nodeports::NodePorts;
use crate::resources::{Registry, Res, split_api_version};
use crate::selectors::Selectors;
use crate::ssa;
use crate::store::{ObjKey, Store, set_rv};
use crate::util::{name_suffix, new_uid, now};
use crate::verb::Verb;

pub(crate) struct State {
    pub registry: Registry,
    pub store: Store,
    pub node_ports: NodePorts,
    pub cluster_ips: ClusterIps,
    pub counts: Counts,
    pub faults: Faults,
    pub statefulset_controller: bool,
    /// Pods start Running and Ready with an IP (no kubelet in the loop).
    pub instant_pods: bool,
    /// How many pod IPs `instant_pods` has handed out.
    pub pod_ips: u32,
    pub auto_create_namespaces: bool,
    /// Set while a controller runs, so its own writes do not re-enter it.
    pub in_controller: bool,
    /// Set while the disruption controller (or an eviction) writes a
    /// budget's status, so that write does not re-enter it.
    pub in_disruption: bool,
}

/// The object a request addresses.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub res: Res,
    /// Namespace, or "" for cluster-scoped resources.
    pub ns: String,
    pub name: String,
    /// The `/status` subresource.
    pub status: bool,
}

impl Target {
    pub fn key(&self) -> ObjKey {
        (self.res.key(), self.ns.clone(), self.name.clone())
    }

    /// Resource name used by counters and faults: `plural[/status]`.
    pub fn counted(&self) -> String {
        if self.status {
            format!("{}/status", self.res.plural)
        } else {
            self.res.plural.clone()
        }
    }
}

/// Per-request write options.
#[derive(Clone, Debug, Default)]
pub(crate) struct Opts {
    pub manager: String,
    pub dry_run: bool,
    pub force: bool,
    /// A request from a client (counted); `false` for the emulator's own
    /// controllers.
    pub api: bool,
}

impl Opts {
    pub fn internal(manager: &str) -> Self {
        Self {
            manager: manager.into(),
            ..Default::default()
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PatchType {
    Merge,
    Strategic,
    Json,
    Apply,
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let base = ct.split(';').next().unwrap_or_default().trim();
        match base {
            "application/merge-patch+json" => Some(Self::Merge),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/json-patch+json" => Some(Self::Json),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// Options of a DELETE.
#[derive(Clone, Debug, Default)]
pub(crate) struct DeleteOpts {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    /// `Orphan` keeps dependents; anything else deletes them.
    pub propagation: Option<String>,
}

enum Ownership {
    Update,
    Applied(Vec<Entry>),
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?
        .get(field)?
        .as_str()
        .filter(|s| !s.is_empty())
}

/// Parses a request body. An apply body may be YAML; clients send JSON
/// (a subset of YAML), which the JSON parser reads several times faster, so
/// YAML is the fallback.
fn parse_object(body: &[u8], yaml: bool) -> ApiResult<Value> {
    let v: Value = if yaml {
        match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(_) => {
                serde_saphyr::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string()))?
            }
        }
    } else {
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string()))?
    };
    if !v.is_object() {
        return Err(ApiError::bad_request("the request body must be an object"));
    }
    Ok(v)
}

impl State {
    pub fn get_obj(&self, t: &Target) -> ApiResult<Arc<Value>> {
        if t.status && !t.res.status {
            return Err(ApiError::not_found(&t.res.plural, &t.name));
        }
        self.store
            .get(&t.key())
            .cloned()
            .ok_or_else(|| ApiError::not_found(&t.res.plural, &t.name))
    }

    pub fn list_objs(&self, res: &Res, ns: Option<&str>, sel: &Selectors) -> Value {
        self.list_page(res, ns, sel, &Page::default())
            .expect("an unpaged list cannot fail")
    }

    /// One page of a list, in (namespace, name) order: `limit` items after
    /// the `continue` token's object, and a token for the rest if any.
    pub fn list_page(
        &self,
        res: &Res,
        ns: Option<&str>,
        sel: &Selectors,
        page: &Page,
    ) -> ApiResult<Value> {
        let after = page
            .continue_token
            .as_deref()
            .map(decode_continue)
            .transpose()?;
        let after = after
            .as_ref()
            .map(|(a_ns, a_name)| (a_ns.as_str(), a_name.as_str()));
        let mut matching = self
            .store
            .list_after(&res.key(), ns, after)
            .filter(|o| sel.matches(o));
        let limit = page.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let items: Vec<Value> = matching.by_ref().take(limit).cloned().collect();
        let mut metadata = json!({"resourceVersion": self.store.rv().to_string()});
        if matching.next().is_some()
            && let Some(last) = items.last()
        {
            metadata["continue"] = json!(encode_continue(
                meta_str(last, "namespace").unwrap_or_default(),
                meta_str(last, "name").unwrap_or_default(),
            ));
        }
        Ok(json!({
            "kind": format!("{}List", res.kind),
            "apiVersion": res.api_version(),
            "metadata": metadata,
            "items": items,
        }))
    }

    fn check_type(&self, res: &Res, obj: &Value) -> ApiResult<()> {
        if let Some(av) = obj.get("apiVersion").and_then(Value::as_str) {
            let (g, v) = split_api_version(av);
            if g != res.group || v != res.version {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({av}) does not match the expected API version ({})",
                    res.api_version()
                )));
            }
        }
        if let Some(k) = obj.get("kind").and_then(Value::as_str)
            && k != res.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                res.kind
            )));
        }
        Ok(())
    }

    fn check_namespace_exists(&mut self, res: &Res, ns: &str) -> ApiResult<()> {
        if !res.namespaced {
            return Ok(());
        }
        let key = ("namespaces".to_string(), String::new(), ns.to_string());
        if self.store.get(&key).is_some() {
            return Ok(());
        }
        if self.auto_create_namespaces {
            self.ensure_namespace(ns);
            return Ok(());
        }
        Err(ApiError::not_found("namespaces", ns))
    }

    pub fn ensure_namespace(&mut self, ns: &str) {
        let key = ("namespaces".to_string(), String::new(), ns.to_string());
        if self.store.get(&key).is_some() {
            return;
        }
        if let Some(res) = self.registry.find("", "v1", "namespaces") {
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            let _ = self.create(&res, "", body, &Opts::internal("kube-emulator"));
        }
    }

    fn check_body_identity(&self, t: &Target, obj: &Value) -> ApiResult<()> {
        self.check_type(&t.res, obj)?;
        if let Some(n) = meta_str(obj, "name")
            && n != t.name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({})",
                t.name
            )));
        }
        if t.res.namespaced
            && let Some(ns) = meta_str(obj, "namespace")
            && ns != t.ns
        {
            return Err(ApiError::namespace_mismatch());
        }
        Ok(())
    }

    /// POST.
    pub fn create(
        &mut self,
        res: &Res,
        ns: &str,
        mut body: Value,
        opts: &Opts,
    ) -> ApiResult<Arc<Value>> {
        self.check_type(res, &body)?;
        let name = match meta_str(&body, "name") {
            Some(n) => n.to_string(),
            None => match meta_str(&body, "generateName") {
                Some(prefix) => format!("{prefix}{}", name_suffix()),
                None => {
                    return Err(ApiError::invalid(
                        &res.kind,
                        "",
                        &[(
                            "metadata.name".into(),
                            "Required value: name or generateName is required".into(),
                        )],
                    ));
                }
            },
        };
        if res.namespaced
            && let Some(bns) = meta_str(&body, "namespace")
            && bns != ns
        {
            return Err(ApiError::namespace_mismatch());
        }
        let causes = validate_name(&res.group, &res.kind, &name);
        if !causes.is_empty() {
            return Err(ApiError::invalid(&res.kind, &name, &causes));
        }
        self.check_namespace_exists(res, ns)?;
        let t = Target {
            res: res.clone(),
            ns: ns.to_string(),
            name: name.clone(),
            status: false,
        };
        if self.store.get(&t.key()).is_some() {
            return Err(ApiError::already_exists(&res.plural, &name));
        }
        obj_mut(&mut body, "metadata").insert("name".into(), json!(name));
        self.write(&t, None, body, Ownership::Update, Verb::Create, opts)
    }

    /// PUT.
    pub fn replace(&mut self, t: &Target, body: Value, opts: &Opts) -> ApiResult<Arc<Value>> {
        let old = self.get_obj(t)?;
        self.check_body_identity(t, &body)?;
        self.write(t, Some(&old), body, Ownership::Update, Verb::Update, opts)
    }

    /// PATCH (all patch types).
    pub fn patch(
        &mut self,
        t: &Target,
        ptype: PatchType,
        body: &[u8],
        opts: &Opts,
    ) -> ApiResult<Arc<Value>> {
        if ptype == PatchType::Apply {
            return self.apply(t, body, opts);
        }
        let old = self.get_obj(t)?;
        let patch: Value =
            serde_json::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let mut new = Value::clone(&old);
        match ptype {
            PatchType::Merge => json_patch::merge(&mut new, &patch),
            PatchType::Strategic => strategic_merge(&mut new, &patch, &mut Walk::new(&t.res.kind)),
            PatchType::Json => {
                let p: json_patch::Patch = serde_json::from_value(patch)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                json_patch::patch(&mut new, &p).map_err(|e| {
                    ApiError::new(
                        422,
                        "Invalid",
                        format!(
                            "the server rejected our request due to an error in our request: {e}"
                        ),
                    )
                })?;
            }
            PatchType::Apply => unreachable!(),
        }
        if !new.is_object() {
            return Err(ApiError::bad_request("patch result is not an object"));
        }
        self.check_body_identity(t, &new)?;
        self.write(t, Some(&old), new, Ownership::Update, Verb::Patch, opts)
    }

    /// PATCH with `application/apply-patch+yaml`.
    fn apply(&mut self, t: &Target, body: &[u8], opts: &Opts) -> ApiResult<Arc<Value>> {
        if opts.manager.is_empty() {
            return Err(ApiError::invalid(
                "PatchOptions.meta.k8s.io",
                "",
                &[(
                    "fieldManager".into(),
                    "Required value: is required for apply patch".into(),
                )],
            ));
        }
        let mut cfg = parse_object(body, true)?;
        if cfg.get("apiVersion").is_none() || cfg.get("kind").is_none() {
            return Err(ApiError::bad_request(
                "apiVersion and kind must be set in an applied configuration",
            ));
        }
        self.check_body_identity(t, &cfg)?;
        ssa::strip_nulls(&mut cfg);
        let scope = if t.status {
            Scope::Status
        } else {
            Scope::Main {
                status_sub: t.res.status,
            }
        };
        let cfg_view = view(&cfg, scope);
        let now = now();
        let actor = Actor {
            manager: &opts.manager,
            subresource: t.status.then_some("status"),
            api_version: &t.res.api_version(),
            now: &now,
        };
        match self.store.get(&t.key()).cloned() {
            None => {
                if t.status {
                    return Err(ApiError::not_found(&t.res.plural, &t.name));
                }
                let causes = validate_name(&t.res.group, &t.res.kind, &t.name);
                if !causes.is_empty() {
                    return Err(ApiError::invalid(&t.res.kind, &t.name, &causes));
                }
                let res = t.res.clone();
                self.check_namespace_exists(&res, &t.ns)?;
                let set = crate::fieldset::fields_of(&cfg_view, &mut Walk::new(&t.res.kind));
                let entries = vec![actor.new_entry("Apply", set)];
                self.write(t, None, cfg, Ownership::Applied(entries), Verb::Apply, opts)
            }
            Some(old) => {
                if let Some(rv) = meta_str(&cfg, "resourceVersion")
                    && Some(rv) != meta_str(&old, "resourceVersion")
                {
                    return Err(ApiError::stale(&t.res.plural, &t.name));
                }
                let applied = ssa::apply(
                    &old,
                    &view(&old, scope),
                    &cfg_view,
                    mf::read(&old),
                    &actor,
                    &t.res.kind,
                    opts.force,
                    &t.res.plural,
                    &t.name,
                )?;
                self.write(
                    t,
                    Some(&old),
                    applied.object,
                    Ownership::Applied(applied.entries),
                    Verb::Apply,
                    opts,
                )
            }
        }
    }

    /// The shared write pipeline.
    fn write(
        &mut self,
        t: &Target,
        old: Option<&Value>,
        mut new: Value,
        own: Ownership,
        verb: Verb,
        opts: &Opts,
    ) -> ApiResult<Arc<Value>> {
        let res = t.res.clone();
        let now = now();
        if t.status && !res.status {
            return Err(ApiError::not_found(&res.plural, &t.name));
        }
        if let Some(old) = old
            && let Some(rv) = meta_str(&new, "resourceVersion")
            && Some(rv) != meta_str(old, "resourceVersion")
        {
            return Err(ApiError::stale(&res.plural, &t.name));
        }

        // Identity and server-managed metadata.
        if !new.is_object() {
            return Err(ApiError::bad_request("the request body must be an object"));
        }
        new["apiVersion"] = json!(res.api_version());
        new["kind"] = json!(res.kind);
        {
            let meta = obj_mut(&mut new, "metadata");
            meta.insert("name".into(), json!(t.name));
            if res.namespaced {
                meta.insert("namespace".into(), json!(t.ns));
            } else {
                meta.remove("namespace");
            }
            meta.remove("resourceVersion");
            meta.remove("selfLink");
            const KEEP: [&str; 5] = [
                "uid",
                "creationTimestamp",
                "generation",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ];
            for f in KEEP {
                match old.and_then(|o| o["metadata"].get(f)) {
                    Some(v) => {
                        meta.insert(f.into(), v.clone());
                    }
                    None => {
                        meta.remove(f);
                    }
                }
            }
            if old.is_none() {
                meta.insert("uid".into(), json!(new_uid()));
                meta.insert("creationTimestamp".into(), json!(now));
            }
        }

        // Status subresource scoping.
        match old {
            Some(old) if t.status => {
                let status = new.get("status").cloned();
                let meta = new["metadata"].clone();
                new = old.clone();
                new["metadata"] = meta;
                // Only .status may change through /status (plus ownership).
                for f in ["labels", "annotations", "ownerReferences", "finalizers"] {
                    match old["metadata"].get(f) {
                        Some(v) => new["metadata"][f] = v.clone(),
                        None => {
                            obj_mut(&mut new, "metadata").remove(f);
                        }
                    }
                }
                match status {
                    Some(s) => new["status"] = s,
                    None => {
                        new.as_object_mut().map(|m| m.remove("status"));
                    }
                }
            }
            Some(old) if res.status => match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    new.as_object_mut().map(|m| m.remove("status"));
                }
            },
            None if res.status => {
                new.as_object_mut().map(|m| m.remove("status"));
            }
            _ => {}
        }
        if let Some(old) = old
            && old["metadata"].get("deletionTimestamp").is_some()
        {
            let before = old["metadata"]["finalizers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let after = new["metadata"]["finalizers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if after.iter().any(|f| !before.contains(f)) {
                return Err(ApiError::invalid(
                    &res.kind,
                    &t.name,
                    &[(
                        "metadata.finalizers".into(),
                        "Forbidden: no new finalizers can be added if the object is being deleted"
                            .into(),
                    )],
                ));
            }
        }

        // Defaulting and validation.
        let owner = format!("{}/{}", t.ns, t.name);
        {
            let ctx = Ctx {
                node_ports: &self.node_ports,
                cluster_ips: &self.cluster_ips,
                owner,
            };
            default_and_validate(&res.group, &res.kind, &mut new, old, &ctx)
                .map_err(|c| ApiError::invalid(&res.kind, &t.name, &c))?;
        }
        // Custom resources are the ones with printer columns of their own.
        crate::schema::drop_empty_go_maps(&res.kind, res.printer_columns.is_some(), &mut new);

        // Generation.
        if res.generation {
            let gen_of = |o: &Value| o["metadata"]["generation"].as_i64().unwrap_or(0);
            let generation = match old {
                None => 1,
                Some(o) if !same_except_meta_and_status(o, &new) => gen_of(o) + 1,
                Some(o) => gen_of(o).max(1),
            };
            obj_mut(&mut new, "metadata").insert("generation".into(), json!(generation));
        }

        // Field ownership.
        let actor_api_version = res.api_version();
        let actor = Actor {
            manager: &opts.manager,
            subresource: t.status.then_some("status"),
            api_version: &actor_api_version,
            now: &now,
        };
        let (mut entries, operation) = match own {
            Ownership::Update => {
                let mut entries = old.map(mf::read).unwrap_or_default();
                let scope = if t.status {
                    Scope::Status
                } else {
                    Scope::Main {
                        status_sub: res.status,
                    }
                };
                let old_view = old.map(|o| view(o, scope));
                mf::record_update(
                    &mut entries,
                    &actor,
                    &res.kind,
                    old_view.as_ref(),
                    &view(&new, scope),
                );
                (entries, "Update")
            }
            Ownership::Applied(entries) => (entries, "Apply"),
        };
        // Ownership is not pruned to what exists: as on the API server, an
        // update's or apply's removals leave the sets, and nothing else does.
        entries.retain(|e| !e.fields.is_empty());
        mf::write(&mut new, &entries);

        // No-op detection: nothing changed, not even ownership.
        if let Some(old) = old {
            if let Some(rv) = old["metadata"].get("resourceVersion") {
                obj_mut(&mut new, "metadata").insert("resourceVersion".into(), rv.clone());
            }
            if new == *old {
                if opts.api && !opts.dry_run {
                    self.counts.record(verb, &t.counted(), false);
                }
                return Ok(Arc::new(new));
            }
        }
        for e in entries.iter_mut() {
            if actor.owns(e, operation) {
                e.time = now.clone();
            }
        }
        mf::write(&mut new, &entries);

        if opts.dry_run {
            set_rv(&mut new, self.store.rv());
            return Ok(Arc::new(new));
        }
        if opts.api {
            self.counts.record(verb, &t.counted(), true);
        }
        let stored = self.store.put(t.key(), new);
        self.after_change(&res, &t.key(), old, Change::Stored(&stored));
        if stored["metadata"].get("deletionTimestamp").is_some()
            && stored["metadata"]["finalizers"]
                .as_array()
                .is_none_or(Vec::is_empty)
        {
            self.remove_now(t, None);
        }
        Ok(stored)
    }

    /// DELETE. Returns the response body: the object if deletion waits for
    /// finalizers or the resource answers with the deleted object (pods and
    /// custom resources), else a success `Status`.
    pub fn delete(&mut self, t: &Target, d: &DeleteOpts, opts: &Opts) -> ApiResult<Arc<Value>> {
        let old = self.get_obj(t)?;
        if let Some(uid) = &d.uid
            && Some(uid.as_str()) != meta_str(&old, "uid")
        {
            return Err(ApiError::conflict(
                &t.res.plural,
                &t.name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old, "uid").unwrap_or_default()
                ),
            ));
        }
        if let Some(rv) = &d.resource_version
            && Some(rv.as_str()) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(
                &t.res.plural,
                &t.name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&old, "resourceVersion").unwrap_or_default()
                ),
            ));
        }
        if opts.dry_run {
            return Ok(old);
        }
        let has_finalizers = old["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if old["metadata"].get("deletionTimestamp").is_some() {
                return Ok(old);
            }
            let mut marked = Value::clone(&old);
            let meta = obj_mut(&mut marked, "metadata");
            meta.insert("deletionTimestamp".into(), json!(now()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            if t.res.generation {
                let g = meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
                meta.insert("generation".into(), json!(g + 1));
            }
            if opts.api {
                self.counts.record(Verb::Delete, &t.counted(), true);
            }
            return Ok(self.store.put(t.key(), marked));
        }
        if opts.api {
            self.counts.record(Verb::Delete, &t.counted(), true);
        }
        self.remove_now(t, d.propagation.as_deref());
        if t.res.returns_deleted_object() {
            return Ok(old);
        }
        Ok(Arc::new(json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": t.name,
                "group": t.res.group,
                "kind": t.res.plural,
                "uid": meta_str(&old, "uid"),
            },
        })))
    }

    /// Removes an object now, then cleans up after it (allocations,
    /// namespace contents, dependents, controllers).
    pub fn remove_now(&mut self, t: &Target, propagation: Option<&str>) {
        let key = t.key();
        let Some(removed) = self.store.remove(&key) else {
            return;
        };
        if t.res.group.is_empty() && t.res.plural == "namespaces" {
            let ns = t.name.clone();
            for k in self.store.keys_where(|k, _| k.1 == ns) {
                if let Some(res) = self
                    .registry
                    .resources
                    .iter()
                    .find(|r| r.key() == k.0)
                    .cloned()
                {
                    let dt = Target {
                        res,
                        ns: k.1.clone(),
                        name: k.2.clone(),
                        status: false,
                    };
                    self.remove_now(&dt, None);
                }
            }
        }
        if let Some(uid) = meta_str(&removed, "uid") {
            let uid = uid.to_string();
            crate::gc::collect(self, &uid, propagation == Some("Orphan"));
        }
        self.after_change(&t.res, &key, Some(&*removed), Change::Removed(&removed));
    }

    /// Keeps allocators in sync and runs the emulated controllers. `prev` is
    /// the object before the change.
    fn after_change(&mut self, res: &Res, key: &ObjKey, prev: Option<&Value>, change: Change<'_>) {
        let obj = match change {
            Change::Stored(o) => Some(o),
            Change::Removed(_) => None,
        };
        if res.group.is_empty() && res.plural == "services" {
            let owner = format!("{}/{}", key.1, key.2);
            let ports: Vec<i64> = obj
                .and_then(|o| o["spec"]["ports"].as_array())
                .map(|ps| ps.iter().filter_map(|p| p["nodePort"].as_i64()).collect())
                .unwrap_or_default();
            self.node_ports.sync(&owner, &ports);
            let ip = obj
                .and_then(|o| o["spec"]["clusterIP"].as_str())
                .and_then(|s| s.parse().ok());
            self.cluster_ips.sync(&owner, ip);
        }
        // Budgets first: a removed pod's eviction mark goes before the
        // StatefulSet controller recreates a pod of the same name.
        if !self.in_disruption {
            crate::disruption::after_change(self, res, &key.1, prev, obj);
        }
        let sts_related = (res.group == "apps" && res.plural == "statefulsets")
            || (res.group.is_empty() && res.plural == "pods");
        if self.statefulset_controller && sts_related && !self.in_controller {
            self.in_controller = true;
            let object = match change {
                Change::Stored(o) | Change::Removed(o) => o,
            };
            crate::statefulset::reconcile_touched(self, &key.1, object);
            self.in_controller = false;
        }
    }
}

/// True if `a` and `b` are equal but for `metadata` and `status` (a spec
/// change bumps `metadata.generation`). Compares in place: no copies.
fn same_except_meta_and_status(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let skip = |k: &String| k != "metadata" && k != "status";
    a.keys().filter(|k| skip(k)).count() == b.keys().filter(|k| skip(k)).count()
        && a.iter()
            .filter(|(k, _)| skip(k))
            .all(|(k, v)| b.get(k) == Some(v))
}

/// A list request's paging: `?limit=` and `?continue=`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Page {
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}

/// The continue token: the last returned object's `namespace/name`, hex
/// encoded (opaque to clients, as a real one is).
fn encode_continue(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_continue(token: &str) -> ApiResult<(String, String)> {
    let invalid = || ApiError::bad_request(format!("invalid continue token {token:?}"));
    if !token.len().is_multiple_of(2) {
        return Err(invalid());
    }
    let bytes = (0..token.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(token.get(i..i + 2).ok_or_else(invalid)?, 16).map_err(|_| invalid())
        })
        .collect::<ApiResult<Vec<u8>>>()?;
    let text = String::from_utf8(bytes).map_err(|_| invalid())?;
    let (ns, name) = text.split_once('/').ok_or_else(invalid)?;
    Ok((ns.to_string(), name.to_string()))
}

/// An object as committed, or as it was when removed.
#[derive(Clone, Copy)]
enum Change<'a> {
    Stored(&'a Value),
    Removed(&'a Value),
}

/// Strategic merge patch, approximated: maps merge (null deletes), the
/// associative lists known to [`crate::schema`] merge by key (an item with
/// `"$patch": "delete"` removes the match), other lists are replaced; other
/// `$` directives are ignored.
fn strategic_merge(target: &mut Value, patch: &Value, w: &mut Walk<'_>) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let t = target.as_object_mut().expect("object");
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        w.names.push(k.clone());
        match (t.get_mut(k), v) {
            (Some(cur @ Value::Object(_)), Value::Object(_)) if !w.atomic_map() => {
                strategic_merge(cur, v, w)
            }
            (Some(Value::Array(cur)), Value::Array(items)) if w.keys().is_some() => {
                let keys = w.keys().unwrap_or_default();
                for item in items {
                    let key = item_key(item, keys);
                    let pos = cur
                        .iter()
                        .position(|c| key.is_some() && item_key(c, keys) == key);
                    let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                    match (pos, delete) {
                        (Some(i), true) => {
                            cur.remove(i);
                        }
                        (None, true) => {}
                        (Some(i), false) => strategic_merge(&mut cur[i], item, w),
                        (None, false) => {
                            let mut fresh = Value::Null;
                            strategic_merge(&mut fresh, item, w);
                            cur.push(fresh);
                        }
                    }
                }
            }
            _ => {
                let mut fresh = Value::Null;
                if v.is_object() {
                    strategic_merge(&mut fresh, v, w);
                } else {
                    fresh = v.clone();
                }
                t.insert(k.clone(), fresh);
            }
        }
        w.names.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_object, same_except_meta_and_status};
    use serde_json::json;

    #[test]
    fn an_apply_body_parses_as_json_or_yaml_alike() {
        let json = br#"{"apiVersion":"v1","kind":"ConfigMap","data":{"a":"1"}}"#;
        let yaml = b"apiVersion: v1\nkind: ConfigMap\ndata:\n  a: \"1\"\n";
        let want = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"}});
        assert_eq!(parse_object(json, true).unwrap(), want);
        assert_eq!(parse_object(yaml, true).unwrap(), want);
        let err = parse_object(b"kind: [unclosed", true).unwrap_err();
        assert_eq!(err.code, 400);
        assert!(
            parse_object(yaml, false).is_err(),
            "YAML only where allowed"
        );
    }

    #[test]
    fn generation_ignores_only_metadata_and_status() {
        let a = json!({"metadata": {"x": 1}, "spec": {"r": 1}, "status": {"s": 1}});
        let b = json!({"metadata": {"x": 2}, "spec": {"r": 1}});
        assert!(same_except_meta_and_status(&a, &b));
        let c = json!({"metadata": {"x": 1}, "spec": {"r": 2}});
        assert!(!same_except_meta_and_status(&a, &c));
        let d = json!({"spec": {"r": 1}, "data": {}});
        assert!(
            !same_except_meta_and_status(&a, &d),
            "an extra field counts"
        );
    }
}
