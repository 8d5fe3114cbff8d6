//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!`) and field
//! selectors (`=`, `==`, `!=` on any dotted path) of list/watch requests, and
//! the structured `metav1.LabelSelector` objects (`matchLabels`,
//! `matchExpressions`) inside objects such as PodDisruptionBudgets.

use serde_json::Value;

use crate::errors::ApiError;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LabelSelector(Vec<Req>);

/// Splits on commas that are not inside parentheses.
fn split_terms(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect()
}

fn set_values(s: &str) -> Option<Vec<String>> {
    let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let bad = |t: &str| ApiError::bad_request(format!("unable to parse requirement: {t}"));
        let mut reqs = Vec::new();
        for t in split_terms(s) {
            let req = if let Some((k, v)) = t.split_once("!=") {
                Req::Ne(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = t.split_once("==") {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = t.split_once('=') {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some(k) = t.strip_prefix('!') {
                Req::NotExists(k.trim().into())
            } else if let Some(idx) = t.find(" notin ") {
                Req::NotIn(
                    t[..idx].trim().into(),
                    set_values(&t[idx + 7..]).ok_or_else(|| bad(t))?,
                )
            } else if let Some(idx) = t.find(" in ") {
                Req::In(
                    t[..idx].trim().into(),
                    set_values(&t[idx + 4..]).ok_or_else(|| bad(t))?,
                )
            } else if t.contains(' ') || t.contains('(') {
                return Err(bad(t));
            } else {
                Req::Exists(t.into())
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::Ne(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Req::NotIn(k, vs) => get(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector over dotted paths such as `metadata.name`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for t in split_terms(s) {
            let (k, eq, v) = if let Some((k, v)) = t.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = t.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = t.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{t}'; can't understand '{t}'"
                )));
            };
            reqs.push((k.trim().to_string(), eq, v.trim().to_string()));
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let mut cur = obj;
            for part in path.split('.') {
                cur = &cur[part];
            }
            let have = match cur {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (have == *want) == *eq
        })
    }
}

/// Whether a `metav1.LabelSelector` object selects `obj` (by its
/// `metadata.labels`), as `LabelSelectorAsSelector(...).Matches` does: a
/// `null` (absent) selector matches nothing, an empty one `{}` everything,
/// and a malformed one (unknown operator, `In` without values) nothing.
pub(crate) fn label_selector_matches(selector: &Value, obj: &Value) -> bool {
    let Some(sel) = selector.as_object() else {
        return false;
    };
    let labels = &obj["metadata"]["labels"];
    let get = |k: &str| labels.get(k).and_then(Value::as_str);
    let match_labels = sel
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| m.iter().all(|(k, v)| get(k) == v.as_str()));
    let empty = Vec::new();
    let exprs = sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    match_labels
        && exprs.iter().all(|e| {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"]
                .as_array()
                .map(|vs| vs.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let have = get(key);
            match e["operator"].as_str() {
                Some("In") => !values.is_empty() && have.is_some_and(|h| values.contains(&h)),
                Some("NotIn") => !values.is_empty() && have.is_none_or(|h| !values.contains(&h)),
                Some("Exists") => values.is_empty() && have.is_some(),
                Some("DoesNotExist") => values.is_empty() && have.is_none(),
                _ => false,
            }
        })
}

/// Both selectors of a list or watch request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selectors {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selectors {
    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_operators() {
        let o = json!({"metadata": {"labels": {"app": "v", "tier": "db"}}});
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(m("app=v"));
        assert!(m("app==v,tier"));
        assert!(!m("app!=v"));
        assert!(m("tier in (db, cache)"));
        assert!(!m("tier notin (db)"));
        assert!(m("!missing"));
        assert!(!m("missing"));
        assert!(m(""));
        assert!(LabelSelector::parse("a in b").is_err());
    }

    #[test]
    fn structured_label_selectors() {
        let o = json!({"metadata": {"labels": {"app": "v", "tier": "db"}}});
        let m = |s: Value| label_selector_matches(&s, &o);
        assert!(!m(json!(null)), "a null selector matches nothing");
        assert!(m(json!({})), "an empty selector matches everything");
        assert!(m(json!({"matchLabels": {"app": "v"}})));
        assert!(!m(json!({"matchLabels": {"app": "w"}})));
        assert!(m(json!({"matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["db", "cache"]},
            {"key": "zone", "operator": "DoesNotExist"},
        ]})));
        assert!(!m(json!({"matchLabels": {"app": "v"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]})));
        assert!(!m(
            json!({"matchExpressions": [{"key": "app", "operator": "Bogus"}]})
        ));
    }

    #[test]
    fn field_selector_paths() {
        let o = json!({"metadata": {"name": "x", "namespace": "ns"}});
        let m = |s: &str| FieldSelector::parse(s).unwrap().matches(&o);
        assert!(m("metadata.name=x"));
        assert!(m("metadata.name==x,metadata.namespace!=other"));
        assert!(!m("metadata.namespace=other"));
    }
}
