# A stand-in for python:3.11-slim built on the debootstrap base (deploy/images/build): Debian
# bookworm's Python 3.11 with pip in a virtual environment first on PATH, so the top-level
# Dockerfile's `pip wheel` / `pip install` steps run unchanged.
ARG BASE_IMAGE=harmony-base:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/python \
    && /opt/python/bin/pip install --cert /etc/ssl/certs/ca-certificates.crt --no-cache-dir -q \
        --upgrade pip wheel
# pip trusts the system's certificate store (with any CA the base image added), not its own
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8
CMD ["python3"]
