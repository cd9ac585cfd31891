package dashboard_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// dashboardFile is the dashboard an operator imports.
const dashboardFile = "../../expiry/prometheus/dashboard.json"

// importOnly are the keys of Grafana's export format that its import dialog
// reads (the plugins a dashboard needs, the inputs it asks for) and that are
// not part of the dashboard model itself.
var importOnly = []string{"__inputs", "__requires", "__elements"}

// The enumerations of the variable model: Go cannot list a type's
// constants, and the strict decoder takes any value of their underlying type.
var (
	variableTypes = []dashboard.VariableType{dashboard.VariableTypeQuery, dashboard.VariableTypeAdhoc,
		dashboard.VariableTypeGroupby, dashboard.VariableTypeConstant, dashboard.VariableTypeDatasource,
		dashboard.VariableTypeInterval, dashboard.VariableTypeTextbox, dashboard.VariableTypeCustom,
		dashboard.VariableTypeSwitch}
	variableHides = []dashboard.VariableHide{dashboard.VariableHideDontHide, dashboard.VariableHideHideLabel,
		dashboard.VariableHideHideVariable, dashboard.VariableHideInControlsMenu}
	variableRefreshes = []dashboard.VariableRefresh{dashboard.VariableRefreshNever,
		dashboard.VariableRefreshOnDashboardLoad, dashboard.VariableRefreshOnTimeRangeChanged}
	variableSorts = []dashboard.VariableSort{dashboard.VariableSortDisabled, dashboard.VariableSortAlphabeticalAsc,
		dashboard.VariableSortAlphabeticalDesc, dashboard.VariableSortNumericalAsc, dashboard.VariableSortNumericalDesc,
		dashboard.VariableSortAlphabeticalCaseInsensitiveAsc, dashboard.VariableSortAlphabeticalCaseInsensitiveDesc,
		dashboard.VariableSortNaturalAsc, dashboard.VariableSortNaturalDesc}
)

func init() {
	// The panel plugins' options and field configs, and the data sources'
	// queries, are decoded by their own types only once registered.
	plugins.RegisterDefaultPlugins()
}

// check decodes raw as Grafana's dashboard model and returns what the schema
// rejects: an unknown field anywhere (panel options and Prometheus queries
// included), a value of the wrong type, a required field missing, a failed
// constraint, a panel type no panel plugin has, a query Prometheus's query
// model does not decode, a variable enumeration out of its range.
func check(raw []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	for _, k := range importOnly {
		delete(top, k)
	}
	model, err := json.Marshal(top)
	if err != nil {
		return fmt.Errorf("re-encode: %w", err)
	}
	var d dashboard.Dashboard
	if err := orNil(d.UnmarshalJSONStrict(model)); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	if err := orNil(d.Validate()); err != nil {
		return fmt.Errorf("constraints: %w", err)
	}
	for i, v := range d.Templating.List {
		switch {
		case !slices.Contains(variableTypes, v.Type):
			return fmt.Errorf("templating.list[%d] %q: unknown variable type %q", i, v.Name, v.Type)
		case v.Hide != nil && !slices.Contains(variableHides, *v.Hide):
			return fmt.Errorf("templating.list[%d] %q: hide %d out of range", i, v.Name, *v.Hide)
		case v.Refresh != nil && !slices.Contains(variableRefreshes, *v.Refresh):
			return fmt.Errorf("templating.list[%d] %q: refresh %d out of range", i, v.Name, *v.Refresh)
		case v.Sort != nil && !slices.Contains(variableSorts, *v.Sort):
			return fmt.Errorf("templating.list[%d] %q: sort %d out of range", i, v.Name, *v.Sort)
		}
	}
	// The dashboard's decoder reports the panels' errors but keeps none of
	// them (the SDK's panel-or-row decoder returns its empty error list as
	// an error before it stores the panel), so each panel is decoded again
	// on its own to check it further.
	var raws struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(model, &raws); err != nil {
		return fmt.Errorf("panels: %w", err)
	}
	for i, raw := range raws.Panels {
		var kind struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(raw, &kind); err != nil {
			return fmt.Errorf("panels[%d]: %w", i, err)
		}
		var panels []dashboard.Panel
		if kind.Type == "row" {
			var row dashboard.RowPanel
			if err := orNil(row.UnmarshalJSONStrict(raw)); err != nil {
				return fmt.Errorf("panels[%d]: %w", i, err)
			}
			if err := orNil(row.Validate()); err != nil {
				return fmt.Errorf("panels[%d]: %w", i, err)
			}
			panels = row.Panels // a collapsed row's
		} else {
			var p dashboard.Panel
			if err := orNil(p.UnmarshalJSONStrict(raw)); err != nil {
				return fmt.Errorf("panels[%d]: %w", i, err)
			}
			panels = []dashboard.Panel{p}
		}
		for _, p := range panels {
			if err := orNil(p.Validate()); err != nil {
				return fmt.Errorf("panels[%d]: %w", i, err)
			}
			if _, ok := cog.ConfigForPanelcfgVariant(p.Type); !ok {
				return fmt.Errorf("panels[%d]: no panel plugin %q", i, p.Type)
			}
			for j, q := range p.Targets {
				if _, ok := q.(*prometheus.Dataquery); !ok {
					return fmt.Errorf("panels[%d].targets[%d]: not a Prometheus query (%T)", i, j, q)
				}
			}
		}
	}
	return nil
}

// orNil returns nil for an empty cog.BuildErrors: the SDK's strict decoders
// return their error list as an error even when it is empty, so that a
// non-nil error alone says nothing.
func orNil(err error) error {
	var list cog.BuildErrors
	if errors.As(err, &list) && len(list) == 0 {
		return nil
	}
	return err
}

// The committed dashboard.json is a dashboard Grafana's schema accepts.
func TestDashboardFitsGrafanaSchema(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := check(raw); err != nil {
		t.Fatalf("%s does not fit Grafana's dashboard schema:\n%v", dashboardFile, err)
	}
	var d dashboard.Dashboard
	if err := orNil(d.UnmarshalJSONStrict(withoutImportKeys(t, raw))); err != nil {
		t.Fatal(err)
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, string(v.Type)+" "+v.Name)
	}
	if want := []string{"datasource datasource", "query job", "query instance"}; !slices.Equal(vars, want) {
		t.Errorf("variables %q, want %q", vars, want)
	}
}

func withoutImportKeys(t *testing.T, raw []byte) []byte {
	t.Helper()
	var top map[string]any
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	for _, k := range importOnly {
		delete(top, k)
	}
	out, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The check rejects the mistakes a hand-edited dashboard makes: each
// mutation of the committed file must fail it.
func TestCheckRejectsBrokenDashboards(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := check(raw); err != nil {
		t.Fatalf("the committed dashboard must pass before its mutations can show anything: %v", err)
	}
	variable := func(d map[string]any, name string) map[string]any {
		for _, v := range d["templating"].(map[string]any)["list"].([]any) {
			if v := v.(map[string]any); v["name"] == name {
				return v
			}
		}
		t.Fatalf("no variable %s", name)
		return nil
	}
	panel := func(d map[string]any, typ string) map[string]any {
		for _, p := range d["panels"].([]any) {
			if p := p.(map[string]any); p["type"] == typ {
				return p
			}
		}
		t.Fatalf("no %s panel", typ)
		return nil
	}
	for _, tc := range []struct {
		name   string
		want   string // in the error: rejected for this reason
		mutate func(d map[string]any)
	}{
		{"a variable of an unknown type", `unknown variable type "qurey"`, func(d map[string]any) { variable(d, "job")["type"] = "qurey" }},
		{"a variable's hide of the wrong type", "templating.list[2].hide: json: cannot unmarshal string", func(d map[string]any) { variable(d, "instance")["hide"] = "no" }},
		{"a variable's refresh out of range", "refresh 7 out of range", func(d map[string]any) { variable(d, "job")["refresh"] = 7 }},
		{"a variable's multi of the wrong type", "templating.list[1].multi: json: cannot unmarshal string", func(d map[string]any) { variable(d, "job")["multi"] = "yes" }},
		{"a variable without a name", "templating.list[1].name: required field is missing", func(d map[string]any) { delete(variable(d, "job"), "name") }},
		{"a variable with an unknown field", "unexpected field 'pluginId'", func(d map[string]any) { variable(d, "datasource")["pluginId"] = "prometheus" }},
		{"a panel's width as a string", "gridPos.w: json: cannot unmarshal string", func(d map[string]any) { panel(d, "stat")["gridPos"].(map[string]any)["w"] = "6" }},
		{"a panel's id as a string", "].id: json: cannot unmarshal string", func(d map[string]any) { panel(d, "timeseries")["id"] = "7" }},
		{"a panel with an unknown field", "unexpected field 'legendMode'", func(d map[string]any) { panel(d, "timeseries")["legendMode"] = "table" }},
		{"a stat option of the wrong type", "options.wideLayout: json: cannot unmarshal string", func(d map[string]any) {
			panel(d, "stat")["options"].(map[string]any)["wideLayout"] = "true"
		}},
		{"an unknown time series option", "unexpected field 'stacking'", func(d map[string]any) {
			panel(d, "timeseries")["options"].(map[string]any)["stacking"] = "normal"
		}},
		{"a required option missing", "options.tooltip: required field is missing", func(d map[string]any) { delete(panel(d, "timeseries")["options"].(map[string]any), "tooltip") }},
		{"a panel type no plugin has", `no panel plugin "timeseries2"`, func(d map[string]any) { panel(d, "timeseries")["type"] = "timeseries2" }},
		{"a query's expr as a number", "targets[0].expr: json: cannot unmarshal number", func(d map[string]any) {
			panel(d, "stat")["targets"].([]any)[0].(map[string]any)["expr"] = 1
		}},
		{"a query with an unknown field", "unexpected field 'query'", func(d map[string]any) {
			panel(d, "stat")["targets"].([]any)[0].(map[string]any)["query"] = "up"
		}},
		{"an unknown top-level field", "unexpected field 'shema'", func(d map[string]any) { d["shema"] = 39 }},
		{"panels not a list", "cannot unmarshal object", func(d map[string]any) { d["panels"] = map[string]any{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d map[string]any
			if err := json.Unmarshal(raw, &d); err != nil {
				t.Fatal(err)
			}
			tc.mutate(d)
			broken, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			err = check(broken)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("rejected for another reason than %q:\n%v", tc.want, err)
			}
			t.Log(err)
		})
	}
}
