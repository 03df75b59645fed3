package pmi_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rmago/rmago/internal/pmi"
	"github.com/rmago/rmago/internal/pmi/pmitest"
)

// fdEnv hands rank a socketpair end of s as PMI_FD, the way a launcher
// does, and returns its environment.
func fdEnv(t *testing.T, s *pmitest.Server, rank int) func(string) string {
	t.Helper()
	f, err := s.Pair(rank)
	if err != nil {
		t.Fatal(err)
	}
	// A bare descriptor, owned by the client from now on (an *os.File
	// would close it again when collected).
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	env := s.Env(rank, fd)
	return func(k string) string { return env[k] }
}

// portEnv gives rank PMI_PORT and PMI_ID, as mpiexec -pmi-port does.
func portEnv(addr string, rank int) func(string) string {
	env := map[string]string{"PMI_PORT": addr, "PMI_ID": strconv.Itoa(rank)}
	return func(k string) string { return env[k] }
}

// session is what every rank does: open, put, fence, get every rank's key,
// finalize.
func session(getenv func(string) string, wire int) (string, error) {
	c, err := pmi.Open(pmi.Config{Getenv: getenv, Wire: wire, Timeout: 20 * time.Second})
	if err != nil {
		return "", err
	}
	defer c.Close()
	if c.Wire() != wire {
		return "", fmt.Errorf("wire %d, want %d", c.Wire(), wire)
	}
	r := c.Rank()
	if err := c.Put("ep-"+strconv.Itoa(r), fmt.Sprintf("10.77.0.%d:%d", r+1, 4000+r)); err != nil {
		return "", err
	}
	if err := c.Fence(); err != nil {
		return "", err
	}
	var got []string
	for q := range c.Size() {
		v, err := c.Get("ep-" + strconv.Itoa(q))
		if err != nil {
			return "", err
		}
		got = append(got, v)
	}
	return fmt.Sprintf("rank %d of %d: %s", r, c.Size(), strings.Join(got, ",")), c.Finalize()
}

func runJob(t *testing.T, n int, envs []func(string) string, wire int) {
	t.Helper()
	out := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { out[r], errs[r] = session(envs[r], wire) })
	}
	wg.Wait()
	for r := range n {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
	}
	slices.Sort(out)
	want := []string{
		"rank 0 of 3: 10.77.0.1:4000,10.77.0.2:4001,10.77.0.3:4002",
		"rank 1 of 3: 10.77.0.1:4000,10.77.0.2:4001,10.77.0.3:4002",
		"rank 2 of 3: 10.77.0.1:4000,10.77.0.2:4001,10.77.0.3:4002",
	}
	if !slices.Equal(out, want) {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(out, "\n"), strings.Join(want, "\n"))
	}
}

// The transcripts are those of the recipe's traces (Hydra 4.0.2, Slurm
// 22.05), with this test's values.
var transcripts = map[string][]string{
	"hydra/1/fd": {
		"> cmd=init pmi_version=1 pmi_subversion=1",
		"< cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0",
		"> cmd=get_maxes",
		"< cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024",
		"> cmd=get_my_kvsname",
		"< cmd=my_kvsname kvsname=kvs_4242_0_1_vm",
		"> cmd=put kvsname=kvs_4242_0_1_vm key=ep-0 value=10.77.0.1:4000",
		"< cmd=put_result rc=0 msg=success",
		"> cmd=barrier_in",
		"< cmd=barrier_out",
		"> cmd=get kvsname=kvs_4242_0_1_vm key=ep-0",
		"< cmd=get_result rc=0 msg=success value=10.77.0.1:4000",
		"> cmd=get kvsname=kvs_4242_0_1_vm key=ep-1",
		"< cmd=get_result rc=0 msg=success value=10.77.0.2:4001",
		"> cmd=get kvsname=kvs_4242_0_1_vm key=ep-2",
		"< cmd=get_result rc=0 msg=success value=10.77.0.3:4002",
		"> cmd=finalize",
		"< cmd=finalize_ack",
	},
	"slurm/1/fd": {
		"> cmd=init pmi_version=1 pmi_subversion=1",
		"< cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1",
		"> cmd=get_maxes",
		"< cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024",
		"> cmd=get_my_kvsname",
		"< cmd=my_kvsname rc=0 kvsname=5.0",
		"> cmd=put kvsname=5.0 key=ep-0 value=10.77.0.1:4000",
		"< cmd=put_result rc=0",
		"> cmd=barrier_in",
		"< cmd=barrier_out rc=0",
		"> cmd=get kvsname=5.0 key=ep-0",
		"< cmd=get_result rc=0 value=10.77.0.1:4000",
		"> cmd=get kvsname=5.0 key=ep-1",
		"< cmd=get_result rc=0 value=10.77.0.2:4001",
		"> cmd=get kvsname=5.0 key=ep-2",
		"< cmd=get_result rc=0 value=10.77.0.3:4002",
		"> cmd=finalize",
		"< cmd=finalize_ack rc=0",
	},
	"hydra/2/fd": {
		"> cmd=init pmi_version=2 pmi_subversion=0",
		"< cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0",
		"> 38    cmd=fullinit;pmirank=0;threaded=FALSE;",
		"<    113cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=0;size=3;appnum=0;debugged=FALSE;pmiverbose=FALSE;rc=0;",
		"> 14    cmd=job-getid;",
		"<     50cmd=job-getid-response;jobid=kvs_4242_0_1_vm;rc=0;",
		"> 42    cmd=kvs-put;key=ep-0;value=10.77.0.1:4000;",
		"<     26cmd=kvs-put-response;rc=0;",
		"> 14    cmd=kvs-fence;",
		"<     28cmd=kvs-fence-response;rc=0;",
		"> 52    cmd=kvs-get;jobid=kvs_4242_0_1_vm;srcid=-1;key=ep-0;",
		"<     58cmd=kvs-get-response;found=TRUE;value=10.77.0.1:4000;rc=0;",
		"> 52    cmd=kvs-get;jobid=kvs_4242_0_1_vm;srcid=-1;key=ep-1;",
		"<     58cmd=kvs-get-response;found=TRUE;value=10.77.0.2:4001;rc=0;",
		"> 52    cmd=kvs-get;jobid=kvs_4242_0_1_vm;srcid=-1;key=ep-2;",
		"<     58cmd=kvs-get-response;found=TRUE;value=10.77.0.3:4002;rc=0;",
		"> 13    cmd=finalize;",
		"<     27cmd=finalize-response;rc=0;",
	},
	"slurm/2/fd": {
		"> cmd=init pmi_version=2 pmi_subversion=0",
		"< cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0",
		"> 51    cmd=fullinit;pmijobid=5.0;pmirank=0;threaded=FALSE;",
		"< 114   cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=0;size=3;appnum=-1;debugged=FALSE;pmiverbose=FALSE;",
		"> 14    cmd=job-getid;",
		"< 38    cmd=job-getid-response;rc=0;jobid=5.0;",
		"> 42    cmd=kvs-put;key=ep-0;value=10.77.0.1:4000;",
		"< 26    cmd=kvs-put-response;rc=0;",
		"> 14    cmd=kvs-fence;",
		"< 28    cmd=kvs-fence-response;rc=0;",
		"> 40    cmd=kvs-get;jobid=5.0;srcid=-1;key=ep-0;",
		"< 58    cmd=kvs-get-response;rc=0;found=TRUE;value=10.77.0.1:4000;",
		"> 40    cmd=kvs-get;jobid=5.0;srcid=-1;key=ep-1;",
		"< 58    cmd=kvs-get-response;rc=0;found=TRUE;value=10.77.0.2:4001;",
		"> 40    cmd=kvs-get;jobid=5.0;srcid=-1;key=ep-2;",
		"< 58    cmd=kvs-get-response;rc=0;found=TRUE;value=10.77.0.3:4002;",
		"> 13    cmd=finalize;",
		"< 27    cmd=finalize-response;rc=0;",
	},
}

func init() {
	// With -pmi-port, PMI-1 starts with the initack handshake; PMI-2
	// names the rank by its PMI_ID in pmirank.
	port1 := append([]string{
		"> cmd=initack pmiid=0",
		"< cmd=initack",
		"< cmd=set size=3",
		"< cmd=set rank=0",
		"< cmd=set debug=0",
	}, transcripts["hydra/1/fd"]...)
	transcripts["hydra/1/port"] = port1
	transcripts["hydra/2/port"] = transcripts["hydra/2/fd"]
}

// TestWires runs a job of 3 ranks on each wire against each process
// manager, through inherited sockets (PMI_FD) and Hydra's -pmi-port, and
// compares rank 0's messages with the real launchers' format.
func TestWires(t *testing.T) {
	for _, tc := range []struct {
		flavor pmitest.Flavor
		wire   int
		port   bool
	}{
		{pmitest.Hydra, 1, false}, {pmitest.Slurm, 1, false},
		{pmitest.Hydra, 2, false}, {pmitest.Slurm, 2, false},
		{pmitest.Hydra, 1, true}, {pmitest.Hydra, 2, true},
	} {
		mode := "fd"
		if tc.port {
			mode = "port"
		}
		name := fmt.Sprintf("%s/%d/%s", tc.flavor, tc.wire, mode)
		t.Run(name, func(t *testing.T) {
			s := pmitest.New(tc.flavor, 3)
			defer s.Close()
			envs := make([]func(string) string, 3)
			var addr string
			if tc.port {
				var err error
				if addr, err = s.Listen(); err != nil {
					t.Fatal(err)
				}
			}
			for r := range envs {
				if tc.port {
					envs[r] = portEnv(addr, r)
				} else {
					envs[r] = fdEnv(t, s, r)
				}
			}
			runJob(t, 3, envs, tc.wire)
			if got, want := s.Transcript(0), transcripts[name]; !slices.Equal(got, want) {
				t.Errorf("rank 0's messages:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if errs := s.Errs(); len(errs) != 0 {
				t.Errorf("server saw protocol errors: %v", errs)
			}
		})
	}
}

// TestHydraFenceIsNotABarrier: on Hydra's PMI-2, kvs-fence answers at once
// and a get of a key not yet put waits until every rank has fenced
// (the recipe's pitfall 4). Rank 0 fences before rank 1 even connects, and
// its get of rank 1's key returns rank 1's value once rank 1 put and fenced.
func TestHydraFenceIsNotABarrier(t *testing.T) {
	s := pmitest.New(pmitest.Hydra, 2)
	s.Blocked = make(chan string, 1)
	defer s.Close()
	env0, env1 := fdEnv(t, s, 0), fdEnv(t, s, 1)
	c0, err := pmi.Open(pmi.Config{Getenv: env0, Wire: 2, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c0.Close()
	if err := c0.Put("a-0", "zero"); err != nil {
		t.Fatal(err)
	}
	if err := c0.Fence(); err != nil { // rank 1 is not even there
		t.Fatal(err)
	}
	type result struct {
		v   string
		err error
	}
	got := make(chan result, 1)
	go func() {
		v, err := c0.Get("a-1")
		got <- result{v, err}
	}()
	if key := <-s.Blocked; key != "a-1" {
		t.Fatalf("blocked get of %q", key)
	}
	c1, err := pmi.Open(pmi.Config{Getenv: env1, Wire: 2, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if err := c1.Put("a-1", "one"); err != nil {
		t.Fatal(err)
	}
	if err := c1.Fence(); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.err != nil || r.v != "one" {
		t.Fatalf("rank 0's get of rank 1's key: %q, %v", r.v, r.err)
	}
	if v, err := c1.Get("a-0"); err != nil || v != "zero" {
		t.Fatalf("rank 1's get of rank 0's key: %q, %v", v, err)
	}
}

// TestErrors: every failure is an error wrapping the right sentinel, never
// a hang.
func TestErrors(t *testing.T) {
	if _, err := pmi.Open(pmi.Config{Getenv: func(string) string { return "" }}); !errors.Is(err, pmi.ErrNoPMI) {
		t.Fatalf("no PMI in the environment: %v", err)
	}
	if _, err := pmi.Open(pmi.Config{Getenv: func(k string) string {
		return map[string]string{"PMI_FD": "x"}[k]
	}}); !errors.Is(err, pmi.ErrPMI) {
		t.Fatalf("PMI_FD=x: %v", err)
	}
	for _, wire := range []int{1, 2} {
		for _, flavor := range []pmitest.Flavor{pmitest.Hydra, pmitest.Slurm} {
			t.Run(fmt.Sprintf("%s/%d", flavor, wire), func(t *testing.T) {
				s := pmitest.New(flavor, 1)
				defer s.Close()
				s.FailCmd = map[int]string{1: "put", 2: "kvs-put"}[wire]
				c, err := pmi.Open(pmi.Config{Getenv: fdEnv(t, s, 0), Wire: wire, Timeout: 20 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if err := c.Put("k", "v"); !errors.Is(err, pmi.ErrPMI) || !strings.Contains(err.Error(), "rc=-1") {
					t.Fatalf("put refused by the server: %v", err)
				}
				for _, kv := range [][2]string{{"k k", "v"}, {"k", "a b"}, {"k", "a=b"}, {"k", "a;b"}, {"k", strings.Repeat("v", pmi.MaxValue+1)}} {
					if err := c.Put(kv[0], kv[1]); !errors.Is(err, pmi.ErrPMI) {
						t.Fatalf("put %q=%q: %v", kv[0], kv[1], err)
					}
				}
				if flavor == pmitest.Slurm || wire == 1 { // Hydra's PMI-2 would wait for fences
					if _, err := c.Get("nothing"); !errors.Is(err, pmi.ErrNotFound) {
						t.Fatalf("get of a missing key: %v", err)
					}
				}
				if err := c.Finalize(); err != nil {
					t.Fatal(err)
				}
				// The process manager closes the connection after finalize.
				if err := c.Fence(); !errors.Is(err, pmi.ErrPMI) {
					t.Fatalf("fence after finalize: %v", err)
				}
			})
		}
	}
	t.Run("slurm without PMI_JOBID", func(t *testing.T) {
		s := pmitest.New(pmitest.Slurm, 1)
		defer s.Close()
		env := fdEnv(t, s, 0)
		_, err := pmi.Open(pmi.Config{Getenv: func(k string) string {
			if k == pmi.EnvJobID {
				return ""
			}
			return env(k)
		}, Wire: 2, Timeout: 20 * time.Second})
		if !errors.Is(err, pmi.ErrPMI) || !strings.Contains(err.Error(), "fullinit-response") {
			t.Fatalf("fullinit without pmijobid: %v", err)
		}
	})
	t.Run("silent process manager", func(t *testing.T) {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fds[0])
		_, err = pmi.Open(pmi.Config{Getenv: func(k string) string {
			return map[string]string{"PMI_FD": strconv.Itoa(fds[1]), "PMI_RANK": "0", "PMI_SIZE": "1"}[k]
		}, Timeout: 100 * time.Millisecond})
		if !errors.Is(err, pmi.ErrPMI) || !strings.Contains(err.Error(), "timeout") {
			t.Fatalf("no answer: %v", err)
		}
	})
}

// TestInheritedFD: a child process gets the socket the way a launcher's
// child does, as an inherited descriptor named by PMI_FD.
func TestInheritedFD(t *testing.T) {
	if os.Getenv("PMITEST_CHILD") != "" {
		out, err := session(os.Getenv, 1)
		if err != nil {
			fmt.Println("CHILD-FAIL", err)
			os.Exit(1)
		}
		fmt.Println("CHILD-OK", out)
		return
	}
	s := pmitest.New(pmitest.Slurm, 1)
	defer s.Close()
	f, err := s.Pair(0)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestInheritedFD$")
	cmd.ExtraFiles = []*os.File{f} // descriptor 3 in the child
	cmd.Env = append(os.Environ(), "PMITEST_CHILD=1", "PMI_FD=3", "PMI_RANK=0", "PMI_SIZE=1", "PMI_JOBID=5.0")
	out, err := cmd.CombinedOutput()
	f.Close()
	if err != nil || !strings.Contains(string(out), "CHILD-OK rank 0 of 1: 10.77.0.1:4000\n") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if v, ok := s.KVS("ep-0"); !ok || v != "10.77.0.1:4000" {
		t.Fatalf("server's KVS: %q %v", v, ok)
	}
}
