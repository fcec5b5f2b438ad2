# A tiny git server for tests: `git http-backend` behind Python's http.server on :8080,
# serving bare repositories from /srv/git (a volume), pushes allowed. Non-root (UID 10001).
# Directories under /srv/seed/<name>/ (e.g. a ConfigMap) become /srv/git/<name>.git at start.
# Also an SSH server for plugins fetched over SSH (tests/e2e/charts/ci-backends runs `sshd` as
# this non-root user, which can then log in only as itself: git, shell git-shell).
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN set -eux; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends git python3 openssh-server >/dev/null; \
    rm -rf /var/lib/apt/lists/*; \
    groupadd --gid 10001 git; \
    useradd --uid 10001 --gid 10001 --home-dir /tmp --no-create-home --shell /usr/bin/git-shell git; \
    usermod -p '*' git; \
    git config --system safe.directory '*'; \
    git config --system http.receivepack true; \
    git config --system init.defaultBranch main; \
    install -d -o 10001 -g 10001 /srv/git /srv/seed
COPY serve.py /usr/local/bin/git-server
USER 10001:10001
ENV HOME=/tmp
EXPOSE 8080
ENTRYPOINT ["python3", "/usr/local/bin/git-server"]
CMD ["--root", "/srv/git", "--seed", "/srv/seed", "--port", "8080"]
