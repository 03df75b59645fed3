// Command child is a test program for rmarun. It performs its arguments as
// actions, in order. An action may be limited to one rank with a "@RANK"
// suffix, e.g. "exit=3@2".
//
//	env          print the RMAGO_* variables as NAME=value lines
//	getenv=NAME  print NAME=value, or "NAME unset"
//	init         join the job (rma.Init) and print "joined"
//	barrier      rma's Barrier; on an error print it and exit 1
//	close        leave the job (World.Close); on an error print it and exit 1
//	out=TEXT     print TEXT to stdout
//	err=TEXT     print TEXT to stderr
//	nonl=TEXT    print TEXT to stdout without a newline
//	spam=K       print K long lines "rank:i:xxx...x" to stdout
//	ready        print "ready pid=PID"
//	ignoreterm   ignore SIGTERM
//	exit=CODE    exit with CODE
//	panic        panic
//	kill         send SIGKILL to itself
//	sleep        sleep forever
//	tag=TEXT     nothing (marks the process in the process table)
//	cpus         print "cpus=LIST gomaxprocs=N": the CPUs it may run on
//	             (Linux's Cpus_allowed_list) and its GOMAXPROCS
package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rmago/rmago/rma"
)

// world is the job joined by "init".
var world *rma.World

func main() {
	rank, _ := strconv.Atoi(os.Getenv("RMAGO_RANK"))
	for _, arg := range os.Args[1:] {
		if i := strings.LastIndex(arg, "@"); i >= 0 {
			if r, err := strconv.Atoi(arg[i+1:]); err == nil {
				if r != rank {
					continue
				}
				arg = arg[:i]
			}
		}
		name, val, _ := strings.Cut(arg, "=")
		switch name {
		case "env":
			for _, kv := range os.Environ() {
				if strings.HasPrefix(kv, "RMAGO_") {
					fmt.Println(kv)
				}
			}
		case "getenv":
			if v, ok := os.LookupEnv(val); ok {
				fmt.Printf("%s=%s\n", val, v)
			} else {
				fmt.Printf("%s unset\n", val)
			}
		case "init":
			var err error
			if world, err = rma.Init(); err != nil {
				fmt.Fprintln(os.Stderr, "init:", err)
				os.Exit(1)
			}
			fmt.Println("joined")
		case "barrier":
			if err := world.Barrier(); err != nil {
				fmt.Fprintln(os.Stderr, "barrier:", err)
				os.Exit(1)
			}
		case "close":
			if err := world.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "close:", err)
				os.Exit(1)
			}
		case "tag":
		case "out":
			fmt.Println(val)
		case "err":
			fmt.Fprintln(os.Stderr, val)
		case "nonl":
			fmt.Print(val)
		case "spam":
			k, _ := strconv.Atoi(val)
			for i := range k {
				fmt.Printf("%d:%d:%s\n", rank, i, strings.Repeat("x", 1000+i*37%5000))
			}
		case "ready":
			fmt.Printf("ready pid=%d\n", os.Getpid())
		case "ignoreterm":
			signal.Ignore(syscall.SIGTERM)
		case "exit":
			code, _ := strconv.Atoi(val)
			os.Exit(code)
		case "panic":
			panic("child panics")
		case "kill":
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			sleepForever()
		case "sleep":
			sleepForever()
		case "cpus":
			list := "?"
			if b, err := os.ReadFile("/proc/self/status"); err == nil {
				for _, l := range strings.Split(string(b), "\n") {
					if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
						list = strings.TrimSpace(v)
					}
				}
			}
			fmt.Printf("cpus=%s gomaxprocs=%d\n", list, runtime.GOMAXPROCS(0))
		default:
			fmt.Fprintf(os.Stderr, "child: unknown action %q\n", arg)
			os.Exit(100)
		}
	}
}

// sleepForever blocks without tripping the runtime's deadlock detector.
func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}
