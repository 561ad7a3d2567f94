# The two commands a newcomer needs (both set up what is missing first):
#   make run    set everything up and run the main job on the embedded default
#   make test   set everything up and run the test suite
.PHONY: setup run test bench lint
setup:
	bash scripts/setup.sh
run: setup
	.venv/bin/arborl train
# The suite runs on TEST_WORKERS pytest-xdist workers: 2, the cores CI has. More than the cores
# only adds contention (each worker loads torch; vLLM, Chromium and the verl smoke test take GiB);
# on a bigger machine `make test TEST_WORKERS=4`. --dist loadgroup keeps the Ray tests on one
# worker and a module with a module-scoped fixture on one worker (tests/conftest.py).
TEST_WORKERS ?= 2
test: setup lint
	.venv/bin/python -m pytest -ra -m "not full" -n $(TEST_WORKERS) --dist loadgroup
bench: setup
	.venv/bin/python bench/run.py
lint:
	.venv/bin/ruff check .
	.venv/bin/mypy sandboxes cli
