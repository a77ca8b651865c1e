# matebot in a container: a non-root user, everything it keeps in the /srv/matebot/data volume.
#   docker build -t matebot .
#   docker run -d --name matebot --restart unless-stopped --stop-timeout 40 \
#     -v matebot-data:/srv/matebot/data -e ANTHROPIC_API_KEY=sk-ant-... \
#     -e TELEGRAM_BOT_TOKEN=... matebot
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --system --create-home --home-dir /srv/matebot --uid 10001 matebot

WORKDIR /opt/matebot
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY channels ./channels
COPY memory ./memory
COPY prompts ./prompts
RUN pip install .

WORKDIR /srv/matebot
COPY config.yaml ./config.yaml
RUN mkdir -p data && chown matebot:matebot data
USER matebot
VOLUME /srv/matebot/data

# The API listens on the container's loopback unless MATE_API_HOST is set (and then it
# needs MATE_API_TOKEN), on MATE_API_PORT (8765); the health check asks it from inside.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('MATE_API_PORT', '8765'); sys.exit(urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4).status != 200)"]

STOPSIGNAL SIGTERM
CMD ["matebot", "run", "--config", "/srv/matebot/config.yaml"]
