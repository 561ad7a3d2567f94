"""The Docker backend: one container per sandbox on a local Docker engine (`sandbox=docker`).

`backend.py` holds `DockerBackend` and its config; the images it runs are built offline by
`sandboxes/images.py` (`arborl sandbox build`).
"""

from .backend import DockerBackend, DockerBackendConfig

__all__ = ["DockerBackend", "DockerBackendConfig"]
