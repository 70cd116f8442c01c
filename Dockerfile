# syntax=docker/dockerfile:1
# rackplane: one image for the worker, the client commands, the exporters and the console.
# Stage 1 builds a virtualenv with rackplane and its runtime dependencies only (no dev
# extras, no compilers in the final image); stage 2 copies that virtualenv onto a slim
# Python and runs as an unprivileged user. Validated statically in `make test`
# (tests/deploy); no Docker engine runs in CI.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/rackplane
WORKDIR /src
COPY pyproject.toml README.md ./
COPY rackplane ./rackplane
RUN /opt/rackplane/bin/pip install .

FROM python:3.11-slim AS runtime
RUN groupadd --system --gid 10001 rackplane \
 && useradd --system --uid 10001 --gid rackplane --home-dir /var/lib/rackplane \
      --create-home --shell /usr/sbin/nologin rackplane
COPY --from=build /opt/rackplane /opt/rackplane
ENV PATH=/opt/rackplane/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RACKPLANE_WEB_BIND=0.0.0.0 \
    RACKPLANE_DATA_DIR=/var/lib/rackplane/worker \
    RACKPLANE_HISTORY_DB=/var/lib/rackplane/history.duckdb
USER 10001:10001
WORKDIR /var/lib/rackplane
EXPOSE 6066
ENTRYPOINT ["rackplane"]
CMD ["worker"]
