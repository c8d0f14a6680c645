// These tests render deploy/k8s/base with kustomize and check each object
// against the Kubernetes API types (strict decoding: an unknown or
// misspelt field fails), then check what wdc's manifests promise: two
// control-plane replicas ready on /readyz, an agent on every node, scrape
// annotations, least-privilege RBAC, and every ConfigMap, Secret and
// ServiceAccount a pod names present in the base.
package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// base is the kustomize base, from this module's directory.
const base = "../../deploy/k8s/base"

// newObject returns an empty typed object for a kind the base may hold.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + "/" + kind {
	case "v1/Namespace":
		return &corev1.Namespace{}, nil
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1/Secret":
		return &corev1.Secret{}, nil
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "v1/Service":
		return &corev1.Service{}, nil
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, nil
	case "apps/v1/DaemonSet":
		return &appsv1.DaemonSet{}, nil
	case "rbac.authorization.k8s.io/v1/Role":
		return &rbacv1.Role{}, nil
	case "rbac.authorization.k8s.io/v1/RoleBinding":
		return &rbacv1.RoleBinding{}, nil
	case "rbac.authorization.k8s.io/v1/ClusterRole":
		return &rbacv1.ClusterRole{}, nil
	case "rbac.authorization.k8s.io/v1/ClusterRoleBinding":
		return &rbacv1.ClusterRoleBinding{}, nil
	}
	return nil, fmt.Errorf("%s %s: not a kind wdc's base should hold", apiVersion, kind)
}

// rendered is the base, rendered and decoded.
type rendered struct {
	objects      []any
	deployments  map[string]*appsv1.Deployment
	daemonSets   map[string]*appsv1.DaemonSet
	configMaps   map[string]bool
	secrets      map[string]bool
	accounts     map[string]bool
	roles        []rbacv1.PolicyRule
	clusterRoles []rbacv1.PolicyRule
	bindings     []rbacv1.Subject
	namespace    string
}

func render(t *testing.T) *rendered {
	t.Helper()
	rm, err := build(base)
	require.NoError(t, err)
	r := &rendered{deployments: map[string]*appsv1.Deployment{}, daemonSets: map[string]*appsv1.DaemonSet{},
		configMaps: map[string]bool{}, secrets: map[string]bool{}, accounts: map[string]bool{}}
	for _, res := range rm.Resources() {
		y, err := res.AsYAML()
		require.NoError(t, err)
		obj, err := newObject(res.GetApiVersion(), res.GetKind())
		require.NoError(t, err, "%s", y)
		require.NoError(t, yaml.UnmarshalStrict(y, obj), "%s %s does not match the API types:\n%s", res.GetKind(), res.GetName(), y)
		r.objects = append(r.objects, obj)
		switch o := obj.(type) {
		case *corev1.Namespace:
			r.namespace = o.Name
		case *appsv1.Deployment:
			r.deployments[o.Name] = o
		case *appsv1.DaemonSet:
			r.daemonSets[o.Name] = o
		case *corev1.ConfigMap:
			r.configMaps[o.Name] = true
		case *corev1.Secret:
			r.secrets[o.Name] = true
		case *corev1.ServiceAccount:
			r.accounts[o.Name] = true
		case *rbacv1.Role:
			r.roles = append(r.roles, o.Rules...)
		case *rbacv1.ClusterRole:
			r.clusterRoles = append(r.clusterRoles, o.Rules...)
		case *rbacv1.RoleBinding:
			r.bindings = append(r.bindings, o.Subjects...)
		case *rbacv1.ClusterRoleBinding:
			r.bindings = append(r.bindings, o.Subjects...)
		}
		if ns := res.GetNamespace(); res.GetKind() != "Namespace" && !strings.HasPrefix(res.GetKind(), "Cluster") {
			assert.Equal(t, "wdc", ns, "%s %s in the base's namespace", res.GetKind(), res.GetName())
		}
	}
	return r
}

// checkPod checks what every wdc pod needs: its service account, config
// and secret present, the metrics port scraped and probed.
func checkPod(t *testing.T, r *rendered, name string, spec corev1.PodTemplateSpec, wantArg string) {
	t.Helper()
	assert.True(t, r.accounts[spec.Spec.ServiceAccountName], "%s: service account %q in the base", name, spec.Spec.ServiceAccountName)
	require.Len(t, spec.Spec.Containers, 1, name)
	c := spec.Spec.Containers[0]
	assert.Equal(t, wantArg, c.Args[0], "%s runs `wdc %s`", name, wantArg)
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef != nil {
			assert.True(t, r.configMaps[from.ConfigMapRef.Name], "%s: ConfigMap %s in the base", name, from.ConfigMapRef.Name)
		}
		if from.SecretRef != nil {
			assert.True(t, r.secrets[from.SecretRef.Name], "%s: Secret %s in the base", name, from.SecretRef.Name)
		}
	}
	var metricsPort int32
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			metricsPort = p.ContainerPort
		}
	}
	require.NotZero(t, metricsPort, "%s: a port named metrics", name)
	addr := ""
	for _, e := range c.Env {
		if e.Name == "WDC_METRICS_ADDRESS" {
			addr = e.Value
		}
	}
	assert.Equal(t, fmt.Sprintf(":%d", metricsPort), addr, "%s: wdc serves metrics on the metrics port", name)
	ann := spec.Annotations
	assert.Equal(t, "true", ann["prometheus.io/scrape"], name)
	assert.Equal(t, fmt.Sprint(metricsPort), ann["prometheus.io/port"], name)
	assert.Equal(t, "/metrics", ann["prometheus.io/path"], name)
	require.NotNil(t, c.ReadinessProbe, name)
	require.NotNil(t, c.ReadinessProbe.HTTPGet, name)
	assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path, name)
	assert.Equal(t, "metrics", c.ReadinessProbe.HTTPGet.Port.String(), name)
	require.NotNil(t, c.LivenessProbe, name)
	require.NotNil(t, c.LivenessProbe.HTTPGet, name)
	assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path, name)
	sc := c.SecurityContext
	require.NotNil(t, sc, name)
	assert.True(t, sc.RunAsNonRoot != nil && *sc.RunAsNonRoot, "%s runs as non-root", name)
	assert.True(t, sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, name)
	assert.NotEmpty(t, c.Resources.Requests, "%s: resource requests", name)
}

func TestBaseRendersAndMatchesTheAPITypes(t *testing.T) {
	r := render(t)
	assert.Equal(t, "wdc", r.namespace)
	cp := r.deployments["wdc-control-plane"]
	require.NotNil(t, cp, "the control-plane Deployment")
	require.NotNil(t, cp.Spec.Replicas)
	assert.EqualValues(t, 2, *cp.Spec.Replicas, "two control planes")
	checkPod(t, r, "control plane", cp.Spec.Template, "control-plane")

	ag := r.daemonSets["wdc-agent"]
	require.NotNil(t, ag, "the agent DaemonSet")
	checkPod(t, r, "agent", ag.Spec.Template, "agent")
	args := strings.Join(ag.Spec.Template.Spec.Containers[0].Args, " ")
	assert.Contains(t, args, "--worker-id=$(NODE_NAME)", "one worker per node, named after it")
	env := map[string]corev1.EnvVar{}
	for _, e := range ag.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	require.Contains(t, env, "NODE_NAME")
	require.NotNil(t, env["NODE_NAME"].ValueFrom)
	assert.Equal(t, "spec.nodeName", env["NODE_NAME"].ValueFrom.FieldRef.FieldPath)
	for _, name := range []string{"WDC_CPU_MILLIS", "WDC_MEMORY_MI"} {
		require.Contains(t, env, name, "the agent declares its container's limits")
		require.NotNil(t, env[name].ValueFrom.ResourceFieldRef)
	}
	assert.Contains(t, args, "--cpu=$(WDC_CPU_MILLIS)m")
	assert.Contains(t, args, "--memory=$(WDC_MEMORY_MI)Mi")
}

// Least privilege: no wildcard, no escalation verbs, secrets created only
// (the attempts' keys) and never read, and every binding names a service account of the base.
func TestRBACIsLeastPrivilege(t *testing.T) {
	r := render(t)
	require.NotEmpty(t, r.roles, "a Role for the Kubernetes launcher")
	for _, rule := range append(slices.Clone(r.roles), r.clusterRoles...) {
		for _, s := range [][]string{rule.APIGroups, rule.Resources, rule.Verbs, rule.ResourceNames} {
			assert.NotContains(t, s, "*", "no wildcard in %+v", rule)
		}
		for _, v := range []string{"escalate", "bind", "impersonate"} {
			assert.NotContains(t, rule.Verbs, v, "%+v", rule)
		}
		if slices.Contains(rule.Resources, "secrets") {
			assert.Equal(t, []string{"secrets"}, rule.Resources, "a rule of its own: %+v", rule)
			assert.Equal(t, []string{"create"}, rule.Verbs, "secrets are only created (attempt keys), never read: %+v", rule)
		}
	}
	for _, rule := range r.clusterRoles {
		for _, v := range rule.Verbs {
			assert.Contains(t, []string{"get", "list", "watch"}, v, "cluster-wide rules only read: %+v", rule)
		}
	}
	require.NotEmpty(t, r.bindings)
	for _, s := range r.bindings {
		assert.Equal(t, rbacv1.ServiceAccountKind, s.Kind)
		assert.True(t, r.accounts[s.Name], "binding subject %s is a service account of the base", s.Name)
	}
}
