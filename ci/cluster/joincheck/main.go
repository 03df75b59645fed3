// Command joincheck proves that the processes a launcher started joined one
// rmago job, and on which hosts they run. The cluster tests
// (ci/cluster/test-cluster.sh) start it under every launcher.
//
// Every rank joins the job (rma.Init), then puts a record into rank 0's
// window between two fences: its rank, the job size it was given, the IPv4
// address of its host and how long its Init took. Rank 0 checks every
// record and prints
//
//	joincheck: ok size=S hosts=IP,IP,...
//	joincheck: init slowest T (rank R)
//
// or says what is wrong and exits 1. -n and -hosts make it also require
// the job size and the number of distinct hosts.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rmago/rmago/rma"
)

// record is the layout of one rank's slot in rank 0's window.
const (
	fRank = iota
	fSize
	fAddr
	fInitMicros
	fields
)

func main() {
	start := time.Now()
	wantSize := flag.Int("n", 0, "require this job size (0: any)")
	wantHosts := flag.Int("hosts", 0, "require this many distinct hosts (0: any)")
	flag.Parse()
	w, err := rma.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "joincheck:", err)
		os.Exit(1)
	}
	initTime := time.Since(start)
	if err := run(w, os.Stdout, initTime, *wantSize, *wantHosts); err != nil {
		fmt.Fprintf(os.Stderr, "joincheck: rank %d: %v\n", w.Rank(), err)
		os.Exit(1)
	}
	if err := w.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "joincheck: rank %d: %v\n", w.Rank(), err)
		os.Exit(1)
	}
}

// run is one rank's part; rank 0 prints the result to out.
func run(w *rma.World, out io.Writer, initTime time.Duration, wantSize, wantHosts int) (err error) {
	me, size := w.Rank(), w.Size()
	win, err := rma.Allocate[uint64](w, fields*size)
	if err != nil {
		return err
	}
	defer func() {
		if ferr := win.Free(); err == nil {
			err = ferr
		}
	}()
	rec := make([]uint64, fields)
	rec[fRank] = uint64(me)
	rec[fSize] = uint64(size)
	rec[fAddr] = uint64(binary.BigEndian.Uint32(hostIPv4()))
	rec[fInitMicros] = uint64(initTime.Microseconds())
	if err := win.Fence(0); err != nil {
		return err
	}
	if err := win.Put(rec, 0, fields*me); err != nil {
		return err
	}
	if err := win.Fence(rma.NoSucceed); err != nil {
		return err
	}
	if me != 0 {
		return nil
	}
	return report(out, win.Local(), size, wantSize, wantHosts)
}

// report checks the records rank 0 received and prints the result to out.
func report(out io.Writer, recs []uint64, size, wantSize, wantHosts int) error {
	var hosts []string
	slowest, slowRank := uint64(0), 0
	for r := range size {
		rec := recs[fields*r : fields*(r+1)]
		if rec[fRank] != uint64(r) || rec[fSize] != uint64(size) {
			return fmt.Errorf("slot %d holds rank %d of size %d, want rank %d of size %d", r, rec[fRank], rec[fSize], r, size)
		}
		ip := make(net.IP, 4)
		binary.BigEndian.PutUint32(ip, uint32(rec[fAddr]))
		if !slices.Contains(hosts, ip.String()) {
			hosts = append(hosts, ip.String())
		}
		if rec[fInitMicros] >= slowest {
			slowest, slowRank = rec[fInitMicros], r
		}
	}
	if wantSize > 0 && size != wantSize {
		return fmt.Errorf("the job has %d ranks, want %d", size, wantSize)
	}
	if wantHosts > 0 && len(hosts) != wantHosts {
		return fmt.Errorf("the ranks run on %d hosts (%s), want %d", len(hosts), strings.Join(hosts, ","), wantHosts)
	}
	_, err := fmt.Fprintf(out, "joincheck: ok size=%d hosts=%s\njoincheck: init slowest %v (rank %d)\n",
		size, strings.Join(hosts, ","), time.Duration(slowest)*time.Microsecond, slowRank)
	return err
}

// hostIPv4 is the first IPv4 address of this host that is not loopback,
// or 127.0.0.1 if there is none.
func hostIPv4() net.IP {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.To4()
		}
	}
	return net.IPv4(127, 0, 0, 1).To4()
}
