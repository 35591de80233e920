# One image for every process of the portal: web (gunicorn), Celery worker and beat, the
# node watcher, the migrations Job and the node agent (deploy/kubernetes/, docs/install.md).
# Tag it with the release, never :latest:
#   docker build -t ghcr.io/example/gpu-quota-portal:0.1.0 .   (pyproject.toml's version)
FROM python:3.11-slim-bookworm
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="gpu-quota-portal" \
      org.opencontainers.image.version="${VERSION}"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 DJANGO_SETTINGS_MODULE=portal.settings_production
WORKDIR /app
# REQUIREMENTS=requirements-dev.txt adds what the simulated cluster needs (docker-compose's sim).
ARG REQUIREMENTS=requirements.txt
COPY requirements.txt requirements-dev.txt ./
RUN pip install --no-cache-dir -r ${REQUIREMENTS}
COPY . .
# collectstatic needs a key and hosts only to import settings; real ones come at run time.
RUN SECRET_KEY=build-only-$(head -c 48 /dev/urandom | base64 | tr -dc a-zA-Z0-9) \
    ALLOWED_HOSTS=build DATABASE_URL=postgres://x@localhost/x \
    python manage.py collectstatic --noinput
# UID and GID 10001: the manifests' runAsUser / runAsGroup / fsGroup.
RUN groupadd --system --gid 10001 portal && useradd --system --uid 10001 --gid 10001 portal
USER 10001
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
