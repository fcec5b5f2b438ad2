//go:build tools

// Pins kube-state-metrics so `go mod tidy` keeps it; the binary itself is built with
// `go build k8s.io/kube-state-metrics/v2` (ci/k8s/build-addons.sh).
package tools

import _ "k8s.io/kube-state-metrics/v2"
