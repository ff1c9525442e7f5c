# The Harmony for PostgreSQL image: the session server, the tuner and the TPC-H tools.
# Build: docker build -t harmony-postgres .   (docker-compose.yml builds it for you)
# PYTHON_IMAGE: any Python 3.11 image with pip on PATH; deploy/images/build passes its own
# (Debian's Python on a debootstrap base) where no public registry is reachable.
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
# the dependencies first, from pyproject.toml alone: a change to the sources reuses this layer
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > requirements.txt \
    && pip wheel --no-cache-dir --wheel-dir /deps -r requirements.txt
COPY README.md ./
COPY harmony ./harmony
COPY harmony_base ./harmony_base
COPY harmony_core ./harmony_core
COPY harmony_report ./harmony_report
COPY harmony_server ./harmony_server
COPY tuner_client ./tuner_client
COPY plugins ./plugins
COPY strategies ./strategies
COPY workloads ./workloads
COPY bme ./bme
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /project .

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="harmony-postgres" \
      org.opencontainers.image.description="Active-Harmony-style autotuner for PostgreSQL throughput"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HARMONY_STATE_DIR=/var/lib/harmony
RUN useradd --system --create-home --uid 10001 harmony \
    && mkdir -p /var/lib/harmony /etc/harmony && chown harmony /var/lib/harmony
COPY --from=build /deps /deps
RUN pip install --no-cache-dir --no-index /deps/*.whl && rm -rf /deps
COPY --from=build /project /project
RUN pip install --no-cache-dir --no-index --no-deps /project/*.whl && rm -rf /project
COPY configs /etc/harmony/configs
COPY deploy/tuner /etc/harmony/tuner
COPY --chmod=0755 deploy/docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
USER harmony
WORKDIR /var/lib/harmony
EXPOSE 1979 9188
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
CMD ["harmony", "server", "--host", "0.0.0.0"]
