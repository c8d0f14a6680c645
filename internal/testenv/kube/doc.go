// Package kubetest runs a real Kubernetes control plane for tests — etcd,
// kube-apiserver and kube-controller-manager (the Job, TTL-after-finished
// and garbage-collector controllers) as local processes from the binaries
// tools/k8s/build.sh caches — and a test kubelet (Kubelet) that binds the
// pods of one namespace, runs their container command as a local process
// with exactly the pod's environment, and writes their status as a
// kubelet would. There is no scheduler, no container runtime and no
// network: whatever a test needs of those, it plays itself.
//
// A missing binary is an error (ErrNoBinaries names the build script),
// never a reason to skip.
//
// Import it as kubetest ("github.com/wdc-runtime/wdc/internal/testenv/kube");
// it is one of the test environments under internal/testenv, beside ray
// (raytest) and s3 (s3test), and nothing outside tests imports it.
package kubetest
