# A package index for tests: pypiserver (pinned with hashes in package-index-requirements.txt,
# its header regenerates it) serving /srv/packages (a volume) on :8080 as a PEP 503 "simple"
# index, no fallback to PyPI, uploads allowed without credentials (a test publishes the wheels it
# builds, as twine would). Non-root (UID 10001). tests/e2e/test_plugin_packages.py installs it
# through tests/e2e/charts/ci-backends (packageIndex.enabled).
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE} AS fetch
RUN set -eux; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates >/dev/null
COPY build-ca/ /usr/local/share/ca-certificates/build-ca/
COPY package-index-requirements.txt /tmp/requirements.txt
RUN set -eux; \
    update-ca-certificates >/dev/null; \
    python3 -m venv /opt/pypiserver; \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt /opt/pypiserver/bin/pip install -q \
        --require-hashes --only-binary :all: --no-cache-dir -r /tmp/requirements.txt; \
    /opt/pypiserver/bin/pypi-server --version

FROM ${BASE_IMAGE}
RUN set -eux; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends python3 >/dev/null; \
    rm -rf /var/lib/apt/lists/*; \
    install -d -o 10001 -g 10001 /srv/packages
COPY --from=fetch /opt/pypiserver /opt/pypiserver
USER 10001:10001
ENV HOME=/tmp
EXPOSE 8080
ENTRYPOINT ["/opt/pypiserver/bin/pypi-server", "run"]
CMD ["-p", "8080", "-i", "0.0.0.0", "--disable-fallback", "-a", ".", "-P", ".", \
     "--backend", "simple-dir", "/srv/packages"]
