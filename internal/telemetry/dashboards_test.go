package telemetry

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// deployDir holds the Grafana dashboard and the Prometheus rules.
var deployDir = filepath.Join("..", "..", "deploy")

// exportedNames are the series names a control plane and an agent export
// from their start (their zero series, the SDK's and the Go and process
// collectors'), as Prometheus names them: a histogram family adds
// _bucket, _sum and _count; "up" is Prometheus's own.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{"up": true}
	for _, zero := range []func(m *Metrics){
		func(m *Metrics) { ExportControlPlaneZeros(m.Handler, "default") },
		func(m *Metrics) { ExportAgentZeros(m.Handler) },
	} {
		m := NewMetrics(nil)
		zero(m)
		require.NoError(t, m.Close())
		fams, err := m.Registry.Gather()
		require.NoError(t, err)
		for _, f := range fams {
			names[f.GetName()] = true
			if f.GetType() == dto.MetricType_HISTOGRAM {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					names[f.GetName()+s] = true
				}
			}
		}
	}
	return names
}

var (
	// Removed before looking for metric names: strings, label matchers,
	// ranges, and the label lists of by/without/on/ignoring/group_*.
	promStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promLabels   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promWords    = map[string]bool{"and": true, "or": true, "unless": true, "offset": true, "bool": true, "by": true,
		"without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true}
)

// metricNames are the metric names expr selects: its identifiers that
// are neither a function (followed by '('), a keyword, a number, nor a
// label.
func metricNames(expr string) []string {
	e := promStrings.ReplaceAllString(expr, `""`)
	e = promLabels.ReplaceAllString(e, " ")
	e = promMatchers.ReplaceAllString(e, " ")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(e, -1) {
		name := e[loc[0]:loc[1]]
		if loc[0] > 0 && (isDigit(e[loc[0]-1]) || e[loc[0]-1] == '.' || e[loc[0]-1] == '$') {
			continue // 15m, 1e3, $__rate_interval
		}
		if rest := strings.TrimLeft(e[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") || promWords[strings.ToLower(name)] {
			continue
		}
		out = append(out, name)
	}
	return out
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

// unknownMetrics lists "where: name" for each metric an expression names
// that is neither exported nor recorded.
func unknownMetrics(exprs map[string]string, known map[string]bool) []string {
	var out []string
	for where, e := range exprs {
		for _, n := range metricNames(e) {
			if !known[n] {
				out = append(out, where+": "+n)
			}
		}
	}
	sort.Strings(out)
	return out
}

type dashboard struct {
	UID    string `json:"uid"`
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Record      string            `json:"record"`
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func TestMetricNamesOfAnExpression(t *testing.T) {
	assert.Equal(t, []string{"wdc_ingest_seconds_bucket"},
		metricNames(`histogram_quantile(0.99, sum by (le, instance) (rate(wdc_ingest_seconds_bucket{reason="a b"}[$__rate_interval])))`))
	assert.Equal(t, []string{"wdc_leases_expired_total", "wdc_leases_expired_total", "up"},
		metricNames("sum(rate(wdc_leases_expired_total[15m])) > 3 * sum(rate(wdc_leases_expired_total[1d] offset 15m)) and on (job) up >= 5"))
	assert.Equal(t, []string{"ns:wdc_bogus_total"}, metricNames(`max without (pod) (ns:wdc_bogus_total)`))
}

// The dashboard and the rules parse, and every PromQL expression in them
// names only metrics that wdc's processes export from their start (or
// that a recording rule defines): a renamed metric fails here.
func TestDashboardAndRulesNameExportedMetrics(t *testing.T) {
	known := exportedNames(t)
	for _, want := range []string{"wdc_leases_revoked_total", "wdc_worker_selection_seconds_bucket", "wdc_attempts_running", "wdc_workers", "process_start_time_seconds"} {
		require.True(t, known[want], "exported: %s", want)
	}
	exprs := map[string]string{}

	b, err := os.ReadFile(filepath.Join(deployDir, "prometheus", "wdc-rules.yml"))
	require.NoError(t, err)
	var rules ruleFile
	require.NoError(t, yaml.UnmarshalStrict(b, &rules))
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Expr, "group %s", g.Name)
			if r.Record != "" {
				known[r.Record] = true
			}
			alerts[r.Alert] = true
			exprs["rule "+r.Record+r.Alert] = r.Expr
		}
	}
	for _, a := range []string{"WdcLeasesExpiringFasterThanUsual", "WdcWorkerFlapping", "WdcIngestFailing"} {
		assert.True(t, alerts[a], "alert %s", a)
	}

	b, err = os.ReadFile(filepath.Join(deployDir, "grafana", "wdc.json"))
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(b, &d))
	assert.Equal(t, "wdc-overview", d.UID)
	require.NotEmpty(t, d.Panels)
	for _, p := range d.Panels {
		require.NotEmpty(t, p.Targets, "panel %q", p.Title)
		for i, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q", p.Title)
			exprs["panel "+p.Title+" #"+string(rune('A'+i))] = tg.Expr
		}
	}
	assert.Empty(t, unknownMetrics(exprs, known), "metrics no wdc process exports")

	// The check bites: a panel naming a metric wdc does not export.
	assert.Equal(t, []string{"panel x: wdc_leases_lost_total"},
		unknownMetrics(map[string]string{"panel x": "sum(rate(wdc_leases_lost_total[5m]))"}, known))
}

// The compose stack's Prometheus scrapes every wdc container (each
// control plane and agent, on its WDC_METRICS_ADDRESS port) and loads the
// rules; its Grafana is provisioned with the dashboard.
func TestComposeScrapesEveryWdcContainer(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "..", "docker-compose.yml"))
	require.NoError(t, err)
	var compose struct {
		Services map[string]struct {
			Image       string            `json:"image"`
			Command     []string          `json:"command"`
			Environment map[string]string `json:"environment"`
			Volumes     []string          `json:"volumes"`
		} `json:"services"`
	}
	require.NoError(t, yaml.Unmarshal(b, &compose))
	b, err = os.ReadFile(filepath.Join(deployDir, "prometheus", "prometheus.yml"))
	require.NoError(t, err)
	var prom struct {
		RuleFiles     []string `json:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `json:"job_name"`
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	require.NoError(t, yaml.Unmarshal(b, &prom))
	targets := map[string]string{}
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				targets[tg] = sc.JobName
			}
		}
	}
	wdc := 0
	for name, s := range compose.Services {
		if s.Image != "wdc:local" {
			continue
		}
		wdc++
		_, port, _ := strings.Cut(s.Environment["WDC_METRICS_ADDRESS"], ":")
		require.NotEmpty(t, port, "%s serves metrics", name)
		job := targets[name+":"+port]
		assert.Equal(t, "wdc-"+s.Command[0], job, "%s (%s) scraped by its role's job", name, s.Command[0])
	}
	assert.Equal(t, 4, wdc, "two control planes and two agents")
	assert.Equal(t, []string{"/etc/prometheus/wdc-rules.yml"}, prom.RuleFiles)
	assert.Contains(t, compose.Services["prometheus"].Volumes, "./deploy/prometheus/wdc-rules.yml:/etc/prometheus/wdc-rules.yml:ro")
	assert.Contains(t, compose.Services["grafana"].Volumes, "./deploy/grafana/wdc.json:/var/lib/grafana/dashboards/wdc.json:ro")
}
