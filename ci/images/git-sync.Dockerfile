# git-sync v4 (k8s.io/git-sync, built by ci/build-git-sync.sh) on Debian, which provides the
# `git` it runs. UID/GID 65533 like the upstream image, so the chart's securityContext matches.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN set -eux; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends git ca-certificates openssh-client >/dev/null; \
    rm -rf /var/lib/apt/lists/*; \
    groupadd --gid 65533 git-sync; \
    useradd --uid 65533 --gid 65533 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin git-sync
COPY git-sync /git-sync
USER 65533:65533
ENV HOME=/tmp
ENTRYPOINT ["/git-sync"]
