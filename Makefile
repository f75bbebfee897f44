# One-command entry points. On a fresh clone:
#   make demo   # create .venv, install, run the audit on the embedded demo
#   make test   # create .venv, install, run the whole test suite (what CI runs)
#   make docs   # build the documentation site strictly (broken links fail) into $(DOCS_DIR)
#   make small-study  # the small study end to end, through the regenerated tables
#   make validation-study  # train on controls too: does the audit predict which sources train worse?
# torch is installed first and pinned, so that resolving the other dependencies never pulls a
# multi-GB CUDA build on a CPU machine. Elsewhere, set TORCH_INDEX to PyTorch's CPU wheel index.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
PY := $(VENV)/bin/python
STAMP := $(VENV)/.transferdx-installed

.PHONY: setup demo test docs bench lint dl19 small-study validation-study validation-static validation-cleaning clean browser

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install --quiet -e '.[dev,openvino]'
	touch $(STAMP)

demo: setup
	$(VENV)/bin/transferdx-audit

dl19: setup
	$(VENV)/bin/transferdx-audit data=msmarco_dl19

# The small study end to end (about 40 min on 2 CPU cores): sensitivity audits, then
# sources → audit → train → evaluate → agree → match → tables into $(STUDY_DIR).
STUDY_DIR ?= outputs/small-study
small-study: setup
	BIN=$(VENV)/bin bash experiments/small_study.sh $(STUDY_DIR)

# Known-truth validation on MiniLM (about 90 min on 2 CPU cores at negatives=1; more with every
# negative): genuine sources and controls trained with several seeds, evaluated on SciFact test, the
# audit checked against that truth; results to experiments/results/validation/minilm_negatives1/.
VALIDATION_DIR ?= outputs/validation-study
validation-study: setup
	BIN=$(VENV)/bin bash experiments/validation_study.sh $(VALIDATION_DIR)

# The static-backbone validation (issue 21; plan: experiments/results/validation/PLAN.md): 11 sources
# × 5 seeds on every audited negative, SciFact test + TREC-DL19; ≈ 80 min on 2 CPU cores from an
# empty cache, minutes from cache; results to experiments/results/validation/static/.
VALIDATION_STATIC_DIR ?= outputs/validation-static
validation-static: setup
	BIN=$(VENV)/bin bash experiments/validation_static.sh $(VALIDATION_STATIC_DIR)

# Does cleaning train a better retriever? (issue 34; plan: experiments/results/cleaning/PLAN.md):
# TREC-DL19 + DL21 single-label records, 10 arms, query-fold CV, static backbone, 5 seeds; ≈ 100 min on
# 2 CPU cores from an empty cache, minutes from cache; results to experiments/results/cleaning/.
VALIDATION_CLEANING_DIR ?= outputs/validation-cleaning
validation-cleaning: setup
	$(VENV)/bin/python experiments/cleaning.py $${TRANSFERDX_DATA_DIR:-../shared/data} --out=$(VALIDATION_CLEANING_DIR)
	$(VENV)/bin/python experiments/cleaning.py $${TRANSFERDX_DATA_DIR:-../shared/data} --out=$(VALIDATION_CLEANING_DIR) --score

# Two workers, one test module each at a time (module fixtures stay shared); TEST_WORKERS=0 runs in
# one process. The slowest tests are listed at the end.
TEST_WORKERS ?= 2
test: setup
	$(PY) -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile) --durations=25

# The docs site (mkdocs.yml over docs/), strict: a broken link, anchor or unlisted page fails.
DOCS_DIR ?= $(or $(TMPDIR),/tmp)/transferdx-site
docs: setup
	$(VENV)/bin/mkdocs build --strict --site-dir $(DOCS_DIR)

# Chromium for tests/test_report_html.py (it opens report.html headless; without a browser it skips):
# installed with apt-get only when missing, quietly; a failed install warns and goes on.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
	  { $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q chromium >/dev/null; } \
	  || echo "warning: chromium not installed: tests/test_report_html.py skips its browser checks" >&2; }

bench: setup
	$(PY) benchmarks/bench_psi.py

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

clean:
	rm -rf outputs .pytest_cache .ruff_cache
