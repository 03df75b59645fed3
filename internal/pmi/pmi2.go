package pmi

import (
	"fmt"
	"strconv"
	"strings"
)

// PMI-2: the init is a PMI-1 line (cmd=init pmi_version=2 pmi_subversion=0);
// every later message is a frame: a 6-character decimal length, then that
// many bytes of "cmd=NAME;k=v;...;", where ";;" inside a value is a ';'.
// Hydra pads the length on the left ("   113"), Slurm on the right
// ("114   "); both accept the left-aligned form this client sends. Hydra
// puts rc last, Slurm first.
//
//	> cmd=fullinit;pmijobid=J;pmirank=R;threaded=FALSE;   < cmd=fullinit-response;rank=R;size=S;...;rc=0;
//	> cmd=job-getid;                                      < cmd=job-getid-response;jobid=J;rc=0;
//	> cmd=kvs-put;key=k;value=v;                          < cmd=kvs-put-response;rc=0;
//	> cmd=kvs-fence;                                      < cmd=kvs-fence-response;rc=0;
//	> cmd=kvs-get;jobid=J;srcid=-1;key=k;                 < cmd=kvs-get-response;found=TRUE;value=v;rc=0;
//	> cmd=finalize;                                       < cmd=finalize-response;rc=0;
//
// Slurm requires pmijobid=$PMI_JOBID in fullinit (Hydra ignores it). With
// PMI_PORT (no PMI_RANK) the process sends pmirank=$PMI_ID.
type client2 struct {
	w          *wire
	rank, size int
	jobid      string
}

// frame2 encodes a request: pairs of key and value.
func frame2(kv ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString(kv[i])
		b.WriteByte('=')
		b.WriteString(strings.ReplaceAll(kv[i+1], ";", ";;"))
		b.WriteByte(';')
	}
	body := b.String()
	return fmt.Sprintf("%-6d%s", len(body), body)
}

// parse2 decodes a frame's body.
func parse2(s string) map[string]string {
	m := map[string]string{}
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			k, v, _ := strings.Cut(cur.String(), "=")
			m[k] = v
			cur.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == ';' && i+1 < len(s) && s[i+1] == ';':
			cur.WriteByte(';')
			i++
		case s[i] == ';':
			flush()
		default:
			cur.WriteByte(s[i])
		}
	}
	flush()
	return m
}

// call sends a request and reads the reply, which must be cmd=want with rc 0.
func (c *client2) call(want string, kv ...string) (map[string]string, error) {
	if err := c.w.send(frame2(kv...)); err != nil {
		return nil, err
	}
	hdr, err := c.w.exactly(6)
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(hdr)))
	if err != nil || n < 0 || n > 1<<20 {
		return nil, fmt.Errorf("%w: bad PMI-2 length %q", ErrPMI, hdr)
	}
	body, err := c.w.exactly(n)
	if err != nil {
		return nil, err
	}
	if c.w.trace != nil {
		c.w.trace("< " + string(hdr) + string(body))
	}
	m := parse2(string(body))
	if m["cmd"] != want {
		return m, fmt.Errorf("%w: got %q, want cmd=%s", ErrPMI, body, want)
	}
	if rc, ok := m["rc"]; ok && rc != "0" {
		return m, fmt.Errorf("%w: %s: rc=%s errmsg=%s", ErrPMI, want, rc, m["errmsg"])
	}
	return m, nil
}

func open2(w *wire, getenv func(string) string, viaPort bool) (*client2, error) {
	c := &client2{w: w}
	c1 := &client1{w: w}
	if _, err := c1.call("cmd=init pmi_version=2 pmi_subversion=0", "response_to_init"); err != nil {
		return nil, err
	}
	args := []string{"cmd", "fullinit"}
	if j := getenv(EnvJobID); j != "" {
		args = append(args, "pmijobid", j)
	}
	if viaPort {
		// Hydra's PMI-2 proxy wants pmirank even with -pmi-port, where
		// PMI_RANK is not set; its PMI_ID is the rank.
		args = append(args, "pmirank", getenv(EnvID))
	} else {
		args = append(args, "pmirank", getenv(EnvRank))
	}
	args = append(args, "threaded", "FALSE")
	m, err := c.call("fullinit-response", args...)
	if err != nil {
		return nil, err
	}
	var err1, err2 error
	c.rank, err1 = strconv.Atoi(m["rank"])
	c.size, err2 = strconv.Atoi(m["size"])
	if err1 != nil || err2 != nil || c.size < 1 || c.rank < 0 || c.rank >= c.size {
		return nil, fmt.Errorf("%w: fullinit gave rank %q of size %q", ErrPMI, m["rank"], m["size"])
	}
	if m, err = c.call("job-getid-response", "cmd", "job-getid"); err != nil {
		return nil, err
	}
	if c.jobid = m["jobid"]; c.jobid == "" {
		return nil, fmt.Errorf("%w: empty jobid", ErrPMI)
	}
	return c, nil
}

func (c *client2) Wire() int { return 2 }
func (c *client2) Rank() int { return c.rank }
func (c *client2) Size() int { return c.size }

func (c *client2) Put(key, value string) error {
	if err := checkKV(key, value); err != nil {
		return err
	}
	_, err := c.call("kvs-put-response", "cmd", "kvs-put", "key", key, "value", value)
	return err
}

func (c *client2) Fence() error {
	_, err := c.call("kvs-fence-response", "cmd", "kvs-fence")
	return err
}

func (c *client2) Get(key string) (string, error) {
	if err := checkKV(key, ""); err != nil {
		return "", err
	}
	m, err := c.call("kvs-get-response", "cmd", "kvs-get", "jobid", c.jobid, "srcid", "-1", "key", key)
	if err != nil {
		return "", err
	}
	if m["found"] != "TRUE" {
		return "", fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return m["value"], nil
}

func (c *client2) Finalize() error {
	_, err := c.call("finalize-response", "cmd", "finalize")
	return err
}

func (c *client2) Close() error { return c.w.c.Close() }
