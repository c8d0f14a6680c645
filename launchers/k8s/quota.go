package k8s

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/wdc-runtime/wdc/resource"
)

// QuotaCapacity reads the namespace's ResourceQuotas and returns the
// capacity they allow: for CPU (millicores), memory (bytes) and GPUs
// (GPUResource) the smallest hard limit among them, read from
// "requests.<name>" or else "<name>" (the launcher's pods request what
// they limit). A resource no quota limits is 0 in capacity; found is
// false when no quota limits any of the three. Errors: the quotas cannot
// be listed.
func QuotaCapacity(ctx context.Context, client kubernetes.Interface, namespace string) (capacity resource.List, found bool, err error) {
	list, err := client.CoreV1().ResourceQuotas(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return resource.List{}, false, fmt.Errorf("list resource quotas in namespace %s: %w", namespace, err)
	}
	limit := func(name corev1.ResourceName, milli bool) int64 {
		var out int64
		seen := false
		for _, rq := range list.Items {
			q, ok := rq.Spec.Hard["requests."+name]
			if !ok {
				q, ok = rq.Spec.Hard[name]
			}
			if !ok {
				continue
			}
			v := q.Value()
			if milli {
				v = q.MilliValue()
			}
			if !seen || v < out {
				out, seen = v, true
			}
			found = true
		}
		return out
	}
	capacity = resource.List{CPUMillis: limit(corev1.ResourceCPU, true), MemoryBytes: limit(corev1.ResourceMemory, false), GPUs: limit(GPUResource, false)}
	return capacity, found, nil
}
