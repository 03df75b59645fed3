package pmi

import (
	"fmt"
	"strconv"
	"strings"
)

// PMI-1: every request and reply is one line of space-separated key=value
// pairs, the first being cmd=NAME. Hydra puts rc last or leaves it out
// (cmd=barrier_out); Slurm puts rc=0 right after cmd. A reply is matched by
// its cmd and, when present, rc must be 0.
//
//	> cmd=init pmi_version=1 pmi_subversion=1   < cmd=response_to_init ... rc=0
//	> cmd=get_maxes                              < cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024
//	> cmd=get_my_kvsname                         < cmd=my_kvsname kvsname=K
//	> cmd=put kvsname=K key=k value=v            < cmd=put_result rc=0 msg=success
//	> cmd=barrier_in                             < cmd=barrier_out
//	> cmd=get kvsname=K key=k                    < cmd=get_result rc=0 msg=success value=v
//	> cmd=finalize                               < cmd=finalize_ack
//
// With PMI_PORT (Hydra's -pmi-port) the rank and size are not in the
// environment: the client first sends cmd=initack pmiid=ID and reads
// cmd=initack then cmd=set size=S, cmd=set rank=R, cmd=set debug=D.
type client1 struct {
	w          *wire
	rank, size int
	kvs        string
	vallen     int
}

// parse1 splits a PMI-1 line into its key=value pairs.
func parse1(line string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

// call1 sends req and reads the reply, which must be cmd=want with rc 0 if
// it has an rc.
func (c *client1) call(req, want string) (map[string]string, error) {
	if err := c.w.send(req + "\n"); err != nil {
		return nil, err
	}
	return c.reply(want)
}

func (c *client1) reply(want string) (map[string]string, error) {
	line, err := c.w.line()
	if err != nil {
		return nil, err
	}
	m := parse1(line)
	if m["cmd"] != want {
		return m, fmt.Errorf("%w: got %q, want cmd=%s", ErrPMI, line, want)
	}
	if rc, ok := m["rc"]; ok && rc != "0" {
		return m, fmt.Errorf("%w: %s: rc=%s msg=%s", ErrPMI, want, rc, m["msg"])
	}
	return m, nil
}

func open1(w *wire, getenv func(string) string, viaPort bool) (*client1, error) {
	c := &client1{w: w, vallen: MaxValue}
	rs, ss := getenv(EnvRank), getenv(EnvSize)
	if viaPort {
		id := getenv(EnvID)
		if _, err := strconv.Atoi(id); err != nil {
			return nil, fmt.Errorf("%w: %s is set but %s=%q is not a number", ErrPMI, EnvPort, EnvID, id)
		}
		if _, err := c.call("cmd=initack pmiid="+id, "initack"); err != nil {
			return nil, err
		}
		for range 3 { // set size, set rank, set debug, in Hydra's order
			m, err := c.reply("set")
			if err != nil {
				return nil, err
			}
			if v, ok := m["size"]; ok {
				ss = v
			}
			if v, ok := m["rank"]; ok {
				rs = v
			}
		}
	}
	if _, err := c.call("cmd=init pmi_version=1 pmi_subversion=1", "response_to_init"); err != nil {
		return nil, err
	}
	m, err := c.call("cmd=get_maxes", "maxes")
	if err != nil {
		return nil, err
	}
	if v, err := strconv.Atoi(m["vallen_max"]); err == nil && v > 0 && v < c.vallen {
		c.vallen = v
	}
	var err1, err2 error
	c.rank, err1 = strconv.Atoi(rs)
	c.size, err2 = strconv.Atoi(ss)
	if err1 != nil || err2 != nil || c.size < 1 || c.rank < 0 || c.rank >= c.size {
		return nil, fmt.Errorf("%w: rank %q of size %q (%s, %s)", ErrPMI, rs, ss, EnvRank, EnvSize)
	}
	if m, err = c.call("cmd=get_my_kvsname", "my_kvsname"); err != nil {
		return nil, err
	}
	if c.kvs = m["kvsname"]; c.kvs == "" {
		return nil, fmt.Errorf("%w: empty kvsname", ErrPMI)
	}
	return c, nil
}

func (c *client1) Wire() int { return 1 }
func (c *client1) Rank() int { return c.rank }
func (c *client1) Size() int { return c.size }

func (c *client1) Put(key, value string) error {
	if err := checkKV(key, value); err != nil {
		return err
	}
	if len(value) > c.vallen {
		return fmt.Errorf("%w: value of key %s has %d bytes, the process manager takes %d", ErrPMI, key, len(value), c.vallen)
	}
	_, err := c.call("cmd=put kvsname="+c.kvs+" key="+key+" value="+value, "put_result")
	return err
}

func (c *client1) Fence() error {
	_, err := c.call("cmd=barrier_in", "barrier_out")
	return err
}

func (c *client1) Get(key string) (string, error) {
	if err := checkKV(key, ""); err != nil {
		return "", err
	}
	m, err := c.call("cmd=get kvsname="+c.kvs+" key="+key, "get_result")
	if err != nil {
		if m != nil && m["cmd"] == "get_result" {
			return "", fmt.Errorf("%w: %s (%v)", ErrNotFound, key, err)
		}
		return "", err
	}
	v, ok := m["value"]
	if !ok {
		return "", fmt.Errorf("%w: %s: reply without a value", ErrNotFound, key)
	}
	return v, nil
}

func (c *client1) Finalize() error {
	_, err := c.call("cmd=finalize", "finalize_ack")
	return err
}

func (c *client1) Close() error { return c.w.c.Close() }
