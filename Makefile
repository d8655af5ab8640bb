# gpuserve.sglang — developer entry points. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
COLL := build/collections/ansible_collections/gpuserve/sglang
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/build/collections
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(BIN):$(PATH)

.PHONY: test deps collection tarball lint sanity unit targets core-floor integration oracle wording bench lab lab-down molecule plan dashboard clean

## Run every check, failing fast, then print a summary.
test: deps
	@tests/ci/run-all.sh

deps:
	@tests/ci/bootstrap.sh

collection:
	@tests/ci/collection-tree.sh >/dev/null

## The release tarball in build/dist: galaxy.yml's repository from GPUSERVE_REPOSITORY_URL (https; required - the
## project's public address, which galaxy.yml itself does not invent).
tarball: deps
	tests/ci/tarball.sh build/dist

lint: deps collection
	cd $(CURDIR) && $(BIN)/ansible-lint --offline

sanity: deps collection
	cd $(COLL) && $(BIN)/ansible-test sanity --python 3.11 --requirements

unit: deps collection
	$(BIN)/pytest -q tests/unit

## The unit tests that need no ansible-core again under the targets' Pythons (3.10, 3.12, 3.13: nodes and containers).
targets: deps
	tests/ci/targets.sh

## The oldest ansible-core claimed (meta/runtime.yml): its unit tests, plan.yml, its sanity and the lab's smoke scenario.
core-floor: deps collection
	tests/ci/core-floor.sh

integration: deps collection
	$(BIN)/pytest -q tests/integration

## The planner against SGLang 0.5.9's and 0.5.23's own code (the wheels' source, torch stubbed): a line per release,
## "oracle agreement <release> N/M", and last the total, "oracle agreement N/M".
oracle: deps
	tests/oracle/oracle.sh

## On demand (downloads nine releases): re-extract the start-up wording of every release and diff tests/wording/table.json.
wording: deps
	$(BIN)/python tests/wording/wording.py check

bench: deps collection
	$(BIN)/python tests/bench/bench_log_parser.py
	$(BIN)/python tests/bench/bench_detection.py
	$(SLOT0) python3 tests/bench/bench_deploy.py
	$(BIN)/python tests/bench/bench_upgrade.py

## Rebuild the Grafana dashboard's JSON from its code (grafana-foundation-sdk): roles/sglang_monitoring/files/.
dashboard: deps
	$(BIN)/python tests/grafana/build_dashboard.py

## The main job: the pre-flight memory plan of the motivating deployment, on localhost.
plan: deps collection
	$(BIN)/ansible-playbook playbooks/plan.yml -e plan_expect_failure=true

## The main job on the lab: a Proxmox-like host with CT 100 (podman + nested LXC), deploy.yml run twice
## (the second must report changed=0). The lab stays up for poking around; `make lab-down` removes it.
## Slot 0 always (its inventory is build/lab/inventory.yml): a shell with another slot's `lab.py env` exported
## would otherwise bring that slot's lab up, and deploy to slot 0's with that slot's Hub.
LAB_INV := -i inventory/lab -i build/lab/inventory.yml
SLOT0 := env -u CONTAINERS_CONF -u GPUSERVE_LAB_HOST_IP -u GPUSERVE_LAB_STATE -u GPUSERVE_LAB_HUB GPUSERVE_LAB_SLOT=0
lab: deps collection
	$(SLOT0) python3 tests/lab/lab.py up
	$(SLOT0) $(BIN)/ansible-playbook $(LAB_INV) tests/lab/playbooks/stage-standin.yml
	$(SLOT0) $(BIN)/ansible-playbook $(LAB_INV) tests/lab/playbooks/stage-cpu-engine.yml
	set -o pipefail; $(SLOT0) $(BIN)/ansible-playbook $(LAB_INV) playbooks/deploy.yml 2>&1 | tee build/lab/deploy.log
	set -o pipefail; $(SLOT0) $(BIN)/ansible-playbook $(LAB_INV) playbooks/deploy.yml 2>&1 | tee build/lab/deploy-again.log
	@grep -Eq 'changed=[1-9]' build/lab/deploy-again.log && { echo "lab: the second deploy changed something"; exit 1; } || echo "lab: second deploy changed=0"
	@grep -h '\[WARNING\]' build/lab/deploy.log build/lab/deploy-again.log || echo "lab: no warnings in either run"
	@grep -h "tokens: planned" build/lab/deploy-again.log | sed -E "s/^ *- '?/lab: /; s/'$$//"

lab-down:
	$(SLOT0) python3 tests/lab/lab.py down

molecule: deps collection
	tests/ci/molecule-all.sh

clean:
	rm -rf build tests/output .pytest_cache
