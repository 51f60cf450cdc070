# drtp: the two commands of the README, plus helpers.
#   make demo   install what is needed, then replay a generated trace against a local registry
#   make test   install what is needed, then run the linter, the format check and the whole test suite
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test bench lint clean

setup:
	bash scripts/install.sh

demo: setup
	$(BIN)/drtp demo --out results/demo

test: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: setup
	$(BIN)/python bench/bench_reader.py

lint:
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) results build *.egg-info
