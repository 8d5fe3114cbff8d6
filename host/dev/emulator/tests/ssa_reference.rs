//! Server-side apply against structured-merge-diff: random sequences of
//! writes to one ConfigMap, Service or StatefulSet (applies and re-applies by
//! two managers, forced or not, creates, PUTs and JSON merge patches by
//! others, fields and list items and whole sub-maps dropped) run through the
//! emulator over HTTP and through `ssa-reference/`, a Go program on
//! Kubernetes' own server-side apply library (Debian's
//! golang-k8s-sigs-structured-merge-diff-dev, 4.1.2). After every operation
//! the stored objects, every manager's field set (fieldsV1, per manager and
//! operation) and the conflicts that refuse an apply must be the same.
//!
//! What is normalised before comparing (nothing else is):
//! - `metadata.uid`, `resourceVersion`, `creationTimestamp`, `generation`,
//!   `selfLink` and `managedFields` of the object (the API server's own);
//! - `status` of Services and StatefulSets (nothing here writes it; the
//!   emulator defaults part of it);
//! - `null` values (the library leaves `null` where it emptied a map or a
//!   list; a real API server's Go types drop them, the emulator never
//!   stores them);
//! - the `time` and `apiVersion` of managed-fields entries; a conflict is
//!   compared as manager name and field path (the message's wording not).
//!
//! Defaulting is mostly kept out of the comparison by construction: every
//! applied configuration carries the fields the emulator (and a real API
//! server) would default, with their default values (a Service's type,
//! headless clusterIP, ipFamilies, ...; a StatefulSet's policies and its pod
//! template's restartPolicy, dnsPolicy, ...; each container's
//! imagePullPolicy, terminationMessage*, resources, ports' protocol). What
//! an apply can still remove and the API server then defaults again (a
//! Service port's targetPort, a pod template's securityContext, a
//! container's resources) the reference defaults as the API server does.
//!
//! `cargo test -p kube-emulator --test ssa_reference` runs 200 sequences from
//! fixed seeds; `SHARDGATE_SSA_SEQUENCES=5000` runs more, and
//! `SHARDGATE_SSA_SEED=N` starts from another seed; `SHARDGATE_SSA_REPORT=FILE`
//! writes every differing sequence there. It needs Go and the
//! library (`.ci/run` installs them) and fails without them.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube_emulator::Emulator;
use serde_json::{Map, Value, json};

/// Where Debian's golang-k8s-sigs-structured-merge-diff-dev puts the library.
const GOCODE: &str = "/usr/share/gocode";
const SMD: &str = "src/sigs.k8s.io/structured-merge-diff";

const INSTALL: &str = "run the install step of .ci/run \
     (apt-get install -y golang-go golang-k8s-sigs-structured-merge-diff-dev)";

// ---------------------------------------------------------------------------
// The Go reference: built once per test run, cached under the target dir.

fn reference_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("ssa-reference")
}

/// Builds `ssa-reference/` (once; the binary is named after a hash of its
/// sources, so a change rebuilds it) and returns the binary's path.
fn reference_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let go_ok = Command::new("go")
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(go_ok, "`go` is not installed: {INSTALL}");
        let lib = Path::new(GOCODE).join(SMD);
        assert!(
            lib.join("merge/update.go").is_file(),
            "structured-merge-diff is not at {}: {INSTALL}",
            lib.display()
        );
        let src = reference_dir();
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for f in ["main.go", "schema.yaml"] {
            let bytes = std::fs::read(src.join(f)).expect("read the reference's sources");
            for b in bytes {
                hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ssa-reference");
        let bin = cache.join(format!("ssa-reference-{hash:016x}"));
        if bin.is_file() {
            return bin;
        }
        // GOPATH mode, offline: Debian's tree has the module at
        // .../structured-merge-diff while its own imports say .../v4, so
        // a GOPATH of our own maps the /v4 path onto it.
        let gopath = cache.join("gopath");
        let v4 = gopath.join(SMD).join("v4");
        std::fs::create_dir_all(v4.parent().unwrap()).unwrap();
        if std::fs::symlink_metadata(&v4).is_err()
            && let Err(e) = std::os::unix::fs::symlink(&lib, &v4)
            && e.kind() != std::io::ErrorKind::AlreadyExists
        {
            panic!("link the library into GOPATH at {}: {e}", v4.display());
        }
        let tmp = cache.join(format!("build-{}", std::process::id()));
        let out = Command::new("go")
            .args(["build", "-o"])
            .arg(&tmp)
            .arg(".")
            .current_dir(&src)
            .env("GO111MODULE", "off")
            .env("GOPATH", format!("{}:{GOCODE}", gopath.display()))
            .env("GOFLAGS", "")
            .env("GOPROXY", "off")
            .env("GOCACHE", cache.join("gocache"))
            .output()
            .expect("run go build");
        assert!(
            out.status.success(),
            "go build of {} failed ({INSTALL}):\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::rename(&tmp, &bin).unwrap();
        bin
    })
}

/// A running reference: one operation in, one answer out.
struct Reference {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Reference {
    fn start() -> Self {
        let mut child = Command::new(reference_binary())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the reference");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, op: &Value) -> Value {
        writeln!(self.stdin, "{op}").expect("write to the reference");
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("read the reference");
        assert!(!line.is_empty(), "the reference exited (input {op})");
        serde_json::from_str(&line).expect("the reference answers JSON")
    }
}

impl Drop for Reference {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// What is generated: three kinds, each a frame every write carries (the
// defaults, the immutable fields) and slots the writers vary.

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    ConfigMap,
    Service,
    StatefulSet,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::ConfigMap => "ConfigMap",
            Kind::Service => "Service",
            Kind::StatefulSet => "StatefulSet",
        }
    }

    fn resource(self) -> ApiResource {
        let (g, v, k) = match self {
            Kind::ConfigMap => ("", "v1", "ConfigMap"),
            Kind::Service => ("", "v1", "Service"),
            Kind::StatefulSet => ("apps", "v1", "StatefulSet"),
        };
        ApiResource::from_gvk(&GroupVersionKind::gvk(g, v, k))
    }

    fn frame(self, name: &str) -> Value {
        let meta = json!({"name": name, "namespace": "default"});
        match self {
            Kind::ConfigMap => json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}),
            Kind::Service => json!({
                "apiVersion": "v1", "kind": "Service", "metadata": meta,
                "spec": {
                    "type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"],
                    "sessionAffinity": "None", "ipFamilies": ["IPv4"],
                    "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster",
                },
            }),
            Kind::StatefulSet => json!({
                "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": "s"}},
                    "serviceName": "s",
                    "podManagementPolicy": "Parallel",
                    "revisionHistoryLimit": 10,
                    "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
                    "updateStrategy": {"type": "OnDelete"},
                    "template": {
                        "metadata": {"labels": {"app": "s"}},
                        "spec": {
                            "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
                            "schedulerName": "default-scheduler",
                            "terminationGracePeriodSeconds": 30,
                            "securityContext": {}, "enableServiceLinks": true,
                            "containers": [container("server", "valkey:9.0", None)],
                        },
                    },
                },
            }),
        }
    }

    fn slots(self) -> Vec<Slot> {
        let mut slots = vec![
            Slot::map(
                &["metadata", "labels"],
                &["app", "tier", "team"],
                &["x", "y"],
            ),
            Slot::map(
                &["metadata", "annotations"],
                &["note", "owner"],
                &["1", "2"],
            ),
            Slot::list(
                &["metadata", "ownerReferences"],
                &["uid"],
                vec![
                    vec![
                        owner("o1", "u1", Some(true)),
                        owner("o1", "u1", Some(false)),
                        owner("o1", "u1", None),
                    ],
                    vec![owner("o2", "u2", None)],
                ],
            ),
        ];
        match self {
            Kind::ConfigMap => {
                slots.push(Slot::map(
                    &["data"],
                    &["d0", "d1", "d2", "d3"],
                    &["a", "b", "c"],
                ));
            }
            Kind::Service => {
                let port = |name: &str, port: i64, proto: &str, target: Value| json!({"name": name, "port": port, "protocol": proto, "targetPort": target});
                let mut http_app = port("http", 80, "TCP", json!(80));
                http_app["appProtocol"] = json!("http");
                slots.push(Slot::list(
                    &["spec", "ports"],
                    &["port", "protocol"],
                    vec![
                        vec![
                            port("http", 80, "TCP", json!(80)),
                            port("http", 80, "TCP", json!(8080)),
                            http_app,
                        ],
                        vec![
                            port("https", 443, "TCP", json!(443)),
                            port("https", 443, "TCP", json!("https")),
                        ],
                        vec![port("dns", 53, "UDP", json!(53))],
                        vec![port("dns-tcp", 53, "TCP", json!(53))],
                    ],
                ));
                slots.push(Slot::value(
                    &["spec", "selector"],
                    vec![
                        json!({"app": "x"}),
                        json!({"app": "x", "tier": "y"}),
                        json!({"app": "z"}),
                    ],
                    false,
                ));
                slots.push(Slot::value(
                    &["spec", "publishNotReadyAddresses"],
                    vec![json!(true), json!(false)],
                    false,
                ));
            }
            Kind::StatefulSet => {
                slots.push(Slot::value(
                    &["spec", "replicas"],
                    vec![json!(1), json!(2), json!(3)],
                    true,
                ));
                slots.push(Slot::value(
                    &["spec", "updateStrategy"],
                    vec![
                        json!({"type": "OnDelete"}),
                        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
                        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}),
                    ],
                    true,
                ));
                let tpl = |rest: &[&'static str]| {
                    let mut p = vec!["spec", "template"];
                    p.extend_from_slice(rest);
                    p
                };
                slots.push(Slot::map(
                    &tpl(&["metadata", "labels"]),
                    &["tier", "team"],
                    &["x", "y"],
                ));
                slots.push(Slot::map(
                    &tpl(&["metadata", "annotations"]),
                    &["note", "restart"],
                    &["1", "2"],
                ));
                slots.push(Slot::value(
                    &tpl(&["spec", "securityContext"]),
                    vec![
                        json!({}),
                        json!({"fsGroup": 999}),
                        json!({"fsGroup": 999, "runAsNonRoot": true}),
                    ],
                    true,
                ));
                slots.push(Slot::value(
                    &tpl(&["spec", "nodeSelector"]),
                    vec![json!({"zone": "a"}), json!({"zone": "b", "disk": "ssd"})],
                    false,
                ));
                slots.push(Slot::list(
                    &tpl(&["spec", "volumes"]),
                    &["name"],
                    vec![
                        vec![
                            json!({"name": "data", "emptyDir": {}}),
                            json!({"name": "data", "emptyDir": {"medium": "Memory"}}),
                        ],
                        vec![
                            json!({"name": "conf", "configMap": {"name": "cm", "defaultMode": 420}}),
                            json!({"name": "conf", "configMap": {"name": "cm", "defaultMode": 420, "optional": true}}),
                        ],
                    ],
                ));
                slots.push(Slot::list(
                    &tpl(&["spec", "containers"]),
                    &["name"],
                    vec![vec![
                        container(
                            "sidecar",
                            "busybox:1.36",
                            Some(json!(["sleep", "infinity"])),
                        ),
                        container(
                            "sidecar",
                            "busybox:1.37",
                            Some(json!(["sleep", "infinity"])),
                        ),
                    ]],
                ));
                slots.push(Slot::list(
                    &tpl(&["spec", "initContainers"]),
                    &["name"],
                    vec![vec![container(
                        "init",
                        "busybox:1.36",
                        Some(json!(["true"])),
                    )]],
                ));
                // The server container's own fields.
                let server = |field: &'static str| {
                    let mut p = tpl(&["spec", "containers"]);
                    p.push("[name=server]");
                    p.push(field);
                    p
                };
                slots.push(Slot::value(
                    &server("image"),
                    vec![json!("valkey:9.0"), json!("valkey:9.1")],
                    true,
                ));
                slots.push(Slot::value(
                    &server("command"),
                    vec![
                        json!(["valkey-server"]),
                        json!(["valkey-server", "/etc/valkey/valkey.conf"]),
                    ],
                    false,
                ));
                slots.push(Slot::value(
                    &server("resources"),
                    vec![
                        json!({}),
                        json!({"limits": {"cpu": "1"}}),
                        json!({"requests": {"memory": "1Gi"}, "limits": {"cpu": "2"}}),
                    ],
                    true,
                ));
                slots.push(Slot::value(
                    &server("securityContext"),
                    vec![
                        json!({"readOnlyRootFilesystem": true}),
                        json!({"readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false}),
                    ],
                    false,
                ));
                let field_ref =
                    json!({"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}});
                let host_ref =
                    json!({"fieldRef": {"apiVersion": "v1", "fieldPath": "status.hostIP"}});
                slots.push(Slot::list(
                    &server("env"),
                    &["name"],
                    vec![
                        vec![
                            json!({"name": "POD_IP", "valueFrom": field_ref}),
                            json!({"name": "POD_IP", "valueFrom": host_ref}),
                        ],
                        vec![
                            json!({"name": "MODE", "value": "a"}),
                            json!({"name": "MODE", "value": "b"}),
                        ],
                        vec![json!({"name": "DEBUG", "value": "1"})],
                    ],
                ));
                slots.push(Slot::list(
                    &server("ports"),
                    &["containerPort", "protocol"],
                    vec![
                        vec![
                            json!({"name": "client", "containerPort": 6379, "protocol": "TCP"}),
                            json!({"name": "valkey", "containerPort": 6379, "protocol": "TCP"}),
                        ],
                        vec![json!({"name": "bus", "containerPort": 16379, "protocol": "TCP"})],
                        vec![json!({"name": "udp", "containerPort": 6379, "protocol": "UDP"})],
                    ],
                ));
                slots.push(Slot::list(
                    &server("volumeMounts"),
                    &["mountPath"],
                    vec![
                        vec![json!({"name": "data", "mountPath": "/data"})],
                        vec![
                            json!({"name": "conf", "mountPath": "/etc/valkey", "readOnly": true}),
                            json!({"name": "conf", "mountPath": "/etc/valkey"}),
                        ],
                    ],
                ));
            }
        }
        slots
    }
}

/// An owner reference to a ConfigMap (the emulator does not check owners).
fn owner(name: &str, uid: &str, controller: Option<bool>) -> Value {
    let mut r = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid});
    if let Some(c) = controller {
        r["controller"] = json!(c);
    }
    r
}

/// A container with every field the API server defaults set to its default.
fn container(name: &str, image: &str, command: Option<Value>) -> Value {
    let mut c = json!({
        "name": name, "image": image, "imagePullPolicy": "IfNotPresent",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File", "resources": {},
    });
    if let Some(cmd) = command {
        c["command"] = cmd;
    }
    c
}

/// Something writers vary, at a path from the object's root (a path step
/// `[name=server]` is the list item with that key).
struct Slot {
    path: Vec<&'static str>,
    shape: Shape,
}

enum Shape {
    /// Entries of a granular map; only these keys (others may be there).
    Map {
        keys: &'static [&'static str],
        values: &'static [&'static str],
    },
    /// Items of an associative list; each item has variants (same key).
    List {
        keys: &'static [&'static str],
        items: Vec<Vec<Value>>,
    },
    /// A value set whole (a scalar, an atomic map or list, or a struct).
    Value {
        variants: Vec<Value>,
        required: bool,
    },
}

impl Slot {
    fn map(
        path: &[&'static str],
        keys: &'static [&'static str],
        values: &'static [&'static str],
    ) -> Self {
        Self {
            path: path.to_vec(),
            shape: Shape::Map { keys, values },
        }
    }

    fn list(path: &[&'static str], keys: &'static [&'static str], items: Vec<Vec<Value>>) -> Self {
        Self {
            path: path.to_vec(),
            shape: Shape::List { keys, items },
        }
    }

    fn value(path: &[&'static str], variants: Vec<Value>, required: bool) -> Self {
        Self {
            path: path.to_vec(),
            shape: Shape::Value { variants, required },
        }
    }

    /// The object holding the slot's field (created as needed), or None if a
    /// list item on the way is not there.
    fn parent<'v>(&self, obj: &'v mut Value) -> Option<&'v mut Map<String, Value>> {
        let mut cur = obj;
        for step in &self.path[..self.path.len() - 1] {
            cur = match step.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                Some(sel) => {
                    let (k, v) = sel.split_once('=').unwrap();
                    cur.as_array_mut()?.iter_mut().find(|i| i[k] == v)?
                }
                None => {
                    let m = cur.as_object_mut()?;
                    m.entry(*step).or_insert_with(|| json!({}))
                }
            };
        }
        cur.as_object_mut()
    }

    fn field(&self) -> &'static str {
        self.path[self.path.len() - 1]
    }

    /// Fills the slot at random (a fresh writer's intent).
    fn fill(&self, rng: &mut fastrand::Rng, obj: &mut Value) {
        let field = self.field();
        let Some(parent) = self.parent(obj) else {
            return;
        };
        match &self.shape {
            Shape::Map { keys, values } => {
                for k in *keys {
                    if rng.u8(..10) < 4 {
                        let m = parent.entry(field).or_insert_with(|| json!({}));
                        m[*k] = json!(values[rng.usize(..values.len())]);
                    }
                }
            }
            Shape::List { items, .. } => {
                for variants in items {
                    if rng.u8(..10) < 4 {
                        let l = parent.entry(field).or_insert_with(|| json!([]));
                        l.as_array_mut()
                            .unwrap()
                            .push(variants[rng.usize(..variants.len())].clone());
                    }
                }
            }
            Shape::Value { variants, required } => {
                if *required || rng.bool() {
                    parent.insert(field.into(), variants[rng.usize(..variants.len())].clone());
                }
            }
        }
    }

    /// One change to the slot: add, remove or change an entry, an item or
    /// the value, or drop everything the slot holds. Returns what it did.
    fn mutate(&self, rng: &mut fastrand::Rng, obj: &mut Value) -> Option<String> {
        let field = self.field();
        let path = self.path.join(".");
        let parent = self.parent(obj)?;
        match &self.shape {
            Shape::Map { keys, values } => {
                let present: Vec<&str> = keys
                    .iter()
                    .copied()
                    .filter(|k| parent.get(field).is_some_and(|m| m.get(k).is_some()))
                    .collect();
                let absent: Vec<&str> = keys
                    .iter()
                    .copied()
                    .filter(|k| !present.contains(k))
                    .collect();
                match rng.u8(..4) {
                    0 if !absent.is_empty() => {
                        let k = absent[rng.usize(..absent.len())];
                        let m = parent.entry(field).or_insert_with(|| json!({}));
                        m[k] = json!(values[rng.usize(..values.len())]);
                        Some(format!("add {path}.{k}"))
                    }
                    1 if !present.is_empty() => {
                        let k = present[rng.usize(..present.len())];
                        let m = parent.get_mut(field)?.as_object_mut()?;
                        m.remove(k);
                        // The last entry gone: the map goes, or stays `{}`.
                        if m.is_empty() && rng.bool() {
                            parent.remove(field);
                        }
                        Some(format!("remove {path}.{k}"))
                    }
                    2 if !present.is_empty() => {
                        let k = present[rng.usize(..present.len())];
                        let m = parent.get_mut(field)?;
                        let old = m[k].clone();
                        let new = values.iter().find(|v| json!(v) != old)?;
                        m[k] = json!(new);
                        Some(format!("change {path}.{k}"))
                    }
                    3 if !present.is_empty() => {
                        let m = parent.get_mut(field)?.as_object_mut()?;
                        m.retain(|k, _| !keys.contains(&k.as_str()));
                        if m.is_empty() {
                            parent.remove(field);
                        }
                        Some(format!("drop all of {path}"))
                    }
                    _ => None,
                }
            }
            Shape::List { keys, items } => {
                let key_of = |v: &Value| keys.iter().map(|k| v[*k].clone()).collect::<Vec<_>>();
                let list: Vec<Value> = parent
                    .get(field)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let present: Vec<&Vec<Value>> = items
                    .iter()
                    .filter(|vs| list.iter().any(|i| key_of(i) == key_of(&vs[0])))
                    .collect();
                let absent: Vec<&Vec<Value>> = items
                    .iter()
                    .filter(|vs| !list.iter().any(|i| key_of(i) == key_of(&vs[0])))
                    .collect();
                let l = |parent: &mut Map<String, Value>| -> Vec<Value> {
                    parent
                        .get(field)
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default()
                };
                let store = |parent: &mut Map<String, Value>, list: Vec<Value>| {
                    if list.is_empty() {
                        parent.remove(field);
                    } else {
                        parent.insert(field.into(), Value::Array(list));
                    }
                };
                match rng.u8(..4) {
                    0 if !absent.is_empty() => {
                        let vs = absent[rng.usize(..absent.len())];
                        let item = vs[rng.usize(..vs.len())].clone();
                        let what = format!("add {path}{:?}", key_of(&item));
                        let mut list = l(parent);
                        list.push(item);
                        store(parent, list);
                        Some(what)
                    }
                    1 if !present.is_empty() => {
                        let key = key_of(&present[rng.usize(..present.len())][0]);
                        let mut list = l(parent);
                        list.retain(|i| key_of(i) != key);
                        store(parent, list);
                        Some(format!("remove {path}{key:?}"))
                    }
                    2 if !present.is_empty() => {
                        let vs = present[rng.usize(..present.len())];
                        let key = key_of(&vs[0]);
                        let mut list = l(parent);
                        let item = list.iter_mut().find(|i| key_of(i) == key)?;
                        let new = vs.iter().find(|v| *v != item)?;
                        *item = new.clone();
                        store(parent, list);
                        Some(format!("change {path}{key:?}"))
                    }
                    3 if !present.is_empty() => {
                        let mut list = l(parent);
                        list.retain(|i| !items.iter().any(|vs| key_of(&vs[0]) == key_of(i)));
                        store(parent, list);
                        Some(format!("drop all of {path}"))
                    }
                    _ => None,
                }
            }
            Shape::Value { variants, required } => {
                if !*required && parent.contains_key(field) && rng.u8(..3) == 0 {
                    parent.remove(field);
                    return Some(format!("remove {path}"));
                }
                let cur = parent.get(field).cloned();
                let others: Vec<&Value> = variants
                    .iter()
                    .filter(|v| Some(*v) != cur.as_ref())
                    .collect();
                let new = others[rng.usize(..others.len())].clone();
                parent.insert(field.into(), new);
                Some(format!("set {path}"))
            }
        }
    }
}

/// One write of a sequence.
#[derive(Clone, Debug)]
enum Op {
    Apply {
        manager: &'static str,
        force: bool,
        config: Value,
    },
    Create {
        manager: &'static str,
        object: Value,
    },
    Put {
        manager: &'static str,
        object: Value,
    },
    Merge {
        manager: &'static str,
        patch: Value,
    },
}

impl Op {
    fn to_reference(&self, kind: Kind) -> Value {
        let k = kind.name();
        match self {
            Op::Apply {
                manager,
                force,
                config,
            } => {
                json!({"op": "apply", "kind": k, "manager": manager, "force": force, "object": config})
            }
            Op::Create { manager, object } => {
                json!({"op": "create", "kind": k, "manager": manager, "object": object})
            }
            Op::Put { manager, object } => {
                json!({"op": "update", "kind": k, "manager": manager, "object": object})
            }
            Op::Merge { manager, patch } => {
                json!({"op": "merge", "kind": k, "manager": manager, "patch": patch})
            }
        }
    }

    fn verb(&self) -> &'static str {
        match self {
            Op::Apply { .. } => "apply",
            Op::Create { .. } => "create",
            Op::Put { .. } => "put",
            Op::Merge { .. } => "merge",
        }
    }
}

/// The RFC 7386 merge patch that turns `from` into `to`.
fn merge_diff(from: &Value, to: &Value) -> Value {
    match (from, to) {
        (Value::Object(a), Value::Object(b)) => {
            let mut out = Map::new();
            for k in a.keys().filter(|k| !b.contains_key(*k)) {
                out.insert(k.clone(), Value::Null);
            }
            for (k, v) in b {
                match a.get(k) {
                    Some(old) if old == v => {}
                    Some(old) => {
                        out.insert(k.clone(), merge_diff(old, v));
                    }
                    None => {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            Value::Object(out)
        }
        _ => to.clone(),
    }
}

/// Generates one sequence's operations as it goes (a PUT or a merge patch
/// starts from the object as the reference stored it).
struct Sequence {
    rng: fastrand::Rng,
    kind: Kind,
    name: String,
    slots: Vec<Slot>,
    intents: BTreeMap<&'static str, Value>,
}

impl Sequence {
    fn new(seed: u64, index: usize) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let kind = match rng.u8(..4) {
            0 | 1 => Kind::ConfigMap,
            2 => Kind::Service,
            _ => Kind::StatefulSet,
        };
        Self {
            rng,
            kind,
            name: format!("s{index}"),
            slots: kind.slots(),
            intents: BTreeMap::new(),
        }
    }

    fn len(&mut self) -> usize {
        self.rng.usize(3..=10)
    }

    fn random_object(&mut self) -> Value {
        let mut obj = self.kind.frame(&self.name);
        for s in &self.slots {
            s.fill(&mut self.rng, &mut obj);
        }
        obj
    }

    /// `changes` random changes to `obj`.
    fn mutate(&mut self, obj: &mut Value, changes: usize) -> Vec<String> {
        let mut done = Vec::new();
        let mut tries = 0;
        while done.len() < changes && tries < 50 {
            tries += 1;
            let i = self.rng.usize(..self.slots.len());
            if let Some(what) = self.slots[i].mutate(&mut self.rng, obj) {
                done.push(what);
            }
        }
        done
    }

    /// The next operation, given the reference's stored object.
    fn next(&mut self, stored: Option<&Value>) -> (Op, String) {
        let Some(stored) = stored else {
            if self.rng.u8(..10) < 3 {
                let manager = if self.rng.bool() { "c" } else { "a" };
                let object = self.random_object();
                return (Op::Create { manager, object }, "create".into());
            }
            return self.apply();
        };
        match self.rng.u8(..10) {
            0..=5 => self.apply(),
            6 | 7 => {
                let manager = if self.rng.u8(..10) < 7 { "c" } else { "a" };
                let mut object = stored.clone();
                let changes = 1 + self.rng.usize(..2);
                let what = self.mutate(&mut object, changes);
                (
                    Op::Put { manager, object },
                    format!("put {}", what.join(", ")),
                )
            }
            _ => {
                let manager = if self.rng.u8(..10) < 7 { "c" } else { "a" };
                let mut to = stored.clone();
                let changes = 1 + self.rng.usize(..2);
                let what = self.mutate(&mut to, changes);
                let patch = merge_diff(stored, &to);
                (
                    Op::Merge { manager, patch },
                    format!("merge {}", what.join(", ")),
                )
            }
        }
    }

    fn apply(&mut self) -> (Op, String) {
        let manager = match self.rng.u8(..10) {
            0..=5 => "a",
            6..=8 => "b",
            _ => "c",
        };
        let force = self.rng.u8(..4) == 0;
        let what = match self.intents.get(manager).cloned() {
            None => {
                let intent = self.random_object();
                self.intents.insert(manager, intent);
                "first apply".to_string()
            }
            Some(mut intent) => {
                let what = if self.rng.u8(..5) == 0 {
                    vec!["re-apply".to_string()]
                } else {
                    self.mutate(&mut intent, 1)
                };
                self.intents.insert(manager, intent);
                what.join(", ")
            }
        };
        let config = self.intents[manager].clone();
        (
            Op::Apply {
                manager,
                force,
                config,
            },
            format!("{what}{}", if force { " (force)" } else { "" }),
        )
    }
}

// ---------------------------------------------------------------------------
// Running an operation on the emulator, and normalising both answers.

/// What an operation left: the object and field sets, or the conflicts.
#[derive(Debug, PartialEq)]
struct Outcome {
    object: Option<Value>,
    fields: BTreeMap<(String, String), BTreeSet<String>>,
    conflicts: Option<BTreeSet<(String, String)>>,
}

async fn run_on_emulator(api: &Api<DynamicObject>, name: &str, op: &Op) -> Result<(), kube::Error> {
    let obj = |v: &Value| serde_json::from_value::<DynamicObject>(v.clone()).unwrap();
    let post = |m: &str| PostParams {
        field_manager: Some(m.into()),
        ..PostParams::default()
    };
    match op {
        Op::Apply {
            manager,
            force,
            config,
        } => {
            let mut pp = PatchParams::apply(manager);
            pp.force = *force;
            api.patch(name, &pp, &Patch::Apply(config)).await.map(drop)
        }
        Op::Create { manager, object } => api.create(&post(manager), &obj(object)).await.map(drop),
        Op::Put { manager, object } => api
            .replace(name, &post(manager), &obj(object))
            .await
            .map(drop),
        Op::Merge { manager, patch } => {
            let pp = PatchParams {
                field_manager: Some((*manager).into()),
                ..PatchParams::default()
            };
            api.patch(name, &pp, &Patch::Merge(patch)).await.map(drop)
        }
    }
}

fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, c| !c.is_null());
            m.values_mut().for_each(drop_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

fn normal_object(kind: Kind, obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o["metadata"].as_object_mut() {
        for f in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "selfLink",
            "managedFields",
        ] {
            m.remove(f);
        }
    }
    if kind != Kind::ConfigMap {
        o.as_object_mut().unwrap().remove("status");
    }
    drop_nulls(&mut o);
    o
}

/// A fieldsV1 set as its member paths (`.f:data.f:x`,
/// `.f:spec.f:ports.k:{...}`), list keys re-serialised with sorted fields.
fn members(fields: &Value) -> BTreeSet<String> {
    fn walk(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
        let Some(m) = v.as_object() else { return };
        if !prefix.is_empty() && (m.is_empty() || m.contains_key(".")) {
            out.insert(prefix.to_string());
        }
        for (k, c) in m {
            let step = match k.strip_prefix("k:").map(serde_json::from_str::<Value>) {
                Some(Ok(Value::Object(kv))) => {
                    let sorted: BTreeMap<_, _> = kv.into_iter().collect();
                    format!("k:{}", serde_json::to_string(&sorted).unwrap())
                }
                _ if k == "." => continue,
                _ => k.clone(),
            };
            walk(c, &format!("{prefix}.{step}"), out);
        }
    }
    let mut out = BTreeSet::new();
    walk(fields, "", &mut out);
    out
}

fn field_sets(entries: &[Value]) -> BTreeMap<(String, String), BTreeSet<String>> {
    entries
        .iter()
        .map(|e| {
            (
                (
                    e["manager"].as_str().unwrap_or_default().to_string(),
                    e["operation"].as_str().unwrap_or_default().to_string(),
                ),
                members(&e["fieldsV1"]),
            )
        })
        .collect()
}

fn reference_outcome(kind: Kind, answer: &Value) -> Outcome {
    let conflicts = answer["conflicts"].as_array().map(|cs| {
        cs.iter()
            .map(|c| {
                (
                    c["manager"].as_str().unwrap().to_string(),
                    c["field"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    });
    if conflicts.is_none()
        && let Some(e) = answer["error"].as_str()
    {
        panic!("the reference refused a write the test generated: {e}");
    }
    Outcome {
        object: answer["object"]
            .as_object()
            .map(|_| normal_object(kind, &answer["object"])),
        fields: field_sets(answer["managedFields"].as_array().unwrap()),
        conflicts,
    }
}

async fn emulator_outcome(
    emu: &Emulator,
    kind: Kind,
    name: &str,
    result: Result<(), kube::Error>,
) -> Result<Outcome, String> {
    let conflicts = match result {
        Ok(()) => None,
        Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "Conflict" => Some(
            s.details
                .as_ref()
                .map(|d| {
                    d.causes
                        .iter()
                        .map(|c| {
                            let manager = c.message.split('"').nth(1).unwrap_or_default();
                            (manager.to_string(), c.field.clone())
                        })
                        .collect()
                })
                .unwrap_or_default(),
        ),
        Err(e) => return Err(format!("the emulator refused: {e}")),
    };
    let stored = emu.get(kind.name(), "default", name);
    let entries = stored
        .as_ref()
        .and_then(|o| o["metadata"]["managedFields"].as_array().cloned())
        .unwrap_or_default();
    Ok(Outcome {
        object: stored.as_ref().map(|o| normal_object(kind, o)),
        fields: field_sets(&entries),
        conflicts,
    })
}

/// Where two JSON values differ: `path: emulator / reference` lines.
fn json_diff(path: &str, e: Option<&Value>, r: Option<&Value>, out: &mut Vec<String>) {
    match (e, r) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                json_diff(&format!("{path}.{k}"), a.get(k), b.get(k), out);
            }
        }
        (a, b) if a != b => {
            let show = |v: Option<&Value>| v.map_or("absent".to_string(), Value::to_string);
            out.push(format!(
                "{path}: emulator {} / reference {}",
                show(a),
                show(b)
            ));
        }
        _ => {}
    }
}

/// The differences between the emulator's and the reference's outcome.
fn differences(e: &Outcome, r: &Outcome) -> Vec<String> {
    let mut out = Vec::new();
    if e.conflicts != r.conflicts {
        out.push(format!(
            "conflicts: emulator {:?} / reference {:?}",
            e.conflicts, r.conflicts
        ));
    }
    json_diff("object", e.object.as_ref(), r.object.as_ref(), &mut out);
    let managers: BTreeSet<&(String, String)> = e.fields.keys().chain(r.fields.keys()).collect();
    for m in managers {
        let empty = BTreeSet::new();
        let (ef, rf) = (
            e.fields.get(m).unwrap_or(&empty),
            r.fields.get(m).unwrap_or(&empty),
        );
        if ef != rf {
            let only = |a: &BTreeSet<String>, b: &BTreeSet<String>| {
                a.difference(b).cloned().collect::<Vec<_>>().join(" ")
            };
            out.push(format!(
                "fields of {}/{}: emulator only [{}], reference only [{}]",
                m.0,
                m.1,
                only(ef, rf),
                only(rf, ef)
            ));
        }
    }
    out
}

// ---------------------------------------------------------------------------

struct Report {
    sequences: usize,
    ops: usize,
    by_verb: BTreeMap<&'static str, usize>,
    conflicts: usize,
    differing: Vec<String>,
}

async fn run(count: usize, base_seed: u64) -> Report {
    let emu = Emulator::builder()
        .start()
        .await
        .expect("start the emulator");
    let client = emu.client().await.expect("client");
    let mut reference = Reference::start();
    let mut report = Report {
        sequences: 0,
        ops: 0,
        by_verb: BTreeMap::new(),
        conflicts: 0,
        differing: Vec::new(),
    };
    for i in 0..count {
        let seed = base_seed + i as u64;
        let mut seq = Sequence::new(seed, i);
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), "default", &seq.kind.resource());
        reference.send(&json!({"op": "reset"}));
        let mut stored: Option<Value> = None;
        let mut log = Vec::new();
        let n = seq.len();
        for step in 0..n {
            let (op, what) = seq.next(stored.as_ref());
            log.push(format!(
                "  {step}: {} by {} ({what}): {}",
                op.verb(),
                match &op {
                    Op::Apply { manager, .. }
                    | Op::Create { manager, .. }
                    | Op::Put { manager, .. }
                    | Op::Merge { manager, .. } => manager,
                },
                op.to_reference(seq.kind)
            ));
            let answer = reference.send(&op.to_reference(seq.kind));
            let expected = reference_outcome(seq.kind, &answer);
            let result = run_on_emulator(&api, &seq.name, &op).await;
            report.ops += 1;
            *report.by_verb.entry(op.verb()).or_default() += 1;
            if expected.conflicts.is_some() {
                report.conflicts += 1;
            }
            let diffs = match emulator_outcome(&emu, seq.kind, &seq.name, result).await {
                Ok(got) => differences(&got, &expected),
                Err(e) => vec![e],
            };
            if !diffs.is_empty() {
                report.differing.push(format!(
                    "seed {seed} ({} {}), after operation {step}:\n{}\n  differences:\n    {}",
                    seq.kind.name(),
                    seq.name,
                    log.join("\n"),
                    diffs.join("\n    ")
                ));
                break;
            }
            stored = answer["object"]
                .as_object()
                .map(|_| answer["object"].clone());
        }
        report.sequences += 1;
    }
    emu.shutdown().await;
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulator_apply_matches_structured_merge_diff() {
    let count = std::env::var("SHARDGATE_SSA_SEQUENCES")
        .ok()
        .map(|s| s.parse().expect("SHARDGATE_SSA_SEQUENCES is a number"))
        .unwrap_or(200);
    let seed = std::env::var("SHARDGATE_SSA_SEED")
        .ok()
        .map(|s| s.parse().expect("SHARDGATE_SSA_SEED is a number"))
        .unwrap_or(0x55A0_0000);
    // Build first: a missing Go fails here, with what to install.
    reference_binary();
    let started = std::time::Instant::now();
    let report = run(count, seed).await;
    println!(
        "ssa reference: {} sequences, {} operations {:?}, {} refused by conflicts, {} differing, {:.1} s",
        report.sequences,
        report.ops,
        report.by_verb,
        report.conflicts,
        report.differing.len(),
        started.elapsed().as_secs_f64()
    );
    for d in report.differing.iter().take(5) {
        println!("{d}\n");
    }
    if let Ok(path) = std::env::var("SHARDGATE_SSA_REPORT") {
        std::fs::write(&path, report.differing.join("\n\n")).expect("write the report");
    }
    assert!(
        report.differing.is_empty(),
        "{} of {} sequences differ from structured-merge-diff (the first 5 are printed above)",
        report.differing.len(),
        report.sequences
    );
}
