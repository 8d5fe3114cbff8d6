// Command ssa-reference runs sequences of writes to one object through
// structured-merge-diff (sigs.k8s.io/structured-merge-diff/v4), the library
// Kubernetes' server-side apply is built on, so the API emulator's field
// ownership can be checked against it (host/dev/emulator/tests/ssa_reference.rs).
//
// It reads JSON operations from stdin, one after another, and writes one JSON
// line per operation to stdout:
//
//	{"op":"reset"}                                        forget the object
//	{"op":"apply","kind":K,"manager":M,"force":F,"object":{...}}  server-side apply
//	{"op":"create","kind":K,"manager":M,"object":{...}}   POST
//	{"op":"update","kind":K,"manager":M,"object":{...}}   PUT (the whole object)
//	{"op":"merge","kind":K,"manager":M,"patch":{...}}     JSON merge patch (RFC 7386)
//
// The answer holds the stored object (without status) and every manager's
// field set in the fieldsV1 form (f:, k:, .), or the conflicts that refused
// an apply (the object is then unchanged). K is ConfigMap, Service or
// StatefulSet, typed by schema.yaml.
//
// Around the library it does what the API server's field manager
// (k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager) does around it: a
// manager is its name and operation (an Update and an Apply of one name are
// two managers); an Update's fields are computed as "current-operation" and
// merged into the manager's previous Update set; an Apply to an object with
// no managed fields first gives every existing field to "before-first-apply";
// apiVersion, kind, metadata and metadata's server fields are stripped from
// every set; status is an ignored field (a reset field of the main resource);
// an object is created from the Go zero value of its type (an empty
// ServiceSpec is there as {}); and each written and stored object goes
// through what decoding into Go types and defaulting do to it (empty Go maps
// and omitempty lists and nulls dropped, the defaults of the fields the
// sequences leave out set; status kept from before, as the strategies do).
package main

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"

	"sigs.k8s.io/structured-merge-diff/v4/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v4/merge"
	"sigs.k8s.io/structured-merge-diff/v4/schema"
	"sigs.k8s.io/structured-merge-diff/v4/typed"
)

//go:embed schema.yaml
var schemaYAML string

// kindInfo is what the reference knows of a kind.
type kindInfo struct {
	typeName   string
	apiVersion fieldpath.APIVersion
	// zero is the Go zero value of the type as the API server converts it
	// (the live object of a create).
	zero string
	// status is a reset field of the main resource.
	status bool
}

var kinds = map[string]kindInfo{
	"ConfigMap": {"configmap", "v1", `{"metadata":{"creationTimestamp":null}}`, false},
	"Service": {"service", "v1",
		`{"metadata":{"creationTimestamp":null},"spec":{},"status":{"loadBalancer":{}}}`, true},
	"StatefulSet": {"statefulset", "apps/v1",
		`{"metadata":{"creationTimestamp":null},"spec":{"selector":null,"template":{"metadata":{"creationTimestamp":null},"spec":{"containers":null}},"updateStrategy":{}},"status":{"replicas":0,"availableReplicas":0}}`, true},
}

// The fields the API server strips from every manager's set.
var stripSet = fieldpath.NewSet(
	fieldpath.MakePathOrDie("apiVersion"),
	fieldpath.MakePathOrDie("kind"),
	fieldpath.MakePathOrDie("metadata"),
	fieldpath.MakePathOrDie("metadata", "name"),
	fieldpath.MakePathOrDie("metadata", "namespace"),
	fieldpath.MakePathOrDie("metadata", "creationTimestamp"),
	fieldpath.MakePathOrDie("metadata", "selfLink"),
	fieldpath.MakePathOrDie("metadata", "uid"),
	fieldpath.MakePathOrDie("metadata", "clusterName"),
	fieldpath.MakePathOrDie("metadata", "generation"),
	fieldpath.MakePathOrDie("metadata", "managedFields"),
	fieldpath.MakePathOrDie("metadata", "resourceVersion"),
)

type op struct {
	Op      string                 `json:"op"`
	Kind    string                 `json:"kind"`
	Manager string                 `json:"manager"`
	Force   bool                   `json:"force"`
	Object  map[string]interface{} `json:"object"`
	Patch   interface{}            `json:"patch"`
}

// managerKey is how the API server keys a manager: name and operation.
type managerKey struct {
	Manager   string `json:"manager"`
	Operation string `json:"operation"`
}

func (k managerKey) String() string {
	b, _ := json.Marshal(k)
	return string(b)
}

func parseKey(s string) managerKey {
	var k managerKey
	_ = json.Unmarshal([]byte(s), &k)
	return k
}

type entry struct {
	Manager   string          `json:"manager"`
	Operation string          `json:"operation"`
	FieldsV1  json.RawMessage `json:"fieldsV1"`
}

type conflict struct {
	Manager   string `json:"manager"`
	Operation string `json:"operation"`
	Field     string `json:"field"`
}

type answer struct {
	Object        map[string]interface{} `json:"object"`
	ManagedFields []entry                `json:"managedFields"`
	Conflicts     []conflict             `json:"conflicts,omitempty"`
	Error         string                 `json:"error,omitempty"`
}

// converter has one version per kind: nothing to convert.
type converter struct{}

func (converter) Convert(v *typed.TypedValue, _ fieldpath.APIVersion) (*typed.TypedValue, error) {
	return v, nil
}
func (converter) IsMissingVersionError(error) bool { return false }

// state is the one object a sequence writes to.
type state struct {
	parser   *typed.Parser
	exists   bool
	object   map[string]interface{}
	managers fieldpath.ManagedFields
}

func main() {
	parser, err := typed.NewParser(typed.YAMLObject(schemaYAML))
	if err != nil {
		fmt.Fprintln(os.Stderr, "schema:", err)
		os.Exit(2)
	}
	st := &state{parser: parser, managers: fieldpath.ManagedFields{}}
	dec := json.NewDecoder(bufio.NewReader(os.Stdin))
	dec.UseNumber()
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	for {
		var o op
		if err := dec.Decode(&o); err == io.EOF {
			break
		} else if err != nil {
			fmt.Fprintln(os.Stderr, "input:", err)
			os.Exit(2)
		}
		var a answer
		if o.Op == "reset" {
			*st = state{parser: parser, managers: fieldpath.ManagedFields{}}
			a.ManagedFields = []entry{}
		} else {
			a = st.run(o)
		}
		if err := enc.Encode(a); err != nil {
			fmt.Fprintln(os.Stderr, "output:", err)
			os.Exit(2)
		}
		// One answer per operation, at once: the caller waits for it.
		if err := out.Flush(); err != nil {
			os.Exit(2)
		}
	}
}

func (st *state) run(o op) answer {
	k, ok := kinds[o.Kind]
	if !ok {
		return st.fail(fmt.Errorf("unknown kind %q", o.Kind))
	}
	tp := st.parser.Type(k.typeName)
	updater := &merge.Updater{Converter: converter{}}
	if k.status {
		updater.IgnoredFields = map[fieldpath.APIVersion]*fieldpath.Set{
			k.apiVersion: fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
		}
	}
	live := st.object
	if !st.exists {
		live = mustJSON(k.zero)
	}
	liveTV, err := tp.FromUnstructured(live)
	if err != nil {
		return st.fail(fmt.Errorf("live object: %v", err))
	}
	// The library changes the map it is given; a refused write changes nothing.
	managers := st.managers.Copy()

	var newTV *typed.TypedValue
	switch o.Op {
	case "apply":
		cfg, err := tp.FromUnstructured(numbers(o.Object))
		if err != nil {
			return st.fail(fmt.Errorf("applied configuration: %v", err))
		}
		if st.exists && len(managers) == 0 {
			// skipNonAppliedManager: fields that exist before the first
			// apply belong to an Update manager of their own.
			zero, _ := tp.FromUnstructured(mustJSON(k.zero))
			_, managers, err = update(updater, zero, liveTV, k.apiVersion, managers,
				managerKey{"before-first-apply", "Update"}.String())
			if err != nil {
				return st.fail(err)
			}
		}
		key := managerKey{o.Manager, "Apply"}.String()
		before := managers.Copy()
		newTV, managers, err = updater.Apply(liveTV, cfg, k.apiVersion, managers, key, o.Force)
		if _, ok := err.(merge.Conflicts); ok {
			return st.refuse(conflicts(updater, liveTV, cfg, k.apiVersion, before, key))
		}
		if err != nil {
			return st.fail(err)
		}
		if newTV == nil {
			newTV = liveTV
		}
	case "create", "update", "merge":
		if (o.Op == "create") == st.exists {
			return st.fail(fmt.Errorf("%s: the object exists: %v", o.Op, st.exists))
		}
		var body interface{} = numbers(o.Object)
		if o.Op == "merge" {
			body = mergePatch(deepCopy(live), numbers(o.Patch))
		}
		m, ok := body.(map[string]interface{})
		if !ok {
			return st.fail(fmt.Errorf("%s: the object is not a JSON object", o.Op))
		}
		obj := decode(o.Kind, tp, m)
		if k.status {
			// The strategies keep the status a main-resource write sends.
			delete(obj, "status")
			if s, ok := live["status"]; ok {
				obj["status"] = s
			}
		}
		objTV, err := tp.FromUnstructured(obj)
		if err != nil {
			return st.fail(fmt.Errorf("object: %v", err))
		}
		newTV, managers, err = update(updater, liveTV, objTV, k.apiVersion, managers,
			managerKey{o.Manager, "Update"}.String())
		if err != nil {
			return st.fail(err)
		}
	default:
		return st.fail(fmt.Errorf("unknown op %q", o.Op))
	}

	for m, vs := range managers {
		s := vs.Set().Difference(stripSet)
		if s.Empty() {
			delete(managers, m)
			continue
		}
		managers[m] = fieldpath.NewVersionedSet(s, vs.APIVersion(), vs.Applied())
	}
	obj, ok := newTV.AsValue().Unstructured().(map[string]interface{})
	if !ok {
		return st.fail(fmt.Errorf("the result is not an object"))
	}
	st.object = decode(o.Kind, tp, obj)
	st.exists = true
	st.managers = managers
	return st.answer()
}

// update is the field manager's Update: the operation's fields are computed
// as "current-operation" (taking them from every other manager) and merged
// into the manager's previous set.
func update(u *merge.Updater, live, obj *typed.TypedValue, v fieldpath.APIVersion,
	managers fieldpath.ManagedFields, key string) (*typed.TypedValue, fieldpath.ManagedFields, error) {
	const self = "current-operation"
	out, managers, err := u.Update(live, obj, v, managers, self)
	if err != nil {
		return nil, nil, err
	}
	if vs, ok := managers[self]; ok {
		delete(managers, self)
		if prev, ok := managers[key]; ok {
			managers[key] = fieldpath.NewVersionedSet(vs.Set().Union(prev.Set()), vs.APIVersion(), vs.Applied())
		} else {
			managers[key] = vs
		}
	}
	return out, managers, nil
}

func (st *state) answer() answer {
	a := answer{ManagedFields: []entry{}}
	if st.exists {
		a.Object = deepCopy(st.object).(map[string]interface{})
		delete(a.Object, "status")
	}
	for m, vs := range st.managers {
		k := parseKey(m)
		js, err := vs.Set().ToJSON()
		if err != nil {
			return answer{Error: err.Error()}
		}
		a.ManagedFields = append(a.ManagedFields, entry{k.Manager, k.Operation, js})
	}
	sort.Slice(a.ManagedFields, func(i, j int) bool {
		x, y := a.ManagedFields[i], a.ManagedFields[j]
		return x.Manager < y.Manager || (x.Manager == y.Manager && x.Operation < y.Operation)
	})
	return a
}

func (st *state) refuse(cs []conflict) answer {
	a := st.answer()
	a.Conflicts = cs
	a.Error = fmt.Sprintf("Apply failed with %d conflicts", len(cs))
	return a
}

// conflicts are the fields an apply would change that other managers own,
// computed as the library's Updater does (each other manager's set
// intersected with what the forced apply modifies or adds). The library's
// own list, merge.ConflictsFromManagers, cannot be read in 4.1.2: it keeps
// the path that Set.Iterate reuses, so its conflicts end up naming each
// other's paths (fixed upstream later).
func conflicts(u *merge.Updater, live, cfg *typed.TypedValue, v fieldpath.APIVersion,
	managers fieldpath.ManagedFields, key string) []conflict {
	forced, _, err := u.Apply(live, cfg, v, managers.Copy(), key, true)
	if err != nil {
		return []conflict{{Field: "forced apply: " + err.Error()}}
	}
	if forced == nil {
		forced = live
	}
	cmp, err := live.Compare(forced)
	if err != nil {
		return []conflict{{Field: "compare: " + err.Error()}}
	}
	cmp = cmp.ExcludeFields(u.IgnoredFields[v])
	changed := cmp.Modified.Union(cmp.Added)
	seen := map[conflict]bool{}
	var out []conflict
	for m, vs := range managers {
		if m == key {
			continue
		}
		mk := parseKey(m)
		vs.Set().Intersection(changed).Iterate(func(p fieldpath.Path) {
			c := conflict{mk.Manager, mk.Operation, p.String()}
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		})
	}
	sort.Slice(out, func(i, j int) bool {
		x, y := out[i], out[j]
		return x.Field < y.Field || (x.Field == y.Field && x.Manager < y.Manager)
	})
	return out
}

func (st *state) fail(err error) answer {
	a := st.answer()
	a.Error = err.Error()
	return a
}

// decode is what the API server does to an object it decodes: into its Go
// type (decodeAsGo), then defaulting. Only the defaults of fields the
// sequences leave out are applied: a Service port's targetPort, a pod
// template's securityContext and a container's resources (a Go struct
// value, so {} when empty). An update is decoded before the field manager
// sees it (its defaults are the writer's); an apply's result after (its
// defaults are nobody's).
func decode(kind string, tp typed.ParseableType, obj map[string]interface{}) map[string]interface{} {
	obj = decodeAsGo(tp, obj)
	switch kind {
	case "Service":
		spec, _ := obj["spec"].(map[string]interface{})
		ports, _ := spec["ports"].([]interface{})
		for _, p := range ports {
			if m, ok := p.(map[string]interface{}); ok && m["targetPort"] == nil {
				m["targetPort"] = m["port"]
			}
		}
	case "StatefulSet":
		spec, _ := obj["spec"].(map[string]interface{})
		tpl, _ := spec["template"].(map[string]interface{})
		pod, _ := tpl["spec"].(map[string]interface{})
		if pod == nil {
			break
		}
		if pod["securityContext"] == nil {
			pod["securityContext"] = map[string]interface{}{}
		}
		for _, list := range []string{"containers", "initContainers"} {
			cs, _ := pod[list].([]interface{})
			for _, c := range cs {
				if m, ok := c.(map[string]interface{}); ok && m["resources"] == nil {
					m["resources"] = map[string]interface{}{}
				}
			}
		}
	}
	return obj
}

// decodeAsGo does to an object what decoding it into the Go type and
// encoding it again does: nulls, empty Go maps (a map type with no named
// fields) and empty lists go (every list field written is omitempty but
// containers, which is never empty here). Empty structs stay: a pointer to
// an empty struct is kept, a struct value is always there.
func decodeAsGo(tp typed.ParseableType, obj map[string]interface{}) map[string]interface{} {
	v, keep := goValue(tp.Schema, tp.TypeRef, obj)
	if !keep {
		return map[string]interface{}{}
	}
	return v.(map[string]interface{})
}

func goValue(s *schema.Schema, tr schema.TypeRef, v interface{}) (interface{}, bool) {
	if v == nil {
		return nil, false
	}
	if tr.NamedType != nil && *tr.NamedType == "__untyped_atomic_" {
		return v, true // status, managedFields, tolerations: kept as they are
	}
	atom, _ := s.Resolve(tr)
	switch x := v.(type) {
	case map[string]interface{}:
		if atom.Map == nil {
			return x, true
		}
		out := map[string]interface{}{}
		for key, child := range x {
			ct := atom.Map.ElementType
			if f, ok := atom.Map.FindField(key); ok {
				ct = f.Type
			}
			if c, keep := goValue(s, ct, child); keep {
				out[key] = c
			}
		}
		// A map type without named fields is a Go map: omitted when empty.
		if len(out) == 0 && len(atom.Map.Fields) == 0 {
			return nil, false
		}
		return out, true
	case []interface{}:
		if len(x) == 0 {
			return nil, false
		}
		var et schema.TypeRef
		if atom.List != nil {
			et = atom.List.ElementType
		}
		out := make([]interface{}, 0, len(x))
		for _, child := range x {
			if c, keep := goValue(s, et, child); keep {
				out = append(out, c)
			}
		}
		return out, true
	default:
		return x, true
	}
}

// mergePatch applies an RFC 7386 JSON merge patch.
func mergePatch(target, patch interface{}) interface{} {
	p, ok := patch.(map[string]interface{})
	if !ok {
		return patch
	}
	t, ok := target.(map[string]interface{})
	if !ok {
		t = map[string]interface{}{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
		} else {
			t[k] = mergePatch(t[k], v)
		}
	}
	return t
}

// numbers turns json.Number into int64 (or float64), as the API server
// decodes JSON numbers.
func numbers(v interface{}) interface{} {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]interface{}:
		out := make(map[string]interface{}, len(x))
		for k, c := range x {
			out[k] = numbers(c)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(x))
		for i, c := range x {
			out[i] = numbers(c)
		}
		return out
	default:
		return v
	}
}

func deepCopy(v interface{}) interface{} {
	switch x := v.(type) {
	case map[string]interface{}:
		out := make(map[string]interface{}, len(x))
		for k, c := range x {
			out[k] = deepCopy(c)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(x))
		for i, c := range x {
			out[i] = deepCopy(c)
		}
		return out
	default:
		return v
	}
}

func mustJSON(s string) map[string]interface{} {
	var m map[string]interface{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		panic(err)
	}
	return m
}
