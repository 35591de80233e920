# Image for the web process, the Celery worker and beat (one image, three commands).
FROM python:3.11-slim
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
RUN useradd --system --uid 10001 portal
USER 10001
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
