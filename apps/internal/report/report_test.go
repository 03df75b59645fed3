package report

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

func TestResult(t *testing.T) {
	r := &Result{App: "sor", Variant: "big", Ranks: 2, N: 64, Iterations: 10, Verified: true}
	r.Finish(2*time.Second, 3*time.Second)
	if r.System != "sor/big" || r.Speedup != 1.5 || r.PerIter != 0.2 {
		t.Fatalf("Finish: %+v", r)
	}
	var text, js bytes.Buffer
	if err := r.Write(&text, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "speed-up 1.5") || !strings.HasSuffix(text.String(), "verified\n") {
		t.Fatalf("text: %q", text.String())
	}
	if err := r.Write(&js, true); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"system", "variant", "ranks", "n", "seconds", "iterations", "speedup"} {
		if _, ok := back[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, js.String())
		}
	}
}

// The text line names every figure: provider and device, what n and the
// iterations count; no time per iteration or speed-up where they mean
// nothing.
func TestResultText(t *testing.T) {
	r := &Result{App: "hashtable", Variant: "cas", Provider: "soft", Device: "soft0", Ranks: 2,
		N: 8000, Size: "8000 slots", Iterations: 2000, IterUnit: "keys inserted per rank", NoPerIter: true, Verified: true}
	r.Finish(500*time.Millisecond, 200*time.Microsecond)
	var text, js bytes.Buffer
	if err := r.Write(&text, false); err != nil {
		t.Fatal(err)
	}
	want := "hashtable/cas: 2 ranks (provider soft, device soft0), 8000 slots, 2000 keys inserted per rank, 500ms, sequential 200µs, speed-up 0.0004, verified\n"
	if text.String() != want {
		t.Errorf("text:\n%q\nwant\n%q", text.String(), want)
	}
	if err := r.Write(&js, true); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if _, ok := back["seconds_per_iteration"]; ok {
		t.Errorf("JSON has seconds_per_iteration for concurrent iterations: %s", js.String())
	}
	if back["provider"] != "soft" || back["device"] != "soft0" || back["size"] != "8000 slots" || back["iteration_unit"] != "keys inserted per rank" {
		t.Errorf("JSON: %s", js.String())
	}

	// No sequential version: neither a sequential time nor a speed-up.
	r = &Result{App: "lockmix", Variant: "mixed", Provider: "soft", Device: "soft0", Ranks: 2,
		N: 2, Size: "2 counter pairs", Iterations: 20, IterUnit: "lock rounds per rank", Verified: true}
	r.Finish(20*time.Millisecond, 0)
	text.Reset()
	js.Reset()
	r.Write(&text, false)
	r.Write(&js, true)
	if want := "lockmix/mixed: 2 ranks (provider soft, device soft0), 2 counter pairs, 20 lock rounds per rank, 20ms (1ms per iteration), verified\n"; text.String() != want {
		t.Errorf("text:\n%q\nwant\n%q", text.String(), want)
	}
	if strings.Contains(js.String(), "speedup") || strings.Contains(js.String(), "seq_seconds") {
		t.Errorf("JSON has a speed-up without a sequential run: %s", js.String())
	}
}

// New takes the provider's name and the device's from the World.
func TestNew(t *testing.T) {
	rmatest.Run(t, 2, func(w *rma.World) error {
		r := New(w, "sor", "big")
		if r.Provider != "soft" || r.Device != "soft0" || r.Ranks != 2 || r.App != "sor" || r.Variant != "big" {
			return fmt.Errorf("New: %+v", r)
		}
		return nil
	})
}
