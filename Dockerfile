# The operator image for `kubectl apply -k manifests/`.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip install --no-cache-dir . && rm -rf /root/.cache
USER 65532:65532
ENTRYPOINT ["phalanx"]
