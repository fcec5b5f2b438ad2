# The kind node base image, assembled here instead of pulled (docker.io/kindest/base cannot be
# pulled on registry-less machines). It follows kind v0.33.0's images/base/Dockerfile, with
# Debian bookworm's packages where kind compiles its own (containerd 1.6, runc 1.1, CNI plugins)
# and kind's own node files (entrypoint, systemd units, containerd config), which
# ci/kind/build-node-image.sh copies from the sigs.k8s.io/kind@v0.33.0 module into the context.
ARG BASE_IMAGE=local/debian:bookworm
FROM ${BASE_IMAGE}
COPY build-ca/ /usr/local/share/ca-certificates/
COPY kind-files/usr/local/bin/ /usr/local/bin/
COPY kind-files/kind/ /kind/
COPY kind-files/etc/ /etc/
COPY crictl /usr/local/bin/crictl
# --force-confold: kind's /etc/containerd/config.toml (copied above) stays. Debian's containerd
# 1.6.20~ds1-1+deb12u3 ships that file as a conffile, and dpkg's prompt fails without a tty.
RUN chmod 0755 /usr/local/bin/* /kind /kind/bin /kind/bin/* \
    && export DEBIAN_FRONTEND=noninteractive \
    && apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-confold \
       systemd conntrack iptables nftables ipset iproute2 ethtool util-linux mount kmod \
       libseccomp2 pigz bash ca-certificates curl jq procps \
       containerd runc containernetworking-plugins >/dev/null \
    && { update-ca-certificates >/dev/null 2>&1 || true; } \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
    && ln -sf /usr/bin/containerd /usr/local/bin/containerd \
    && mkdir -p /opt/cni/bin && ln -sf /usr/lib/cni/* /opt/cni/bin/ \
    && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \
    && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
       /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
       /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \
    && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \
    && ln -sf /usr/lib/systemd/systemd /sbin/init \
    && ctr oci spec \
       | jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
       | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \
    && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \
    && systemctl mask systemd-binfmt.service \
    && mkdir -p /etc/kubernetes/manifests
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]
