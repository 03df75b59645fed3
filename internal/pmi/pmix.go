//go:build pmix

package pmi

/*
#cgo pkg-config: pmix
#include <stdlib.h>
#include <string.h>
#include <pmix.h>

static pmix_proc_t me;

static int rmago_pmix_init(uint32_t *rank, uint32_t *size) {
	pmix_status_t rc = PMIx_Init(&me, NULL, 0);
	if (rc != PMIX_SUCCESS) return rc;
	*rank = me.rank;
	pmix_proc_t job;
	PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
	pmix_value_t *v = NULL;
	rc = PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &v);
	if (rc != PMIX_SUCCESS) return rc;
	*size = v->data.uint32;
	PMIX_VALUE_RELEASE(v);
	return PMIX_SUCCESS;
}

static int rmago_pmix_put(const char *key, char *val) {
	pmix_value_t v;
	v.type = PMIX_STRING;
	v.data.string = val;
	pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key, &v);
	if (rc != PMIX_SUCCESS) return rc;
	return PMIx_Commit();
}

static int rmago_pmix_fence(void) {
	pmix_info_t info;
	bool collect = true;
	PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
	pmix_status_t rc = PMIx_Fence(NULL, 0, &info, 1);
	PMIX_INFO_DESTRUCT(&info);
	return rc;
}

// rmago_pmix_get returns a malloc'd copy of the string value, or NULL with *rc set.
static char *rmago_pmix_get(uint32_t owner, const char *key, int *rc) {
	pmix_proc_t p;
	PMIX_LOAD_PROCID(&p, me.nspace, owner);
	pmix_value_t *v = NULL;
	*rc = PMIx_Get(&p, key, NULL, 0, &v);
	if (*rc != PMIX_SUCCESS) return NULL;
	char *s = NULL;
	if (v->type == PMIX_STRING && v->data.string != NULL) s = strdup(v->data.string);
	else *rc = PMIX_ERR_TYPE_MISMATCH;
	PMIX_VALUE_RELEASE(v);
	return s;
}

static int rmago_pmix_finalize(void) { return PMIx_Finalize(NULL, 0); }
static const char *rmago_pmix_error(int rc) { return PMIx_Error_string(rc); }
static const char *rmago_pmix_nspace(void) { return me.nspace; }
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// PMIxBuilt reports whether this binary has the PMIx client (build tag pmix).
const PMIxBuilt = true

// pmixOnce: libpmix keeps one client per process.
var pmixMu sync.Mutex

type pmixClient struct {
	rank, size int
	trace      func(string)
	done       bool
}

// OpenPMIx connects to the PMIx server the environment names (PMIX_*:
// srun --mpi=pmix, Open MPI's mpirun) through libpmix. Get takes the owner
// of the key (GetFrom); PMIx has no global key space.
func OpenPMIx(trace func(string)) (Client, error) {
	pmixMu.Lock()
	defer pmixMu.Unlock()
	var rank, size C.uint32_t
	if rc := C.rmago_pmix_init(&rank, &size); rc != C.PMIX_SUCCESS {
		return nil, pmixErr("PMIx_Init", rc)
	}
	c := &pmixClient{rank: int(rank), size: int(size), trace: trace}
	c.log(fmt.Sprintf("init nspace=%s rank=%d size=%d", C.GoString(C.rmago_pmix_nspace()), c.rank, c.size))
	return c, nil
}

func pmixErr(op string, rc C.int) error {
	return fmt.Errorf("%w: %s: %s (%d)", ErrPMI, op, C.GoString(C.rmago_pmix_error(rc)), int(rc))
}

func (c *pmixClient) log(s string) {
	if c.trace != nil {
		c.trace("pmix " + s)
	}
}

func (c *pmixClient) Wire() int { return WirePMIx }
func (c *pmixClient) Rank() int { return c.rank }
func (c *pmixClient) Size() int { return c.size }

func (c *pmixClient) Put(key, value string) error {
	if err := checkKV(key, value); err != nil {
		return err
	}
	ck, cv := C.CString(key), C.CString(value)
	defer C.free(unsafe.Pointer(ck))
	defer C.free(unsafe.Pointer(cv))
	c.log("put " + key + "=" + value)
	if rc := C.rmago_pmix_put(ck, cv); rc != C.PMIX_SUCCESS {
		return pmixErr("PMIx_Put "+key, rc)
	}
	return nil
}

func (c *pmixClient) Fence() error {
	c.log("fence")
	if rc := C.rmago_pmix_fence(); rc != C.PMIX_SUCCESS {
		return pmixErr("PMIx_Fence", rc)
	}
	return nil
}

// Get cannot work on PMIx, whose keys belong to the rank that put them.
func (c *pmixClient) Get(key string) (string, error) {
	return "", fmt.Errorf("%w: PMIx needs the key's owner (GetFrom)", ErrPMI)
}

// GetFrom returns the value that rank owner put under key.
func (c *pmixClient) GetFrom(owner int, key string) (string, error) {
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	var rc C.int
	s := C.rmago_pmix_get(C.uint32_t(owner), ck, &rc)
	if s == nil {
		if rc == C.PMIX_ERR_NOT_FOUND {
			return "", fmt.Errorf("%w: %s of rank %d", ErrNotFound, key, owner)
		}
		return "", pmixErr(fmt.Sprintf("PMIx_Get %s of rank %d", key, owner), rc)
	}
	defer C.free(unsafe.Pointer(s))
	v := C.GoString(s)
	c.log(fmt.Sprintf("get %s of rank %d = %s", key, owner, v))
	return v, nil
}

func (c *pmixClient) Finalize() error {
	pmixMu.Lock()
	defer pmixMu.Unlock()
	if c.done {
		return nil
	}
	c.done = true
	c.log("finalize")
	if rc := C.rmago_pmix_finalize(); rc != C.PMIX_SUCCESS {
		return pmixErr("PMIx_Finalize", rc)
	}
	return nil
}

func (c *pmixClient) Close() error { return c.Finalize() }
