# One image for every Tideway process; docker-compose.yml picks the command.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY schemas schemas
COPY stages stages
COPY streams streams
COPY migrations migrations
RUN pip install --no-cache-dir .
ENTRYPOINT ["tideway"]
