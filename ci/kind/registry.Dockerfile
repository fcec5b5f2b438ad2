# The local OCI registry: Debian's docker-registry (distribution 2.8), the same server a
# platform team runs. ci/kind/registry.sh runs it on kind's network, published on 127.0.0.1.
ARG BASE_IMAGE=local/debian:bookworm
FROM ${BASE_IMAGE}
RUN export DEBIAN_FRONTEND=noninteractive && apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends docker-registry >/dev/null \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
COPY config.yml /etc/docker/registry/config.yml
EXPOSE 5000
ENTRYPOINT ["/usr/bin/docker-registry", "serve", "/etc/docker/registry/config.yml"]
