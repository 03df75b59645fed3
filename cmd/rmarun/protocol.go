//go:build unix

package main

import (
	"fmt"
	"strconv"
	"strings"
)

// The agent protocol. rmarun starts "rmarun -agent" on each remote host
// through the launcher (ssh) and talks to it over the launcher's standard
// input and output, so that nothing secret is on a command line:
//
//	rmarun -> agent   one JSON setupMsg line, then one JSON startMsg line,
//	                  then "S <signal>" lines; closing the agent's input
//	                  (ssh ends, rmarun dies) stops that host's ranks.
//	agent -> rmarun   one line per message:
//	    H <addr> <port>        hello: the address its ranks listen on, and a
//	                           free rendezvous port there if asked for one
//	    O <rank> <text>        a line the rank wrote on its standard output
//	    E <rank> <text>        a line the rank wrote on its standard error
//	    I <rank>               the rank entered rma.Init
//	    J <rank>               the rank met every other rank
//	    P <rank> <peer>        the rank lost its peer (a failure follows)
//	    X <rank> <when> <code> <signal> <stopped> <init> <detail>
//	                           the rank ended (exitInfo; detail is
//	                           "start:"+StartErr, "lost:"+Lost or "-")
//	    L <text>               a message of the agent itself

// setupMsg is the first thing an agent reads: how to pick its address.
type setupMsg struct {
	Host     string // the host's name in -H or the hostfile
	Choice   addrChoice
	NeedPort bool // rank 0 runs there: find a free rendezvous port
}

// startMsg tells an agent to start its ranks.
type startMsg struct {
	Ranks      []int
	Size       int
	Argv       []string
	Cwd        string   // rmarun's directory; the agent goes there if it exists
	Env        []string // NAME=value set for the ranks (RMAGO_*, -x)
	Rendezvous string
	Secret     string
	Addr       string // the address from the hello

	BindTo        string // -bind-to, applied to the host's own CPUs
	Oversubscribe bool
}

// encodeExit formats an X line.
func encodeExit(rank int, e exitInfo) string {
	detail := "-"
	switch {
	case e.StartErr != "":
		detail = "start:" + e.StartErr
	case e.Lost != "":
		detail = "lost:" + e.Lost
	}
	return fmt.Sprintf("X %d %d %d %d %t %d %s\n", rank, e.When, e.Code, e.Signal, e.Stopped, e.Init, oneLine(detail))
}

// decodeExit parses the fields after "X ".
func decodeExit(s string) (int, exitInfo, error) {
	f := strings.SplitN(s, " ", 7)
	if len(f) != 7 {
		return 0, exitInfo{}, fmt.Errorf("bad exit message %q", s)
	}
	var e exitInfo
	rank, err1 := strconv.Atoi(f[0])
	when, err2 := strconv.ParseInt(f[1], 10, 64)
	code, err3 := strconv.Atoi(f[2])
	sig, err4 := strconv.Atoi(f[3])
	stopped, err5 := strconv.ParseBool(f[4])
	init, err6 := strconv.Atoi(f[5])
	for _, err := range []error{err1, err2, err3, err4, err5, err6} {
		if err != nil {
			return 0, e, fmt.Errorf("bad exit message %q", s)
		}
	}
	e = exitInfo{When: when, Code: code, Signal: sig, Stopped: stopped, Init: init}
	if v, ok := strings.CutPrefix(f[6], "start:"); ok {
		e.StartErr = v
	} else if v, ok := strings.CutPrefix(f[6], "lost:"); ok {
		e.Lost = v
	}
	return rank, e, nil
}

// oneLine replaces the newlines of s, which must fit on a protocol line.
func oneLine(s string) string {
	return strings.ReplaceAll(s, "\n", " ")
}
