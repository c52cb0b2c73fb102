# skill-mcp appliance (SPEC §15.2). The base image is named only here; CI builds against a
# locally imported Debian tree with --build-arg BASE_IMAGE=local/debian:bookworm.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS build
# apt-get clean: a base without debian-slim's docker-clean hook (CI's debootstrap tree) would
# otherwise keep every downloaded .deb in the layer.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-venv ca-certificates \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml constraints.txt README.md* LICENSE* ./
COPY skill_mcp ./skill_mcp
# The build network's CA arrives as the BuildKit secret pip_ca, mounted for this command only;
# PIP_CERT is set only when the secret is present and non-empty, so it never lands in a layer.
# pip and setuptools are build tools: the server never uses them (25 MiB, and pip's own CVEs).
RUN --mount=type=secret,id=pip_ca,target=/run/secrets/pip_ca \
    python3 -m venv /app/venv \
    && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
    && /app/venv/bin/pip install --no-cache-dir --disable-pip-version-check -c /src/constraints.txt /src \
    && /app/venv/bin/pip uninstall -y --disable-pip-version-check pip setuptools

FROM ${BASE_IMAGE}
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 nodejs nftables ca-certificates \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --gid 10001 app \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin app \
    && mkdir -p /data \
    && chown 10001:10001 /data
COPY --from=build /app/venv /app/venv
# The demo skill, so an unmounted container serves it; mount real skills read-only over /skills.
COPY skill_mcp/skills/skill-mcp-demo /skills/skill-mcp-demo
COPY nftables/egress.nft /etc/skill-mcp/egress.nft
COPY appliance/entrypoint.sh /app/entrypoint.sh
RUN chmod 0755 /app/entrypoint.sh \
    && chmod -R a+rX,go-w /skills /etc/skill-mcp
# The venv stays off PATH: python3 on PATH (and for scripts) is Debian's interpreter.
ENV SKILLS_DIR=/skills LANG=C.UTF-8
USER 10001:10001
ENTRYPOINT ["/app/entrypoint.sh"]
CMD ["/app/venv/bin/skill-mcp", "serve"]
