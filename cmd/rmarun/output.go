//go:build unix

package main

import (
	"bytes"
	"io"
	"sync"
)

// maxPending is the longest partial line held back, in bytes.
const maxPending = 64 << 10

// A lineWriter copies whole lines to w, each preceded by prefix, holding back
// a trailing partial line until it is completed or flushed. Each call writes
// its lines to w with a single Write while holding mu, so lines from several
// lineWriters sharing mu never mix. Write and flush must not be called
// concurrently on one lineWriter.
type lineWriter struct {
	w       io.Writer
	mu      *sync.Mutex
	prefix  []byte
	pending []byte
}

// Write writes the complete lines of pending+p and keeps the rest pending.
func (lw *lineWriter) Write(p []byte) (int, error) {
	lw.pending = append(lw.pending, p...)
	end := bytes.LastIndexByte(lw.pending, '\n') + 1
	if end == 0 && len(lw.pending) < maxPending {
		return len(p), nil
	}
	if end == 0 { // an overlong partial line: write it as a line of its own
		end = len(lw.pending)
	}
	err := lw.emit(lw.pending[:end])
	lw.pending = append(lw.pending[:0], lw.pending[end:]...)
	return len(p), err
}

// flush writes a pending partial line, terminated by a newline.
func (lw *lineWriter) flush() {
	if len(lw.pending) > 0 {
		lw.emit(lw.pending)
		lw.pending = lw.pending[:0]
	}
}

// emit writes the lines in b, each prefixed and newline-terminated.
func (lw *lineWriter) emit(b []byte) error {
	var out []byte
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line = b[:i+1]
		}
		b = b[len(line):]
		out = append(out, lw.prefix...)
		out = append(out, line...)
		if line[len(line)-1] != '\n' {
			out = append(out, '\n')
		}
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	_, err := lw.w.Write(out)
	return err
}

// pump copies r to lw until r ends, then flushes lw.
func pump(r io.Reader, lw *lineWriter) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			lw.Write(buf[:n])
		}
		if err != nil {
			break
		}
	}
	lw.flush()
}
