// Command k8scheck prints a kustomization rendered by the kustomize
// library, as `kubectl kustomize DIR` would: multi-document YAML on
// stdout. wdc's Kubernetes system test sends its output to a real API
// server as a server-side dry run.
//
//	go run . ../../deploy/k8s/base
package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// build renders the kustomization in dir. Errors: kustomize's (a missing
// or malformed file, a resource outside what the load restrictor allows).
func build(dir string) (resmap.ResMap, error) {
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return rm, nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: k8scheck KUSTOMIZATION_DIR   (prints the rendered YAML)")
		os.Exit(2)
	}
	rm, err := build(os.Args[1])
	if err == nil {
		var out []byte
		if out, err = rm.AsYaml(); err == nil {
			_, err = os.Stdout.Write(out)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8scheck:", err)
		os.Exit(1)
	}
}
