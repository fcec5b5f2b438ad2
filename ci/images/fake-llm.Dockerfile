# The deterministic OpenAI-compatible LLM for tests (tests/fakes/openai_server.py, stdlib only).
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN set -eux; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends python3 >/dev/null; \
    rm -rf /var/lib/apt/lists/*
COPY openai_server.py /app/openai_server.py
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["python3", "/app/openai_server.py"]
CMD ["--host", "0.0.0.0", "--port", "8080"]
