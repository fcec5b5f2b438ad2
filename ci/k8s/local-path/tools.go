//go:build tools

// Pins local-path-provisioner so `go mod tidy` keeps it; the binary itself is
// built with `go build github.com/rancher/local-path-provisioner`.
package tools

import _ "github.com/rancher/local-path-provisioner"
