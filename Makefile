# Two entry points: `make demo` (the main job) and `make test` (the whole suite, docs included).
# Each creates or reuses .venv and installs the package with what it needs;
# pip's download cache is reused, so a second run installs nothing new.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# The device clients (MediaPipe, Task Library) that the tests run exported files with; their
# pins conflict with the package's, so they live in an environment of their own.
CLIENTS := .venv-clients
CLIENTS_STAMP := $(CLIENTS)/.installed-stamp
# The dataset writers (supervision, datumaro, globox, labelme, labelformat, Label Studio's
# converter, FiftyOne) that tests/test_writer_libraries.py writes datasets with; an environment
# of their own too (tests/writers/requirements.txt says why).
WRITERS := .venv-writers
WRITERS_STAMP := $(WRITERS)/.installed-stamp
PYTEST_ARGS ?=

# Two workers; each takes whole groups (a test file, or a test class), the longest first by
# tests/durations.json (tests/scheduling.py).
PYTEST_OPTIONS := -q -ra -n 2 --dist loadscope --no-loadscope-reorder
PYTEST := $(BIN)/python -m pytest $(PYTEST_OPTIONS)

.PHONY: demo test test-all test-quick profile coverage install clean bench docs

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade --quiet pip
	$(BIN)/python -m pip install --quiet -e '.[test,fast_eval,tflite,reports,docs,onnx,openvino,trackers,kaggle,tune,video,track]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/efficientdet-train --demo --model_dir=runs/demo

$(CLIENTS_STAMP): tests/clients/requirements.txt
	test -x $(CLIENTS)/bin/python || $(PYTHON) -m venv $(CLIENTS)
	$(CLIENTS)/bin/python -m pip install --quiet -r tests/clients/requirements.txt
	touch $(CLIENTS_STAMP)

# --no-compile: imports here never write bytecode, and the writers run once per suite.
$(WRITERS_STAMP): tests/writers/requirements.txt
	test -x $(WRITERS)/bin/python || $(PYTHON) -m venv $(WRITERS)
	$(WRITERS)/bin/python -m pip install --quiet --no-compile -r tests/writers/requirements.txt
	touch $(WRITERS_STAMP)

# The suite CI runs: every test but those marked slow (setup.cfg says which kinds), so that it
# ends within CI's time on a 2-core machine, and one shard of the slow ones, the commit's turn
# (tests/scheduling.py), so that each slow test runs every few landings.
test: $(STAMP) $(CLIENTS_STAMP) $(WRITERS_STAMP)
	$(PYTEST) --slow-shard=auto --durations=25 $(PYTEST_ARGS)

# Every test, the slow ones included: before a release, or after changing what they cover.
test-all: $(STAMP) $(CLIENTS_STAMP) $(WRITERS_STAMP)
	$(PYTEST) --durations=25 $(PYTEST_ARGS)

# The inner loop while working: the tests marked quick, at least one for every module.
test-quick: $(STAMP) $(CLIENTS_STAMP) $(WRITERS_STAMP)
	$(PYTEST) -m quick $(PYTEST_ARGS)

# The whole suite with every test's time, the time by file, and tests/durations.json rewritten
# (the group times the scheduling reads).
profile: $(STAMP) $(CLIENTS_STAMP) $(WRITERS_STAMP)
	$(PYTEST) --durations=0 --write-durations=tests/durations.json $(PYTEST_ARGS)

# Line coverage of efficientdet_keras/ over the whole suite, the processes that tests start
# included (coverage.py's patch=subprocess, setup.cfg): commands start cold, so that each starts
# coverage itself. Prints the report by module and writes htmlcov/; ends with pytest's status.
coverage: $(STAMP) $(CLIENTS_STAMP) $(WRITERS_STAMP)
	rm -rf .coverage .coverage.* htmlcov
	EFFICIENTDET_TEST_WARM=0 $(BIN)/python -m coverage run -m pytest $(PYTEST_OPTIONS) \
		$(PYTEST_ARGS); status=$$?; \
	$(BIN)/python -m coverage combine -q && $(BIN)/python -m coverage report && \
	$(BIN)/python -m coverage html -q; exit $$status

# The docs site in site/; strict, as the test suite builds it: a broken link or reference fails.
# The generated reference pages are written (and are to be committed) first.
docs: $(STAMP)
	$(BIN)/python docs/hooks/generated_pages.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) $(CLIENTS) $(WRITERS) build *.egg-info .pytest_cache site .coverage .coverage.* htmlcov

bench: $(STAMP)
	$(BIN)/python benchmarks/bench.py --what=postprocess
	$(BIN)/python benchmarks/bench.py --what=pipeline --batch_size=4
	$(BIN)/python benchmarks/bench.py --what=host
	$(BIN)/python benchmarks/bench.py --what=open_data
	$(BIN)/python benchmarks/bench.py --what=augment --batch_size=4
	$(BIN)/python benchmarks/bench.py --what=eval --image_size=256 --batch_size=8
	$(BIN)/python benchmarks/bench.py --what=train --image_size=256 --batch_size=4
	$(BIN)/python benchmarks/bench.py --what=serve --image_size=512
	$(BIN)/python benchmarks/bench.py --what=tflite --model_dir=runs/demo
	$(BIN)/python benchmarks/bench.py --what=formats --model_dir=runs/demo
	$(BIN)/python benchmarks/bench.py --what=openvino_int8 --model_dir=runs/demo
	$(BIN)/python benchmarks/bench.py --what=short_runs
	$(BIN)/python benchmarks/bench.py --what=learning_guard
	$(BIN)/python benchmarks/bench.py --what=class_rows
	$(BIN)/python benchmarks/bench.py --what=large_inputs --repeats=3
	$(BIN)/python benchmarks/bench.py --what=speed --model_dir=runs/demo
	$(BIN)/python benchmarks/bench.py --what=models --repeats=5
