# TLS-terminating reverse proxy in front of the API (docker/compose.tls.yaml): Debian's nginx,
# configured by docker/proxy/nginx.conf. Debian's package rather than the nginx image, so that
# a host without a container registry builds it from its local Debian base image
# (GRADER_PROXY_BASE_IMAGE; docs/deployment.md, "TLS in front of the API").
# No `# syntax=` line: BuildKit would pull that frontend from Docker Hub (see worker.Dockerfile).
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
# Debian's stable nginx (security updates within the release), as the other images do.
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx \
    && rm -rf /var/lib/apt/lists/* /etc/nginx/sites-enabled /etc/nginx/conf.d \
    # Logs to the container's output (nginx opens its built-in error log before its config).
    && ln -sf /dev/stdout /var/log/nginx/access.log \
    && ln -sf /dev/stderr /var/log/nginx/error.log \
    && groupadd --system --gid 10002 proxy-tls \
    && useradd --system --uid 10002 --gid proxy-tls --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin proxy-tls
COPY docker/proxy/nginx.conf /etc/nginx/nginx.conf
# Unprivileged: ports 8443 (TLS) and 8080 (redirect to TLS) inside; compose publishes them.
USER 10002:10002
EXPOSE 8443 8080
CMD ["nginx", "-e", "stderr", "-g", "daemon off;"]
