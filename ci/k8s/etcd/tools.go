//go:build tools

// Package tools pins the etcd server and etcdctl commands this module builds.
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
