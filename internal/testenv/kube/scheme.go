package kubetest

import (
	"k8s.io/client-go/kubernetes/scheme"
)

// clientNegotiator serves the unversioned /readyz request.
var clientNegotiator = scheme.Codecs.WithoutConversion()
