# headstab: the two commands of the README, and the benchmarks.
#   make demo   offline toy-scale reproduction (config/demo.yaml) on 2 cores
#   make demo-circuits  the induction control (config/demo_circuits.yaml): refits trained through the phase change
#   make test   style checks (make lint), unit + integration tests (and the real-Slurm test when Slurm is installed)
#   make bench  side-by-side benchmarks -> results/bench/summary.json
#   make gpu-check  the device checks of the training path on CUDA (DEVICE=cpu: toy sizes) -> results/gpu-check/
#   make calibration  size and coverage of every reported p-value and interval -> results/calibration/summary.csv
#   make mutation  mutation testing of the scientific modules -> results/mutation/summary.json (not part of make test)

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.headstab-installed
CORES ?= all
TEST_WORKERS ?= 2

.PHONY: demo demo-circuits run-config test lint bench gpu-check calibration mutation venv clean-demo

venv: $(STAMP)

# torch first, pinned: an unpinned torch (or one pulled in by another package) would download the
# newest CUDA build. The lock file constrains everything else to the versions we test with.
$(STAMP): requirements.txt requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -r requirements.txt -c requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

# The greedy scheduler: Snakemake's default ILP re-solves the schedule after every job, and with the demo's
# hundreds of short jobs that costs the 2 cores more than it saves (benchmarks/README.md, "The demo").
# The report needs the finished run, so it is a second snakemake call (it reruns nothing). Snakemake writes
# the report in place, so it goes to a temporary name first: a killed call leaves no report.html that looks whole.
demo: $(STAMP)
	$(MAKE) run-config CONFIG=config/demo.yaml RESULTS=results/demo

demo-circuits: $(STAMP)
	$(MAKE) run-config CONFIG=config/demo_circuits.yaml RESULTS=results/demo_circuits

run-config:
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PATH="$(CURDIR)/$(BIN):$$PATH" \
		$(BIN)/snakemake --cores $(CORES) --scheduler greedy --configfile $(CONFIG)
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PATH="$(CURDIR)/$(BIN):$$PATH" \
		$(BIN)/snakemake --cores $(CORES) --report $(RESULTS)/.report.tmp.html --configfile $(CONFIG)
	mv -f $(RESULTS)/.report.tmp.html $(RESULTS)/report.html

# Style first: ruff (lint and format) on the Python, snakefmt on the Snakefile and rule files.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check .

test: $(STAMP) lint
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -n $(TEST_WORKERS)

bench: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python benchmarks/run_all.py

gpu-check: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python benchmarks/gpu_check.py --device $(or $(DEVICE),cuda)

calibration: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python calibration/run.py $(if $(METHODS),--methods $(METHODS)) $(if $(JOBS),--jobs $(JOBS))

# mutmut is a tool of this target only, so it is installed here rather than in every venv.
# MODULES="cka stability" limits the run; the summary keeps the other modules' last results.
mutation: $(STAMP)
	test -x $(BIN)/mutmut || $(BIN)/python -m pip install --quiet mutmut==3.8.1
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python mutation/run.py $(MODULES)

clean-demo:
	rm -rf results/demo results/demo_circuits
