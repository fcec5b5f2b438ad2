# The git-sync v4 stand-in (ci/images/git-sync/git_sync.py): a test double of upstream
# git-sync for this project's registry-less CI only (docs/plugins.md). Debian's git, run as
# 65533:65533 like the upstream image, entrypoint /git-sync like upstream.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN set -eux; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends git python3 ca-certificates openssh-client >/dev/null; \
    rm -rf /var/lib/apt/lists/*; \
    groupadd --gid 65533 git-sync; \
    useradd --uid 65533 --gid 65533 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin git-sync
COPY git_sync.py /git-sync
RUN chmod 0755 /git-sync
USER 65533:65533
ENV HOME=/tmp
ENTRYPOINT ["/git-sync"]
