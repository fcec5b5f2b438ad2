# Debian with the netfilter tools a node-level network component runs (iptables, ipset,
# conntrack), for kube-proxy and kube-router, each built from source by
# ci/kind/build-node-image.sh. iptables-wrapper.sh picks the node's iptables backend on first
# use, as upstream's kube-proxy image does.
ARG BASE_IMAGE=local/debian:bookworm
FROM ${BASE_IMAGE}
COPY build-ca/ /usr/local/share/ca-certificates/
COPY iptables-wrapper.sh /usr/sbin/iptables-wrapper
RUN export DEBIAN_FRONTEND=noninteractive && apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends iptables ipset conntrack iproute2 kmod >/dev/null \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
    && chmod 0755 /usr/sbin/iptables-wrapper \
    && for name in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do \
         ln -sf /usr/sbin/iptables-wrapper "/usr/sbin/$name"; \
       done
ARG BINARY
COPY ${BINARY} /usr/local/bin/${BINARY}
RUN ln -s /usr/local/bin/${BINARY} /usr/local/bin/component
ENTRYPOINT ["/usr/local/bin/component"]
