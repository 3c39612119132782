# The two commands of README.md: `make demo` and `make test`.
.PHONY: setup demo test lint p4 bench clean

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/cassini emulate --topology cassini-testbed --trace snapshot2 --schedulers themis,th+cassini --profile-first --out results/demo --force

test: setup
	$(MAKE) lint
	.venv/bin/python -m pytest -q -rs

lint:
	.venv/bin/ruff check .
	.venv/bin/mypy topologies scheduler controlplane emulation p4src

p4:
	bash scripts/build_p4.sh

clean:
	.venv/bin/cassini clean
