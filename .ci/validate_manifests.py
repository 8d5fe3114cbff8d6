#!/usr/bin/env python3
"""Offline checks of shardgate's deployment artifacts (everything under deploy/).

Run from the repository root:

    pip install -r .ci/requirements.txt      # Python packages (pinned)
    python3 .ci/validate_manifests.py

It also needs the `helm` (v3 or v4) and `kubectl` binaries on PATH, or named by
the HELM and KUBECTL environment variables; deploy/README.md says how CI
installs them. Nothing is installed or downloaded by this script, and nothing
here needs a network or a Kubernetes API server.

Exit status: 0 when every check passes, 1 when any fails (each failure is
listed), 2 when a Python package it needs is missing.

What is checked
===============

Files
  F1  Every *.yaml / *.yml under deploy/ parses (all documents of a multi-document
      file) with a YAML loader that also rejects duplicate mapping keys; Helm
      templates (deploy/helm/*/templates/) are excluded, they are rendered instead.
      Every *.json under deploy/ parses.
  F2  Every Kubernetes manifest document has apiVersion, kind and metadata.name.
  F3  The files the project documents exist (operator manifests, chart files,
      Dockerfile, READMEs).
  F4  Versions agree: the workspace version in Cargo.toml = the chart's appVersion
      = the image tag and app.kubernetes.io/version of deploy/operator.

The CRD (deploy/crds/valkeyclusters.shardgate.io.yaml)
  C1  The whole CRD object validates against Kubernetes' strict JSON Schema for
      apiextensions.k8s.io/v1 CustomResourceDefinition (unknown or misspelled
      fields in JSONSchemaProps fail), for every Kubernetes version in
      K8S_VERSIONS.
  C2  metadata.name is <spec.names.plural>.<spec.group>; plural and singular are
      lower-case DNS-1035 labels; kind and listKind (if set) start upper-case;
      scope is Namespaced or Cluster; version names are unique DNS-1035 labels;
      exactly one version has storage: true; at least one is served; every
      version has schema.openAPIV3Schema; printer columns have a unique non-empty
      name, a type in {integer, number, string, boolean, date} and a jsonPath
      starting with ".".
  C3  The openAPIV3Schema of every version is structural, by these rules:
      S1  none of $ref, $schema, id, definitions, dependencies, additionalItems,
          patternProperties; no uniqueItems: true; items is a schema, not a list.
      S2  type, where given, is one of array, boolean, integer, number, object,
          string; outside allOf/anyOf/oneOf/not every node (the root, each
          property, the additionalProperties schema, each items schema) has a
          type unless it has x-kubernetes-int-or-string: true or
          x-kubernetes-preserve-unknown-fields: true.
      S3  the root has type: object, and no nullable, default,
          x-kubernetes-int-or-string or x-kubernetes-embedded-resource.
      S4  inside allOf/anyOf/oneOf/not: no description, type, default,
          additionalProperties or nullable (except the exact int-or-string
          pattern anyOf: [{type: integer}, {type: string}] on a node with
          x-kubernetes-int-or-string), and every property / items used there is
          also specified outside the junctor at the same place.
      S5  metadata of the root (or of an x-kubernetes-embedded-resource node), if
          specified, has only type: object, a description and properties name
          and/or generateName, and those are type: string; no default anywhere
          under it.
      S6  x-kubernetes-int-or-string: true has no type.
      S7  x-kubernetes-preserve-unknown-fields is true if present, on type
          object or no type.
      S8  x-kubernetes-embedded-resource: true has type object and properties or
          x-kubernetes-preserve-unknown-fields: true.
      S9  properties and additionalProperties are not both set;
          additionalProperties is a schema, never false; properties /
          additionalProperties only with type object, items only (and always)
          with type array.
      S10 x-kubernetes-list-type is atomic, set or map, on type array only; set
          has scalar items (or objects with x-kubernetes-map-type: atomic); map
          has object items and a non-empty, duplicate-free
          x-kubernetes-list-map-keys whose every key is a property of the items
          of scalar type that is required by the items or has a default;
          x-kubernetes-list-map-keys only with x-kubernetes-list-type: map.
      S11 x-kubernetes-map-type is granular or atomic, on type object only.
      S12 enum values have the node's type (null only if nullable); a default
          validates against its own node's schema (type, enum, bounds, pattern,
          nullable, unknown fields).
      S13 minimum <= maximum, minLength <= maxLength, minItems <= maxItems,
          minProperties <= maxProperties; length bounds and pattern only on
          strings, item bounds only on arrays, numeric bounds only on
          integer/number; pattern compiles (RE2).
      S14 every name in required is a declared property (a lint: the API server
          accepts it, but it is always a typo).
      S15 x-kubernetes-validations: rule is a non-empty string that compiles as
          CEL; message, if set, is non-empty with no line break;
          messageExpression, if set, compiles; reason, if set, is one of
          FieldValueInvalid, FieldValueForbidden, FieldValueRequired,
          FieldValueDuplicate; fieldPath, if set, is a dotted / ['key'] path (no
          array index) to a property declared below that node (at the root also
          .metadata.name / .metadata.generateName); a rule using oldSelf only on
          a correlatable node (reached through object properties, map values
          and items of x-kubernetes-list-type: map lists only).
  C4  deploy/helm/shardgate/crds/ holds a byte-identical copy of the CRD.
  C5  Self-test: a few deliberately broken copies of the CRD schema are each
      rejected by C3 (so the checker is known to bite).

Samples (deploy/samples/*.yaml)
  P1  Each file starts with a comment saying what it shows; each document is a
      ValkeyCluster of a served version (shardgate.io/v1alpha1), has metadata.name
      (DNS-1123 subdomain) and metadata.namespace (DNS-1123 label), and only
      apiVersion/kind/metadata/spec at the top.
  P2  Each is defaulted as the API server does (structural defaulting, nulls of
      non-nullable fields dropped) and then validated with jsonschema against
      the version's openAPIV3Schema, translated from OpenAPI: nullable ->
      type [T, "null"]; x-kubernetes-int-or-string -> integer or string;
      format int32/int64 -> numeric range; an object with properties and no
      additionalProperties / x-kubernetes-preserve-unknown-fields rejects
      unknown fields (the API server would silently prune them); other formats
      and x-kubernetes-* are ignored.
  P3  Every x-kubernetes-validations rule is evaluated with CEL on the defaulted
      object, at every place its node occurs (the root sees metadata.name and
      metadata.generateName only, as in Kubernetes); transition rules (oldSelf)
      are skipped, as on create.
  P4  Self-test: mutations of a sample that the API server must reject (out of
      range shards/replicas, bad enums, a wrong type, an unknown field, a bad
      hostnamePrefix or domain, hostname without domain, a too-long name) are
      each rejected by P2/P3.

Operator manifests, Helm chart, kustomize
  W1  `kubectl kustomize deploy/webhook` builds the webhook's objects (schemas
      checked for all but cert-manager's kinds), its RBAC only reads, and the
      webhook configuration calls /validate with sideEffects None.
  K1  `kubectl kustomize deploy/operator` and `kubectl kustomize deploy` build;
      both hold exactly the expected kinds (the operator objects and the
      Namespace; deploy also the CRD, equal to deploy/crds/), pass R1/D1/V1,
      and equal the plain deploy/operator/*.yaml objects.
  H1  `helm lint --strict` passes, with default values and with each variant.
  H2  `helm template` renders, for the default values: exactly one each of
      ServiceAccount, ClusterRole, ClusterRoleBinding, Role, RoleBinding,
      Deployment, Service, PodDisruptionBudget; and, Helm-only labels aside,
      the same objects as deploy/operator (so chart and plain manifests cannot
      drift apart). With --include-crds the CRD equals deploy/crds/.
      Variants: watchNamespace and a lease name set (Role + RoleBinding in that
      namespace instead of the cluster-wide pair, plus a ClusterRole +
      ClusterRoleBinding for the nodes grant alone, `--namespace NS`,
      `--lease-name`, the Lease Role limited to that name); leader election off with one
      replica (no Lease Role, `--no-leader-election`); metrics Service off; and
      renders that must FAIL with a message naming the problem: leader
      election off with 2 replicas, a logFormat or a watchNamespace that
      values.schema.json rejects. `--include-crds --kube-version 1.30.0` renders
      (Chart.yaml's kubeVersion admits the oldest supported Kubernetes).
  H3  Each optional object (metrics.serviceMonitor, metrics.prometheusRule,
      metrics.grafanaDashboard, aggregatedRoles), alone and all together:
      helm lint --strict passes, the operator's own objects are unchanged,
      exactly the option's objects are added and validate (monitoring.coreos.com
      kinds structurally: selector and port reach the metrics Service; the
      four alerts exist with shardgate expressions), the dashboard ConfigMap is
      labelled grafana_dashboard: "1" and holds JSON, the viewer/editor roles
      aggregate to view/edit and only touch shardgate.io (viewer read-only,
      status never written). Null runAsUser/runAsGroup (OpenShift) renders
      none while runAsNonRoot and readOnlyRootFilesystem stay; a
      ServiceMonitor without the metrics Service fails. Metric names used by
      the alerts and the dashboard are checked by cargo test against the
      /metrics a running operator serves (tests/tests/deploy.rs).
  R1  RBAC least privilege, on the plain manifests and on every render, against
      the rules derived from the code: deploy/operator/rbac-rules.json, which
      `shardgate rbac` prints from the table in host/operator/src/rbac.rs (a
      cargo test keeps the file current; tests/tests/deploy.rs checks that the
      table is what the operator really requests, both ways). The operator's
      roles grant exactly the table's verbs on each resource: its "watched"
      grants in the operator ClusterRole, or with watchNamespace in a Role in
      that namespace; its "cluster" grants (cluster-scoped kinds: nodes) always
      in a ClusterRole bound by a ClusterRoleBinding (with watchNamespace a
      ClusterRole of its own holding nothing else); its "ownNamespace" grants
      (the leader-election Lease) in a Role in the operator's namespace, only
      with leader election on. resourceNames only where the table names one
      (the Lease: the lease name), never on create/list/watch; no "*"
      anywhere, no nonResourceURLs, no nodes/* or secrets/* subresources, no
      other verbs or resources; the bindings reference those roles and bind
      exactly the operator's ServiceAccount in the operator's namespace.
  R2  Self-test: broken copies of the plain manifests' RBAC (another verb on
      nodes, a nodes/* subresource, nodes in a Role or bound by a RoleBinding,
      nodes missing, nodes mixed into the watchNamespace variant's Role or
      other grants into its nodes ClusterRole, a verb or a resource the code
      does not use, a verb the code uses missing) are each rejected by R1.
  D1  The Deployment: replicas as configured (2 by default); the image
      ghcr.io/shardgate/shardgate:<version>; args start with `run` and carry
      `--log-format json`; POD_NAME and POD_NAMESPACE from the downward API;
      liveness GET /healthz and readiness GET /readyz on container port 8080;
      requests 50m/64Mi, limits 500m/256Mi; pod and container security
      context: runAsNonRoot, runAsUser 65532, readOnlyRootFilesystem,
      allowPrivilegeEscalation false, capabilities drop ALL (no add), seccomp
      RuntimeDefault, not privileged, no host namespaces; scheduling prefers
      different nodes (preferred pod anti-affinity or a ScheduleAnyway spread on
      kubernetes.io/hostname); serviceAccountName is the bound ServiceAccount.
      The PodDisruptionBudget has maxUnavailable 1 and selects the pods; the
      metrics Service is ClusterIP with a port named metrics = 8080 reaching
      container port 8080 and selects the pods.
  V1  Every object (plain manifests, kustomize output, every render) validates
      against Kubernetes' strict schemas for each version in K8S_VERSIONS.
  V2  values.yaml validates against values.schema.json.

Dockerfile (deploy/Dockerfile)
  B1  The builder is rust:<workspace rust-version>*, it runs
      `rustup target add wasm32-wasip2` and `cargo build --release ... -p
      shardgate`; the runtime is gcr.io/distroless/cc-debian12:nonroot, runs as
      65532 with ENTRYPOINT ["/shardgate"]; every COPY source exists and every
      workspace member is copied.

What it cannot check (no API server here): real admission (quota, Pod Security
admission, webhooks), CEL cost limits, server-side defaulting of built-in
kinds, that the image exists or runs, and anything at run time.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import traceback
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable

try:
    import celpy
    import celpy.celtypes
    import jsonschema
    import kubernetes_validate.utils as kv
    import re2
    import yaml
except ImportError as exc:  # pragma: no cover - environment problem
    print(
        f"error: the Python package providing '{exc.name}' is missing.\n"
        "       Install the pinned requirements:  pip install -r .ci/requirements.txt",
        file=sys.stderr,
    )
    sys.exit(2)

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
CRD_FILE = DEPLOY / "crds" / "valkeyclusters.shardgate.io.yaml"
CHART = DEPLOY / "helm" / "shardgate"
SAMPLES = DEPLOY / "samples"
OPERATOR = DEPLOY / "operator"

OPERATOR_NAMESPACE = "shardgate-system"
OPERATOR_NAME = "shardgate"
IMAGE_REPO = "ghcr.io/shardgate/shardgate"
LEASE_NAME = "shardgate-leader"
# Oldest supported (Chart.yaml kubeVersion) and newest known to kubernetes-validate.
K8S_VERSIONS = ("1.30", kv.major_minor(kv.latest_version()))

# The rules the operator needs come from the code: host/operator/src/rbac.rs
# lists every resource it reads or writes (tests/tests/deploy.rs checks that
# against the requests it really makes), and `shardgate rbac` writes that
# table to this file (a cargo test keeps it current).
RBAC_RULES_FILE = OPERATOR / "rbac-rules.json"
# A grant's resourceName placeholder for the Lease's name.
LEASE_NAME_PLACEHOLDER = "<lease>"
GRANT_SCOPES = ("watched", "cluster", "ownNamespace")


class RequiredRules:
    """What deploy/operator/rbac-rules.json says the operator needs."""

    def __init__(self, path: Path) -> None:
        self.operator: dict[tuple[str, str], set[str]] = {}  # watched + cluster-scoped
        self.cluster_scoped: set[tuple[str, str]] = set()
        self.lease: dict[tuple[str, str], set[str]] = {}  # the operator's own namespace
        self.named: dict[tuple[str, str], str] = {}  # resourceName placeholders
        self.problems: list[str] = []
        where = rel(path)
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            self.problems.append(f"{where}: cannot be read as JSON ({exc}); "
                                 f"regenerate it: cargo run -p shardgate -- rbac > {where}")
            return
        grants = doc.get("grants") if isinstance(doc, dict) else None
        if not isinstance(grants, list) or not grants:
            self.problems.append(f"{where}: grants: must be a non-empty list")
            return
        for i, g in enumerate(grants):
            at = f"{where}: grants[{i}]"
            group, resources, verbs = g.get("apiGroup"), g.get("resources"), g.get("verbs")
            scope, name = g.get("scope"), g.get("resourceName")
            if not isinstance(group, str):
                self.problems.append(f"{at}.apiGroup: must be a string")
                continue
            if not (isinstance(resources, list) and resources and all(isinstance(r, str) for r in resources)):
                self.problems.append(f"{at}.resources: must be a non-empty list of strings")
                continue
            if not (isinstance(verbs, list) and verbs and all(isinstance(v, str) for v in verbs)):
                self.problems.append(f"{at}.verbs: must be a non-empty list of strings")
                continue
            if scope not in GRANT_SCOPES:
                self.problems.append(f"{at}.scope: {scope!r} is not one of {list(GRANT_SCOPES)}")
                continue
            if name is not None and name != LEASE_NAME_PLACEHOLDER:
                self.problems.append(f"{at}.resourceName: only {LEASE_NAME_PLACEHOLDER!r} is known")
                continue
            into = self.lease if scope == "ownNamespace" else self.operator
            for r in resources:
                into.setdefault((group, r), set()).update(verbs)
                if scope == "cluster":
                    self.cluster_scoped.add((group, r))
                if name is not None:
                    self.named[(group, r)] = name

EXPECTED_RESOURCES = {
    "requests": {"cpu": "50m", "memory": "64Mi"},
    "limits": {"cpu": "500m", "memory": "256Mi"},
}
HELM_ONLY_LABELS = ("app.kubernetes.io/managed-by", "helm.sh/chart", "app.kubernetes.io/version")

TOOLS_HINT = "see 'CI tools' in deploy/README.md for the install step (.ci/run runs it)"

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

SCALAR_TYPES = {"string", "integer", "number", "boolean"}
VALID_TYPES = SCALAR_TYPES | {"array", "object"}
JUNCTORS = ("allOf", "anyOf", "oneOf", "not")
FORBIDDEN_KEYWORDS = ("$ref", "$schema", "id", "definitions", "dependencies", "additionalItems",
                      "patternProperties")
VALIDATION_REASONS = {"FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired",
                      "FieldValueDuplicate"}
PRINTER_COLUMN_TYPES = {"integer", "number", "string", "boolean", "date"}
INT_OR_STRING_PATTERN = [{"type": "integer"}, {"type": "string"}]


# --------------------------------------------------------------------------- report

class Report:
    def __init__(self) -> None:
        self.passed = 0
        self.failed: list[str] = []

    def check(self, name: str, fn: Callable[[], Iterable[str] | None]) -> None:
        """Runs one check; it returns (or yields) problems, none meaning pass."""
        try:
            problems = list(fn() or [])
        except Exception:  # a crash is a failure, with its traceback
            problems = ["check crashed:\n" + traceback.format_exc()]
        if problems:
            self.failed.append(name)
            print(f"FAIL {name}")
            for p in problems:
                for i, line in enumerate(str(p).splitlines() or [""]):
                    print(("     - " if i == 0 else "       ") + line)
        else:
            self.passed += 1
            print(f"ok   {name}")


# --------------------------------------------------------------------------- YAML

class StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (the API server rejects them too)."""


def _mapping_without_duplicates(loader: StrictLoader, node: yaml.MappingNode, deep: bool = False):
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                f"found duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                             _mapping_without_duplicates)


def load_docs(text: str) -> list[Any]:
    return [d for d in yaml.load_all(text, Loader=StrictLoader) if d is not None]


def load_file(path: Path) -> list[Any]:
    return load_docs(path.read_text())


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def is_template(path: Path) -> bool:
    parts = path.relative_to(DEPLOY).parts
    return parts[0] == "helm" and "templates" in parts[:-1]


# --------------------------------------------------------------------------- small helpers

def get(obj: Any, *path: Any, default: Any = None) -> Any:
    for p in path:
        if isinstance(obj, dict) and p in obj:
            obj = obj[p]
        elif isinstance(obj, list) and isinstance(p, int) and -len(obj) <= p < len(obj):
            obj = obj[p]
        else:
            return default
    return obj


def ident(obj: dict) -> str:
    ns = get(obj, "metadata", "namespace")
    return f"{obj.get('kind')}/{(ns + '/') if ns else ''}{get(obj, 'metadata', 'name')}"


def diff(a: Any, b: Any, path: str = "", limit: int = 12) -> list[str]:
    """Human-readable differences between two JSON-like values."""
    out: list[str] = []

    def walk(x: Any, y: Any, p: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y), key=str):
                if k not in x:
                    out.append(f"{p}.{k}: only in the second ({json.dumps(y[k])[:120]})")
                elif k not in y:
                    out.append(f"{p}.{k}: only in the first ({json.dumps(x[k])[:120]})")
                else:
                    walk(x[k], y[k], f"{p}.{k}")
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for i, (xi, yi) in enumerate(zip(x, y)):
                walk(xi, yi, f"{p}[{i}]")
        elif x != y:
            out.append(f"{p or '<root>'}: {json.dumps(x)[:120]} != {json.dumps(y)[:120]}")

    walk(a, b, path)
    return out


def workspace_versions() -> tuple[str, str]:
    data = tomllib.loads((ROOT / "Cargo.toml").read_text())
    pkg = data["workspace"]["package"]
    return pkg["version"], pkg["rust-version"]


# --------------------------------------------------------------------------- Kubernetes schemas (V1)

# kubernetes-validate reads the (large) shared definitions file on every call;
# the files never change during a run, so read each once.
kv.schema_contents = functools.lru_cache(maxsize=None)(kv.schema_contents)


def k8s_schema_problems(objs: Iterable[dict], what: str) -> list[str]:
    problems = []
    for obj in objs:
        for version in K8S_VERSIONS:
            try:
                kv.validate(obj, version, strict=True)
            except kv.ValidationError as e:
                where = ".".join(str(p) for p in e.path) or "<root>"
                problems.append(f"{what}: {ident(obj)} is invalid for Kubernetes {version}: "
                                f"{where}: {e.message}")
            except kv.SchemaNotFoundError as e:
                problems.append(f"{what}: {ident(obj)}: {e.message}")
    return problems


# --------------------------------------------------------------------------- CEL

CEL_ENV = celpy.Environment()


@functools.lru_cache(maxsize=None)
def cel_program(expr: str):
    return CEL_ENV.program(CEL_ENV.compile(expr))


def cel_compile_error(expr: str) -> str | None:
    try:
        cel_program(expr)
    except Exception as e:  # celpy raises CELParseError and friends
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return None


def uses_old_self(expr: str) -> bool:
    return re.search(r"\boldSelf\b", expr) is not None


# --------------------------------------------------------------------------- OpenAPI -> JSON Schema

INT_RANGES = {"int32": (-(2 ** 31), 2 ** 31 - 1), "int64": (-(2 ** 63), 2 ** 63 - 1)}


def to_jsonschema(node: dict, *, prune: bool = True, root: bool = False) -> dict:
    """Translates a CRD (OpenAPI v3.0) schema node to a draft-4 JSON Schema."""
    out: dict[str, Any] = {}
    t = node.get("type")
    nullable = node.get("nullable") is True
    if node.get("x-kubernetes-int-or-string") is True and "anyOf" not in node:
        alternatives: list[dict] = [{"type": "integer"}, {"type": "string"}]
        if nullable:
            alternatives.append({"type": "null"})
        out["anyOf"] = alternatives
    elif t:
        out["type"] = [t, "null"] if nullable else t
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
                "maxLength", "pattern", "minItems", "maxItems", "minProperties", "maxProperties",
                "multipleOf", "required"):
        if key in node:
            out[key] = node[key]
    if "enum" in node:
        out["enum"] = list(node["enum"]) + ([None] if nullable and None not in node["enum"] else [])
    if node.get("format") in INT_RANGES and t == "integer":
        lo, hi = INT_RANGES[node["format"]]
        out.setdefault("allOf", []).append({"minimum": lo, "maximum": hi})
    props = dict(node.get("properties") or {})
    if root and prune:
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    if props:
        out["properties"] = {k: to_jsonschema(v, prune=prune) for k, v in props.items()}
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = to_jsonschema(node["additionalProperties"], prune=prune)
    elif props and prune and node.get("x-kubernetes-preserve-unknown-fields") is not True:
        out["additionalProperties"] = False
    if isinstance(node.get("items"), dict):
        out["items"] = to_jsonschema(node["items"], prune=prune)
    for j in ("allOf", "anyOf", "oneOf"):
        if j in node:
            out.setdefault(j, []).extend(to_jsonschema(s, prune=False) for s in node[j])
    if "not" in node:
        out["not"] = to_jsonschema(node["not"], prune=False)
    return out


def jsonschema_problems(schema: dict, value: Any, prefix: str = "") -> list[str]:
    validator = jsonschema.Draft4Validator(schema)
    problems = []
    for e in sorted(validator.iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path]):
        where = prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
        hint = ""
        if e.validator == "additionalProperties" and e.validator_value is False:
            hint = " (unknown field: the API server would silently drop it)"
        problems.append(f"{where or '<root>'}: {e.message}{hint}")
    return problems


# --------------------------------------------------------------------------- defaulting

def apply_defaults(node: dict, value: Any) -> Any:
    """Structural defaulting: fills missing fields with their defaults, drops
    nulls of non-nullable fields (or replaces them by the default), recursively."""
    if isinstance(value, dict):
        props = node.get("properties") or {}
        for name, sub in props.items():
            if name in value and value[name] is None and sub.get("nullable") is not True:
                del value[name]
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(sub, value[name])
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            for name in list(value):
                if name not in props:
                    value[name] = apply_defaults(extra, value[name])
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        value = [apply_defaults(node["items"], v) for v in value]
    return value


# --------------------------------------------------------------------------- structural schema (C3)

def _fieldpath_tokens(field_path: str) -> list[str] | None:
    tokens, pos = [], 0
    pattern = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\['([^'\]]+)'\]")
    while pos < len(field_path):
        m = pattern.match(field_path, pos)
        if not m:
            return None
        tokens.append(m.group(1) or m.group(2))
        pos = m.end()
    return tokens or None


def _fieldpath_problem(node: dict, field_path: str, at_root: bool) -> str | None:
    tokens = _fieldpath_tokens(field_path)
    if tokens is None:
        return f"fieldPath {field_path!r} is not a path like .a.b or ['a'] (array indices are not allowed)"
    if at_root and tokens in (["metadata", "name"], ["metadata", "generateName"]):
        return None
    cur = node
    for t in tokens:
        if t in (cur.get("properties") or {}):
            cur = cur["properties"][t]
        elif isinstance(cur.get("additionalProperties"), dict):
            cur = cur["additionalProperties"]
        else:
            return f"fieldPath {field_path!r} does not name a property of this schema (stuck at {t!r})"
    return None


def structural_problems(root: dict) -> list[str]:
    problems: list[str] = []

    def add(path: str, msg: str) -> None:
        problems.append(f"{path or '<root>'}: {msg}")

    def common(node: dict, path: str) -> None:
        """Rules that hold for every schema node, in or out of junctors."""
        for k in FORBIDDEN_KEYWORDS:
            if k in node:
                add(path, f"{k} is not allowed in a CRD schema (S1)")
        if node.get("uniqueItems") is True:
            add(path, "uniqueItems: true is not allowed (S1)")
        if isinstance(node.get("items"), list):
            add(path, "items must be a schema, not a list (S1)")
        t = node.get("type")
        if t is not None and t not in VALID_TYPES:
            add(path, f"type {t!r} is not one of {sorted(VALID_TYPES)} (S2)")
        # S13 bounds
        for lo, hi in (("minimum", "maximum"), ("minLength", "maxLength"), ("minItems", "maxItems"),
                       ("minProperties", "maxProperties")):
            if lo in node and hi in node and node[lo] > node[hi]:
                add(path, f"{lo} {node[lo]} > {hi} {node[hi]} (S13)")
        if t:
            if t != "string" and any(k in node for k in ("minLength", "maxLength", "pattern")):
                add(path, f"minLength/maxLength/pattern on type {t} (S13)")
            if t != "array" and any(k in node for k in ("minItems", "maxItems")):
                add(path, f"minItems/maxItems on type {t} (S13)")
            if t not in ("integer", "number") and any(
                    k in node for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                        "multipleOf")):
                add(path, f"numeric bounds on type {t} (S13)")
        if "pattern" in node:
            try:
                re2.compile(node["pattern"])
            except Exception as e:
                add(path, f"pattern {node['pattern']!r} does not compile: {e} (S13)")

    def junctor_walk(jnode: Any, outside: dict | None, path: str) -> None:
        """S4: inside allOf/anyOf/oneOf/not."""
        if not isinstance(jnode, dict):
            add(path, "junctor entry must be a schema")
            return
        common(jnode, path)
        for k in ("description", "type", "default", "additionalProperties", "nullable"):
            if k in jnode:
                add(path, f"{k} must not be set inside allOf/anyOf/oneOf/not (S4)")
        for name, sub in (jnode.get("properties") or {}).items():
            out_sub = get(outside, "properties", name)
            if not isinstance(out_sub, dict):
                add(f"{path}.properties.{name}",
                    "property used inside a junctor but not specified outside it (S4)")
            junctor_walk(sub, out_sub if isinstance(out_sub, dict) else None,
                         f"{path}.properties.{name}")
        if "items" in jnode:
            out_items = get(outside, "items")
            if not isinstance(out_items, dict):
                add(f"{path}.items", "items used inside a junctor but not specified outside it (S4)")
            junctor_walk(jnode["items"], out_items if isinstance(out_items, dict) else None,
                         f"{path}.items")
        for j in JUNCTORS:
            if j in jnode:
                subs = jnode[j] if j != "not" else [jnode[j]]
                for i, s in enumerate(subs):
                    junctor_walk(s, outside, f"{path}.{j}[{i}]")

    def metadata_walk(meta: Any, path: str) -> None:
        """S5."""
        if not isinstance(meta, dict):
            add(path, "metadata schema must be a mapping (S5)")
            return
        extra = set(meta) - {"type", "properties", "description"}
        if extra:
            add(path, f"metadata may only restrict name and generateName; found {sorted(extra)} (S5)")
        if meta.get("type", "object") != "object":
            add(path, "metadata must be type: object (S5)")
        for name, sub in (meta.get("properties") or {}).items():
            if name not in ("name", "generateName"):
                add(f"{path}.properties.{name}", "only name and generateName may be specified (S5)")
            elif not isinstance(sub, dict) or sub.get("type") != "string":
                add(f"{path}.properties.{name}", "must be type: string (S5)")
            elif "default" in sub:
                add(f"{path}.properties.{name}", "no default under metadata (S5)")

    def walk(node: Any, path: str, *, is_root: bool = False, correlatable: bool = True) -> None:
        if not isinstance(node, dict):
            add(path, "schema node must be a mapping")
            return
        common(node, path)
        t = node.get("type")
        int_or_string = node.get("x-kubernetes-int-or-string") is True
        preserve = node.get("x-kubernetes-preserve-unknown-fields")
        embedded = node.get("x-kubernetes-embedded-resource") is True

        # S2 / S3
        if not t and not int_or_string and preserve is not True:
            add(path, "type is required (structural schema; S2)")
        if is_root:
            if t != "object":
                add(path, "the root must be type: object (S3)")
            for k in ("nullable", "default", "x-kubernetes-int-or-string",
                      "x-kubernetes-embedded-resource"):
                if k in node:
                    add(path, f"{k} is not allowed at the root (S3)")
        # S6 / S7 / S8
        if int_or_string and t:
            add(path, "x-kubernetes-int-or-string: true must not have a type (S6)")
        if preserve is not None and preserve is not True:
            add(path, "x-kubernetes-preserve-unknown-fields must be true or absent (S7)")
        if preserve is True and t not in (None, "object"):
            add(path, "x-kubernetes-preserve-unknown-fields only on type object or no type (S7)")
        if embedded and (t != "object" or not (node.get("properties") or preserve is True)):
            add(path, "x-kubernetes-embedded-resource needs type: object and properties or "
                      "x-kubernetes-preserve-unknown-fields (S8)")
        # S9
        if "properties" in node and "additionalProperties" in node:
            add(path, "properties and additionalProperties are mutually exclusive (S9)")
        if node.get("additionalProperties") is False:
            add(path, "additionalProperties: false is not allowed (unknown fields are pruned; S9)")
        if ("properties" in node or "additionalProperties" in node) and t not in (None, "object"):
            add(path, f"properties/additionalProperties on type {t} (S9)")
        if "items" in node and t not in (None, "array"):
            add(path, f"items on type {t} (S9)")
        if t == "array" and not isinstance(node.get("items"), dict):
            add(path, "type: array needs an items schema (S9)")
        # S10
        list_type = node.get("x-kubernetes-list-type")
        keys = node.get("x-kubernetes-list-map-keys")
        items = node.get("items") if isinstance(node.get("items"), dict) else {}
        if list_type is not None:
            if list_type not in ("atomic", "set", "map"):
                add(path, f"x-kubernetes-list-type {list_type!r} is not atomic, set or map (S10)")
            if t != "array":
                add(path, "x-kubernetes-list-type only on type: array (S10)")
        if list_type == "set":
            it = items.get("type")
            if it not in SCALAR_TYPES and not (it == "object" and
                                               items.get("x-kubernetes-map-type") == "atomic"):
                add(path, "x-kubernetes-list-type: set needs scalar items (or atomic maps) (S10)")
        if keys is not None and list_type != "map":
            add(path, "x-kubernetes-list-map-keys only with x-kubernetes-list-type: map (S10)")
        if list_type == "map":
            if items.get("type") != "object":
                add(path, "x-kubernetes-list-type: map needs items of type object (S10)")
            if not keys:
                add(path, "x-kubernetes-list-type: map needs x-kubernetes-list-map-keys (S10)")
            else:
                if len(set(keys)) != len(keys):
                    add(path, "x-kubernetes-list-map-keys has duplicates (S10)")
                for k in keys:
                    ks = get(items, "properties", k)
                    if not isinstance(ks, dict):
                        add(path, f"list map key {k!r} is not a property of the items (S10)")
                        continue
                    if ks.get("type") not in SCALAR_TYPES:
                        add(path, f"list map key {k!r} must be a scalar (S10)")
                    if k not in (items.get("required") or []) and "default" not in ks:
                        add(path, f"list map key {k!r} must be required by the items or have a "
                                  "default (S10)")
        # S11
        map_type = node.get("x-kubernetes-map-type")
        if map_type is not None:
            if map_type not in ("granular", "atomic"):
                add(path, f"x-kubernetes-map-type {map_type!r} is not granular or atomic (S11)")
            if t != "object":
                add(path, "x-kubernetes-map-type only on type: object (S11)")
        # S12
        if "enum" in node:
            type_check = to_jsonschema({k: v for k, v in node.items() if k in ("type", "nullable")})
            for v in node["enum"]:
                if jsonschema_problems(type_check, v):
                    add(path, f"enum value {v!r} does not have the node's type (S12)")
        if "default" in node:
            for p in jsonschema_problems(to_jsonschema(node), node["default"]):
                add(path, f"default {json.dumps(node['default'])} is invalid: {p} (S12)")
        # S14
        for r in node.get("required") or []:
            if r not in (node.get("properties") or {}) and preserve is not True:
                add(path, f"required names {r!r}, which is not a declared property (S14)")
        # S15
        for i, v in enumerate(node.get("x-kubernetes-validations") or []):
            vpath = f"{path}.x-kubernetes-validations[{i}]"
            rule = v.get("rule") if isinstance(v, dict) else None
            if not isinstance(rule, str) or not rule.strip():
                add(vpath, "rule must be a non-empty string (S15)")
                continue
            err = cel_compile_error(rule)
            if err:
                add(vpath, f"rule does not compile as CEL: {err} (S15)")
            if "message" in v and (not isinstance(v["message"], str) or not v["message"].strip()
                                   or "\n" in v["message"] or "\r" in v["message"]):
                add(vpath, "message must be a non-empty single line (S15)")
            if "messageExpression" in v:
                err = cel_compile_error(str(v["messageExpression"]))
                if err:
                    add(vpath, f"messageExpression does not compile as CEL: {err} (S15)")
            if "reason" in v and v["reason"] not in VALIDATION_REASONS:
                add(vpath, f"reason {v['reason']!r} is not one of {sorted(VALIDATION_REASONS)} (S15)")
            if "fieldPath" in v:
                fp = _fieldpath_problem(node, str(v["fieldPath"]), is_root)
                if fp:
                    add(vpath, fp + " (S15)")
            if uses_old_self(rule) and not correlatable:
                add(vpath, "a transition rule (oldSelf) on a node that is not correlatable (S15)")

        # S5: metadata of the root or an embedded resource
        if (is_root or embedded) and "metadata" in (node.get("properties") or {}):
            metadata_walk(node["properties"]["metadata"], f"{path}.properties.metadata")

        # S4 and the int-or-string exception
        for j in JUNCTORS:
            if j not in node:
                continue
            if int_or_string and j == "anyOf" and node[j] == INT_OR_STRING_PATTERN:
                continue
            if int_or_string and j == "allOf" and node[j] == [{"anyOf": INT_OR_STRING_PATTERN}]:
                continue
            subs = node[j] if j != "not" else [node[j]]
            if not isinstance(subs, list):
                add(path, f"{j} must be a list of schemas")
                continue
            for i, s in enumerate(subs):
                junctor_walk(s, node, f"{path}.{j}[{i}]")

        # children
        for name, sub in (node.get("properties") or {}).items():
            if (is_root or embedded) and name == "metadata":
                continue
            walk(sub, f"{path}.properties.{name}", correlatable=correlatable)
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.additionalProperties",
                 correlatable=correlatable)
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}.items", correlatable=correlatable and list_type == "map")

    walk(root, "", is_root=True)
    return problems


# --------------------------------------------------------------------------- custom objects (P1-P3)

def cel_rule_problems(node: dict, value: Any, path: str, is_root: bool = False) -> list[str]:
    problems: list[str] = []
    if value is None:
        return problems
    for v in node.get("x-kubernetes-validations") or []:
        rule = v.get("rule", "")
        if uses_old_self(rule):
            continue  # transition rules are not evaluated on create
        seen = value
        if is_root and isinstance(value, dict):
            seen = dict(value)
            seen["metadata"] = {k: val for k, val in (value.get("metadata") or {}).items()
                                if k in ("name", "generateName")}
        try:
            result = cel_program(rule).evaluate({"self": celpy.json_to_cel(seen)})
        except Exception as e:
            problems.append(f"{path or '<root>'}: rule {rule!r} failed to evaluate: "
                            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}")
            continue
        if not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            msg = v.get("message") or f"failed rule: {rule}"
            fp = v.get("fieldPath", "")
            problems.append(f"{(path + fp) or '<root>'}: {msg}")
    if isinstance(value, dict):
        props = node.get("properties") or {}
        for name, sub in props.items():
            if name in value:
                problems += cel_rule_problems(sub, value[name], f"{path}.{name}")
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            for name, item in value.items():
                if name not in props:
                    problems += cel_rule_problems(extra, item, f"{path}.{name}")
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for i, item in enumerate(value):
            problems += cel_rule_problems(node["items"], item, f"{path}[{i}]")
    return problems


def custom_object_problems(crd: dict, obj: Any) -> list[str]:
    if not isinstance(obj, dict):
        return ["document is not a mapping"]
    spec = crd["spec"]
    served = {f"{spec['group']}/{v['name']}": v for v in spec["versions"] if v.get("served")}
    problems = []
    if obj.get("apiVersion") not in served:
        return [f"apiVersion {obj.get('apiVersion')!r} is not a served version ({sorted(served)})"]
    if obj.get("kind") != spec["names"]["kind"]:
        return [f"kind {obj.get('kind')!r} is not {spec['names']['kind']!r}"]
    extra = set(obj) - {"apiVersion", "kind", "metadata", "spec"}
    if extra:
        problems.append(f"unexpected top-level fields {sorted(extra)} (a sample has no status)")
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        problems.append(f"metadata.name {name!r} is not a DNS-1123 subdomain")
    if spec.get("scope") == "Namespaced":
        ns = meta.get("namespace")
        if not isinstance(ns, str) or len(ns) > 63 or not DNS1123_LABEL.match(ns):
            problems.append(f"metadata.namespace {ns!r} is missing or not a DNS-1123 label")
    schema = served[obj["apiVersion"]]["schema"]["openAPIV3Schema"]
    defaulted = apply_defaults(schema, copy.deepcopy(obj))
    problems += jsonschema_problems(to_jsonschema(schema, root=True), defaulted)
    if not problems:  # CEL on a schema-valid object only, as the API server does
        problems += cel_rule_problems(schema, defaulted, "", is_root=True)
    return problems


# --------------------------------------------------------------------------- RBAC (R1)

REQUIRED = RequiredRules(RBAC_RULES_FILE)


def rule_triples(role: dict, what: str, problems: list[str],
                 allowed_names: dict[tuple[str, str], str] | None = None
                 ) -> dict[tuple[str, str], set[str]]:
    grants: dict[tuple[str, str], set[str]] = {}
    for i, rule in enumerate(role.get("rules") or []):
        where = f"{what} {ident(role)} rules[{i}]"
        if rule.get("nonResourceURLs"):
            problems.append(f"{where}: nonResourceURLs are not needed")
        groups, resources, verbs = (rule.get(k) or [] for k in ("apiGroups", "resources", "verbs"))
        names = rule.get("resourceNames") or []
        for field, values in (("apiGroups", groups), ("resources", resources), ("verbs", verbs),
                              ("resourceNames", names)):
            if any("*" in str(v) for v in values):
                problems.append(f"{where}: wildcard in {field}: {values}")
        for g in groups:
            for r in resources:
                if r.startswith(("secrets/", "nodes/")):
                    problems.append(f"{where}: grants access to {r}, which the operator never uses")
                if names:
                    wanted = (allowed_names or {}).get((g, r))
                    if wanted is None or names != [wanted]:
                        problems.append(f"{where}: resourceNames {names} on {g or 'core'}/{r} "
                                        f"(allowed: {[wanted] if wanted else 'none'})")
                    if "create" in verbs or "list" in verbs or "watch" in verbs:
                        problems.append(f"{where}: resourceNames cannot limit create/list/watch")
                grants.setdefault((g, r), set()).update(verbs)
    return grants


def compare_grants(got: dict[tuple[str, str], set[str]], want: dict[tuple[str, str], set[str]],
                   what: str) -> list[str]:
    problems = []
    for key in sorted(set(got) | set(want)):
        g, r = key
        label = f"{g or 'core'}/{r}"
        extra = got.get(key, set()) - want.get(key, set())
        missing = want.get(key, set()) - got.get(key, set())
        if key not in want:
            problems.append(f"{what}: grants {label} {sorted(got[key])}, which is not needed")
            continue
        if extra:
            problems.append(f"{what}: grants {label} verbs {sorted(extra)} beyond least privilege")
        if missing:
            problems.append(f"{what}: lacks {label} verbs {sorted(missing)} that the operator uses")
    return problems


class Variant:
    """What a set of operator objects should look like."""

    def __init__(self, *, replicas: int = 2, watch_namespace: str = "", leader_election: bool = True,
                 metrics_service: bool = True, namespace_object: bool = False,
                 crd_object: bool = False, namespace: str = OPERATOR_NAMESPACE,
                 lease_name: str = LEASE_NAME) -> None:
        self.replicas = replicas
        self.watch_namespace = watch_namespace
        self.leader_election = leader_election
        self.metrics_service = metrics_service
        self.namespace_object = namespace_object
        self.crd_object = crd_object
        self.namespace = namespace
        self.lease_name = lease_name

    def kinds(self) -> Counter:
        c: Counter = Counter({"ServiceAccount": 1, "Deployment": 1, "PodDisruptionBudget": 1})
        if self.watch_namespace:
            c["Role"] += 1
            c["RoleBinding"] += 1
        # The operator's ClusterRole; with watchNamespace one holding only the
        # (cluster-scoped) nodes grant.
        c["ClusterRole"] += 1
        c["ClusterRoleBinding"] += 1
        if self.leader_election:
            c["Role"] += 1
            c["RoleBinding"] += 1
        if self.metrics_service:
            c["Service"] += 1
        if self.namespace_object:
            c["Namespace"] += 1
        if self.crd_object:
            c["CustomResourceDefinition"] += 1
        return c


def rbac_problems(objs: list[dict], v: Variant, what: str) -> list[str]:
    problems: list[str] = []
    deployments = [o for o in objs if o.get("kind") == "Deployment"]
    if len(deployments) != 1:
        return [f"{what}: expected one Deployment, found {len(deployments)}"]
    dep = deployments[0]
    sa_name = get(dep, "spec", "template", "spec", "serviceAccountName")
    sa_ns = get(dep, "metadata", "namespace")
    if sa_ns != v.namespace:
        problems.append(f"{what}: the Deployment is in namespace {sa_ns!r}, not {v.namespace!r}")
    if not any(o.get("kind") == "ServiceAccount" and get(o, "metadata", "name") == sa_name
               and get(o, "metadata", "namespace") == sa_ns for o in objs):
        problems.append(f"{what}: no ServiceAccount {sa_ns}/{sa_name} for the Deployment")

    roles = {(o["kind"], get(o, "metadata", "namespace"), get(o, "metadata", "name")): o
             for o in objs if o.get("kind") in ("Role", "ClusterRole")}
    bindings = [o for o in objs if o.get("kind") in ("RoleBinding", "ClusterRoleBinding")]
    operator_grants: dict[tuple[str, str], set[str]] = {}
    lease_grants: dict[tuple[str, str], set[str]] = {}
    bound: set[tuple] = set()
    for b in bindings:
        ref = b.get("roleRef") or {}
        bns = get(b, "metadata", "namespace") if b["kind"] == "RoleBinding" else None
        if ref.get("apiGroup") != "rbac.authorization.k8s.io":
            problems.append(f"{what}: {ident(b)} roleRef.apiGroup is {ref.get('apiGroup')!r}")
        if b["kind"] == "ClusterRoleBinding" and ref.get("kind") != "ClusterRole":
            problems.append(f"{what}: {ident(b)} must reference a ClusterRole")
        key = (ref.get("kind"), bns if ref.get("kind") == "Role" else None, ref.get("name"))
        role = roles.get(key)
        if role is None:
            problems.append(f"{what}: {ident(b)} references {key}, which is not in the manifests")
            continue
        subjects = b.get("subjects") or []
        if subjects != [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_ns}]:
            problems.append(f"{what}: {ident(b)} must bind exactly ServiceAccount {sa_ns}/{sa_name};"
                            f" binds {subjects}")
        bound.add(key)
        role_ns = key[1]
        allowed_names = {k: v.lease_name if n == LEASE_NAME_PLACEHOLDER else n
                         for k, n in REQUIRED.named.items()}
        grants = rule_triples(role, what, problems, allowed_names=allowed_names)
        for lease_key in [k for k in grants if k in REQUIRED.lease]:
            if role["kind"] != "Role" or role_ns != v.namespace:
                problems.append(f"{what}: {lease_key[1]} permissions must be a Role in "
                                f"{v.namespace!r} (the operator's own namespace), found in {ident(role)}")
            lease_grants.setdefault(lease_key, set()).update(grants.pop(lease_key))
        for cluster_key in [k for k in grants if k in REQUIRED.cluster_scoped]:
            # Cluster-scoped: a Role or a RoleBinding could never grant them.
            if role["kind"] != "ClusterRole" or b["kind"] != "ClusterRoleBinding":
                problems.append(f"{what}: {cluster_key[1]} permissions must be a ClusterRole bound "
                                f"by a ClusterRoleBinding ({cluster_key[1]} are cluster-scoped), found "
                                f"{ident(role)} bound by {ident(b)}")
            operator_grants.setdefault(cluster_key, set()).update(grants.pop(cluster_key))
        if grants:
            if v.watch_namespace:
                if role["kind"] != "Role" or role_ns != v.watch_namespace:
                    problems.append(f"{what}: with watchNamespace the operator's permissions must be "
                                    f"a Role in {v.watch_namespace!r}, found {ident(role)}")
            elif role["kind"] != "ClusterRole":
                problems.append(f"{what}: the operator's permissions must be a ClusterRole "
                                f"(it watches all namespaces), found {ident(role)}")
            for k, verbs in grants.items():
                operator_grants.setdefault(k, set()).update(verbs)
    for key, role in roles.items():
        if key not in bound:
            problems.append(f"{what}: {ident(role)} is bound by nothing")
    problems += REQUIRED.problems
    problems += compare_grants(operator_grants, REQUIRED.operator, f"{what}: operator role")
    problems += compare_grants(lease_grants, REQUIRED.lease if v.leader_election else {},
                               f"{what}: Lease role")
    return problems


# --------------------------------------------------------------------------- Deployment (D1)

def _labels_match(selector: dict | None, labels: dict | None) -> bool:
    return bool(selector) and all((labels or {}).get(k) == val for k, val in selector.items())


def deployment_problems(objs: list[dict], v: Variant, version: str, what: str) -> list[str]:
    problems: list[str] = []

    def need(cond: bool, msg: str) -> None:
        if not cond:
            problems.append(f"{what}: {msg}")

    dep = next((o for o in objs if o.get("kind") == "Deployment"), None)
    if dep is None:
        return [f"{what}: no Deployment"]
    spec = dep.get("spec") or {}
    pod = get(spec, "template", "spec") or {}
    pod_labels = get(spec, "template", "metadata", "labels") or {}
    need(spec.get("replicas") == v.replicas, f"replicas is {spec.get('replicas')!r}, want {v.replicas}")
    need(_labels_match(get(spec, "selector", "matchLabels"), pod_labels),
         "the Deployment's selector does not match its pod labels")
    containers = pod.get("containers") or []
    need(len(containers) == 1, f"expected one container, found {len(containers)}")
    if not containers:
        return problems
    c = containers[0]
    need(c.get("image") == f"{IMAGE_REPO}:{version}",
         f"image is {c.get('image')!r}, want {IMAGE_REPO}:{version}")
    args = [str(a) for a in c.get("args") or []]
    command = c.get("command")
    need(command in (None, ["/shardgate"]), f"command is {command!r}, want the image's /shardgate")
    need(args[:1] == ["run"], f"args must start with 'run': {args}")
    joined = " ".join(args)
    need("--log-format json" in joined or "--log-format=json" in joined,
         f"args lack --log-format json: {args}")
    if v.watch_namespace:
        need(f"--namespace {v.watch_namespace}" in joined or f"--namespace={v.watch_namespace}" in joined,
             f"args lack --namespace {v.watch_namespace}: {args}")
    else:
        need("--namespace" not in joined, f"args must not limit the namespace: {args}")
    need(("--no-leader-election" in args) != v.leader_election,
         f"--no-leader-election must be {'absent' if v.leader_election else 'present'}: {args}")
    if v.leader_election and v.lease_name != LEASE_NAME:
        need(f"--lease-name {v.lease_name}" in joined or f"--lease-name={v.lease_name}" in joined,
             f"args lack --lease-name {v.lease_name}: {args}")
    elif "--lease-name" in joined:
        need(f"--lease-name {v.lease_name}" in joined or f"--lease-name={v.lease_name}" in joined,
             f"--lease-name is not {v.lease_name}: {args}")
    env = {e.get("name"): e for e in c.get("env") or []}
    for name, field in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace")):
        need(get(env, name, "valueFrom", "fieldRef", "fieldPath") == field,
             f"env {name} must come from the downward API fieldRef {field}")
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
    need(8080 in ports.values(), f"no containerPort 8080: {c.get('ports')}")

    def probe_ok(probe: Any, path: str) -> bool:
        port = get(probe, "httpGet", "port")
        port = ports.get(port, port)
        return get(probe, "httpGet", "path") == path and port == 8080

    need(probe_ok(c.get("livenessProbe"), "/healthz"), "livenessProbe must GET /healthz on 8080")
    need(probe_ok(c.get("readinessProbe"), "/readyz"), "readinessProbe must GET /readyz on 8080")
    need(c.get("resources") == EXPECTED_RESOURCES,
         f"resources are {c.get('resources')}, want {EXPECTED_RESOURCES}")

    psc = pod.get("securityContext") or {}
    csc = c.get("securityContext") or {}

    def effective(key: str) -> Any:
        return csc.get(key, psc.get(key))

    need(effective("runAsNonRoot") is True, "runAsNonRoot must be true")
    need(effective("runAsUser") == 65532, f"runAsUser is {effective('runAsUser')!r}, want 65532")
    need(csc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem must be true")
    need(csc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation must be false")
    need(csc.get("privileged") in (None, False), "privileged must not be true")
    need("ALL" in (get(csc, "capabilities", "drop") or []), "capabilities must drop ALL")
    need(not get(csc, "capabilities", "add"), "capabilities must add nothing")
    need(get(effective("seccompProfile"), "type") == "RuntimeDefault",
         "seccompProfile must be RuntimeDefault")
    for k in ("hostNetwork", "hostPID", "hostIPC"):
        need(not pod.get(k), f"{k} must not be set")
    for m in c.get("volumeMounts") or []:
        vol = next((x for x in pod.get("volumes") or [] if x.get("name") == m.get("name")), None)
        need(vol is not None and "hostPath" not in vol, f"volume {m.get('name')!r} must exist and "
                                                        "not be a hostPath")

    sa = pod.get("serviceAccountName")
    need(sa not in (None, "", "default"), f"serviceAccountName is {sa!r}")

    preferred_anti = any(
        get(t, "podAffinityTerm", "topologyKey") == "kubernetes.io/hostname"
        and _labels_match(get(t, "podAffinityTerm", "labelSelector", "matchLabels"), pod_labels)
        for t in get(pod, "affinity", "podAntiAffinity",
                     "preferredDuringSchedulingIgnoredDuringExecution") or [])
    preferred_spread = any(
        t.get("topologyKey") == "kubernetes.io/hostname"
        and t.get("whenUnsatisfiable") == "ScheduleAnyway"
        and _labels_match(get(t, "labelSelector", "matchLabels"), pod_labels)
        for t in pod.get("topologySpreadConstraints") or [])
    need(preferred_anti or preferred_spread,
         "replicas must prefer different nodes (preferred podAntiAffinity or a ScheduleAnyway "
         "topologySpreadConstraint on kubernetes.io/hostname selecting the pods)")
    need(not get(pod, "affinity", "podAntiAffinity",
                 "requiredDuringSchedulingIgnoredDuringExecution"),
         "anti-affinity must be preferred, not required (one-node clusters)")

    pdbs = [o for o in objs if o.get("kind") == "PodDisruptionBudget"]
    for pdb in pdbs:
        need(get(pdb, "spec", "maxUnavailable") == 1, "the PodDisruptionBudget needs maxUnavailable: 1")
        need("minAvailable" not in (pdb.get("spec") or {}), "the PodDisruptionBudget sets minAvailable")
        need(_labels_match(get(pdb, "spec", "selector", "matchLabels"), pod_labels),
             "the PodDisruptionBudget does not select the operator pods")
        need(get(pdb, "metadata", "namespace") == get(dep, "metadata", "namespace"),
             "the PodDisruptionBudget is not in the Deployment's namespace")

    for svc in (o for o in objs if o.get("kind") == "Service"):
        s = svc.get("spec") or {}
        need(s.get("type", "ClusterIP") == "ClusterIP", "the metrics Service must be ClusterIP")
        need(_labels_match(s.get("selector"), pod_labels), "the metrics Service does not select the pods")
        sp = {p.get("name"): p for p in s.get("ports") or []}
        m = sp.get("metrics")
        need(m is not None and m.get("port") == 8080, "the Service needs port 'metrics' = 8080")
        if m is not None:
            target = m.get("targetPort", m.get("port"))
            need(ports.get(target, target) == 8080, "the 'metrics' port must reach container port 8080")
    return problems


def option_problems(extra: list[dict], base: list[dict], what: str) -> list[str]:
    """The chart's optional objects are wired to what they watch or extend."""
    problems = []
    svc = next((o for o in base if o.get("kind") == "Service"), None)
    for o in extra:
        kind, labels = o.get("kind"), get(o, "metadata", "labels", default={}) or {}
        if kind == "ServiceMonitor":
            sel = get(o, "spec", "selector", "matchLabels", default={})
            if svc is None or any(get(svc, "metadata", "labels", default={}).get(k) != v
                                  for k, v in sel.items()) or not sel:
                problems.append(f"{what}: the ServiceMonitor selects {sel}, not the metrics Service")
            ports = [e.get("port") for e in get(o, "spec", "endpoints", default=[])]
            svc_ports = [p.get("name") for p in get(svc or {}, "spec", "ports", default=[])]
            if not ports or any(p not in svc_ports for p in ports):
                problems.append(f"{what}: ServiceMonitor ports {ports}, Service has {svc_ports}")
        elif kind == "PrometheusRule":
            rules = [r for g in get(o, "spec", "groups", default=[]) for r in g.get("rules", [])]
            names = {r.get("alert") for r in rules}
            for want in ("ShardgateClusterNotReady", "ShardgateReconcileErrors",
                         "ShardgateModuleRejected", "ShardgateModuleRolledBack"):
                if want not in names:
                    problems.append(f"{what}: no alert {want}")
            for r in rules:
                if not isinstance(r.get("expr"), str) or "shardgate_" not in r["expr"]:
                    problems.append(f"{what}: alert {r.get('alert')} has no shardgate expression")
                if not get(r, "annotations", "summary"):
                    problems.append(f"{what}: alert {r.get('alert')} has no summary")
                if "for" in r and not re.fullmatch(r"([0-9]+(ms|s|m|h|d|w|y))+", str(r["for"])):
                    problems.append(f"{what}: alert {r.get('alert')} has a bad for: {r['for']!r}")
        elif kind == "ConfigMap":
            if labels.get("grafana_dashboard") != "1":
                problems.append(f"{what}: the dashboard ConfigMap lacks grafana_dashboard: \"1\"")
            for key, text in (o.get("data") or {}).items():
                try:
                    dash = json.loads(text)
                except ValueError as e:
                    problems.append(f"{what}: dashboard {key} is not JSON: {e}")
                    continue
                exprs = [t.get("expr", "") for p in dash.get("panels", []) for t in p.get("targets", [])]
                if not exprs or not all("shardgate_" in e for e in exprs):
                    problems.append(f"{what}: dashboard {key}: every panel queries shardgate metrics")
        elif kind == "ClusterRole":
            name = get(o, "metadata", "name", default="")
            agg = {k for k in labels if k.startswith("rbac.authorization.k8s.io/aggregate-to-")}
            rules = o.get("rules", [])
            if any(set(r.get("apiGroups", [])) != {"shardgate.io"} for r in rules):
                problems.append(f"{what}: {name} grants outside shardgate.io")
            verbs = {v for r in rules for v in r.get("verbs", [])}
            if name.endswith("-viewer"):
                if agg != {"rbac.authorization.k8s.io/aggregate-to-view"}:
                    problems.append(f"{what}: {name} aggregates to {agg}, want view")
                if verbs - {"get", "list", "watch"}:
                    problems.append(f"{what}: {name} must only read: {verbs}")
            elif name.endswith("-editor"):
                if "rbac.authorization.k8s.io/aggregate-to-edit" not in agg:
                    problems.append(f"{what}: {name} does not aggregate to edit: {agg}")
                status = [r for r in rules if any(x.endswith("/status") for x in r.get("resources", []))]
                if any(set(r["verbs"]) - {"get", "list", "watch"} for r in status):
                    problems.append(f"{what}: {name} may not write status (the operator's)")
            else:
                problems.append(f"{what}: unexpected ClusterRole {name}")
    return problems


def operator_set_problems(objs: list[dict], v: Variant, version: str, what: str) -> list[str]:
    problems = []
    got = Counter(o.get("kind") for o in objs)
    if got != v.kinds():
        problems.append(f"{what}: kinds are {dict(sorted(got.items()))}, "
                        f"want exactly {dict(sorted(v.kinds().items()))}")
    for o in objs:
        kind = o.get("kind")
        if kind in ("Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"):
            continue
        ns = get(o, "metadata", "namespace")
        allowed = {v.namespace} | ({v.watch_namespace} if v.watch_namespace else set())
        if ns not in allowed:
            problems.append(f"{what}: {ident(o)} is in namespace {ns!r}, want one of {sorted(allowed)}")
    problems += rbac_problems(objs, v, what)
    problems += deployment_problems(objs, v, version, what)
    return problems


def normalized(objs: list[dict]) -> dict[str, dict]:
    out = {}
    for o in objs:
        o = copy.deepcopy(o)
        for labels in (get(o, "metadata", "labels"), get(o, "spec", "template", "metadata", "labels")):
            if isinstance(labels, dict):
                for k in HELM_ONLY_LABELS:
                    labels.pop(k, None)
        out[ident(o)] = o
    return out


# --------------------------------------------------------------------------- external tools

class Tools:
    def __init__(self) -> None:
        self.helm = os.environ.get("HELM") or shutil.which("helm")
        self.kubectl = os.environ.get("KUBECTL") or shutil.which("kubectl")
        self.tmp = tempfile.TemporaryDirectory(prefix="validate-manifests-")
        home = Path(self.tmp.name)
        self.env = dict(os.environ,
                        HELM_CACHE_HOME=str(home / "cache"), HELM_CONFIG_HOME=str(home / "config"),
                        HELM_DATA_HOME=str(home / "data"), KUBECONFIG=str(home / "kubeconfig"))

    def run(self, argv: list[str], timeout: int = 120) -> subprocess.CompletedProcess:
        return subprocess.run(argv, cwd=ROOT, env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def missing(self, name: str) -> list[str]:
        path = self.helm if name == "helm" else self.kubectl
        if not path:
            return [f"`{name}` was not found on PATH (or in ${name.upper()}); {TOOLS_HINT}"]
        return []

    def helm_version(self) -> str:
        r = self.run([self.helm, "version", "--short"])
        return r.stdout.strip()

    def helm_template(self, *extra: str) -> tuple[list[dict] | None, str]:
        argv = [self.helm, "template", OPERATOR_NAME, str(CHART), "--namespace",
                OPERATOR_NAMESPACE, *extra]
        r = self.run(argv)
        if r.returncode != 0:
            return None, (r.stderr or r.stdout).strip()
        return load_docs(r.stdout), ""

    def kustomize(self, path: Path) -> tuple[list[dict] | None, str]:
        r = self.run([self.kubectl, "kustomize", str(path)])
        if r.returncode != 0:
            return None, (r.stderr or r.stdout).strip()
        return load_docs(r.stdout), ""


# --------------------------------------------------------------------------- main

def main() -> int:
    started = time.monotonic()
    report = Report()
    tools = Tools()
    version, rust_version = workspace_versions()
    state: dict[str, Any] = {}

    # ---- F: files
    yaml_files = sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()
                        and not is_template(p))
    json_files = sorted(p for p in DEPLOY.rglob("*.json") if p.is_file())

    def check_parse():
        problems = []
        for p in yaml_files:
            try:
                docs = load_file(p)
            except yaml.YAMLError as e:
                problems.append(f"{rel(p)}: {e}")
                continue
            if not docs:
                problems.append(f"{rel(p)}: no YAML document")
            for i, d in enumerate(docs):
                if not isinstance(d, dict):
                    problems.append(f"{rel(p)}: document {i} is a {type(d).__name__}, not a mapping")
        for p in json_files:
            try:
                json.loads(p.read_text())
            except json.JSONDecodeError as e:
                problems.append(f"{rel(p)}: {e}")
        state["docs"] = {}
        for p in yaml_files:
            try:
                state["docs"][p] = load_file(p)
            except yaml.YAMLError:
                pass
        return problems

    report.check(f"F1 {len(yaml_files)} YAML and {len(json_files)} JSON files under deploy/ parse "
                 "(templates excluded, duplicate keys rejected)", check_parse)
    docs: dict[Path, list[Any]] = state.get("docs", {})

    def k8s_docs(p: Path) -> list[dict]:
        return [d for d in docs.get(p, []) if isinstance(d, dict)]

    manifest_files = [p for p in yaml_files
                      if p.parent in (OPERATOR, SAMPLES, DEPLOY / "crds", CHART / "crds")
                      and p.name != "kustomization.yaml"]

    def check_manifest_shape():
        problems = []
        for p in manifest_files:
            for i, d in enumerate(k8s_docs(p)):
                for key in ("apiVersion", "kind"):
                    if not isinstance(d.get(key), str) or not d.get(key):
                        problems.append(f"{rel(p)} document {i}: {key} is missing")
                if not get(d, "metadata", "name"):
                    problems.append(f"{rel(p)} document {i}: metadata.name is missing")
        return problems

    report.check("F2 every manifest has apiVersion, kind and metadata.name", check_manifest_shape)

    required_files = [
        "Dockerfile", "README.md", "kustomization.yaml", "crds/valkeyclusters.shardgate.io.yaml",
        "operator/namespace.yaml", "operator/serviceaccount.yaml", "operator/rbac.yaml",
        "operator/rbac-rules.json",
        "operator/deployment.yaml", "operator/service-metrics.yaml", "operator/kustomization.yaml",
        "helm/README.md", "helm/shardgate/Chart.yaml", "helm/shardgate/values.yaml",
        "helm/shardgate/values.schema.json", "helm/shardgate/templates/_helpers.tpl",
        "helm/shardgate/templates/NOTES.txt", "helm/shardgate/crds/valkeyclusters.shardgate.io.yaml",
        "samples/valkeycluster-external.yaml", "samples/valkeycluster-nodeport-ip.yaml",
        "samples/valkeycluster-loadbalancer.yaml", "samples/valkeycluster-tls.yaml",
        "samples/valkeycluster-gateway.yaml",
    ]
    report.check("F3 the documented deploy/ files exist",
                 lambda: [f"deploy/{f} is missing" for f in required_files
                          if not (DEPLOY / f).is_file()])

    def check_versions():
        problems = []
        chart = (k8s_docs(CHART / "Chart.yaml") or [{}])[0]
        if str(chart.get("appVersion")) != version:
            problems.append(f"Chart.yaml appVersion {chart.get('appVersion')!r} != Cargo.toml "
                            f"workspace version {version!r}")
        if chart.get("apiVersion") != "v2":
            problems.append("Chart.yaml must be apiVersion: v2")
        for d in k8s_docs(OPERATOR / "deployment.yaml"):
            if d.get("kind") != "Deployment":
                continue
            for c in get(d, "spec", "template", "spec", "containers") or []:
                if c.get("image") != f"{IMAGE_REPO}:{version}":
                    problems.append(f"deploy/operator/deployment.yaml image {c.get('image')!r} != "
                                    f"{IMAGE_REPO}:{version}")
            for labels in (get(d, "metadata", "labels"), get(d, "spec", "template", "metadata", "labels")):
                if (labels or {}).get("app.kubernetes.io/version") != version:
                    problems.append("deploy/operator/deployment.yaml app.kubernetes.io/version label "
                                    f"!= {version!r}")
        return problems

    report.check(f"F4 versions agree (Cargo.toml {version}, Chart appVersion, image tag)", check_versions)

    # ---- C: the CRD
    crd_docs = k8s_docs(CRD_FILE)
    crd = crd_docs[0] if len(crd_docs) == 1 else None

    def need_crd():
        if crd is None:
            raise RuntimeError(f"{rel(CRD_FILE)} must hold exactly one document")
        return crd

    report.check(f"C1 the CRD is a valid apiextensions.k8s.io/v1 CRD (strict, Kubernetes "
                 f"{', '.join(K8S_VERSIONS)})",
                 lambda: k8s_schema_problems([need_crd()], rel(CRD_FILE)))

    def check_crd_names():
        c = need_crd()
        problems = []
        spec = c.get("spec") or {}
        names = spec.get("names") or {}
        if c.get("apiVersion") != "apiextensions.k8s.io/v1" or c.get("kind") != "CustomResourceDefinition":
            problems.append("not an apiextensions.k8s.io/v1 CustomResourceDefinition")
        if get(c, "metadata", "name") != f"{names.get('plural')}.{spec.get('group')}":
            problems.append(f"metadata.name {get(c, 'metadata', 'name')!r} != <plural>.<group>")
        for k in ("plural", "singular"):
            if k in names and not DNS1035_LABEL.match(str(names[k])):
                problems.append(f"names.{k} {names[k]!r} is not a lower-case DNS-1035 label")
        for k in ("kind", "listKind"):
            if k in names and not re.match(r"^[A-Z][A-Za-z0-9]*$", str(names[k])):
                problems.append(f"names.{k} {names[k]!r} must be CamelCase starting upper-case")
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            problems.append(f"scope {spec.get('scope')!r}")
        versions = spec.get("versions") or []
        vnames = [v.get("name") for v in versions]
        if len(set(vnames)) != len(vnames):
            problems.append(f"duplicate version names {vnames}")
        for v in versions:
            if not DNS1035_LABEL.match(str(v.get("name"))):
                problems.append(f"version name {v.get('name')!r} is not a DNS-1035 label")
            if not isinstance(get(v, "schema", "openAPIV3Schema"), dict):
                problems.append(f"version {v.get('name')}: no schema.openAPIV3Schema")
            cols = v.get("additionalPrinterColumns") or []
            cnames = [col.get("name") for col in cols]
            if len(set(cnames)) != len(cnames) or not all(cnames):
                problems.append(f"version {v.get('name')}: printer column names must be unique and "
                                f"non-empty: {cnames}")
            for col in cols:
                if col.get("type") not in PRINTER_COLUMN_TYPES:
                    problems.append(f"printer column {col.get('name')!r}: type {col.get('type')!r}")
                if not str(col.get("jsonPath", "")).startswith("."):
                    problems.append(f"printer column {col.get('name')!r}: jsonPath must start with '.'")
        if sum(1 for v in versions if v.get("storage")) != 1:
            problems.append("exactly one version must have storage: true")
        if not any(v.get("served") for v in versions):
            problems.append("no version is served")
        return problems

    report.check("C2 CRD names, versions and printer columns", check_crd_names)

    def check_structural():
        problems = []
        for v in need_crd()["spec"]["versions"]:
            schema = get(v, "schema", "openAPIV3Schema")
            if isinstance(schema, dict):
                problems += [f"version {v['name']}: {p}" for p in structural_problems(schema)]
        return problems

    report.check("C3 the CRD schema is structural (S1-S15, incl. every CEL rule compiles)",
                 check_structural)

    def check_chart_crd_copy():
        copy_path = CHART / "crds" / CRD_FILE.name
        others = sorted(p.name for p in (CHART / "crds").glob("*") if p.name != CRD_FILE.name)
        problems = [f"unexpected files in {rel(CHART / 'crds')}: {others}"] if others else []
        if not copy_path.is_file() or copy_path.read_bytes() != CRD_FILE.read_bytes():
            problems.append(f"{rel(copy_path)} is not a byte-identical copy of {rel(CRD_FILE)}; "
                            f"refresh it: cp {rel(CRD_FILE)} {rel(copy_path)}")
        return problems

    report.check("C4 the chart's crds/ copy is byte-identical to deploy/crds/", check_chart_crd_copy)

    def check_structural_selftest():
        base = need_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

        def mutate(fn: Callable[[dict], None]) -> dict:
            s = copy.deepcopy(base)
            fn(s)
            return s

        spec_props = ["properties", "spec", "properties"]
        cases: dict[str, dict] = {
            "a property without type": mutate(lambda s: get(s, *spec_props, "shards").pop("type")),
            "a list-map key that is not required": mutate(lambda s: get(
                s, "properties", "status", "properties", "conditions", "items", "required").remove("type")),
            "an empty CEL rule": mutate(lambda s: get(s, *spec_props, "externalAccess",
                                                      "x-kubernetes-validations")[0].update(rule="")),
            "a CEL rule that does not compile": mutate(lambda s: get(
                s, *spec_props, "externalAccess", "x-kubernetes-validations")[0].update(rule="self.(")),
            "a fieldPath to no property": mutate(lambda s: get(
                s, *spec_props, "externalAccess", "x-kubernetes-validations")[0].update(
                fieldPath=".nosuch")),
            "a default outside its enum": mutate(lambda s: get(
                s, *spec_props, "externalAccess", "properties", "serviceType").update(default="Headless")),
            "metadata with labels restricted": mutate(lambda s: s["properties"].update(
                metadata={"type": "object", "properties": {"labels": {"type": "object"}}})),
            "a type inside anyOf": mutate(lambda s: get(s, *spec_props, "shards").update(
                anyOf=[{"type": "integer"}])),
            "additionalProperties: false": mutate(lambda s: s["properties"]["spec"].update(
                additionalProperties=False)),
            "a nullable root": mutate(lambda s: s.update(nullable=True)),
        }
        return [f"C3 accepted a schema with {name}" for name, s in cases.items()
                if not structural_problems(s)]

    report.check("C5 self-test: C3 rejects broken copies of the schema", check_structural_selftest)

    # ---- P: samples
    sample_files = sorted(SAMPLES.glob("*.yaml"))

    def check_samples():
        problems = []
        c = need_crd()
        if not sample_files:
            problems.append("no samples in deploy/samples/")
        for p in sample_files:
            if not p.read_text().lstrip().startswith("#"):
                problems.append(f"{rel(p)}: must start with a comment saying what it shows")
            docs = k8s_docs(p)
            gateways = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "Gateway"}
            for i, d in enumerate(docs):
                if d.get("kind") == "Gateway":
                    if d.get("apiVersion") != "gateway.networking.k8s.io/v1":
                        problems.append(f"{rel(p)} document {i}: a Gateway must be gateway.networking.k8s.io/v1")
                    continue
                problems += [f"{rel(p)} document {i}: {x}" for x in custom_object_problems(c, d)]
                problems += [f"{rel(p)} document {i}: {x}" for x in gateway_listener_problems(d, gateways)]
        return problems

    def gateway_listener_problems(cluster: dict, gateways: dict) -> list[str]:
        # A sample's Gateway has a TCP listener for every node the cluster
        # routes through it: basePort + s*(replicas+1) + n.
        spec = cluster.get("spec", {})
        gw = spec.get("externalAccess", {}).get("gateway")
        if not gw:
            return []
        name = gw["gatewayRef"]["name"]
        if name not in gateways:
            return [f"names Gateway {name!r}, which the sample does not hold"]
        ports = {l["port"] for l in gateways[name]["spec"].get("listeners", []) if l.get("protocol") == "TCP"}
        nodes = spec.get("replicas", 0) + 1
        want = {gw["basePort"] + s * nodes + n for s in range(spec.get("shards", 3)) for n in range(nodes)}
        missing = sorted(want - ports)
        return [f"Gateway {name!r} lacks TCP listeners {missing}"] if missing else []

    report.check(f"P1-P3 {len(sample_files)} samples are valid ValkeyClusters (schema with defaults, "
                 "unknown fields, every CEL rule)", check_samples)

    def check_sample_selftest():
        c = need_crd()
        base = k8s_docs(SAMPLES / "valkeycluster-nodeport-ip.yaml")[0]

        def mutate(fn: Callable[[dict], None]) -> dict:
            o = copy.deepcopy(base)
            fn(o)
            return o

        ea = lambda o: o["spec"]["externalAccess"]  # noqa: E731
        cases = {
            "shards: 0": mutate(lambda o: o["spec"].update(shards=0)),
            "shards: 1001": mutate(lambda o: o["spec"].update(shards=1001)),
            "replicas: 16": mutate(lambda o: o["spec"].update(replicas=16)),
            "replicas: '1' (a string)": mutate(lambda o: o["spec"].update(replicas="1")),
            "serviceType: Headless": mutate(lambda o: ea(o).update(serviceType="Headless")),
            "externalTrafficPolicy: local": mutate(lambda o: ea(o).update(externalTrafficPolicy="local")),
            "preferredEndpointType: dns": mutate(lambda o: ea(o).update(preferredEndpointType="dns")),
            "an unknown field": mutate(lambda o: ea(o).update(annotations={"a": "b"})),
            "hostnamePrefix: Shard_1": mutate(lambda o: ea(o).update(hostnamePrefix="Shard_1")),
            "domain: -bad-.example.com": mutate(lambda o: ea(o).update(domain="-bad-.example.com")),
            "hostname without a domain": mutate(lambda o: ea(o).update(preferredEndpointType="hostname")),
            "a 42-character name (StatefulSet names too long)": mutate(
                lambda o: o["metadata"].update(name="a" * 42)),
            "an upper-case name": mutate(lambda o: o["metadata"].update(name="Demo")),
            "no namespace": mutate(lambda o: o["metadata"].pop("namespace")),
        }
        problems = [f"accepted a sample with {name}" for name, o in cases.items()
                    if not custom_object_problems(c, o)]
        ok = mutate(lambda o: ea(o).update(preferredEndpointType="hostname", domain="valkey.example.com"))
        problems += [f"rejected a valid hostname sample: {p}" for p in custom_object_problems(c, ok)]
        return problems

    report.check("P4 self-test: invalid ValkeyClusters are rejected, a valid one accepted",
                 check_sample_selftest)

    # ---- plain operator manifests
    plain_ops = [d for f in ("namespace.yaml", "serviceaccount.yaml", "rbac.yaml", "deployment.yaml",
                             "service-metrics.yaml") for d in k8s_docs(OPERATOR / f)]
    report.check("V1 deploy/operator/*.yaml validate against Kubernetes schemas (strict, "
                 f"{', '.join(K8S_VERSIONS)})", lambda: k8s_schema_problems(plain_ops, "deploy/operator"))
    report.check("R1+D1 deploy/operator: least-privilege RBAC, Deployment, PDB, metrics Service",
                 lambda: operator_set_problems(plain_ops, Variant(namespace_object=True), version,
                                               "deploy/operator"))

    def check_rbac_selftest():
        watch_ns = "valkey-apps"

        def find(objs: list[dict], kind: str, name: str) -> dict:
            return next(o for o in objs if o.get("kind") == kind and get(o, "metadata", "name") == name)

        def is_nodes(rule: dict) -> bool:
            return rule.get("resources") == ["nodes"]

        def scoped(objs: list[dict]) -> list[dict]:
            """The watchNamespace layout the chart renders: the operator's rules as a
            Role in watch_ns, the nodes rule alone in a ClusterRole "<name>-nodes"."""
            objs = copy.deepcopy(objs)
            role = find(objs, "ClusterRole", OPERATOR_NAME)
            binding = find(objs, "ClusterRoleBinding", OPERATOR_NAME)
            nodes_role = {**copy.deepcopy(role), "rules": [r for r in role["rules"] if is_nodes(r)]}
            nodes_role["metadata"]["name"] = f"{OPERATOR_NAME}-nodes"
            nodes_binding = copy.deepcopy(binding)
            nodes_binding["metadata"]["name"] = nodes_binding["roleRef"]["name"] = f"{OPERATOR_NAME}-nodes"
            role.update(kind="Role", rules=[r for r in role["rules"] if not is_nodes(r)])
            role["metadata"]["namespace"] = watch_ns
            binding["kind"], binding["roleRef"]["kind"] = "RoleBinding", "Role"
            binding["metadata"]["namespace"] = watch_ns
            return objs + [nodes_role, nodes_binding]

        plain, plain_v = plain_ops, Variant(namespace_object=True)
        ns_ops, ns_v = scoped(plain_ops), Variant(namespace_object=True, watch_namespace=watch_ns)

        def mutate(base: list[dict], fn: Callable[[list[dict]], None]) -> list[dict]:
            objs = copy.deepcopy(base)
            fn(objs)
            return objs

        def op_rules(objs: list[dict]) -> list[dict]:
            return find(objs, "ClusterRole", OPERATOR_NAME)["rules"]

        def nodes_rule(objs: list[dict], kind: str = "ClusterRole", name: str = OPERATOR_NAME) -> dict:
            return next(r for r in find(objs, kind, name)["rules"] if is_nodes(r))

        def move_nodes_to_lease_role(objs: list[dict]) -> None:
            rule = nodes_rule(objs)
            op_rules(objs).remove(rule)
            find(objs, "Role", f"{OPERATOR_NAME}-leader-election")["rules"].append(rule)

        def nodes_in_namespaced_role(objs: list[dict]) -> None:
            rule = nodes_rule(objs, "ClusterRole", f"{OPERATOR_NAME}-nodes")
            find(objs, "Role", OPERATOR_NAME)["rules"].append(rule)
            objs[:] = [o for o in objs if get(o, "metadata", "name") != f"{OPERATOR_NAME}-nodes"]

        def nodes_bound_by_rolebinding(objs: list[dict]) -> None:
            b = find(objs, "ClusterRoleBinding", f"{OPERATOR_NAME}-nodes")
            b["kind"] = "RoleBinding"
            b["metadata"]["namespace"] = watch_ns

        cases: list[tuple[str, list[dict], Variant]] = [
            ("get on nodes", mutate(plain, lambda o: nodes_rule(o)["verbs"].append("get")), plain_v),
            ("patch on nodes", mutate(plain, lambda o: nodes_rule(o)["verbs"].append("patch")), plain_v),
            ("only watch on nodes", mutate(plain, lambda o: nodes_rule(o).update(verbs=["watch"])), plain_v),
            ("a nodes/proxy subresource", mutate(plain, lambda o: op_rules(o).append(
                {"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]})), plain_v),
            ("a nodes/status subresource", mutate(plain, lambda o: nodes_rule(o).update(
                resources=["nodes", "nodes/status"])), plain_v),
            ("resourceNames on nodes", mutate(plain, lambda o: nodes_rule(o).update(
                resourceNames=["node-1"])), plain_v),
            ("no nodes rule", mutate(plain, lambda o: op_rules(o).remove(nodes_rule(o))), plain_v),
            ("a verb the code does not use (update on pods)", mutate(plain, lambda o: op_rules(o).append(
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["update"]})), plain_v),
            ("a verb the code uses missing (delete on statefulsets)", mutate(plain, lambda o: [
                r.update(verbs=[v for v in r["verbs"] if v != "delete"]) for r in op_rules(o)
                if r.get("resources") == ["statefulsets"]]), plain_v),
            ("a resource the code never touches (deployments)", mutate(plain, lambda o: op_rules(o).append(
                {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]})), plain_v),
            ("nodes in the Lease Role", mutate(plain, move_nodes_to_lease_role), plain_v),
            ("watchNamespace: nodes in the namespaced Role", mutate(ns_ops, nodes_in_namespaced_role), ns_v),
            ("watchNamespace: the nodes ClusterRole bound by a RoleBinding",
             mutate(ns_ops, nodes_bound_by_rolebinding), ns_v),
            ("watchNamespace: services in the nodes ClusterRole", mutate(ns_ops, lambda o: find(
                o, "ClusterRole", f"{OPERATOR_NAME}-nodes")["rules"].append(
                {"apiGroups": [""], "resources": ["services"], "verbs": ["get"]})), ns_v),
            ("watchNamespace: no nodes ClusterRole", mutate(ns_ops, lambda o: o.__setitem__(
                slice(None), [x for x in o if get(x, "metadata", "name") != f"{OPERATOR_NAME}-nodes"])),
             ns_v),
        ]
        problems = [f"R1 accepted RBAC with {name}" for name, objs, v in cases
                    if not rbac_problems(objs, v, name)]
        for name, objs, v in (("the plain manifests", plain, plain_v),
                              ("their watchNamespace layout", ns_ops, ns_v)):
            problems += [f"R1 rejected {name}: {p}" for p in rbac_problems(objs, v, name)]
        return problems

    report.check("R2 self-test: R1 rejects broken RBAC (nodes verbs, subresources, scope)",
                 check_rbac_selftest)

    # ---- kustomize
    def check_kustomize():
        if tools.missing("kubectl"):
            return tools.missing("kubectl")
        problems = []
        for path, v in ((OPERATOR, Variant(namespace_object=True)),
                        (DEPLOY, Variant(namespace_object=True, crd_object=True))):
            objs, err = tools.kustomize(path)
            if objs is None:
                problems.append(f"kubectl kustomize {rel(path)} failed:\n{err}")
                continue
            problems += operator_set_problems(objs, v, version, f"kustomize {rel(path)}")
            problems += k8s_schema_problems(objs, f"kustomize {rel(path)}")
            mine = normalized([o for o in objs if o.get("kind") != "CustomResourceDefinition"])
            want = normalized(plain_ops)
            if mine != want:
                problems.append(f"kustomize {rel(path)} differs from deploy/operator/*.yaml: "
                                f"{diff(want, mine)}")
            crds = [o for o in objs if o.get("kind") == "CustomResourceDefinition"]
            if crds and crd is not None and crds[0] != crd:
                problems.append(f"kustomize {rel(path)}: the CRD differs from {rel(CRD_FILE)}: "
                                f"{diff(crd, crds[0])}")
        return problems

    report.check("K1 kubectl kustomize deploy/operator and deploy build, with the expected objects",
                 check_kustomize)

    def check_webhook():
        if tools.missing("kubectl"):
            return tools.missing("kubectl")
        path = DEPLOY / "webhook"
        objs, err = tools.kustomize(path)
        if objs is None:
            return [f"kubectl kustomize {rel(path)} failed:\n{err}"]
        problems = []
        kinds = sorted(o.get("kind", "") for o in objs)
        want = sorted(["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Issuer",
                       "Certificate", "Deployment", "Service", "ValidatingWebhookConfiguration"])
        if kinds != want:
            problems.append(f"kustomize {rel(path)}: kinds {kinds}, expected {want}")
        # cert-manager's kinds have no schema here; the rest is checked strictly.
        core = [o for o in objs if not o.get("apiVersion", "").startswith("cert-manager.io/")]
        problems += k8s_schema_problems(core, f"kustomize {rel(path)}")
        for o in objs:
            if o.get("kind") == "ClusterRole":
                for rule in o.get("rules", []):
                    if set(rule.get("verbs", [])) - {"get", "list", "watch"}:
                        problems.append(f"{rel(path)}: the webhook may only read: {rule}")
            if o.get("kind") == "ValidatingWebhookConfiguration":
                for hook in o.get("webhooks", []):
                    svc = hook.get("clientConfig", {}).get("service", {})
                    if svc.get("path") != "/validate":
                        problems.append(f"{rel(path)}: webhook path must be /validate: {svc}")
                    if hook.get("sideEffects") != "None":
                        problems.append(f"{rel(path)}: sideEffects must be None")
        return problems

    report.check("W1 kubectl kustomize deploy/webhook: the webhook's objects, read-only RBAC, "
                 "the /validate path", check_webhook)

    # ---- helm
    def check_values_schema():
        schema = json.loads((CHART / "values.schema.json").read_text())
        values = k8s_docs(CHART / "values.yaml")[0]
        return jsonschema_problems(schema, values, "values")

    report.check("V2 values.yaml validates against values.schema.json", check_values_schema)

    variants: list[tuple[str, list[str], Variant]] = [
        ("defaults", [], Variant()),
        ("watchNamespace=valkey-apps, leaseName=apps-leader",
         ["--set", "watchNamespace=valkey-apps", "--set", "leaderElection.leaseName=apps-leader"],
         Variant(watch_namespace="valkey-apps", lease_name="apps-leader")),
        ("leader election off, 1 replica",
         ["--set", "leaderElection.enabled=false", "--set", "replicaCount=1"],
         Variant(replicas=1, leader_election=False)),
        ("metrics Service off", ["--set", "metrics.service.enabled=false"],
         Variant(metrics_service=False)),
    ]

    def check_helm_lint():
        if tools.missing("helm"):
            return tools.missing("helm")
        problems = []
        for name, args, _ in variants:
            r = tools.run([tools.helm, "lint", "--strict", str(CHART), "--namespace",
                           OPERATOR_NAMESPACE, *args])
            if r.returncode != 0:
                problems.append(f"helm lint --strict ({name}) failed:\n{(r.stdout + r.stderr).strip()}")
        return problems

    helm_label = tools.helm_version() if tools.helm else "missing"
    report.check(f"H1 helm lint --strict, {len(variants)} value sets (helm {helm_label})", check_helm_lint)

    def check_helm_render(name: str, args: list[str], v: Variant) -> Callable[[], list[str]]:
        def run() -> list[str]:
            if tools.missing("helm"):
                return tools.missing("helm")
            objs, err = tools.helm_template(*args)
            if objs is None:
                return [f"helm template ({name}) failed:\n{err}"]
            what = f"helm template ({name})"
            problems = operator_set_problems(objs, v, version, what)
            problems += k8s_schema_problems(objs, what)
            if name == "defaults":
                mine = normalized(objs)
                want = normalized([o for o in plain_ops if o.get("kind") != "Namespace"])
                if mine != want:
                    problems.append(f"{what} differs from deploy/operator/*.yaml (Helm-only labels "
                                    f"ignored): {diff(want, mine)}")
            return problems
        return run

    for name, args, v in variants:
        report.check(f"H2 helm template ({name}): expected objects, RBAC, Deployment, schemas",
                     check_helm_render(name, args, v))

    def check_helm_crds_and_failures():
        if tools.missing("helm"):
            return tools.missing("helm")
        problems = []
        objs, err = tools.helm_template("--include-crds", "--kube-version", "1.30.0")
        if objs is None:
            problems.append(f"helm template --include-crds --kube-version 1.30.0 failed:\n{err}")
        else:
            crds = [o for o in objs if o.get("kind") == "CustomResourceDefinition"]
            if len(crds) != 1 or crds[0] != crd:
                problems.append(f"helm template --include-crds: want exactly the CRD of "
                                f"{rel(CRD_FILE)}, got {len(crds)}")
        must_fail = [
            (["--set", "leaderElection.enabled=false"], "requires replicaCount: 1"),
            (["--set", "logFormat=xml"], "logFormat"),
            (["--set", "watchNamespace=Not_A_Namespace"], "watchNamespace"),
        ]
        for args, expected in must_fail:
            objs, err = tools.helm_template(*args)
            if objs is not None:
                problems.append(f"helm template {shlex.join(args)} rendered; it must fail")
            elif expected not in err:
                problems.append(f"helm template {shlex.join(args)} failed without mentioning "
                                f"{expected!r}:\n{err}")
        return problems

    report.check("H2 helm template --include-crds carries the CRD; invalid values fail",
                 check_helm_crds_and_failures)

    # ---- the chart's optional objects: monitoring, people's roles, security contexts
    OPTIONS = {
        "metrics.serviceMonitor.enabled": "ServiceMonitor",
        "metrics.prometheusRule.enabled": "PrometheusRule",
        "metrics.grafanaDashboard.enabled": "ConfigMap",
        "aggregatedRoles.enabled": "ClusterRole",
    }

    def check_helm_options():
        if tools.missing("helm"):
            return tools.missing("helm")
        problems = []
        base, err = tools.helm_template()
        if base is None:
            return [f"helm template (defaults) failed:\n{err}"]
        base_ids = {ident(o) for o in base}
        # Each option alone, then all at once: the operator's own objects stay
        # exactly as with the defaults, and only the option's objects are added.
        runs = [[k] for k in OPTIONS] + [list(OPTIONS)]
        for keys in runs:
            args = [a for k in keys for a in ("--set", f"{k}=true")]
            what = f"helm template ({', '.join(keys)})"
            objs, err = tools.helm_template(*args)
            if objs is None:
                problems.append(f"{what} failed:\n{err}")
                continue
            r = tools.run([tools.helm, "lint", "--strict", str(CHART), *args])
            if r.returncode != 0:
                problems.append(f"helm lint --strict {shlex.join(args)} failed:\n{r.stdout}{r.stderr}")
            extra = [o for o in objs if ident(o) not in base_ids]
            same = [o for o in objs if ident(o) in base_ids]
            if normalized(same) != normalized(base):
                problems.append(f"{what}: changed the operator's own objects: "
                                f"{diff(normalized(base), normalized(same))}")
            want = Counter(OPTIONS[k] for k in keys)
            want["ClusterRole"] += want["ClusterRole"]  # viewer and editor
            got = Counter(o.get("kind") for o in extra)
            if got != want:
                problems.append(f"{what}: added {dict(got)}, want {dict(want)}")
            problems += k8s_schema_problems([o for o in extra if not o.get("apiVersion", "").startswith(
                "monitoring.coreos.com/")], what)
            problems += option_problems(extra, base, what)
        # OpenShift: its SCC assigns the UID, so the chart must let it go.
        args = ["--set", "podSecurityContext.runAsUser=null", "--set", "podSecurityContext.runAsGroup=null",
                "--set", "securityContext.runAsUser=null", "--set", "securityContext.runAsGroup=null"]
        objs, err = tools.helm_template(*args)
        if objs is None:
            problems.append(f"helm template {shlex.join(args)} failed:\n{err}")
        else:
            problems += k8s_schema_problems(objs, "helm template (no runAsUser)")
            pod = next(o for o in objs if o.get("kind") == "Deployment")["spec"]["template"]["spec"]
            ctx = [pod.get("securityContext", {})] + [c.get("securityContext", {}) for c in pod["containers"]]
            if any("runAsUser" in c or "runAsGroup" in c for c in ctx):
                problems.append(f"runAsUser/runAsGroup null still renders a UID: {ctx}")
            if not all(c.get("runAsNonRoot") for c in ctx):
                problems.append(f"runAsNonRoot must stay: {ctx}")
            if not pod["containers"][0]["securityContext"].get("readOnlyRootFilesystem"):
                problems.append("readOnlyRootFilesystem must stay")
        objs, err = tools.helm_template("--set", "metrics.serviceMonitor.enabled=true",
                                        "--set", "metrics.service.enabled=false")
        if objs is not None:
            problems.append("a ServiceMonitor without the metrics Service rendered; it must fail")
        elif "metrics.service.enabled" not in err:
            problems.append(f"ServiceMonitor without the Service failed without saying why:\n{err}")
        return problems

    report.check("H3 helm template with each option (ServiceMonitor, PrometheusRule, Grafana dashboard, "
                 "aggregated roles, securityContext): objects, schemas, wiring", check_helm_options)

    # ---- Dockerfile
    def check_dockerfile():
        text = (DEPLOY / "Dockerfile").read_text()
        lines = [ln.strip() for ln in re.sub(r"\\\n", " ", text).splitlines()
                 if ln.strip() and not ln.strip().startswith("#")]
        froms = [ln.split()[1] for ln in lines if ln.upper().startswith("FROM ")]
        problems = []
        if not froms or not re.match(rf"^rust:{re.escape(rust_version)}([.-].*)?$", froms[0]):
            problems.append(f"the builder must be rust:{rust_version}* (Cargo.toml rust-version); "
                            f"FROM lines: {froms}")
        if not froms or froms[-1] != "gcr.io/distroless/cc-debian12:nonroot":
            problems.append(f"the runtime must be gcr.io/distroless/cc-debian12:nonroot; FROM: {froms}")
        runs = " ".join(ln for ln in lines if ln.upper().startswith("RUN "))
        if "rustup target add wasm32-wasip2" not in runs:
            problems.append("no `rustup target add wasm32-wasip2`")
        if not re.search(r"cargo build --release\b.*-p shardgate\b", runs):
            problems.append("no `cargo build --release ... -p shardgate`")
        users = [ln.split()[1] for ln in lines if ln.upper().startswith("USER ")]
        if not users or users[-1].split(":")[0] not in ("65532", "nonroot"):
            problems.append(f"the final USER must be 65532: {users}")
        if 'ENTRYPOINT ["/shardgate"]' not in lines:
            problems.append('no ENTRYPOINT ["/shardgate"]')
        copied: set[str] = set()
        for ln in lines:
            parts = ln.split()
            if parts[0].upper() == "COPY" and not any(p.startswith("--from") for p in parts):
                for src in parts[1:-1]:
                    if src.startswith("--"):
                        continue
                    copied.add(src.rstrip("/"))
                    if not (ROOT / src).exists():
                        problems.append(f"COPY source {src!r} does not exist in the repository")
        members = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["members"]
        for m in members:
            if not any(m == c or m.startswith(c + "/") for c in copied):
                problems.append(f"workspace member {m!r} is not copied into the builder")
        for f in ("Cargo.toml", "Cargo.lock"):
            if f not in copied:
                problems.append(f"{f} is not copied into the builder")
        return problems

    report.check("B1 deploy/Dockerfile: builder, runtime, user, entrypoint, COPY sources", check_dockerfile)

    elapsed = time.monotonic() - started
    print()
    if report.failed:
        print("failed checks:")
        for name in report.failed:
            print(f"  - {name}")
    print(f"validate_manifests: took {elapsed:.1f} s")
    print(f"validate_manifests: {report.passed} passed, {len(report.failed)} failed")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
