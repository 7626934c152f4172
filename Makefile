# mirrortutor's two commands:
#   make lab    set up (first time only) and open the course in JupyterLab
#   make test   set up (first time only) and run every test, every notebook included
# and, for whoever publishes the course:
#   make site   the course as a static website (build/site/html), from the stored outputs
# Both create or reuse a project-local virtual environment (.venv) from the pinned dependencies in
# pyproject.toml; it is rebuilt only when pyproject.toml changes.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The course's kernel: a private network namespace, reached over Unix sockets
# (mirrortutor/clusters/kernel.py). Notebooks, exercises and JupyterLab all run on it.
KERNEL := $(VENV)/share/jupyter/kernels/mirrortutor/kernel.json
# nbval: compare every stored output, after hiding only what is truly random (see the .cfg file)
NBVAL  := --nbval --nbval-kernel-name mirrortutor \
          --nbval-sanitize-with mirrortutor/grading/nbval_sanitize.cfg --nbval-cell-timeout=900

.PHONY: lab test test-fast notebooks figures site bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; sys.exit(0 if (3, 10) <= v <= (3, 13) else 1)' \
	  || { echo "mirrortutor needs Python 3.10 to 3.13 (TensorFlow 2.21's range); '$(PYTHON)' is $$($(PYTHON) --version 2>&1). Run: make PYTHON=python3.11 ..."; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -q -e ".[test]"
	@touch $(STAMP)

$(KERNEL): $(STAMP) mirrortutor/clusters/kernel.py
	$(BIN)/python -m mirrortutor.clusters.kernel install

# Root (a container, a VM) must say --allow-root; LAB_ARGS passes anything else (--no-browser, --port).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)
LAB_ARGS ?=
# The course's kernel is the only one offered, so every notebook opens on it (JupyterLab picks
# the one Python kernel there is when a notebook names another).
LAB_KERNEL := --KernelSpecManager.allowed_kernelspecs=mirrortutor \
              --MappingKernelManager.default_kernel_name=mirrortutor

lab: $(KERNEL)
	$(BIN)/jupyter lab $(ROOT_FLAG) --ServerApp.root_dir=. $(LAB_KERNEL) $(LAB_ARGS) \
	  notebooks/00_welcome.ipynb

# The exercise keys in exercises/ run in tests/grading, once each: graded as a submission, compared
# cell by cell with their stored outputs (the same comparison an nbval pass over exercises/ made).
# Every test's time goes to artifacts/test-times.xml (JUnit XML, git-ignored): where the run's
# minutes went, for keeping `make test` inside its budget.
test: $(KERNEL)
	@bash scripts/ensure_chromium.sh
	$(BIN)/python -m pytest -q --durations=25 --junitxml=artifacts/test-times.xml tests notebooks $(NBVAL)

# The TensorFlow-free tests only (numpy core, layout rules): seconds, for quick iterations.
test-fast: $(KERNEL)
	$(BIN)/python -m pytest -q tests/core

# Re-run every notebook and store its outputs as nbval's reference (after changing a chapter);
# every figure also gets its still image (scripts/static_figures.py, drawn in Chromium).
notebooks: $(KERNEL)
	@bash scripts/ensure_chromium.sh
	$(BIN)/python scripts/refresh_notebooks.py notebooks/*.ipynb exercises/*.ipynb

# Only the still images beside the stored figures, from the stored JSON (nothing re-runs).
figures: $(STAMP)
	@bash scripts/ensure_chromium.sh
	$(BIN)/python scripts/static_figures.py notebooks/*.ipynb exercises/*.ipynb

# The course as a static website, from the stored outputs (nothing re-runs): open
# build/site/html/index.html, or publish that folder as it is (it needs no network).
site: $(STAMP)
	$(BIN)/python website/build_site.py build/site

bench: $(KERNEL)
	$(BIN)/python benchmarks/instrumentation_overhead.py
	$(BIN)/python benchmarks/allreduce_table.py
	$(BIN)/python benchmarks/scaling_panel.py
	$(BIN)/python benchmarks/course_speed.py
	$(BIN)/python benchmarks/grading_sandbox.py

clean:
	rm -rf $(VENV) build *.egg-info
