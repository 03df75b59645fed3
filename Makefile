# rmago: one-sided communication (RMA) for Go.
#   make run        build, then a 2-rank ping-pong on the embedded soft provider
#   make test       gofmt, go vet (also for the other 64-bit Linux ports), staticcheck, the race-enabled
#                   test suite (again on shm, and on two pretend nodes: shm inside each,
#                   soft between), a short fuzz run
#   make test-rdma  the real-RDMA path on Soft-RoCE in a QEMU VM (needs root for apt-get)
#   make test-cluster  jobs across 3 network-namespace hosts under srun (PMI-1, PMI-2, PMIx), Hydra mpiexec, Open MPI mpirun and rmarun -H (root)
#   make test-faults  fault injection (kill -9, SIGSTOP/SIGCONT, early Close, a peer that
#                   stops reading, hostile bootstrap connections) on jobs of 2-8 ranks;
#                   writes docs/reliability.md; FAULT_TRIALS=N trials per scenario
#   make compare    rmago beside Open MPI and MPICH (TCP and shared memory), writes docs/benchmarks.md
#   make plot       PLOTJSON='a.json b.json' [PLOTOUT=out.svg] [PLOTFLAGS=...]: latency/bandwidth plots
GO       ?= go
BIN      ?= bin
# The fuzz budget is a count of executions, not a duration: go1.26's fuzz
# coordinator can report a spurious "context deadline exceeded" failure when
# a -fuzztime duration ends under load (golang/go#75804, fixed in go1.27).
# 300000 executions take 6-15 s here.
FUZZTIME ?= 300000x
RANKS    ?= 2
PPFLAGS  ?=

.PHONY: all build run test vet vet-ports lint fmt-check fuzz test-rdma test-cluster test-faults clean

all: build

# build: the launcher, the benchmark, the apps and the examples, one binary
# each in $(BIN) named after its directory (bin/rmarun, bin/pingpong,
# bin/sor, bin/heat, bin/histogram, bin/hashtable, bin/transpose,
# bin/lockmix, bin/hello).
build:
	$(GO) build -o $(BIN)/ ./cmd/rmarun ./pingpong ./apps/... ./examples/...

run: build
	$(BIN)/rmarun -n $(RANKS) -provider soft $(BIN)/pingpong $(PPFLAGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# lint: staticcheck (a pinned release, fetched through the module proxy
# like any module) for what go vet does not look at: unused code, results
# never used, expressions that compare a thing with itself.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	$(GO) run $(STATICCHECK) ./...

# vet-ports: the library and its tests build for the other 64-bit Linux
# architectures HPC systems run (Arm and POWER), system calls included.
PORTS ?= arm64 ppc64le
vet-ports:
	for a in $(PORTS); do GOOS=linux GOARCH=$$a $(GO) vet ./... || exit 1; done

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzResponder -fuzztime $(FUZZTIME) -fuzzminimizetime 2000x ./verbs/soft

test: fmt-check vet vet-ports lint
	$(GO) test -race -count=1 -timeout 20m ./...
	RMAGO_PROVIDER=shm $(GO) test -race -count=1 -timeout 10m ./rma/... ./sync/...
	RMAGO_TEST_NODES=2 $(GO) test -race -count=1 -timeout 10m ./rma/... ./sync/...
	# Both forms of the fence's first round, whichever this machine's
	# cores would choose (RMAGO_FENCE, docs/sync-protocols.md).
	RMAGO_FENCE=all $(GO) test -race -count=1 -timeout 10m ./rma/
	RMAGO_FENCE=gather $(GO) test -race -count=1 -timeout 10m ./rma/
	$(MAKE) fuzz

test-rdma:
	ci/test-rdma.sh

test-cluster:
	GO=$(GO) ci/cluster/test-cluster.sh

# Fault injection (ci/faults): FAULT_TRIALS trials per scenario (fault x
# epoch mode), FAULT_PARALLEL trials at once; FAULT_SEED replays a plan;
# FAULT_RACE=1 builds the ranks with -race; FAULT_STRICT=1 also fails on a
# survivor whose error is wrong, late or unnamed (by default those are
# counted in the report, and hangs, orphans, corruption and data races
# fail the run); FAULTFLAGS adds faultrun flags
# (e.g. -faults kill9,stop -modes fence -v). The suite runs twice, between
# ranks on the soft provider (TCP) and on shm (shared memory; stopread, a
# fault of sockets, only on soft), each writing its section of
# docs/reliability.md; 4-8 minutes on 2 cores. The details of every trial
# (goroutine dumps of hung ranks) go to $(BIN)/fault-logs/PROVIDER.
FAULT_TRIALS   ?= 5
FAULT_PARALLEL ?= 3
FAULT_RACE     ?=
FAULTFLAGS     ?=

test-faults:
	$(GO) build $(if $(FAULT_RACE),-race) -o $(BIN)/faultrank ./ci/faults/faultrank
	$(GO) build -o $(BIN)/faultrun ./ci/faults/faultrun
	rm -rf $(BIN)/fault-logs
	$(BIN)/faultrun -provider soft -rank $(BIN)/faultrank -trials $(FAULT_TRIALS) -parallel $(FAULT_PARALLEL) -out docs/reliability.md -log $(BIN)/fault-logs/soft $(FAULTFLAGS)
	$(BIN)/faultrun -provider shm -rank $(BIN)/faultrank -trials $(FAULT_TRIALS) -parallel $(FAULT_PARALLEL) -out docs/reliability.md -log $(BIN)/fault-logs/shm $(FAULTFLAGS)

clean:
	rm -rf $(BIN)

.PHONY: compare plot
PLOTOUT  ?= pingpong.svg
PLOTJSON ?=
PLOTFLAGS ?=

compare: build
	ci/compare/compare.sh

plot: build
	$(BIN)/pingpong plot -o $(PLOTOUT) $(PLOTFLAGS) $(PLOTJSON)
