# The two commands a newcomer needs (both set up what is missing first):
#   make run    set everything up and run the main job on the embedded default
#   make test   set everything up and run the test suite
.PHONY: setup run test bench lint
setup:
	bash scripts/setup.sh
run: setup
	.venv/bin/arborl train
test: setup lint
	.venv/bin/python -m pytest -ra -m "not full"
bench: setup
	.venv/bin/python bench/run.py
lint:
	.venv/bin/ruff check .
	.venv/bin/mypy sandboxes cli
