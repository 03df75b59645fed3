package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
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
