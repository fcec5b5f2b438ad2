# kube-state-metrics for the e2e tier's live alerts (tests/e2e/test_alerts_ksm.py): the static
# binary ci/k8s/build-addons.sh builds from the Go module proxy (version pinned in
# ci/k8s/kube-state-metrics/go.mod) on an empty image, as no reachable registry serves
# registry.k8s.io/kube-state-metrics here. Runs as nobody, as upstream's image does.
FROM scratch
COPY kube-state-metrics /kube-state-metrics
USER 65534:65534
EXPOSE 8080 8081
ENTRYPOINT ["/kube-state-metrics"]
