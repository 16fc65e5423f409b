# cuebot-acct: `make run` starts the service with a demo farm, `make test` runs the suite.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
BIND ?= 127.0.0.1:8000
LOCAL := .local

.PHONY: venv services run stop test test-suite bench screenshots clean

venv: $(VENV)/.installed

# The runtime lock (hashed, so it is installed alone: pip then demands a hash of every line) and the
# development tools over it.
$(VENV)/.installed: requirements.txt requirements-dev.txt
	@command -v python3 >/dev/null || { echo "python3 is required"; exit 1; }
	@test -x $(VENV)/bin/python || python3 -m venv $(VENV) 2>/dev/null || { \
	  if [ "$$(id -u)" != 0 ]; then echo "python3-venv is missing (python3 -m venv failed); install it (sudo apt-get install -y python3-venv) and run again"; exit 1; fi; \
	  echo "python3-venv is missing (python3 -m venv failed); installing it now: apt-get update && apt-get install -y python3-venv"; \
	  apt-get update && apt-get install -y python3-venv && echo "installed python3-venv" && python3 -m venv $(VENV); }
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q --require-hashes -r requirements.txt
	$(VENV)/bin/pip install -q -r requirements-dev.txt
	touch $@

services: venv
	$(PY) scripts/services.py up

# The demo runs the design's Redis era (README, "Which OpenCue") unless the shell names another.
DEMO_ERA := ACCOUNTING_SCHEDULER=$${ACCOUNTING_SCHEDULER:-redis}

run: services
	$(DEMO_ERA) $(PY) manage.py migrate --noinput
	$(DEMO_ERA) $(PY) manage.py seed_demo_farm
	$(DEMO_ERA) $(PY) manage.py setup_schedules
	$(DEMO_ERA) $(PY) scripts/server.py start --bind $(BIND)

stop:
	$(PY) scripts/server.py stop
	$(PY) scripts/services.py down

# The test settings' servers only, no database (pytest-django makes its own), promtool, Chromium and chromedriver;
# then the import layers (.importlinter), the lint rules and the format (ruff.toml), the types (mypy.ini) and the suite; then the
# servers this run started are stopped again (those that already answered are left running).
test: venv
	DJANGO_SETTINGS_MODULE=settings.test $(PY) scripts/services.py with --tests -- $(MAKE) --no-print-directory test-suite

# What `make test` runs once the servers answer.
test-suite:
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/ruff check --no-cache .
	$(VENV)/bin/ruff format --check --no-cache .
	$(VENV)/bin/mypy
	$(PY) -m pytest $(PYTEST_ARGS)

# PNGs of the admin's pages (docs/admin.md#screenshots); needs `make run`, Chromium and chromedriver (Selenium drives them).
screenshots: venv
	$(DEMO_ERA) $(PY) scripts/screenshots.py --url http://$(BIND)

bench: services
	$(DEMO_ERA) $(PY) manage.py migrate --noinput
	$(DEMO_ERA) $(PY) bench/release.py
	$(DEMO_ERA) $(PY) bench/reseed.py
	$(DEMO_ERA) $(PY) bench/rebuild.py
	$(DEMO_ERA) $(PY) bench/recalculate_subs.py
