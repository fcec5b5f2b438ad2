#!/usr/bin/env bash
# Generates the cluster's CA, serving and client certificates with openssl, and
# the kubeconfigs for each component. Idempotent: an existing PKI is kept, so a
# warm start reuses it and old kubeconfigs stay valid. Usage: pki.sh NODE_IP NODE_NAME
set -euo pipefail
source "$(dirname "$0")/env.sh"
NODE_IP="$1"
NODE_NAME="$2"
API_SERVICE_IP="10.96.0.1"
mkdir -p "$K8S_PKI"
cd "$K8S_PKI"
umask 077

if [[ ! -f ca.key ]]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -keyout ca.key -out ca.crt \
    -subj "/CN=hermes-k8s-ca" 2>/dev/null
fi
# A different node address (another machine, a new VM) invalidates the serving certs.
if [[ -f node-ip && "$(cat node-ip)" != "$NODE_IP" ]]; then rm -f apiserver.crt kubelet-serving.crt; fi
echo "$NODE_IP" > node-ip
[[ -f sa.key ]] || { openssl genrsa -out sa.key 2048 2>/dev/null && openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null; }

# cert NAME CN ORG EXT_USAGE [SANS]
cert() {
  local name="$1" cn="$2" org="$3" usage="$4" sans="${5:-}"
  [[ -f "$name.crt" ]] && return 0
  local subj="/CN=$cn"
  [[ -n "$org" ]] && subj="/O=$org$subj"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [[ -n "$sans" ]] && echo "subjectAltName=$sans"
  } > "$name.ext"
  openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "$subj" 2>/dev/null
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

cert apiserver kube-apiserver "" serverAuth \
  "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$API_SERVICE_IP,IP:$NODE_IP"
cert apiserver-kubelet-client kube-apiserver-kubelet-client "system:masters" clientAuth
cert admin kubernetes-admin "system:masters" clientAuth
cert controller-manager system:kube-controller-manager "" clientAuth
cert scheduler system:kube-scheduler "" clientAuth
cert kube-proxy system:kube-proxy "" clientAuth
cert kubelet "system:node:$NODE_NAME" "system:nodes" clientAuth
cert kubelet-serving "$NODE_NAME" "" serverAuth "DNS:$NODE_NAME,DNS:localhost,IP:$NODE_IP,IP:127.0.0.1"

# kubeconfig FILE CERT SERVER
kubeconfig() {
  local file="$1" name="$2" server="$3"
  cat > "$file.tmp" <<KC
apiVersion: v1
kind: Config
clusters:
- name: hermes-k8s
  cluster:
    certificate-authority-data: $(base64 -w0 < ca.crt)
    server: $server
users:
- name: $name
  user:
    client-certificate-data: $(base64 -w0 < "$name.crt")
    client-key-data: $(base64 -w0 < "$name.key")
contexts:
- name: hermes-k8s
  context: {cluster: hermes-k8s, user: $name}
current-context: hermes-k8s
KC
  mv "$file.tmp" "$file"
}
LOCAL_API="https://127.0.0.1:6443"
for c in controller-manager scheduler kube-proxy kubelet; do kubeconfig "$c.kubeconfig" "$c" "$LOCAL_API"; done
# The admin kubeconfig names the node IP so it also works from inside
# containers on this host (pods reach the API on that address too).
kubeconfig "$KUBECONFIG_PATH" admin "https://$NODE_IP:6443"
chmod 600 "$KUBECONFIG_PATH"
