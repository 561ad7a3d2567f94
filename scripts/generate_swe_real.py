"""Cut the `swe-real` suite's SWE-bench instances from bare mirrors of its repositories.

    python scripts/generate_swe_real.py --mirrors DIR [--per-repo 4] [--image arborl/base:latest]

The cutting is `arborl.tasks.swebench.real.generate` (its doc says how); this script gives it
the Docker layer builder of the code env (`arborl.envs.code.instance_images`) for the environment
images, which `tasks/` may not import. Needs Docker and the host's `pip`.
"""

from __future__ import annotations

import sys

import docker

from arborl.envs.code.instance_images import docker_builder
from arborl.tasks.swebench.real.generate import main

if __name__ == "__main__":
    main(sys.argv[1:], docker_builder(docker.from_env()))
