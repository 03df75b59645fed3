// Package pmitest is a small PMI process manager for tests: it speaks the
// PMI-1 and PMI-2 wires the way MPICH's Hydra (4.0) or Slurm's mpi/pmi2
// plugin (22.05) do, byte for byte as far as a client can tell (reply
// field order, PMI-2 length padding, the -pmi-port initack, fence
// semantics), over socketpairs handed to the ranks as PMI_FD or over TCP as
// PMI_PORT. It records every message for tests to compare.
package pmitest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Flavor is the process manager imitated.
type Flavor int

const (
	// Hydra: rc last (or absent), PMI-2 lengths padded on the left,
	// PMI-2 kvs-fence not a barrier (a kvs-get of a missing key waits
	// until every rank has fenced as often as the caller).
	Hydra Flavor = iota
	// Slurm: rc first, PMI-2 lengths padded on the right, kvs-fence a
	// barrier, kvs-get of a missing key answers found=FALSE at once,
	// fullinit needs pmijobid, the init line is read with one read of at
	// most 64 bytes.
	Slurm
)

func (f Flavor) String() string {
	if f == Slurm {
		return "slurm"
	}
	return "hydra"
}

// Server is a process manager for one job of Size ranks.
type Server struct {
	Flavor Flavor
	Size   int
	// KVSName is the kvsname (PMI-1) and jobid (PMI-2).
	KVSName string
	// FailCmd, if set, makes the server answer that command (e.g. "put",
	// "kvs-put") with rc=-1.
	FailCmd string
	// Blocked, if not nil, receives the key of every kvs-get that waits
	// for other ranks' fences (Hydra, PMI-2).
	Blocked chan string

	mu      sync.Mutex
	cond    sync.Cond
	kvs     map[string]string
	inBar   int   // ranks inside the current barrier
	barGen  int   // completed barriers
	epoch   []int // PMI-2 fences per rank (Hydra)
	log     [][]string
	errs    []error
	ln      net.Listener
	conns   []net.Conn
	wg      sync.WaitGroup
	stopped bool
}

// New returns a server for a job of size ranks.
func New(f Flavor, size int) *Server {
	s := &Server{Flavor: f, Size: size, KVSName: "kvs_4242_0_1_vm", kvs: map[string]string{},
		epoch: make([]int, size), log: make([][]string, size)}
	if f == Slurm {
		s.KVSName = "5.0"
	}
	s.cond.L = &s.mu
	return s
}

// Pair creates a socketpair for rank, serves one end and returns the
// other, to be handed to the rank as PMI_FD.
func (s *Server) Pair(rank int) (*os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	mine := os.NewFile(uintptr(fds[0]), "pmi-server")
	c, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		syscall.Close(fds[1])
		return nil, err
	}
	s.serve(c, rank)
	return os.NewFile(uintptr(fds[1]), "pmi-client"), nil
}

// Env returns the environment a launcher gives rank with PMI_FD=fd.
func (s *Server) Env(rank, fd int) map[string]string {
	env := map[string]string{"PMI_FD": strconv.Itoa(fd), "PMI_RANK": strconv.Itoa(rank), "PMI_SIZE": strconv.Itoa(s.Size)}
	if s.Flavor == Slurm {
		env["PMI_JOBID"] = s.KVSName
	}
	return env
}

// Listen serves PMI_PORT connections on loopback, as Hydra's -pmi-port,
// and returns the PMI_PORT value. The rank is learnt from initack (PMI-1)
// or fullinit (PMI-2).
func (s *Server) Listen() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.serve(c, -1)
		}
	}()
	return ln.Addr().String(), nil
}

// Close stops the server and waits for its goroutines.
func (s *Server) Close() {
	s.mu.Lock()
	s.stopped = true
	if s.ln != nil {
		s.ln.Close()
	}
	for _, c := range s.conns {
		c.Close()
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	s.wg.Wait()
}

// Transcript is what rank sent ("> ") and received ("< "), in order.
func (s *Server) Transcript(rank int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.log[rank]...)
}

// Errs is the protocol errors the server saw (a client speaking wrongly).
func (s *Server) Errs() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.errs...)
}

// KVS returns the value of key, if any.
func (s *Server) KVS(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.kvs[key]
	return v, ok
}

func (s *Server) serve(c net.Conn, rank int) {
	s.mu.Lock()
	s.conns = append(s.conns, c)
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer c.Close()
		cn := &conn{s: s, c: c, rank: rank}
		if err := cn.run(); err != nil && err != io.EOF {
			s.mu.Lock()
			if !s.stopped {
				s.errs = append(s.errs, fmt.Errorf("rank %d: %w", cn.rank, err))
			}
			s.mu.Unlock()
		}
	}()
}

type conn struct {
	s       *Server
	c       net.Conn
	r       *bufio.Reader
	rank    int
	done    bool
	pending []string // messages before the rank was known
}

func (cn *conn) record(dir, msg string) {
	cn.pending = append(cn.pending, dir+" "+msg)
	cn.flush()
}

// flush moves the pending messages to the rank's transcript once the rank is known.
func (cn *conn) flush() {
	if cn.rank < 0 || cn.rank >= cn.s.Size {
		return
	}
	cn.s.mu.Lock()
	cn.s.log[cn.rank] = append(cn.s.log[cn.rank], cn.pending...)
	cn.s.mu.Unlock()
	cn.pending = cn.pending[:0]
}

func (cn *conn) send(msgs ...string) error {
	var b strings.Builder
	for _, m := range msgs {
		cn.record("<", strings.TrimRight(m, "\n"))
		b.WriteString(m)
	}
	_, err := io.WriteString(cn.c, b.String()) // one write, several messages
	return err
}

// first reads the first line: Slurm with a single read of 64 bytes.
func (cn *conn) first() (string, error) {
	if cn.s.Flavor != Slurm {
		return cn.r.ReadString('\n')
	}
	buf := make([]byte, 64)
	n, err := cn.c.Read(buf)
	if err != nil {
		return "", err
	}
	line := string(buf[:n])
	if !strings.HasSuffix(line, "\n") || strings.Count(line, "\n") != 1 {
		return "", fmt.Errorf("init not in one read: %q", line)
	}
	return line, nil
}

func (cn *conn) run() error {
	cn.r = bufio.NewReader(cn.c)
	line, err := cn.first()
	for err == nil && !cn.done {
		line = strings.TrimRight(line, "\n")
		cn.record(">", line)
		var v2 bool
		if v2, err = cn.pmi1(line); err != nil || v2 {
			break
		}
		line, err = cn.r.ReadString('\n')
	}
	if err != nil || cn.done {
		return err
	}
	for !cn.done { // PMI-2 frames
		var hdr [6]byte
		if _, err := io.ReadFull(cn.r, hdr[:]); err != nil {
			return err
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(hdr[:])))
		if err != nil {
			return fmt.Errorf("bad PMI-2 length %q", hdr)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(cn.r, body); err != nil {
			return err
		}
		if cn.rank < 0 && strings.HasPrefix(string(body), "cmd=fullinit;") {
			cn.rank, _ = strconv.Atoi(parse2(string(body))["pmirank"])
		}
		cn.record(">", string(hdr[:])+string(body))
		if err := cn.pmi2(parse2(string(body))); err != nil {
			return err
		}
	}
	return nil
}

func parse1(line string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

func parse2(s string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Split(strings.ReplaceAll(s, ";;", "\x00"), ";") {
		if f == "" {
			continue
		}
		k, v, _ := strings.Cut(strings.ReplaceAll(f, "\x00", ";"), "=")
		m[k] = v
	}
	return m
}

// reply1 sends a PMI-1 reply: hydra or slurm, as the flavor; FailCmd
// turns it into an rc=-1.
func (cn *conn) reply1(cmd, hydra, slurm string) error {
	if cn.s.FailCmd != "" && strings.HasPrefix(cmd, cn.s.FailCmd) {
		return cn.send("cmd=" + cmd + " rc=-1 msg=injected_failure\n")
	}
	if cn.s.Flavor == Slurm {
		return cn.send("cmd=" + cmd + slurm + "\n")
	}
	return cn.send("cmd=" + cmd + hydra + "\n")
}

// pmi1 handles one PMI-1 line; it returns true after a PMI-2 init.
func (cn *conn) pmi1(line string) (bool, error) {
	s := cn.s
	m := parse1(line)
	switch m["cmd"] {
	case "initack":
		id, err := strconv.Atoi(m["pmiid"])
		if err != nil || id < 0 || id >= s.Size {
			return false, fmt.Errorf("bad initack %q", line)
		}
		cn.rank = id
		cn.flush()
		return false, cn.send("cmd=initack\n", "cmd=set size="+strconv.Itoa(s.Size)+"\n",
			"cmd=set rank="+strconv.Itoa(id)+"\n", "cmd=set debug=0\n")
	case "init":
		if m["pmi_version"] == "2" {
			return true, cn.reply1("response_to_init", " pmi_version=2 pmi_subversion=0 rc=0", " rc=0 pmi_version=2 pmi_subversion=0")
		}
		return false, cn.reply1("response_to_init", " pmi_version=1 pmi_subversion=1 rc=0", " rc=0 pmi_version=1 pmi_subversion=1")
	case "get_maxes":
		const maxes = " kvsname_max=256 keylen_max=64 vallen_max=1024"
		return false, cn.reply1("maxes", maxes, " rc=0"+maxes)
	case "get_my_kvsname":
		return false, cn.reply1("my_kvsname", " kvsname="+s.KVSName, " rc=0 kvsname="+s.KVSName)
	case "put":
		if m["kvsname"] != s.KVSName || len(m["value"]) > 1024 || m["key"] == "" {
			return false, cn.send("cmd=put_result rc=-1 msg=bad_put\n")
		}
		s.mu.Lock()
		s.kvs[m["key"]] = m["value"]
		s.mu.Unlock()
		return false, cn.reply1("put_result", " rc=0 msg=success", " rc=0")
	case "barrier_in":
		if err := cn.barrier(); err != nil {
			return false, err
		}
		return false, cn.reply1("barrier_out", "", " rc=0")
	case "get":
		s.mu.Lock()
		v, ok := s.kvs[m["key"]]
		s.mu.Unlock()
		if !ok || m["kvsname"] != s.KVSName {
			return false, cn.reply1("get_result", " rc=-1 msg=key_"+m["key"]+"_not_found", " rc=-1")
		}
		return false, cn.reply1("get_result", " rc=0 msg=success value="+v, " rc=0 value="+v)
	case "finalize":
		cn.done = true
		return false, cn.reply1("finalize_ack", "", " rc=0")
	}
	return false, fmt.Errorf("unknown PMI-1 command %q", line)
}

// barrier waits until every rank entered it.
func (cn *conn) barrier() error {
	s := cn.s
	s.mu.Lock()
	defer s.mu.Unlock()
	gen := s.barGen
	s.inBar++
	if s.inBar == s.Size {
		s.inBar = 0
		s.barGen++
		s.cond.Broadcast()
	}
	for s.barGen == gen && !s.stopped {
		s.cond.Wait()
	}
	if s.stopped {
		return io.EOF
	}
	return nil
}

// reply2 formats a PMI-2 frame: rc and padding as the flavor does.
func (cn *conn) reply2(cmd string, kv ...string) error {
	fields := []string{"cmd=" + cmd}
	rc := "0"
	if cn.s.FailCmd != "" && strings.HasPrefix(cmd, cn.s.FailCmd) {
		kv = []string{"errmsg", "injected failure"}
	}
	if len(kv) == 2 && kv[0] == "errmsg" {
		rc = "-1"
	}
	if cn.s.Flavor == Slurm {
		fields = append(fields, "rc="+rc)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		fields = append(fields, kv[i]+"="+strings.ReplaceAll(kv[i+1], ";", ";;"))
	}
	if cn.s.Flavor == Hydra {
		fields = append(fields, "rc="+rc)
	}
	body := strings.Join(fields, ";") + ";"
	if cn.s.Flavor == Hydra {
		return cn.send(fmt.Sprintf("%6d%s", len(body), body))
	}
	return cn.send(fmt.Sprintf("%-6d%s", len(body), body))
}

func (cn *conn) pmi2(m map[string]string) error {
	s := cn.s
	switch m["cmd"] {
	case "fullinit":
		if s.Flavor == Slurm && m["pmijobid"] != s.KVSName {
			return cn.reply2("fullinit-response", "errmsg", "pmijobid missing")
		}
		r, err := strconv.Atoi(m["pmirank"])
		if err != nil || r < 0 || r >= s.Size {
			return fmt.Errorf("fullinit without a valid pmirank: %v", m)
		}
		appnum := "0"
		if s.Flavor == Slurm {
			appnum = "-1"
		}
		return cn.reply2("fullinit-response", "pmi-version", "2", "pmi-subversion", "0", "rank", strconv.Itoa(r),
			"size", strconv.Itoa(s.Size), "appnum", appnum, "debugged", "FALSE", "pmiverbose", "FALSE")
	case "job-getid":
		return cn.reply2("job-getid-response", "jobid", s.KVSName)
	case "kvs-put":
		s.mu.Lock()
		s.kvs[m["key"]] = m["value"]
		s.mu.Unlock()
		return cn.reply2("kvs-put-response")
	case "kvs-fence":
		if s.Flavor == Slurm {
			if err := cn.barrier(); err != nil {
				return err
			}
		} else {
			s.mu.Lock()
			s.epoch[cn.rank]++
			s.cond.Broadcast()
			s.mu.Unlock()
		}
		return cn.reply2("kvs-fence-response")
	case "kvs-get":
		if m["jobid"] != s.KVSName {
			return cn.reply2("kvs-get-response", "found", "FALSE")
		}
		s.mu.Lock()
		v, ok := s.kvs[m["key"]]
		if !ok && s.Flavor == Hydra {
			if s.Blocked != nil {
				s.Blocked <- m["key"]
			}
			for !ok && !s.stopped && !s.allFenced(s.epoch[cn.rank]) {
				s.cond.Wait()
				v, ok = s.kvs[m["key"]]
			}
		}
		s.mu.Unlock()
		if !ok {
			return cn.reply2("kvs-get-response", "found", "FALSE")
		}
		return cn.reply2("kvs-get-response", "found", "TRUE", "value", v)
	case "finalize":
		cn.done = true
		return cn.reply2("finalize-response")
	}
	return fmt.Errorf("unknown PMI-2 command %v", m)
}

// allFenced reports whether every rank fenced at least n times; under mu.
func (s *Server) allFenced(n int) bool {
	for _, e := range s.epoch {
		if e < n {
			return false
		}
	}
	return true
}
