# A stand-in for upstream's `nousresearch/hermes-agent` image, for machines where it cannot be
# pulled (this project's CI): Dockerfile.upstream is built and tested on it, the release
# workflow builds the same recipe on the real image. Made the way upstream's is
# (docs/hermes-versions.md): Debian with Python 3.14, Hermes in a venv at /opt/hermes/.venv,
# user `hermes` (UID 10000) whose home is /opt/data, HERMES_HOME=/opt/data, a SQLite with the
# WAL-reset fix (sid's), the venv's bin first on PATH, root as the default user. Hermes is the
# newest that installs here: PyPI's 0.19.0, which declares Python < 3.14 and runs on it. What
# it installs is ci/images/standin-requirements.txt, hash-checked wheels held to the agent
# lock's versions (the command that regenerates it is its first lines).
ARG BASE_IMAGE=local/debian:sid
FROM ${BASE_IMAGE}
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN set -eux; \
    apt-get -o Acquire::Check-Valid-Until=false update -qq; \
    apt-get install -y -qq --no-install-recommends \
      python3.14 python3.14-venv ca-certificates git procps >/dev/null; \
    rm -rf /var/lib/apt/lists/*
COPY build-ca/ /usr/local/share/ca-certificates/
RUN update-ca-certificates >/dev/null 2>&1 || true
COPY standin-requirements.txt /build/standin-requirements.txt
RUN set -eux; \
    useradd -u 10000 -m -d /opt/data hermes; \
    python3.14 -m venv /opt/hermes/.venv; \
    /opt/hermes/.venv/bin/pip install -q --require-hashes --only-binary :all: \
      --ignore-requires-python -r /build/standin-requirements.txt; \
    /opt/hermes/.venv/bin/hermes --version; \
    rm -rf /build
ENV HERMES_HOME=/opt/data \
    PATH=/opt/hermes/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /opt/hermes
