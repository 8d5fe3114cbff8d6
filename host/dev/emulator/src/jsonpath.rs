//! The JSONPath dialect of `k8s.io/client-go/util/jsonpath`, as far as CRD
//! `additionalPrinterColumns` use it: `.a.b`, `['a.b']`, `[n]` (negative
//! too), `[a:b:c]`, `[*]`/`.*`, `..name`, and filters
//! `[?(@.type=="Ready")]` with `==`, `!=`, `<`, `<=`, `>`, `>=` or bare
//! existence. Missing keys give no result (`AllowMissingKeys(true)`, as the
//! API server's table convertor sets); type errors (indexing an object,
//! comparing a string with a number) are errors, as there.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    /// `.*`: every value of an object or element of an array.
    Wildcard,
    /// `..`: the value and all its descendants that have children.
    Recursive,
    Index(i64),
    Slice {
        start: Option<i64>,
        end: Option<i64>,
        step: Option<i64>,
    },
    Filter(Box<Filter>),
}

#[derive(Debug, Clone, PartialEq)]
struct Filter {
    left: Vec<Step>,
    /// `None`: existence test.
    cmp: Option<(Op, Operand)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq)]
enum Operand {
    Literal(Value),
    Path(Vec<Step>),
}

/// A parsed path.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JsonPath {
    steps: Vec<Step>,
}

impl std::str::FromStr for JsonPath {
    type Err = String;

    /// Parses `.status.x`, `{.status.x}` or `$.status.x`.
    fn from_str(path: &str) -> Result<Self, String> {
        let mut s = path.trim();
        if let Some(inner) = s.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
            s = inner.trim();
        }
        s = s.strip_prefix('$').unwrap_or(s);
        let chars: Vec<char> = s.chars().collect();
        let (steps, end) = parse_steps(&chars, 0)?;
        if end != chars.len() {
            return Err(format!("unexpected {:?} in {path:?}", chars[end]));
        }
        Ok(Self { steps })
    }
}

impl JsonPath {
    /// All results, in document order.
    pub fn find<'a>(&self, root: &'a Value) -> Result<Vec<&'a Value>, String> {
        eval(&self.steps, vec![root])
    }
}

/// How `PrintResults` writes one result: strings as they are, numbers and
/// booleans as Go's `fmt.Print` does, objects and arrays as compact JSON,
/// `null` as `<no value>`.
pub(crate) fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "<no value>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (None, Some(u), _) => u.to_string(),
            (None, None, Some(f)) => go_float(f),
            _ => n.to_string(),
        },
        Value::Array(_) | Value::Object(_) => v.to_string(),
    }
}

/// Go's `%v` for a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`):
/// shortest digits, in exponent form when the exponent is below -4 or at
/// least 6.
fn go_float(f: f64) -> String {
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if f != 0.0 && !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        format!("{f}")
    }
}

fn is_name_end(c: char) -> bool {
    matches!(c, '.' | '[' | ']' | ')' | ' ' | '=' | '!' | '<' | '>')
}

/// Steps from `i` until the end of the input or a character that cannot
/// start a step (e.g. an operator inside a filter).
fn parse_steps(c: &[char], mut i: usize) -> Result<(Vec<Step>, usize), String> {
    let mut steps = Vec::new();
    // A leading bare name (`status.x`) is a field.
    if i < c.len() && !is_name_end(c[i]) && c[i] != '@' {
        let (name, next) = parse_name(c, i);
        steps.push(Step::Field(name));
        i = next;
    }
    while i < c.len() {
        match c[i] {
            '.' if c.get(i + 1) == Some(&'.') => {
                steps.push(Step::Recursive);
                i += 2;
                if c.get(i) == Some(&'[') {
                    continue;
                }
                let (step, next) = parse_dotted(c, i)?;
                steps.extend(step);
                i = next;
            }
            '.' => {
                let (step, next) = parse_dotted(c, i + 1)?;
                steps.extend(step);
                i = next;
            }
            '[' => {
                let (step, next) = parse_bracket(c, i + 1)?;
                steps.push(step);
                i = next;
            }
            _ => break,
        }
    }
    Ok((steps, i))
}

/// After a `.`: `*`, a name, or nothing (`.` alone is the current value).
fn parse_dotted(c: &[char], i: usize) -> Result<(Option<Step>, usize), String> {
    match c.get(i) {
        Some('*') => Ok((Some(Step::Wildcard), i + 1)),
        None => Ok((None, i)),
        Some(ch) if is_name_end(*ch) => Ok((None, i)),
        Some(_) => {
            let (name, next) = parse_name(c, i);
            Ok((Some(Step::Field(name)), next))
        }
    }
}

/// A field name up to the next `.`/`[` (a backslash escapes a dot).
fn parse_name(c: &[char], mut i: usize) -> (String, usize) {
    let mut name = String::new();
    while i < c.len() && !is_name_end(c[i]) {
        if c[i] == '\\' && i + 1 < c.len() {
            i += 1;
        }
        name.push(c[i]);
        i += 1;
    }
    (name, i)
}

/// A quoted string starting at the quote `c[i]`; returns it and the index
/// after the closing quote.
fn parse_quoted(c: &[char], i: usize) -> Result<(String, usize), String> {
    let q = c[i];
    let mut out = String::new();
    let mut j = i + 1;
    while j < c.len() {
        match c[j] {
            '\\' if j + 1 < c.len() => {
                out.push(c[j + 1]);
                j += 2;
            }
            ch if ch == q => return Ok((out, j + 1)),
            ch => {
                out.push(ch);
                j += 1;
            }
        }
    }
    Err("unterminated quoted string".into())
}

/// Inside `[...]`, `i` just after the `[`; returns the index after `]`.
fn parse_bracket(c: &[char], i: usize) -> Result<(Step, usize), String> {
    let close = |j: usize| -> Result<usize, String> {
        if c.get(j) == Some(&']') {
            Ok(j + 1)
        } else {
            Err("expected ]".into())
        }
    };
    match c.get(i) {
        Some('\'' | '"') => {
            let (name, j) = parse_quoted(c, i)?;
            Ok((Step::Field(name), close(j)?))
        }
        // `[*]` is the whole slice `[:]` (arrays only), unlike `.*`.
        Some('*') => Ok((
            Step::Slice {
                start: None,
                end: None,
                step: None,
            },
            close(i + 1)?,
        )),
        Some('?') => {
            if c.get(i + 1) != Some(&'(') {
                return Err("expected ( after ?".into());
            }
            let (filter, j) = parse_filter(c, i + 2)?;
            if c.get(j) != Some(&')') {
                return Err("expected ) closing the filter".into());
            }
            Ok((Step::Filter(Box::new(filter)), close(j + 1)?))
        }
        Some(_) => {
            let end = (i..c.len())
                .find(|&j| c[j] == ']')
                .ok_or("unterminated [")?;
            let inner: String = c[i..end].iter().collect();
            Ok((parse_index(inner.trim())?, end + 1))
        }
        None => Err("unterminated [".into()),
    }
}

fn parse_index(s: &str) -> Result<Step, String> {
    let num = |p: &str| -> Result<Option<i64>, String> {
        let p = p.trim();
        if p.is_empty() {
            Ok(None)
        } else {
            p.parse()
                .map(Some)
                .map_err(|_| format!("bad array index {p:?}"))
        }
    };
    let parts: Vec<&str> = s.split(':').collect();
    match parts.as_slice() {
        [one] => num(one)?
            .map(Step::Index)
            .ok_or_else(|| "empty array index".to_string()),
        [a, b] => Ok(Step::Slice {
            start: num(a)?,
            end: num(b)?,
            step: None,
        }),
        [a, b, st] => Ok(Step::Slice {
            start: num(a)?,
            end: num(b)?,
            step: num(st)?,
        }),
        _ => Err(format!("bad array index {s:?}")),
    }
}

fn skip_spaces(c: &[char], mut i: usize) -> usize {
    while c.get(i) == Some(&' ') {
        i += 1;
    }
    i
}

/// `@.path [op operand]` up to (not including) the closing `)`.
fn parse_filter(c: &[char], i: usize) -> Result<(Filter, usize), String> {
    let i = skip_spaces(c, i);
    if c.get(i) != Some(&'@') {
        return Err("a filter must start with @".into());
    }
    let (left, i) = parse_steps(c, i + 1)?;
    let i = skip_spaces(c, i);
    let two: String = c[i..c.len().min(i + 2)].iter().collect();
    let (op, len) = match two.as_str() {
        "==" => (Op::Eq, 2),
        "!=" => (Op::Ne, 2),
        "<=" => (Op::Le, 2),
        ">=" => (Op::Ge, 2),
        _ if two.starts_with('<') => (Op::Lt, 1),
        _ if two.starts_with('>') => (Op::Gt, 1),
        _ => return Ok((Filter { left, cmp: None }, i)),
    };
    let i = skip_spaces(c, i + len);
    let (operand, i) = match c.get(i) {
        Some('\'' | '"') => {
            let (s, j) = parse_quoted(c, i)?;
            (Operand::Literal(Value::String(s)), j)
        }
        Some('@') => {
            let (p, j) = parse_steps(c, i + 1)?;
            (Operand::Path(p), j)
        }
        Some(_) => {
            let end = (i..c.len())
                .find(|&j| c[j] == ')' || c[j] == ' ')
                .unwrap_or(c.len());
            let word: String = c[i..end].iter().collect();
            (Operand::Literal(parse_literal(&word)?), end)
        }
        None => return Err("missing right operand".into()),
    };
    Ok((
        Filter {
            left,
            cmp: Some((op, operand)),
        },
        skip_spaces(c, i),
    ))
}

fn parse_literal(word: &str) -> Result<Value, String> {
    match word {
        "true" => Ok(Value::Bool(true)),
        "false" => Ok(Value::Bool(false)),
        _ if word.contains(['.', 'e', 'E']) => word
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| format!("bad number {word:?}")),
        _ => word
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| format!("unrecognized literal {word:?}")),
    }
}

fn eval<'a>(steps: &[Step], mut cur: Vec<&'a Value>) -> Result<Vec<&'a Value>, String> {
    for step in steps {
        let mut next = Vec::new();
        for v in cur {
            if v.is_null() {
                continue;
            }
            apply(step, v, &mut next)?;
        }
        cur = next;
    }
    Ok(cur)
}

fn as_array(v: &Value) -> Result<&Vec<Value>, String> {
    v.as_array()
        .ok_or_else(|| format!("{} is not array or slice", kind_name(v)))
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "map[string]interface {}",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        Value::Null => "nil",
        Value::Array(_) => "[]interface {}",
    }
}

fn apply<'a>(step: &Step, v: &'a Value, out: &mut Vec<&'a Value>) -> Result<(), String> {
    match step {
        Step::Field(name) => out.extend(v.as_object().and_then(|m| m.get(name))),
        Step::Wildcard => match v {
            Value::Object(m) => out.extend(m.values()),
            Value::Array(a) => out.extend(a.iter()),
            _ => {}
        },
        Step::Recursive => descendants(v, out),
        Step::Index(i) => {
            let a = as_array(v)?;
            let len = a.len() as i64;
            let idx = if *i < 0 { i + len } else { *i };
            if idx < 0 || idx >= len {
                return Err(format!(
                    "array index out of bounds: index {idx}, length {len}"
                ));
            }
            out.push(&a[idx as usize]);
        }
        Step::Slice { start, end, step } => {
            let a = as_array(v)?;
            let len = a.len() as i64;
            let s = start.map_or(0, |s| if s < 0 { s + len } else { s });
            let e = end.map_or(len, |e| if e < 0 { e + len } else { e });
            if s == e {
                return Ok(());
            }
            if s < 0 || s >= len || e < 0 || e > len {
                return Err(format!("array index out of bounds: length {len}"));
            }
            if s > e {
                return Err(format!(
                    "starting index {s} is greater than ending index {e}"
                ));
            }
            let st = step.unwrap_or(1);
            if st <= 0 {
                return Err("step must be > 0".into());
            }
            out.extend(a[s as usize..e as usize].iter().step_by(st as usize));
        }
        Step::Filter(f) => {
            for item in as_array(v)? {
                if f.matches(item)? {
                    out.push(item);
                }
            }
        }
    }
    Ok(())
}

/// `evalRecursive`: a value with children, then (recursively) its children.
fn descendants<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    let children: Vec<&Value> = match v {
        Value::Object(m) => m.values().collect(),
        Value::Array(a) => a.iter().collect(),
        _ => Vec::new(),
    };
    if children.is_empty() {
        return;
    }
    out.push(v);
    for child in children {
        descendants(child, out);
    }
}

impl Filter {
    fn matches(&self, item: &Value) -> Result<bool, String> {
        let lefts = eval(&self.left, vec![item])?;
        let left = match lefts.as_slice() {
            [] => return Ok(false),
            [one] => *one,
            _ => return Err("can only compare one element at a time".into()),
        };
        let Some((op, operand)) = &self.cmp else {
            return Ok(true);
        };
        let right = match operand {
            Operand::Literal(v) => v,
            Operand::Path(p) => match eval(p, vec![item])?.as_slice() {
                [] => return Ok(false),
                [one] => *one,
                _ => return Err("can only compare one element at a time".into()),
            },
        };
        compare(*op, left, right)
    }
}

/// Go template comparisons: same basic kind only (int with int, float
/// with float, string with string; booleans for equality only).
fn compare(op: Op, l: &Value, r: &Value) -> Result<bool, String> {
    use std::cmp::Ordering;
    let bad = || Err::<bool, String>("incompatible types for comparison".into());
    let ord: Ordering = match (l, r) {
        (Value::String(a), Value::String(b)) => a.cmp(b),
        (Value::Number(a), Value::Number(b)) => {
            match (a.as_i64(), b.as_i64(), a.is_f64(), b.is_f64()) {
                (Some(x), Some(y), false, false) => x.cmp(&y),
                (_, _, true, true) => {
                    let (x, y) = (a.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
                    x.partial_cmp(&y).ok_or("NaN in comparison")?
                }
                _ => return bad(),
            }
        }
        (Value::Bool(a), Value::Bool(b)) => match op {
            Op::Eq => return Ok(a == b),
            Op::Ne => return Ok(a != b),
            _ => return Err("invalid type for comparison".into()),
        },
        _ => return bad(),
    };
    Ok(match op {
        Op::Eq => ord == Ordering::Equal,
        Op::Ne => ord != Ordering::Equal,
        Op::Lt => ord == Ordering::Less,
        Op::Le => ord != Ordering::Greater,
        Op::Gt => ord == Ordering::Greater,
        Op::Ge => ord != Ordering::Less,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn find(path: &str, v: &Value) -> Vec<Value> {
        path.parse::<JsonPath>()
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .find(v)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .into_iter()
            .cloned()
            .collect()
    }

    fn obj() -> Value {
        json!({
            "metadata": {"name": "vc", "labels": {"app.kubernetes.io/name": "valkey"}},
            "spec": {"replicas": 2, "ratio": 1.5, "on": true},
            "status": {
                "state": "Running",
                "shards": 3,
                "nothing": null,
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "AllShardsReady"},
                    {"type": "ExternalAccessReady", "status": "False", "reason": "Pending"},
                    {"type": "Count", "status": "True", "n": 5},
                ],
            },
        })
    }

    #[test]
    fn dotted_paths() {
        let o = obj();
        assert_eq!(find(".status.state", &o), vec![json!("Running")]);
        assert_eq!(find("{.spec.replicas}", &o), vec![json!(2)]);
        assert_eq!(find("$.spec.on", &o), vec![json!(true)]);
        assert_eq!(find("status.shards", &o), vec![json!(3)]);
        assert_eq!(find(".", &o), vec![o.clone()]);
        assert!(find(".status.missing.deeper", &o).is_empty());
        assert!(find(".status.state.deeper", &o).is_empty());
        assert_eq!(
            find(".metadata.labels['app.kubernetes.io/name']", &o),
            vec![json!("valkey")]
        );
        assert_eq!(
            find(r".metadata.labels.app\.kubernetes\.io/name", &o),
            vec![json!("valkey")]
        );
    }

    #[test]
    fn filters() {
        let o = obj();
        assert_eq!(
            find(r#".status.conditions[?(@.type=="Ready")].status"#, &o),
            vec![json!("True")]
        );
        assert_eq!(
            find(
                r#".status.conditions[?(@.type=="ExternalAccessReady")].reason"#,
                &o
            ),
            vec![json!("Pending")]
        );
        assert_eq!(
            find(".status.conditions[?(@.type == 'Ready')].reason", &o),
            vec![json!("AllShardsReady")]
        );
        assert_eq!(
            find(r#".status.conditions[?(@.status!="True")].type"#, &o),
            vec![json!("ExternalAccessReady")]
        );
        assert_eq!(
            find(".status.conditions[?(@.n)].type", &o),
            vec![json!("Count")]
        );
        assert_eq!(
            find(".status.conditions[?(@.n>=5)].type", &o),
            vec![json!("Count")]
        );
        assert!(find(".status.conditions[?(@.n<5)].type", &o).is_empty());
        assert!(find(r#".status.conditions[?(@.type=="Nope")].status"#, &o).is_empty());
        assert!(find(r#".status.missing[?(@.type=="Ready")].status"#, &o).is_empty());
        // Comparing a string with a number is an error, as in Go templates.
        let p: JsonPath = ".status.conditions[?(@.type==1)].status".parse().unwrap();
        assert!(p.find(&o).is_err());
    }

    #[test]
    fn indexes_slices_wildcards_and_recursion() {
        let o = obj();
        assert_eq!(find(".status.conditions[0].type", &o), vec![json!("Ready")]);
        assert_eq!(
            find(".status.conditions[-1].type", &o),
            vec![json!("Count")]
        );
        assert_eq!(
            find(".status.conditions[0:2].status", &o),
            vec![json!("True"), json!("False")]
        );
        assert_eq!(
            find(".status.conditions[::2].type", &o),
            vec![json!("Ready"), json!("Count")]
        );
        assert_eq!(find(".status.conditions[*].type", &o).len(), 3);
        assert_eq!(find(".status.conditions.*", &o).len(), 3);
        assert_eq!(find(".spec.*", &o).len(), 3);
        let p: JsonPath = ".spec[*]".parse().unwrap();
        assert!(p.find(&o).is_err(), "[*] is a slice");
        assert_eq!(
            find("..reason", &o),
            vec![json!("AllShardsReady"), json!("Pending")]
        );
        let p: JsonPath = ".status.conditions[7].type".parse().unwrap();
        assert!(p.find(&o).is_err(), "out of bounds");
        let p: JsonPath = ".spec[0]".parse().unwrap();
        assert!(p.find(&o).is_err(), "indexing an object");
    }

    #[test]
    fn parse_errors() {
        for bad in [
            ".a[",
            ".a[?(@.x==\"y\"]",
            ".a[?(x==1)]",
            ".a['unterminated]",
            ".a[x]",
        ] {
            assert!(bad.parse::<JsonPath>().is_err(), "{bad}");
        }
    }

    #[test]
    fn text_is_go_print() {
        assert_eq!(text(&json!("x")), "x");
        assert_eq!(text(&json!(3)), "3");
        assert_eq!(text(&json!(1.5)), "1.5");
        assert_eq!(text(&json!(3.0)), "3");
        assert_eq!(text(&json!(1234567.5)), "1.2345675e+06");
        assert_eq!(text(&json!(0.00001)), "1e-05");
        assert_eq!(text(&json!(true)), "true");
        assert_eq!(text(&Value::Null), "<no value>");
        assert_eq!(text(&json!({"b": 1, "a": [1]})), r#"{"a":[1],"b":1}"#);
    }
}
