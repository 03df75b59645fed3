// Package cli parses an app's command line once per job: every rank of a
// job parses the same flags, so only rank 0 (or a process started by no
// launcher) prints the usage or a flag error, and -h prints it once.
package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
)

// rankEnv lists the variables in which the launchers rmago joins (rmarun,
// Slurm, Hydra, PMIx launchers such as Open MPI's mpirun) give a process
// its rank.
var rankEnv = []string{"RMAGO_RANK", "SLURM_PROCID", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK"}

// Speaks reports whether this process prints usage and command-line
// errors: rank 0 of a job, or a process outside any job.
func Speaks() bool {
	for _, v := range rankEnv {
		if r, ok := os.LookupEnv(v); ok && r != "" {
			return r == "0"
		}
	}
	return true
}

// Parse parses the command line into the flags defined on
// flag.CommandLine. -h prints "usage: synopsis" and the flags on stderr
// and exits 0; a bad flag prints the error and the usage and exits 2;
// either only from the rank that Speaks.
func Parse(synopsis string) {
	fs := flag.CommandLine
	out := io.Writer(os.Stderr)
	if !Speaks() {
		out = io.Discard
	}
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "usage: %s\n", synopsis)
		fs.PrintDefaults()
	}
	flag.Parse()
}
