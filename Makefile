# The two commands in README.md: `make run` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PRESET ?= presets/grpo-sort.yaml

.PHONY: run test setup bench bench-ppo bench-dpo bench-workbench bench-inspector bench-reliability clean

run: setup
	$(BIN)/rl-workbench $(PRESET)

# Two workers (pytest-xdist), a test file on one worker (--dist loadfile: a module fixture's
# launch happens once); the slowest 25 tests printed, so growth is seen. The budget:
# README, Development.
test: setup
	OMP_NUM_THREADS=1 QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=25

setup: $(VENV)/.installed

# A torch already installed for the Python that makes the venv (a CUDA build on a GPU
# machine, say) is kept: the venv then sees system site-packages. Otherwise torch is
# installed first and pinned, so that no other requirement pulls a different build.
$(VENV)/.installed: pyproject.toml Makefile
	@if [ ! -x $(BIN)/python ]; then \
	  if $(PYTHON) -c "import torch" 2>/dev/null; then \
	    echo "keeping the installed torch: $$($(PYTHON) -c 'import torch; print(torch.__version__)')"; \
	    $(PYTHON) -m venv --system-site-packages $(VENV); \
	  else \
	    $(PYTHON) -m venv $(VENV); \
	  fi; \
	fi
	@$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install "torch==2.13.0"
	$(BIN)/pip install -e ".[test]"
	@touch $@

bench: setup
	$(BIN)/pip install -e ".[bench]"
	$(BIN)/python bench/grpo_vs_trl.py

# PPO is compared with trl==1.12.0 (the last TRL with a PPO trainer), which the script
# installs in its own venv, bench/out/trl112-venv, the first time.
bench-ppo: setup
	$(BIN)/pip install -e ".[bench]"
	$(BIN)/python bench/ppo_vs_trl.py

bench-dpo: setup
	$(BIN)/pip install -e ".[bench]"
	$(BIN)/python bench/dpo_vs_trl.py

bench-workbench: setup
	QT_QPA_PLATFORM=offscreen $(BIN)/python bench/workbench_bench.py

bench-inspector: setup
	QT_QPA_PLATFORM=offscreen $(BIN)/python bench/inspector_bench.py

# kill -9 the engine at random moments, resume each time; checks checkpoints, events and
# that the final adapter equals an uninterrupted run's (CPU, one thread; a few minutes).
bench-reliability: setup
	OMP_NUM_THREADS=1 $(BIN)/python bench/reliability.py

clean:
	rm -rf $(VENV) runs .pytest_cache
