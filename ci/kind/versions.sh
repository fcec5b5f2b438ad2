# Versions of everything the kind path builds. Sourced, not run.
KIND_VERSION=v0.33.0            # sigs.k8s.io/kind, from the Go module proxy
CRICTL_VERSION=v1.34.0          # sigs.k8s.io/cri-tools
KUBE_ROUTER_VERSION=v2.1.0      # github.com/cloudnativelabs/kube-router/v2 (the CNI)
ETCD_IMAGE_TAG=3.6.5-0          # what kubeadm v1.34 deploys (ci/k8s/etcd builds v3.6.5)
COREDNS_VERSION=v1.14.7         # ci/k8s/coredns; kubeadm is told this tag (ci/kind-config.yaml)
PAUSE_VERSION=3.10              # the sandbox_image of kind's containerd config
LOCAL_PATH_VERSION=v0.0.30      # github.com/rancher/local-path-provisioner
NODE_IMAGE_REPO=localhost/hermes-runtime/kind-node
CLUSTER_NAME=hermes
REGISTRY_NAME=hermes-registry   # the local registry container, on kind's network
REGISTRY_HOST_PORT=5001         # 127.0.0.1:5001 on the host: where images are pushed
