# Prometheus 2.42 and promtool from Debian bookworm's `prometheus` package, for the e2e tier's
# live alert tests (tests/e2e/test_alerts.py): no registry serves prom/prometheus here. The
# package's service is never started in the build (policy-rc.d), and the server runs non-root
# with its TSDB on a volume at /prometheus. Recommends (node-exporter) are left out.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN set -eux; \
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; \
    chmod 0755 /usr/sbin/policy-rc.d; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
    rm -rf /var/lib/apt/lists/* /usr/sbin/policy-rc.d; \
    install -d -o 10004 -g 10004 /prometheus; \
    prometheus --version; \
    promtool --version
USER 10004:10004
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
