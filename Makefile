# Each target creates .venv when it is missing and installs the project into it.
VENV ?= .venv
PY := $(VENV)/bin/python
# On machines without a local CPU wheel, override e.g. TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cpu".
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: install test demo bench bench-clm pretrain-clm bench-recovery bench-evidence bench-evidence-voxel bench-evidence-v3 bench-evidence-v3-maxent bench-evidence-v4 bench-evidence-v5 bench-demo-seeds \
	bench-countdown report lint docs

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -e ".[dev,embedded,docs]"
	touch $@

install: $(VENV)/.installed

test: $(VENV)/.installed
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The documentation site (mkdocs.yml, docs/) into site/; --strict: a broken link or a missing page fails.
docs: $(VENV)/.installed
	$(VENV)/bin/mkdocs build --strict --site-dir site

demo: $(VENV)/.installed
	HF_HUB_OFFLINE=1 $(VENV)/bin/divrl demo --out demo_out

# The machine benchmarks, then BENCHMARKS.md from every result fragment (the real-model recovery experiment,
# hours long, is `make bench-recovery`; see each script's --help for --quick).
bench: $(VENV)/.installed
	$(PY) benchmarks/toy/toy_reproduction.py
	$(PY) benchmarks/toy/toy_methods.py
	$(PY) benchmarks/toy/toy_flowrl.py
	$(PY) benchmarks/toy/toy_entropy_control.py
	$(PY) benchmarks/toy/flat_group_residue.py
	$(PY) benchmarks/micro/verifier_throughput.py
	$(PY) benchmarks/micro/molecule_scoring.py
	$(PY) benchmarks/micro/trainer_overhead.py
	$(PY) benchmarks/micro/population_overhead.py
	$(PY) benchmarks/micro/cpu_step.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/micro/eval_time.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/micro/sft_step.py
	$(PY) benchmarks/report.py

# The chemical LM: its pretraining (about 2 h on 2 idle cores, resumable: rerun to continue; writes the shipped model),
# then its MOSES metrics and PMO score distributions, and its cost per oracle call against v4's Gemma warm start.
pretrain-clm: $(VENV)/.installed
	$(VENV)/bin/divrl pretrain-clm --out runs/pretrain-clm --threads 2 --max-steps 2700 --seed 0 \
		--ship-to src/divrl/embedded/smiles-clm

bench-clm: $(VENV)/.installed
	$(PY) benchmarks/clm_prior.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/micro/clm_speed.py
	$(PY) benchmarks/report.py

# The real-model recovery experiment: hours on 2 CPU cores. It keeps its state in benchmarks/state/ and
# resumes where it stopped; results/hypospace_recovery.* are rewritten after every unit, then BENCHMARKS.md.
bench-recovery: $(VENV)/.installed
	HF_HUB_OFFLINE=1 $(PY) benchmarks/hypospace_recovery.py --resume
	$(PY) benchmarks/report.py

# Evidence v2 (issue 13): every method x 3 seeds at the v2 budget, many hours on 2 cores. Its finished units'
# small files live in benchmarks/evidence/ (committed), so any session or machine resumes where the last stopped.
bench-evidence: $(VENV)/.installed
	HF_HUB_OFFLINE=1 $(PY) benchmarks/hypospace_recovery.py --protocol v2 --resume
	$(PY) benchmarks/report.py

bench-evidence-voxel: $(VENV)/.installed
	HF_HUB_OFFLINE=1 $(PY) benchmarks/hypospace_recovery.py --protocol v2-voxel --resume
	$(PY) benchmarks/report.py

# The demo's settings with 5 seeds (about 45 min on 2 cores, resumable): what one `make demo` run is read against.
# Countdown end to end on the embedded model (about 20 min).
bench-demo-seeds: $(VENV)/.installed
	HF_HUB_OFFLINE=1 $(PY) benchmarks/campaigns/demo_seeds.py
	$(PY) benchmarks/report.py

bench-countdown: $(VENV)/.installed
	HF_HUB_OFFLINE=1 $(PY) benchmarks/campaigns/countdown_embedded.py
	$(PY) benchmarks/report.py

# Evidence v3 (issue 28): from a git worktree at the campaign's recorded commit, in a venv of its own (see the script)
bench-evidence-v3:
	bash benchmarks/campaigns/v3_campaign.sh

# MaxEnt's default under v3's protocol, added after v3 (issue 42; its own folder, commit and worktree), one lane
bench-evidence-v3-maxent:
	V3_PROTOCOL=v3-maxent-voxel V3_WORKERS=1 bash benchmarks/campaigns/v3_campaign.sh

# Evidence v4 (issue 41): molecules under a fixed oracle budget, from its pinned worktree, one lane (see the protocol in
# benchmarks/evidence/molecules_v4/); then `.venv/bin/python benchmarks/molecules_v4.py report` on main.
bench-evidence-v4:
	bash benchmarks/campaigns/v4_campaign.sh

bench-evidence-v5:
	bash benchmarks/v5_campaign.sh

report: $(VENV)/.installed
	$(PY) benchmarks/report.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests benchmarks
