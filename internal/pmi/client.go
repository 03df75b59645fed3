// Package pmi is a pure-Go client (no cgo, no libpmi) of the two "simple"
// PMI wire protocols that process managers speak to the processes they
// start: PMI-1 (newline-terminated "cmd=NAME k=v ..." lines) and PMI-2
// (a PMI-1 style init line, then frames of a 6-character decimal length
// and "cmd=NAME;k=v;..."). Both are spoken by MPICH's Hydra (mpiexec) and by
// Slurm's mpi/pmi2 plugin (srun --mpi=pmi2).
//
// A process finds its process manager through the environment: PMI_FD, a
// connected socket it inherited, or else PMI_PORT ("host:port") with
// PMI_ID, as Hydra's mpiexec -pmi-port sets them. Open connects and runs the
// init handshake; the Client then offers the key-value store (KVS) that is
// all a bootstrap needs: Put, Fence, Get.
//
// Fence semantics differ (see Client.Fence): code that must see every
// rank's key after a fence should Get exactly the keys the ranks put before
// fencing, which works under every launcher.
//
// How the transport's bootstrap uses it, and the wires: docs/launch.md.
package pmi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Environment variables read by Open.
const (
	EnvFD    = "PMI_FD"    // inherited socket to the process manager
	EnvPort  = "PMI_PORT"  // host:port of the process manager (Hydra -pmi-port)
	EnvID    = "PMI_ID"    // this process's id with PMI_PORT
	EnvRank  = "PMI_RANK"  // rank (PMI-1 with PMI_FD)
	EnvSize  = "PMI_SIZE"  // size (PMI-1 with PMI_FD)
	EnvJobID = "PMI_JOBID" // Slurm's job.step, needed in PMI-2's fullinit
)

// Errors returned by the client. Test with errors.Is.
var (
	// ErrPMI means the process manager answered with an error, with a
	// reply this client did not expect, or not at all.
	ErrPMI = errors.New("pmi: process manager error")
	// ErrNotFound means Get found no value for the key.
	ErrNotFound = errors.New("pmi: key not found")
	// ErrNoPMI means the environment names no process manager.
	ErrNoPMI = errors.New("pmi: no PMI_FD or PMI_PORT in the environment")
)

// MaxValue is the longest value Put accepts on either wire: PMI-1's
// vallen_max as Hydra and Slurm report it, and PMI-2's PMI2_MAX_VALLEN.
// Values must not contain spaces, newlines, '=' or ';'.
const MaxValue = 1024

// MaxKey is the longest key Put and Get accept (keylen_max).
const MaxKey = 64

// Client is a connection to the process manager, after its init handshake.
// Its methods are not safe for concurrent use.
type Client interface {
	// Wire is 1 or 2.
	Wire() int
	// Rank and Size are this process's place in the job.
	Rank() int
	Size() int
	// Put stores key=value in the job's KVS.
	Put(key, value string) error
	// Fence publishes this process's puts. On PMI-1 (barrier_in) and on
	// Slurm's PMI-2 it is a barrier. Hydra's PMI-2 kvs-fence returns at
	// once; a later Get of a key not yet put waits until every process has
	// fenced. Either way, after every process put its keys and fenced, Get
	// of those keys succeeds.
	Fence() error
	// Get returns the value of key, or an error wrapping ErrNotFound.
	Get(key string) (string, error)
	// Finalize tells the process manager this process is done with PMI.
	Finalize() error
	// Close closes the connection (without Finalize).
	Close() error
}

// Config describes how to reach the process manager.
type Config struct {
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// Wire is 1 (default) or 2.
	Wire int
	// Timeout bounds each request's round trip, a fence included (0: none).
	Timeout time.Duration
	// Trace, if not nil, receives every message sent ("> ...") and
	// received ("< ...").
	Trace func(string)
}

// Open connects to the process manager the environment names and runs the
// init handshake of the selected wire.
func Open(cfg Config) (Client, error) {
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	if cfg.Wire == 0 {
		cfg.Wire = 1
	}
	if cfg.Wire != 1 && cfg.Wire != 2 {
		return nil, fmt.Errorf("%w: wire %d: want 1 or 2", ErrPMI, cfg.Wire)
	}
	c, viaPort, err := dial(cfg.Getenv)
	if err != nil {
		return nil, err
	}
	w := &wire{c: c, timeout: cfg.Timeout, trace: cfg.Trace}
	var cl Client
	if cfg.Wire == 1 {
		cl, err = open1(w, cfg.Getenv, viaPort)
	} else {
		cl, err = open2(w, cfg.Getenv, viaPort)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return cl, nil
}

// dial returns the connection the environment names: the inherited
// PMI_FD, or a TCP connection to PMI_PORT.
func dial(getenv func(string) string) (net.Conn, bool, error) {
	if s := getenv(EnvFD); s != "" {
		fd, err := strconv.Atoi(s)
		if err != nil || fd < 0 {
			return nil, false, fmt.Errorf("%w: bad %s=%q", ErrPMI, EnvFD, s)
		}
		f := os.NewFile(uintptr(fd), "pmi")
		if f == nil {
			return nil, false, fmt.Errorf("%w: %s=%d is not an open file", ErrPMI, EnvFD, fd)
		}
		// FileConn duplicates the descriptor (close-on-exec); the
		// inherited one is closed so that no child process inherits it.
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return nil, false, fmt.Errorf("%w: %s=%d: %v", ErrPMI, EnvFD, fd, err)
		}
		return c, false, nil
	}
	if s := getenv(EnvPort); s != "" {
		c, err := net.DialTimeout("tcp", s, 10*time.Second)
		if err != nil {
			return nil, false, fmt.Errorf("%w: %s=%s: %v", ErrPMI, EnvPort, s, err)
		}
		return c, true, nil
	}
	return nil, false, ErrNoPMI
}

// wire is the connection with its deadline and trace.
type wire struct {
	c       net.Conn
	buf     []byte // bytes read but not yet consumed
	timeout time.Duration
	trace   func(string)
}

func (w *wire) arm() {
	if w.timeout > 0 {
		w.c.SetDeadline(time.Now().Add(w.timeout))
	}
}

// send writes s in one write: Slurm reads the init line with a single read.
func (w *wire) send(s string) error {
	if w.trace != nil {
		w.trace("> " + strings.TrimRight(s, "\n"))
	}
	w.arm()
	if _, err := io.WriteString(w.c, s); err != nil {
		return fmt.Errorf("%w: sending %q: %v", ErrPMI, firstWord(s), err)
	}
	return nil
}

// fill reads more bytes into buf.
func (w *wire) fill() error {
	var b [512]byte
	n, err := w.c.Read(b[:])
	w.buf = append(w.buf, b[:n]...)
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// line reads one newline-terminated line (without the newline).
func (w *wire) line() (string, error) {
	w.arm()
	for {
		if i := bytes.IndexByte(w.buf, '\n'); i >= 0 {
			s := string(w.buf[:i])
			w.buf = w.buf[i+1:]
			if w.trace != nil {
				w.trace("< " + s)
			}
			return s, nil
		}
		if len(w.buf) > 64<<10 {
			return "", fmt.Errorf("%w: reply line longer than 64 KiB", ErrPMI)
		}
		if err := w.fill(); err != nil {
			return "", fmt.Errorf("%w: reading reply: %v", ErrPMI, err)
		}
	}
}

// exactly reads n bytes.
func (w *wire) exactly(n int) ([]byte, error) {
	w.arm()
	for len(w.buf) < n {
		if err := w.fill(); err != nil {
			return nil, fmt.Errorf("%w: reading reply: %v", ErrPMI, err)
		}
	}
	b := w.buf[:n:n]
	w.buf = w.buf[n:]
	return b, nil
}

func firstWord(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, " ;"); i >= 0 {
		return s[:i]
	}
	return s
}

// checkKV rejects keys and values the wires cannot carry.
func checkKV(key, value string) error {
	if key == "" || len(key) > MaxKey || strings.ContainsAny(key, " \n=;") {
		return fmt.Errorf("%w: bad key %q", ErrPMI, key)
	}
	if len(value) > MaxValue || strings.ContainsAny(value, " \n=;") {
		return fmt.Errorf("%w: value of key %s: %d bytes or a space, newline, '=' or ';'", ErrPMI, key, len(value))
	}
	return nil
}

// WirePMIx is what Client.Wire returns for the PMIx client (OpenPMIx).
const WirePMIx = 3
