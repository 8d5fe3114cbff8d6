//! The HTTP front end: parses Kubernetes REST paths and query parameters,
//! applies faults, dispatches to the verbs, and renders responses.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State as AxState};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use futures::FutureExt;
use serde_json::{Value, json};

use crate::age;
use crate::chaos::RequestRecord;
use crate::discovery;
use crate::errors::{ApiError, ApiResult};
use crate::ops::{DeleteOpts, Opts, Page, PatchType, State, Target};
use crate::resources::Res;
use crate::selectors::{FieldSelector, LabelSelector, Selectors};
use crate::table::{TableRequest, TableWatch};
use crate::verb::Verb;
use crate::watch::{self, WatchParams};

pub(crate) struct Shared {
    pub state: Mutex<State>,
    pub bookmark_interval: Duration,
    pub server_address: String,
    pub chaos: Arc<crate::chaos::Chaos>,
}

impl Shared {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(crate) fn router(shared: Arc<Shared>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(shared)
}

fn json_response(code: u16, v: &Value, content_type: &str) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from(v.to_string()))
        .expect("response")
}

fn ok(v: &Value) -> Response {
    json_response(200, v, "application/json")
}

fn error(e: &ApiError) -> Response {
    let mut resp = json_response(e.code, &e.to_status(), "application/json");
    let retry_after = e
        .details
        .as_ref()
        .and_then(|d| d["retryAfterSeconds"].as_u64())
        .filter(|s| *s > 0);
    if let Some(secs) = retry_after {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
    }
    resp
}

/// A parsed resource URL.
struct Route {
    res: Res,
    ns: Option<String>,
    name: Option<String>,
    status: bool,
    /// A subresource with its own handler: `pods/{name}/eviction` or
    /// `pods/{name}/binding`.
    sub: Option<&'static str>,
}

fn parse_route(state: &State, group: &str, version: &str, rest: &[&str]) -> ApiResult<Route> {
    let nf = || {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    };
    let namespaced_form = rest.len() >= 3
        && rest[0] == "namespaces"
        && state
            .registry
            .find(group, version, rest[2])
            .is_some_and(|r| r.namespaced);
    let (ns, rest) = if namespaced_form {
        (Some(rest[1].to_string()), &rest[2..])
    } else {
        (None, rest)
    };
    let plural = rest.first().ok_or_else(nf)?;
    let res = state.registry.find(group, version, plural).ok_or_else(nf)?;
    let name = rest.get(1).map(|s| s.to_string());
    let (status, sub) = match rest.get(2) {
        None => (false, None),
        Some(&"status") if res.status && rest.len() == 3 => (true, None),
        Some(sub) if rest.len() == 3 && ns.is_some() => {
            match res.extra_subresources().iter().find(|s| s.name == *sub) {
                Some(s) => (false, Some(s.name)),
                None => return Err(nf()),
            }
        }
        _ => return Err(nf()),
    };
    if !res.namespaced && ns.is_some() {
        return Err(nf());
    }
    if res.namespaced && ns.is_none() && name.is_some() {
        return Err(nf());
    }
    Ok(Route {
        res,
        ns,
        name,
        status,
        sub,
    })
}

fn decode_percent(s: &str) -> String {
    form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

async fn handle(AxState(shared): AxState<Arc<Shared>>, req: Request) -> Response {
    let method = req.method().clone();
    let headers = req.headers().clone();
    let path = req.uri().path().to_string();
    let query: HashMap<String, String> = req
        .uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let body = match axum::body::to_bytes(req.into_body(), 64 << 20).await {
        Ok(b) => b,
        Err(e) => return error(&ApiError::bad_request(e.to_string())),
    };
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode_percent)
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();

    match (segs.as_slice(), &method) {
        (["version"], &Method::GET) => {
            return ok(&json!({
                "major": "1", "minor": "33", "gitVersion": "v1.33.0-kube-emulator",
                "gitCommit": "", "gitTreeState": "clean", "buildDate": "1970-01-01T00:00:00Z",
                "goVersion": "", "compiler": "rustc", "platform": "linux/amd64",
            }));
        }
        (["healthz" | "livez" | "readyz"], _) => {
            return Response::new(Body::from("ok"));
        }
        (["api"], &Method::GET) => {
            let st = shared.lock();
            return if discovery::wants_aggregated(accept) {
                json_response(
                    200,
                    &discovery::aggregated(&st.registry, true),
                    discovery::AGGREGATED,
                )
            } else {
                ok(&discovery::api_versions(&shared.server_address))
            };
        }
        (["apis"], &Method::GET) => {
            let st = shared.lock();
            return if discovery::wants_aggregated(accept) {
                json_response(
                    200,
                    &discovery::aggregated(&st.registry, false),
                    discovery::AGGREGATED,
                )
            } else {
                ok(&discovery::api_group_list(&st.registry))
            };
        }
        (["apis", g], &Method::GET) => {
            let st = shared.lock();
            return match discovery::api_group(&st.registry, g) {
                Some(v) => ok(&v),
                None => error(&ApiError::new(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                )),
            };
        }
        (["api", v], &Method::GET) | (["apis", _, v], &Method::GET) => {
            let group = if segs[0] == "api" { "" } else { segs[1] };
            let st = shared.lock();
            return match discovery::resource_list(&st.registry, group, v) {
                Some(l) => ok(&l),
                None => error(&ApiError::new(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                )),
            };
        }
        (["emulator", "writes"], &Method::GET) => return ok(&shared.lock().counts.to_json()),
        (["emulator", "writes"], &Method::DELETE)
        | (["emulator", "writes", "reset"], &Method::POST) => {
            shared.lock().counts = Default::default();
            return ok(&json!({"reset": true}));
        }
        _ => {}
    }

    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] if !rest.is_empty() => ("", *v, rest),
        ["apis", g, v, rest @ ..] if !rest.is_empty() => (*g, *v, rest),
        _ => {
            return error(&ApiError::new(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ));
        }
    };
    let route = {
        let st = shared.lock();
        match parse_route(&st, group, version, rest) {
            Ok(r) => r,
            Err(e) => return error(&e),
        }
    };
    let client = crate::chaos::client_of(&headers);
    let fut = serve_resource(&shared, route, &method, &headers, &query, body, &client);
    match std::panic::AssertUnwindSafe(fut).catch_unwind().await {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => error(&e),
        Err(_) => error(&ApiError::internal(
            "kube-emulator panicked while serving this request",
        )),
    }
}

fn flag(query: &HashMap<String, String>, key: &str) -> bool {
    matches!(query.get(key).map(String::as_str), Some("true" | "1"))
}

async fn serve_resource(
    shared: &Arc<Shared>,
    route: Route,
    method: &Method,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: Bytes,
    client: &str,
) -> ApiResult<Response> {
    if let Some(sub) = route.sub {
        return serve_subresource(shared, route, sub, method, query, body, client).await;
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let verb = match (method, &route.name) {
        (&Method::GET, None) if flag(query, "watch") => Verb::Watch,
        (&Method::GET, None) => Verb::List,
        (&Method::GET, Some(_)) => Verb::Get,
        (&Method::POST, None) => Verb::Create,
        (&Method::PUT, Some(_)) => Verb::Update,
        (&Method::PATCH, Some(_)) => match PatchType::from_content_type(content_type) {
            Some(PatchType::Apply) => Verb::Apply,
            Some(_) => Verb::Patch,
            None => {
                return Err(ApiError::new(
                    415,
                    "UnsupportedMediaType",
                    format!(
                        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml ({content_type})"
                    ),
                ));
            }
        },
        (&Method::DELETE, _) => Verb::Delete,
        _ => {
            return Err(ApiError::method_not_allowed(format!(
                "the server does not allow this method on the requested resource ({method})"
            )));
        }
    };
    let counted = if route.status {
        format!("{}/status", route.res.plural)
    } else {
        route.res.plural.clone()
    };
    let name = route.name.clone().unwrap_or_default();
    injected(shared, verb, &counted, &name, client).await?;
    let write = !matches!(verb, Verb::Get | Verb::List | Verb::Watch);
    let namespace = route.ns.clone().unwrap_or_default();
    // A create names its object in the body.
    let logged_name = match verb {
        Verb::Create => created_name(&body),
        _ => name.clone(),
    };
    let group = route.res.group.clone();
    let response = serve_verb(shared, route, verb, headers, query, body, name.clone()).await;
    shared.chaos.requested(|| RequestRecord {
        client: client.to_string(),
        verb,
        group,
        resource: counted.clone(),
        namespace: namespace.clone(),
        name,
        code: answer_code(&response),
    });
    if write && response.as_ref().is_ok_and(|r| r.status().is_success()) {
        shared
            .chaos
            .wrote(client, verb, &counted, &namespace, &logged_name);
    }
    response
}

/// The HTTP status a handler's answer is sent with.
fn answer_code(answer: &ApiResult<Response>) -> u16 {
    match answer {
        Ok(r) => r.status().as_u16(),
        Err(e) => e.code,
    }
}

/// `metadata.name` of a create's body (JSON or YAML), or its
/// `generateName` prefix.
fn created_name(body: &Bytes) -> String {
    let v: Value = serde_json::from_slice(body)
        .or_else(|_| serde_saphyr::from_slice(body))
        .unwrap_or_default();
    let meta = &v["metadata"];
    meta["name"]
        .as_str()
        .or_else(|| meta["generateName"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Applies the faults injected for this request: waits out its latency,
/// or fails it; each that fires is counted.
async fn injected(
    shared: &Arc<Shared>,
    verb: Verb,
    counted: &str,
    name: &str,
    client: &str,
) -> ApiResult<()> {
    let verdict = shared.lock().faults.check(verb, counted, name, client);
    for kind in &verdict.fired {
        shared.chaos.fired(kind);
    }
    if !verdict.delay.is_zero() {
        tokio::time::sleep(verdict.delay).await;
    }
    match verdict.error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Serves one verb on a resource (not a subresource).
async fn serve_verb(
    shared: &Arc<Shared>,
    route: Route,
    verb: Verb,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: Bytes,
    name: String,
) -> ApiResult<Response> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let table = match verb {
        Verb::Get | Verb::List | Verb::Watch => {
            let accept = headers
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            TableRequest::negotiate(accept, query)?
        }
        _ => None,
    };

    let selectors = Selectors {
        labels: LabelSelector::parse(
            query
                .get("labelSelector")
                .map(String::as_str)
                .unwrap_or_default(),
        )?,
        fields: FieldSelector::parse(
            query
                .get("fieldSelector")
                .map(String::as_str)
                .unwrap_or_default(),
        )?,
    };
    let manager = query
        .get("fieldManager")
        .cloned()
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| {
            if verb == Verb::Apply {
                return String::new();
            }
            headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .and_then(|ua| ua.split('/').next())
                .filter(|s| !s.is_empty())
                .unwrap_or("unknown")
                .to_string()
        });
    let opts = Opts {
        manager,
        dry_run: query.get("dryRun").is_some_and(|v| v == "All"),
        force: flag(query, "force"),
        api: true,
    };
    let ns = route.ns.clone().unwrap_or_default();
    let target = Target {
        res: route.res.clone(),
        ns: ns.clone(),
        name: name.clone(),
        status: route.status,
    };
    let parse_json = |b: &Bytes| -> ApiResult<Value> {
        serde_json::from_slice(b).map_err(|e| ApiError::bad_request(e.to_string()))
    };

    match verb {
        Verb::Watch => {
            let rv = match query.get("resourceVersion").filter(|s| !s.is_empty()) {
                None => None,
                Some(s) => Some(s.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version: {s}"))
                })?),
            };
            let timeout = query
                .get("timeoutSeconds")
                .and_then(|s| s.parse::<u64>().ok())
                .map(Duration::from_secs)
                .unwrap_or(Duration::from_secs(1800));
            let params = WatchParams {
                res: route.res.clone(),
                ns: route.ns.clone(),
                selectors,
                resource_version: rv,
                bookmarks: flag(query, "allowWatchBookmarks"),
                send_initial_events: flag(query, "sendInitialEvents"),
                timeout,
                bookmark_interval: shared.bookmark_interval,
                table: table.map(TableWatch::new),
            };
            let content_type = params
                .table
                .as_ref()
                .map_or_else(|| "application/json".to_string(), TableWatch::content_type);
            let stream = {
                let st = shared.lock();
                if watch::expired(&st, &params) {
                    shared.chaos.fired("410 gone");
                }
                watch::open(&st, params)
            };
            Ok(Response::builder()
                .status(200)
                .header(header::CONTENT_TYPE, content_type)
                .body(Body::from_stream(stream))
                .expect("response"))
        }
        Verb::List => {
            let page = Page {
                limit: match query.get("limit").filter(|l| !l.is_empty()) {
                    Some(l) => Some(l.parse().map_err(|_| {
                        ApiError::bad_request(format!("invalid limit {l:?}: not a number"))
                    })?),
                    None => None,
                },
                continue_token: query.get("continue").filter(|c| !c.is_empty()).cloned(),
            };
            let list =
                shared
                    .lock()
                    .list_page(&route.res, route.ns.as_deref(), &selectors, &page)?;
            Ok(match table {
                Some(t) => json_response(
                    200,
                    &t.list(&route.res, &list, age::now()),
                    &t.content_type(),
                ),
                None => ok(&list),
            })
        }
        Verb::Get => {
            let obj = shared.lock().get_obj(&target)?;
            Ok(match table {
                Some(t) => json_response(
                    200,
                    &t.object(&route.res, &obj, age::now(), true),
                    &t.content_type(),
                ),
                None => ok(&obj),
            })
        }
        Verb::Create => {
            if route.res.namespaced && route.ns.is_none() {
                return Err(ApiError::method_not_allowed(
                    "create requires a namespace in the URL",
                ));
            }
            let obj = parse_json(&body)?;
            let created = shared.lock().create(&route.res, &ns, obj, &opts)?;
            Ok(json_response(201, &created, "application/json"))
        }
        Verb::Update => {
            let obj = parse_json(&body)?;
            Ok(ok(&*shared.lock().replace(&target, obj, &opts)?))
        }
        Verb::Patch | Verb::Apply => {
            let ptype = PatchType::from_content_type(content_type).unwrap_or(PatchType::Merge);
            let mut st = shared.lock();
            let existed = st.store.get(&target.key()).is_some();
            let out = st.patch(&target, ptype, &body, &opts)?;
            Ok(json_response(
                if existed { 200 } else { 201 },
                &out,
                "application/json",
            ))
        }
        Verb::Delete => {
            let mut d = DeleteOpts {
                propagation: query.get("propagationPolicy").cloned(),
                ..Default::default()
            };
            if !body.is_empty() {
                let opts_body = parse_json(&body)?;
                d.uid = opts_body["preconditions"]["uid"]
                    .as_str()
                    .map(str::to_string);
                d.resource_version = opts_body["preconditions"]["resourceVersion"]
                    .as_str()
                    .map(str::to_string);
                if let Some(p) = opts_body["propagationPolicy"].as_str() {
                    d.propagation = Some(p.to_string());
                }
            }
            let mut st = shared.lock();
            match &route.name {
                Some(_) => Ok(ok(&*st.delete(&target, &d, &opts)?)),
                None => {
                    // deletecollection
                    let list = st.list_objs(&route.res, route.ns.as_deref(), &selectors);
                    let items = list["items"].as_array().cloned().unwrap_or_default();
                    for item in &items {
                        let t = Target {
                            res: route.res.clone(),
                            ns: item["metadata"]["namespace"]
                                .as_str()
                                .unwrap_or_default()
                                .to_string(),
                            name: item["metadata"]["name"]
                                .as_str()
                                .unwrap_or_default()
                                .to_string(),
                            status: false,
                        };
                        let _ = st.delete(&t, &d, &opts);
                    }
                    Ok(ok(&list))
                }
            }
        }
    }
}

/// `POST .../pods/{name}/eviction` or `.../binding`: counted and faulted as
/// `create` of `pods/eviction` or `pods/binding`.
async fn serve_subresource(
    shared: &Arc<Shared>,
    route: Route,
    sub: &str,
    method: &Method,
    query: &HashMap<String, String>,
    body: Bytes,
    client: &str,
) -> ApiResult<Response> {
    if method != Method::POST {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({method})"
        )));
    }
    let name = route.name.clone().unwrap_or_default();
    let counted = format!("{}/{sub}", route.res.plural);
    let namespace = route.ns.clone().unwrap_or_default();
    let group = route.res.group.clone();
    let record = |code: u16| RequestRecord {
        client: client.to_string(),
        verb: Verb::Create,
        group: group.clone(),
        resource: counted.clone(),
        namespace: namespace.clone(),
        name: name.clone(),
        code,
    };
    let (ok, refused) = (record(201), record(0));
    let answer = serve_subresource_verb(shared, route, sub, query, body, client).await;
    shared.chaos.requested(|| match &answer {
        Ok(_) => ok,
        Err(e) => RequestRecord {
            code: e.code,
            ..refused
        },
    });
    answer
}

/// [`serve_subresource`] once its request is recorded.
async fn serve_subresource_verb(
    shared: &Arc<Shared>,
    route: Route,
    sub: &str,
    query: &HashMap<String, String>,
    body: Bytes,
    client: &str,
) -> ApiResult<Response> {
    let name = route.name.clone().unwrap_or_default();
    let counted = format!("{}/{sub}", route.res.plural);
    injected(shared, Verb::Create, &counted, &name, client).await?;
    let namespace = route.ns.clone().unwrap_or_default();
    let target = Target {
        res: route.res,
        ns: route.ns.unwrap_or_default(),
        name,
        status: false,
    };
    let opts = Opts {
        manager: String::new(),
        dry_run: query.get("dryRun").is_some_and(|v| v == "All"),
        force: false,
        api: true,
    };
    let status = if sub == "binding" {
        crate::binding::bind(&mut shared.lock(), &target, &body, &opts)?
    } else {
        crate::eviction::evict(&mut shared.lock(), &target, &body, &opts)?
    };
    shared
        .chaos
        .wrote(client, Verb::Create, &counted, &namespace, &target.name);
    Ok(json_response(201, &status, "application/json"))
}
