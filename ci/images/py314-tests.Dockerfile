# The Python 3.14 test runner: Debian sid's python3.14 with the runtime's dependencies, the
# test tools and Hermes installed, and no hermes-runtime source of its own. ci/test-py314.sh
# mounts the checkout at /src (PYTHONPATH=/src) and runs the unit tier in it. The layer that
# installs the dependencies depends only on pyproject.toml, so a code change rebuilds nothing.
ARG BASE_IMAGE=local/debian:sid
FROM ${BASE_IMAGE}
# Check-Valid-Until off: sid's Release file lives a week, and a mirror that serves a snapshot
# (as this project's machines use) outlives it; the packages are still signed and checked.
RUN set -eux; \
    apt-get -o Acquire::Check-Valid-Until=false update -qq; \
    apt-get install -y -qq --no-install-recommends \
      python3.14 python3.14-venv git ca-certificates procps >/dev/null; \
    rm -rf /var/lib/apt/lists/*
COPY build-ca/ /usr/local/share/ca-certificates/
RUN update-ca-certificates >/dev/null 2>&1 || true
COPY pyproject.toml README.md /build/
# A stand-in package: pip installs every dependency of hermes-runtime from its pyproject, and
# the distribution's console script and entry points; then the stand-in's code is removed and
# a .pth file puts /src on every interpreter's path (also a gateway started with a clean
# environment). hermes-agent 0.19.0 declares Python < 3.14 in its metadata and imports on
# 3.14 (docs/hermes-versions.md).
RUN set -eux; \
    mkdir -p /build/hermes_runtime; \
    touch /build/hermes_runtime/__init__.py; \
    python3.14 -m venv /opt/venv; \
    /opt/venv/bin/pip install -q --disable-pip-version-check --ignore-requires-python \
      "/build[test,dev]"; \
    site="$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"; \
    rm -rf "$site/hermes_runtime"; \
    echo /src > "$site/hermes-runtime-src.pth"; \
    rm -rf /build /root/.cache/pip
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONPYCACHEPREFIX=/tmp/pycache
WORKDIR /src
