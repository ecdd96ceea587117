# fenceproxy developer targets. `make test` is the README's test command and
# what CI runs (.ci/run).
GO      ?= go
# The one version string: the VERSION file holds the release (v0.3.0), which
# is the git tag, the Go module version (go get .../client@v0.3.0), what
# `fenceproxy version` prints, and the image tag. CHANGELOG.md's newest entry
# names it too (cmd/fenceproxy/version_test.go keeps them equal).
VERSION ?= $(shell cat VERSION)
LDFLAGS := -s -w -X main.version=$(VERSION)
# The image `make image` builds: $(IMAGE):$(VERSION).
IMAGE   ?= fenceproxy

.PHONY: build image version run test test-short test-deploy faults faults-long faults-test fuzz bench bench-quick redis-server etcd vet

build: ## static binary, built exactly as the container image builds it
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/fenceproxy ./cmd/fenceproxy

image: ## the container image, tagged with VERSION (docker build --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION) .)
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION) .

version: ## print the version the build stamps into the binary and the image tag
	@echo $(VERSION)

run: ## fenceproxy on the embedded store in front of http://127.0.0.1:3000
	FENCE_UPSTREAM_URL=$${FENCE_UPSTREAM_URL:-http://127.0.0.1:3000} $(GO) run ./cmd/fenceproxy

test: redis-server etcd vet ## every test, with the race detector; tests start their own redis-server and etcd
	$(GO) test -race -count=1 ./...
	@# allocation counts are only meaningful without -race (sync.Pool drops items under it)
	$(GO) test -count=1 -run 'Alloc' ./proxy ./internal/upstream
	@# the fault suite's controls, compiled in only under this tag
	$(GO) test -race -count=1 -tags faultsbreak -run 'Break' ./fencestore/redisstore
	$(MAKE) test-deploy

test-deploy: ## render and strictly validate every manifest, check the Dockerfile, build as the image does (own module)
	cd deploy && $(GO) test -count=1 ./...

test-short: ## without the Redis- and etcd-backed tests
	FENCE_SKIP_REDIS=1 FENCE_SKIP_ETCD=1 $(GO) test -race -count=1 ./...

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

faults: build redis-server etcd ## fault and load suite, bounded (CI): one scenario= line per scenario, exit 1 on a safety failure
	cd faults && $(GO) run ./cmd/faults -mode short -bin ../bin/fenceproxy

faults-long: build redis-server etcd ## the same, longer, with more injections (about 10 minutes)
	cd faults && $(GO) run ./cmd/faults -mode long -bin ../bin/fenceproxy

faults-test: redis-server etcd ## the suite's own tests: the checker on bad histories, and broken systems that must fail
	cd faults && $(GO) vet ./... && $(GO) test -count=1 ./...

FUZZTIME ?= 30s
fuzz: ## run every fuzz target for FUZZTIME each (seeds live in testdata/fuzz)
	$(GO) test -run '^$$' -fuzz '^FuzzParseToken$$' -fuzztime $(FUZZTIME) ./proxy
	$(GO) test -run '^$$' -fuzz '^FuzzCanonicalPath$$' -fuzztime $(FUZZTIME) ./proxy
	$(GO) test -run '^$$' -fuzz '^FuzzRequestTarget$$' -fuzztime $(FUZZTIME) ./proxy
	$(GO) test -run '^$$' -fuzz '^FuzzParseRoutes$$' -fuzztime $(FUZZTIME) ./config
	$(GO) test -run '^$$' -fuzz '^FuzzParseTemplate$$' -fuzztime $(FUZZTIME) ./config
	$(GO) test -run '^$$' -fuzz '^FuzzFoldPath$$' -fuzztime $(FUZZTIME) ./config
	$(GO) test -run '^$$' -fuzz '^FuzzParseSignedToken$$' -fuzztime $(FUZZTIME) ./internal/fencejwt

bench: redis-server ## Go benchmarks, then the load comparison, open-loop latency, sweep and per-feature costs (~12 min; regenerates docs/performance.*)
	$(GO) test -run '^$$' -bench . -skip '^BenchmarkFeature$$' -benchmem ./proxy ./fencestore/...
	bench/run-all.sh

bench-quick: redis-server ## a smoke run of the load harness (~3 min; writes only under bench/results/)
	QUICK=1 bench/run-all.sh

# The Redis-backed tests need redis-server on PATH. On a fresh Debian machine
# as root this installs it; elsewhere it says what to install.
etcd: ## the etcd server and etcdutl that the etcd store's tests start (built once from the Go module proxy when missing)
	@bash fencestore/etcdstore/etcdtest/install-etcd.sh

redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing redis-server (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
	  else \
	    echo "redis-server not found: install it (Debian/Ubuntu: sudo apt-get install -y redis-server; macOS: brew install redis)" >&2; \
	    echo "or run 'make test-short' to skip the Redis-backed tests" >&2; exit 1; \
	  fi; }
