package main

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// trialEnv names the variable that marks every process of a trial (the
// ranks and anything they start inherit it).
const trialEnv = "FAULTRUN_TRIAL"

// jobProcs returns the live processes that belong to a trial: those whose
// environment carries its marker (a random string per trial, so that no
// other process can match). Zombies are dead and are not counted.
func jobProcs(marker string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := []byte(trialEnv + "=" + marker + "\x00")
	self := os.Getpid()
	var out []int
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == self {
			continue
		}
		if state := procState(ent.Name()); state == "" || state == "Z" || state == "X" {
			continue
		}
		if env, err := os.ReadFile("/proc/" + ent.Name() + "/environ"); err == nil && bytes.Contains(append(env, 0), want) {
			out = append(out, pid)
		}
	}
	return out
}

// procState reads the state letter of /proc/<pid>/stat ("" if unknown).
func procState(pid string) string {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return ""
	}
	// pid (comm) state ...; comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 1 {
		return ""
	}
	return f[0]
}

// reapOrphans counts the trial's processes still alive after the driver
// ended the trial (every rank waited for), then kills them and waits,
// boundedly, until they are gone.
func reapOrphans(marker string) int {
	found := jobProcs(marker)
	for _, pid := range found {
		syscall.Kill(pid, syscall.SIGCONT)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if len(jobProcs(marker)) == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return len(found)
}
