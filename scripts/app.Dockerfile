# The arborl application image (compose.yaml's sandbox-image, trainer and eval services).
# Built on the offline base image (`arborl sandbox build`), so no registry is needed; pip needs
# a package index (PyPI, or a mirror/wheelhouse: pass PIP_INDEX_URL / PIP_FIND_LINKS).
ARG BASE=arborl/base:latest
FROM ${BASE}
USER root
ARG TORCH_SPEC="torch==2.13.0"
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG PIP_INDEX_URL
ARG PIP_FIND_LINKS
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
# debootstrap: the sandbox-image service builds arborl/base itself; docker.io: the CLI
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3-venv python3-dev build-essential debootstrap docker.io ca-certificates \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# torch first, alone: any other resolution of it would pull another build
RUN pip install -q "${TORCH_SPEC}" --extra-index-url "${TORCH_INDEX_URL}"
WORKDIR /opt/arborl
COPY pyproject.toml constraints.txt README.md ./
COPY envs envs
COPY agents agents
COPY trainer trainer
COPY sandboxes sandboxes
COPY kernels kernels
COPY tasks tasks
COPY eval eval
COPY cli cli
RUN pip install -q -c constraints.txt .
ENTRYPOINT []
CMD ["arborl", "--help"]
