# trainadmit webhook image: `docker build -t trainadmit:0.1.0 .`
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY webhook ./webhook
COPY certs ./certs
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
COPY policies /policies
# a fixed non-root user; the Deployment also sets runAsNonRoot and a read-only root filesystem
RUN useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin trainadmit
USER 65532:65532
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
EXPOSE 8443
ENTRYPOINT ["trainadmit"]
CMD ["serve", "--policy=/policies", "--tls-cert=/tls/tls.crt", "--tls-key=/tls/tls.key", "--port=8443"]
